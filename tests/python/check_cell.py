#!/usr/bin/env python3
"""An independent zenoh client (eclipse-zenoh, Python) inspects a running cell.

Usage: check_cell.py ENDPOINT CELL_ID [SERVICE ...] [--tls DIR --identity NAME] [--expect-refused]
Checks: liveliness tokens under cell/<id>/alive/ list every expected service; every service
answers cell/<id>/<service>/status with a JSON object naming itself; a joint state sample
arrives and hand-decodes from postcard (version byte, varint stamp, little-endian f64 joints).
A secured cell (docs/security.md): --tls DIR names the certificates (DIR/ca.pem,
DIR/NAME.pem, DIR/NAME.key; without --identity only the CA: no client certificate). The keys
asked are the ones the cell's access control gives an operator (`alive/*`, `*/status`).
--expect-refused: success when the session cannot be opened (a client without credentials).
Exits 0 on success, 1 with a reason otherwise. Prints 'N passed, N failed'.
"""
import argparse
import json
import struct
import sys
import time

import zenoh

# common::codec::WIRE_VERSION, read from the Rust source so a version bump that leaves
# JointState alone (v9 Enable.token, v10 HybridState flags and MotionEnd) needs no edit here;
# the JointState layout itself (unchanged since v7 appended period_s) is what the hand
# decoding below checks.
def _wire_version() -> int:
    import pathlib
    import re
    src = pathlib.Path(__file__).resolve().parents[2] / "common" / "src" / "codec.rs"
    m = re.search(r"pub const WIRE_VERSION: u8 = (\d+);", src.read_text())
    if m is None:
        raise SystemExit(f"WIRE_VERSION not found in {src}")
    return int(m.group(1))


WIRE_VERSION = _wire_version()


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def main():
    ap = argparse.ArgumentParser(description="an independent zenoh client inspects a cell")
    ap.add_argument("endpoint")
    ap.add_argument("cell_id")
    ap.add_argument("services", nargs="*")
    ap.add_argument("--tls", metavar="DIR", help="certificate directory of a secured cell")
    ap.add_argument("--identity", metavar="NAME", help="this client's certificate (DIR/NAME.pem)")
    ap.add_argument("--expect-refused", action="store_true",
                    help="succeed when the cell refuses the session")
    a = ap.parse_args()
    endpoint, cell_id = a.endpoint, a.cell_id
    expected = sorted(a.services) or ["control", "force", "kinematics", "robot-io", "sensor", "sim"]
    cfg = {
        "mode": "client",
        "connect": {"endpoints": [endpoint], "timeout_ms": 5000, "exit_on_failure": True},
        "scouting": {"multicast": {"enabled": False}},
    }
    if a.tls:
        tls = {"root_ca_certificate": f"{a.tls}/ca.pem", "enable_mtls": True,
               "verify_name_on_connect": True}
        if a.identity:
            tls["connect_certificate"] = f"{a.tls}/{a.identity}.pem"
            tls["connect_private_key"] = f"{a.tls}/{a.identity}.key"
        # zenoh's QUIC link (TLS 1.3 inside QUIC) reads its settings from link.tls.
        cfg["transport"] = {"link": {"protocols": ["quic"], "tls": tls}}
    conf = zenoh.Config.from_json5(json.dumps(cfg))
    if a.expect_refused:
        try:
            with zenoh.open(conf) as s:
                alive = [r.ok.key_expr for r in s.liveliness().get(f"cell/{cell_id}/alive/*", timeout=2.0) if r.ok]
            print(f"FAIL the cell accepted the session (liveliness: {alive})")
            print("0 passed, 1 failed")
            return 1
        except zenoh.ZError as e:
            print(f"ok   the cell refused the session: {e}")
            print("1 passed, 0 failed")
            return 0
    passed, failed = 0, 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    with zenoh.open(conf) as s:
        alive = []
        for _ in range(30):
            alive = sorted({str(r.ok.key_expr).rsplit("/", 1)[-1]
                            for r in s.liveliness().get(f"cell/{cell_id}/alive/*", timeout=2.0) if r.ok})
            if alive == expected:
                break
            time.sleep(0.2)
        check("liveliness lists every service", alive == expected, f"{alive} != {expected}")

        statuses = {}
        for _ in range(10):
            statuses = {}
            for r in s.get(f"cell/{cell_id}/*/status", timeout=2.0):
                if r.ok:
                    statuses[str(r.ok.key_expr)] = r.ok.payload.to_string()
            if len(statuses) == len(expected):
                break
            time.sleep(0.2)
        check("one status reply per service", len(statuses) == len(expected), f"{sorted(statuses)}")
        for key, text in sorted(statuses.items()):
            try:
                v = json.loads(text)
                check(f"{key} is JSON naming its service",
                      key == f"cell/{cell_id}/{v['service']}/status" and "inputs" in v, text[:200])
            except (ValueError, KeyError) as e:
                check(f"{key} is JSON", False, f"{e}: {text[:200]}")

        sub = s.declare_subscriber(f"cell/{cell_id}/robot/joint_state")
        sample = sub.recv()
        buf = bytes(sample.payload.to_bytes())
        version = buf[0]
        seq, i = varint(buf, 1)
        _mono, i = varint(buf, i)
        _cycle, i = varint(buf, i)
        q = struct.unpack_from("<6d", buf, i)
        i += 2 * 6 * 8 + 3  # q_rad, qd_rad_s, three status bools
        (period_s,) = struct.unpack_from("<d", buf, i)
        check("joint state decodes by hand from postcard",
              version == WIRE_VERSION and seq > 0 and all(abs(x) < 7.0 for x in q)
              and 0.0 < period_s <= 0.1 and i + 8 == len(buf),
              f"v={version} seq={seq} q={q} period_s={period_s} len={len(buf)}")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
