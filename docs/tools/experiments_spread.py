#!/usr/bin/env python3
"""Compare a regenerated docs/experiments.md with the figures of earlier regenerations.

Each earlier version of docs/experiments.md in git (from --since on) is one run of
`cell experiment all` (or of one experiment, for the rows it changed). For every
(experiment, case, metric) the script prints the old range over those versions and
flags the new value when it lies outside that range, widened by --slack (relative)
for metrics whose old runs all agree. Booleans must equal one of the old values.

usage: docs/tools/experiments_spread.py [--since REV] [--new FILE] [--all]
       docs/tools/experiments_spread.py --old A.md B.md ... --runs C.md D.md ...
The second form compares runs made the same day: the old code's runs (--old) against the new
code's (--runs); a row is flagged when the new runs' range and the old runs' range, each
widened by the larger of the two ranges (the run-to-run spread seen that day), do not overlap.
"""
import argparse
import re
import subprocess
import sys


def parse(text):
    """{(experiment, case, metric): value} from both table layouts: `| case | metric | value |
    target | kind | source |` and the wide one, `| case | `m1` | `m2` | ...` with a row a case."""
    rows = {}
    section = None
    wide = None
    for line in text.splitlines():
        m = re.match(r"^## `([^`]+)`", line)
        if m:
            section, wide = m.group(1), None
            continue
        if section is None or not line.startswith("| ") or line.startswith("|---"):
            if not line.startswith("|"):
                wide = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] == "case":
            wide = None if cells[1] == "metric" else [c.strip("`") for c in cells[1:]]
            continue
        if wide is not None:
            for metric, value in zip(wide, cells[1:]):
                rows[(section, cells[0], metric)] = value
        elif len(cells) >= 4:
            rows[(section, cells[0], cells[1].strip("`"))] = cells[2]
    return rows


def number(v):
    if v in ("true", "false"):
        return v
    try:
        return float(v)
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--since", default="ba6e78a", help="oldest version with today's definitions")
    ap.add_argument("--new", default="docs/experiments.md")
    ap.add_argument("--slack", type=float, default=0.10)
    ap.add_argument("--all", action="store_true", help="print every row, not only those outside")
    ap.add_argument("--old", nargs="+", help="the old code's runs (docs/experiments.md copies)")
    ap.add_argument("--runs", nargs="+", help="the new code's runs")
    a = ap.parse_args()
    if a.old and a.runs:
        return same_day(a)
    revs = subprocess.run(
        ["git", "log", "--format=%h", f"{a.since}^..HEAD", "--", "docs/experiments.md"],
        check=True, capture_output=True, text=True).stdout.split()
    old = {}
    for rev in revs:
        text = subprocess.run(["git", "show", f"{rev}:docs/experiments.md"],
                              check=True, capture_output=True, text=True).stdout
        for key, v in parse(text).items():
            old.setdefault(key, {})
            old[key].setdefault(v, rev)
    new = parse(open(a.new, encoding="utf-8").read())
    outside = 0
    print(f"{len(revs)} earlier versions ({revs[-1]}..{revs[0]}); {len(new)} rows now")
    for key, v in new.items():
        vals = old.get(key)
        if not vals:
            print(f"NEW   {key}: {v} (no earlier value)")
            continue
        nv = number(v)
        olds = [number(x) for x in vals]
        if isinstance(nv, str) or nv is None:
            ok = v in vals
            rng = "/".join(sorted(vals))
        else:
            nums = [x for x in olds if isinstance(x, float)]
            if not nums:
                ok, rng = False, "/".join(vals)
            else:
                lo, hi = min(nums), max(nums)
                pad = a.slack * max(abs(lo), abs(hi)) if hi - lo < a.slack * max(abs(hi), 1e-12) else 0.0
                ok = lo - pad - 1e-3 <= nv <= hi + pad + 1e-3
                rng = f"{lo:g}..{hi:g} over {len(nums)}"
        if not ok:
            outside += 1
        if a.all or not ok:
            print(f"{'ok   ' if ok else 'OUT  '} {key[0]} | {key[1]} | {key[2]}: {v}  (old {rng})")
    print(f"{outside} of {len(new)} rows outside the old spread")
    return 0


def same_day(a):
    olds = [parse(open(f, encoding="utf-8").read()) for f in a.old]
    news = [parse(open(f, encoding="utf-8").read()) for f in a.runs]
    keys = [k for k in news[0] if all(k in r for r in news + olds)]
    flagged = 0
    print(f"{len(a.old)} runs of the old code, {len(a.runs)} of the new; {len(keys)} rows in all of them")
    print("| experiment | case | metric | old runs | new runs | |")
    print("|---|---|---|---|---|---|")
    for k in keys:
        ov = [number(r[k]) for r in olds]
        nv = [number(r[k]) for r in news]
        if any(v is None for v in ov + nv):
            continue
        if isinstance(ov[0], str) or isinstance(nv[0], str):
            ok = set(map(str, nv)) <= set(map(str, ov)) or len(set(map(str, ov + nv))) == 1
            same = len(set(map(str, ov))) == 1 and len(set(map(str, nv))) == 1
        else:
            spread = max(max(ov) - min(ov), max(nv) - min(nv))
            ok = not (min(nv) > max(ov) + spread + 1e-3 or max(nv) < min(ov) - spread - 1e-3)
            same = spread == 0
        flagged += not ok
        if a.all or not ok:
            fmt = lambda vs: " / ".join(str(v) if isinstance(v, str) else f"{v:g}" for v in vs)
            print(f"| {k[0]} | {k[1]} | `{k[2]}` | {fmt(ov)} | {fmt(nv)} | {'' if ok else 'OUTSIDE'} |")
    print(f"{flagged} of {len(keys)} rows: the new runs outside the old runs' range widened by the day's spread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
