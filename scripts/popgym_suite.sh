#!/usr/bin/env bash
# The POPGym benchmark: recur's PPO on the native POPGym ids, each cell and seed, with POPGym's
# metric. A developer tool (minutes to hours), not part of CI.
#
#   scripts/popgym_suite.sh [--cells gru,lstm,mingru] [--levels Easy,Medium] [--seeds 0,1,2]
#                           [--families RepeatFirst,...] [--frames N] [--out DIR]
#                           [--eval-episodes N] [--jobs N]
#
# Each (id, cell, seed) trains `configs/popgym/<Family><Level>.toml` with
# `--set policy.cell=<cell> --seed <seed>` (and `--frames N` when given; default: the
# preset's run.frames), never stopping at the target. Per run, one JSON line in
# DIR/suite.jsonl:
#   id, family, level, cell, seed, frames, wall_s,
#   mmer        the max over training of the mean episodic return over recur's window:
#               mean_return (metrics.csv, one row per update) is the mean of the last 20
#               episodes; the max is over those rows;
#   final_greedy  recur-learner eval of the final checkpoint: 100 greedy episodes on seeds
#               1000000.. (never a training seed);
#   frames_to_mmer  the frames at which the max was first reached;
#   mmer_100    POPGym's MMER: the same maximum over `mean_return_100`, the mean of the last
#               100 episodes: RLlib's `episode_reward_mean` window, which the POPGym paper's
#               MMER is the maximum of (RLlib takes it once per training iteration, recur once
#               per update). Comparisons with the paper and with SB3 use this one.
# At the end, DIR/suite.md holds the table (mean +- std over seeds per id and cell): MMER,
# MMER (100) and greedy per cell.
# Defaults: gru and lstm, Easy and Medium, seeds 0-2, every family, DIR
# benchmarks/results/popgym-suite-<time>. --jobs N runs N trainings at once (each uses the
# preset's actors; default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/target_dir.sh

cells=gru,lstm
levels=Easy,Medium
seeds=0,1,2
families=RepeatFirst,RepeatPrevious,Autoencode,CountRecall,HigherLower,MultiarmedBandit,Concentration,Battleship,MineSweeper,PositionOnlyCartPole,VelocityOnlyCartpole,NoisyPositionOnlyCartPole,PositionOnlyPendulum,NoisyPositionOnlyPendulum
frames=
out=benchmarks/results/popgym-suite-$(date +%Y%m%d-%H%M%S)
eval_episodes=100
jobs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cells) cells=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --families) families=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --eval-episodes) eval_episodes=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "popgym_suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for c in ${cells//,/ }; do
  case "$c" in gru|lstm|mingru) ;; *) echo "--cells: unknown cell $c (gru, lstm, mingru)" >&2; exit 2 ;; esac
done
for l in ${levels//,/ }; do
  case "$l" in Easy|Medium|Hard) ;; *) echo "--levels: unknown level $l (Easy, Medium, Hard)" >&2; exit 2 ;; esac
done
for f in ${families//,/ }; do
  for l in ${levels//,/ }; do
    [ -f "configs/popgym/$f$l.toml" ] || { echo "--families: no preset configs/popgym/$f$l.toml" >&2; exit 2; }
  done
done

cargo build --release --quiet -p recur-actor -p recur-learner --bin recur-actor --bin recur-learner
bin="$(target_dir)/release/recur-learner"
mkdir -p "$out/runs"
echo "popgym_suite: writing $out/suite.jsonl ($(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" >&2

one() {
  local f=$1 l=$2 c=$3 s=$4
  local id="popgym-$f$l-v0" run="$out/runs/$f$l-$c-$s"
  local args=(train --config "configs/popgym/$f$l.toml" --seed "$s" --run-dir "$run" --quiet
    --set "policy.cell=\"$c\"" --set run.stop_at_target=false)
  [ -z "$frames" ] || args+=(--frames "$frames")
  if ! "$bin" "${args[@]}" >"$run.log" 2>&1; then
    echo "popgym_suite: $id $c seed $s failed, see $run.log" >&2
    return 1
  fi
  "$bin" eval --checkpoint "$run" --episodes "$eval_episodes" >"$run.eval.json" 2>>"$run.log"
  python3 - "$run" "$id" "$f" "$l" "$c" "$s" <<'EOF' >>"$out/suite.jsonl"
import csv, json, sys
run, id_, fam, lvl, cell, seed = sys.argv[1:]
# Rows before the first finished episode have mean_return NaN.
rows = [r for r in csv.DictReader(open(run + "/metrics.csv")) if r["mean_return"] != "NaN"]
summary = json.load(open(run + "/summary.json"))
ev = json.loads(open(run + ".eval.json").read().strip().splitlines()[-1])
best = max(rows, key=lambda r: float(r["mean_return"]))
# RLlib's 100-episode window (metrics.csv files from before the column have none: null).
wide = [float(r["mean_return_100"]) for r in rows if r.get("mean_return_100", "NaN") != "NaN"]
print(json.dumps({
    "id": id_, "family": fam, "level": lvl, "cell": cell, "seed": int(seed),
    "frames": summary["frames"], "wall_s": round(summary["seconds"], 2),
    "mmer": float(best["mean_return"]), "frames_to_mmer": int(best["frames"]),
    "mmer_100": max(wide) if wide else None,
    "final_greedy": ev.get("mean_return"),
}))
EOF
  echo "popgym_suite: $id $c seed $s: $(tail -1 "$out/suite.jsonl")" >&2
}

running=0
for f in ${families//,/ }; do
  for l in ${levels//,/ }; do
    for c in ${cells//,/ }; do
      for s in ${seeds//,/ }; do
        one "$f" "$l" "$c" "$s" &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
      done
    done
  done
done
wait || true

python3 - "$out" <<'EOF'
import collections, json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + "/suite.jsonl")]
cells = sorted({r["cell"] for r in rows})
by = collections.defaultdict(list)
for r in rows:
    by[(r["id"], r["cell"])].append(r)
def fmt(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return "%.3f" % xs[0]
    return "%.3f ± %.3f" % (statistics.mean(xs), statistics.stdev(xs))
lines = ["| id | " + " | ".join("%s MMER | %s MMER (100) | %s greedy" % (c, c, c) for c in cells)
         + " | frames | wall s |",
         "| --- |" + " --- | --- | --- |" * len(cells) + " --- | --- |"]
for id_ in dict.fromkeys(r["id"] for r in rows):
    cols = []
    for c in cells:
        rs = by.get((id_, c), [])
        cols += [fmt([r["mmer"] for r in rs]), fmt([r.get("mmer_100") for r in rs]),
                 fmt([r["final_greedy"] for r in rs])]
    rs = [r for c in cells for r in by.get((id_, c), [])]
    frames = max(r["frames"] for r in rs)
    wall = statistics.mean(r["wall_s"] for r in rs)
    lines.append("| %s | %s | %d | %.1f |" % (id_, " | ".join(cols), frames, wall))
open(out + "/suite.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
