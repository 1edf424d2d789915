#!/usr/bin/env bash
# Same-run A/B of two builds of recur-bench (developer tool, not part of CI).
#
#   scripts/ab_bench.sh OLD_BIN_DIR NEW_BIN_DIR [--rounds N] [--quick] [--out FILE]
#                       [--suites rnn,learner,actor,transport]
#
# Each *_BIN_DIR holds release binaries (recur-bench, recur-actor) of one build, e.g. a copy of
# target/release from another commit. For every suite (rnn, learner, actor, transport) the two
# builds run alternately, A B A B ..., `--rounds` times each, so drift of the shared host hits
# both alike. Every JSON line is kept with a `build` field ("old"/"new") in --out, and a table
# prints, per row, the median of each build's primary measure and new/old (>1 = new faster).
# --suites runs only the named suites (default: all four).
# The binaries of a commit REV, in a target directory of their own (a shared one links stale
# code): `git worktree add /tmp/ab-REV REV`, then there `CARGO_TARGET_DIR=/tmp/ab-REV-target
# cargo build --release -p recur-bench -p recur-actor`; for a commit from before issue 56, where
# recur-bench was in recur-learner, `-p recur-learner -p recur-actor` (`[ -f bench/Cargo.toml ]`
# tells which); the BIN_DIR is then /tmp/ab-REV-target/release.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 2 ] || { sed -n 2,18p "$0" >&2; exit 2; }
old=$1 new=$2
shift 2
rounds=3 quick="" out=ab_bench.jsonl only=rnn,learner,actor,transport
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --quick) quick=--quick; shift ;;
    --out) out=$2; shift 2 ;;
    --suites) only=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
for d in "$old" "$new"; do
  [ -x "$d/recur-bench" ] || { echo "$d/recur-bench: not an executable" >&2; exit 2; }
done

suites=(
  "rnn --threads 2 --iters 3 $quick"
  "learner --threads 2 $quick"
  "actor --threads 1 $quick"
  "transport $quick"
)
: >"$out"
for suite in "${suites[@]}"; do
  [[ ",$only," == *",${suite%% *},"* ]] || continue
  for r in $(seq "$rounds"); do
    for build in old new; do
      dir=$old
      [ $build = new ] && dir=$new
      echo "== $build round $r: recur-bench $suite" >&2
      # shellcheck disable=SC2086
      "$dir/recur-bench" $suite 2>/dev/null | grep '^{' |
        sed "s/^{/{\"build\":\"$build\",\"round\":$r,/" >>"$out"
    done
  done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
# Primary measure per row kind and whether larger is better.
PRIMARY = [("gb_per_s", True), ("steps_per_s", True), ("frames_per_s", True), ("median_us", False)]
MEASURED = {"build", "round", "median_ms", "min_ms", "max_ms", "frames_per_s", "gflop_per_s",
            "peak_gflop_per_s", "peak_fraction", "steps_per_s", "updates_per_s", "us_per_step",
            "gb_per_s", "memcpy_gb_per_s", "ratio", "chunks", "median_us", "p90_us", "max_us",
            "iters", "saved_bytes"}
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("bench") == "gemm":
        continue
    measure = next(((k, up) for k, up in PRIMARY if k in r), None)
    if measure is None:
        continue
    key = json.dumps({k: v for k, v in r.items() if k not in MEASURED}, sort_keys=True)
    rows.setdefault((key, measure), {"old": [], "new": []})[r["build"]].append(r[measure[0]])
ratios = []
print(f"{'new/old':>8}  {'old':>12}  {'new':>12}  row")
for (key, (k, up)), v in rows.items():
    if not v["old"] or not v["new"]:
        continue
    a, b = statistics.median(v["old"]), statistics.median(v["new"])
    ratio = (b / a) if up else (a / b)
    ratios.append(ratio)
    desc = ",".join(f"{x}={y}" for x, y in json.loads(key).items() if x != "bench")
    print(f"{ratio:8.3f}  {a:12.1f}  {b:12.1f}  {json.loads(key)['bench']} {k} {desc}")
if ratios:
    print(f"rows {len(ratios)}, median new/old {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")
EOF
