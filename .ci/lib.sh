# Shared by .ci/run (the per-change tier) and .ci/full (every long form): what the tests need
# installed, the capabilities CI requires, step timing, and the closing report. Sourced, not run.

export CARGO_TERM_COLOR=never
# One target directory outside the clone: clippy, the tests and the README's main command build
# into it (one release build serves all three), and repeated runs on one machine reuse it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/cell-ci-target}"

ci_t0=$(date +%s)
ci_steps=()
ci_failed=()
ci_log_dir="$(mktemp -d /var/tmp/cell-ci-logs.XXXXXX)"
# Every retry after a proven cause, every skipped capability, every goal figure reported beside
# a looser gate (tests::report) lands here; printed last.
export CELL_TEST_REPORT="${ci_log_dir}/retries-and-skips.tsv"
: > "$CELL_TEST_REPORT"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian packages the tests use, installed in one apt-get call: docker-compose (tests/deploy.rs
# validates the compose file, no engine needed), systemd (systemd-analyze verify/security,
# offline), g++ (libFuzzer's C++), iproute2 (the two-host tests' network namespaces). Python's
# eclipse-zenoh, the same minor as the crate, for the independent-client test.
ci_install() {
    local pkgs=()
    command -v docker-compose > /dev/null || pkgs+=(docker-compose)
    command -v systemd-analyze > /dev/null || pkgs+=(systemd)
    command -v c++ > /dev/null || pkgs+=(g++)
    command -v ip > /dev/null || pkgs+=(iproute2)
    if [ "${#pkgs[@]}" -gt 0 ]; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" > /dev/null
    fi
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        eclipse-zenoh==1.10.2 mcap==1.6.0 jsonschema==4.26.0
    # What CI provides, a test must have: without it the test fails with its reason instead of
    # skipping (tests::require_or_skip).
    export CELL_REQUIRE_PYTHON_ZENOH=1
    export CELL_REQUIRE_PYTHON_MCAP=1
    export CELL_REQUIRE_DOCKER_COMPOSE=1
    export CELL_REQUIRE_SYSTEMD_ANALYZE=1
    if [ "$(id -u)" = 0 ]; then
        export CELL_REQUIRE_NETNS=1
        export CELL_REQUIRE_FIFO=1
    fi
}

# step NAME CMD...: runs CMD, records its time and result; a failure is collected (the run goes
# on and fails at the end, so the first failure does not hide the rest).
step() {
    local name="$1"
    shift
    echo "== ${name}"
    local t0 rc=0
    t0=$(date +%s)
    "$@" || rc=$?
    local dt=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        ci_steps+=("$(printf '%6d s  ok    %s' "$dt" "$name")")
    else
        ci_steps+=("$(printf '%6d s  FAIL  %s (exit %d)' "$dt" "$name" "$rc")")
        ci_failed+=("$name")
    fi
    echo "== ${name}: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in ${dt} s"
}

# step_or_stop NAME CMD...: a step whose failure ends the run at once (format, lints).
step_or_stop() {
    step "$@"
    if [ "${#ci_failed[@]}" -gt 0 ]; then
        ci_finish
    fi
}

# The README's test command, its output kept so the per-binary times can be listed.
ci_tests() {
    # The full tier also runs the tests marked #[ignore = "full tier ..."].
    local extra=()
    [ "${CELL_TIER:-}" = full ] && extra=(-- --include-ignored)
    cargo test --release --workspace --no-fail-fast "${extra[@]}" 2>&1 | tee "${ci_log_dir}/tests.log"
    return "${PIPESTATUS[0]}"
}

# The README's main command, exactly as written, in this clone; then the files it promises.
ci_main_command() {
    unset CELL_CONFIG
    if ! cargo run --release --bin cell -- demo; then
        echo "== the demo failed: the last 200 lines of out/demo/cell.log"
        tail -n 200 out/demo/cell.log || true
        return 1
    fi
    python3 - << 'PY'
import json, pathlib, sys
d = pathlib.Path("out/demo")
s = json.loads((d / "summary.json").read_text())
problems = []
if s.get("passed") is not True:
    problems.append("summary.json: passed is not true")
report = (d / "report.html").read_text()
if "<table" not in report or "data:image/png;base64," not in report:
    problems.append("report.html has no table or no embedded plot")
for png in ["guiding.png", "teach-playback.png", "press-table.png", "peg-in-hole.png"]:
    b = (d / png).read_bytes() if (d / png).exists() else b""
    if b[1:4] != b"PNG":
        problems.append(f"{png} missing or not a PNG")
    elif png not in report:
        problems.append(f"report.html does not show {png}")
import os
retried = [st for st in s.get("steps", []) if st.get("retries")]
with open(os.environ["CELL_TEST_REPORT"], "a") as f:
    for st in retried:
        for r in st["retries"]:
            what = json.dumps(r).replace("\t", " ")
            f.write(f"retry\tREADME main command (demo)::{st['step']}\t{what}\n")
print("demo: summary.json passed, report.html and 4 plots present;",
      f"steps with a repeat after a proven stall: {[st['step'] for st in retried] or 'none'}")
if problems:
    print("demo output problems:", *problems, sep="\n  ")
    sys.exit(1)
PY
}

# The closing lines: each step's time, each test binary's time, the failures, and last the
# retry/skip report. Exits non-zero when any step failed.
ci_finish() {
    echo
    echo "== CI summary ($(basename "$0"), $(($(date +%s) - ci_t0)) s in all)"
    printf '%s\n' "${ci_steps[@]}"
    if [ -f "${ci_log_dir}/tests.log" ]; then
        echo "-- test binaries (cargo's 'finished in' per binary, slowest first)"
        awk '/^ *Running / { bin = $NF; gsub(/[()]/, "", bin); n = split(bin, a, "/"); bin = a[n] }
             /^test result:/ { for (i = 1; i <= NF; i++) if ($i == "in") t = $(i + 1);
                               sub(/s$/, "", t); printf "%8.1f s  %s  %s\n", t, bin, $3 " " $4 " " $5 " " $6 }' \
            "${ci_log_dir}/tests.log" | sort -rn | head -n 25
    fi
    if [ "${#ci_failed[@]}" -gt 0 ]; then
        echo "FAILED steps: ${ci_failed[*]}"
    fi
    local n
    n=$(grep -c . "$CELL_TEST_REPORT" || true)
    echo "== retries, skips and reported figures (tests::report): ${n} line(s)"
    if [ "$n" -gt 0 ]; then
        # One line per distinct (kind, test, what), with its count: every reason is shown.
        awk -F'\t' '{ printf "%-7s %s: %s\n", $1, $2, $3 }' "$CELL_TEST_REPORT" | sort | uniq -c
    fi
    # The plain closing line: every test result line of the test command, added up.
    if [ -f "${ci_log_dir}/tests.log" ]; then
        awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i + 1) ~ /^passed;?$/) p += $i; if ($(i + 1) ~ /^failed;?$/) f += $i } }
             END { printf "tests: %d passed, %d failed\n", p, f }' "${ci_log_dir}/tests.log"
    fi
    if [ "${#ci_failed[@]}" -gt 0 ]; then
        exit 1
    fi
    exit 0
}
