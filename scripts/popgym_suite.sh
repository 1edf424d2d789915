#!/usr/bin/env bash
# The POPGym benchmark: recur's PPO on the native POPGym ids, each cell and seed, with POPGym's
# metric. A developer tool (minutes to hours), not part of CI.
#
#   scripts/popgym_suite.sh [--cells gru,lstm,mingru] [--levels Easy,Medium] [--seeds 0,1,2]
#                           [--families RepeatFirst,...] [--frames N] [--out DIR]
#                           [--eval-episodes N] [--jobs N] [--until-paper | --until-paper-best]
#                           [--set KEY=VALUE]...
#                           [--presets DIR]
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
#   paper_gru, paper_best, paper_best_model  the POPGym paper's MMER for the id (its GRU, and
#               the best of its 13 models), from benchmarks/popgym-paper.json (a third party's
#               transcription; null for the ids it has no number for);
#   frames_to_paper  the frames at which mean_return_100 first reached paper_gru at the paper's
#               three decimals (null: never); frames_to_best  the same for paper_best.
# --until-paper: a run whose id has a paper GRU number stops once its MMER (100) reaches it
# (run.target_window = 100, run.stop_at_target), so runs that get there early cost little; the
# budget (--frames, or the preset's) is the ceiling. The paper trained 15M frames.
# --until-paper-best: the same, at the paper's best model's number for the id (which is at
# least its GRU's), so a run goes on past the GRU's number (still reported as frames_to_paper)
# while it can still reach the best one. The row's `until` says which (null: neither).
# --set KEY=VALUE passes a config override to every run (preset variants, e.g.
# --set ppo.lr=3e-4); the overrides are kept in each row (`set`). --presets DIR reads
# DIR/<Family><Level>.toml instead of configs/popgym/'s (whole preset variants; the row's
# `presets` names the directory).
# At the end, DIR/suite.md holds the table (mean +- population std over seeds per id and
# cell): MMER (100) first (the paper's window, the headline), then MMER (20), greedy, the
# paper's GRU and best model, and the frames to the paper's GRU per seed.
# --cells preset keeps each preset's own cell (the row names it).
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
until_paper=  # gru or best: the paper's number a run stops at
sets=()
presets=configs/popgym
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
    --until-paper) until_paper=gru; shift ;;
    --until-paper-best) until_paper=best; shift ;;
    --set) sets+=("$2"); shift 2 ;;
    --presets) presets=${2%/}; shift 2 ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "popgym_suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for c in ${cells//,/ }; do
  case "$c" in gru|lstm|mingru|preset) ;; *) echo "--cells: unknown cell $c (gru, lstm, mingru, preset)" >&2; exit 2 ;; esac
done
for l in ${levels//,/ }; do
  case "$l" in Easy|Medium|Hard) ;; *) echo "--levels: unknown level $l (Easy, Medium, Hard)" >&2; exit 2 ;; esac
done
for f in ${families//,/ }; do
  for l in ${levels//,/ }; do
    [ -f "$presets/$f$l.toml" ] || { echo "--families: no preset $presets/$f$l.toml" >&2; exit 2; }
  done
done

cargo build --release --quiet -p recur-actor -p recur-learner --bin recur-actor --bin recur-learner
bin="$(target_dir)/release/recur-learner"
mkdir -p "$out/runs"
echo "popgym_suite: writing $out/suite.jsonl ($(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" >&2

one() {
  local f=$1 l=$2 c=$3 s=$4
  local id="popgym-$f$l-v0" run="$out/runs/$f$l-$c-$s"
  local args=(train --config "$presets/$f$l.toml" --seed "$s" --run-dir "$run" --quiet)
  [ "$c" = preset ] || args+=(--set "policy.cell=\"$c\"")
  local target="" until=null
  [ -z "$until_paper" ] || target=$(paper_number "$f$l" "$until_paper")
  if [ -n "$target" ]; then
    args+=(--set "run.target_return=$target" --set run.target_window=100 --set run.stop_at_target=true)
    until="\"$until_paper\""
  else
    args+=(--set run.stop_at_target=false)
  fi
  local kv
  for kv in "${sets[@]}"; do args+=(--set "$kv"); done
  [ -z "$frames" ] || args+=(--frames "$frames")
  if ! "$bin" "${args[@]}" >"$run.log" 2>&1; then
    echo "popgym_suite: $id $c seed $s failed, see $run.log" >&2
    return 1
  fi
  "$bin" eval --checkpoint "$run" --episodes "$eval_episodes" >"$run.eval.json" 2>>"$run.log"
  python3 - "$run" "$id" "$f" "$l" "$c" "$s" "${sets[*]}" "$presets" "$until" <<'EOF' >>"$out/suite.jsonl"
import csv, json, sys
run, id_, fam, lvl, cell, seed, sets, presets, until = sys.argv[1:]
paper = json.load(open("benchmarks/popgym-paper.json"))["ids"].get(fam + lvl, {})
if cell == "preset":  # the preset's own cell, as the run resolved it
    import tomllib
    cell = tomllib.load(open(run + "/config.toml", "rb"))["policy"]["cell"]
# Rows before the first finished episode have mean_return NaN.
rows = [r for r in csv.DictReader(open(run + "/metrics.csv")) if r["mean_return"] != "NaN"]
summary = json.load(open(run + "/summary.json"))
ev = json.loads(open(run + ".eval.json").read().strip().splitlines()[-1])
best = max(rows, key=lambda r: float(r["mean_return"]))
# RLlib's 100-episode window (metrics.csv files from before the column have none: null).
wide = [float(r["mean_return_100"]) for r in rows if r.get("mean_return_100", "NaN") != "NaN"]
# The paper's figures have three decimals: reaching one is reaching it rounded.
def reached(key):
    return next((int(r["frames"]) for r in rows if paper.get(key) is not None
                 and r.get("mean_return_100", "NaN") != "NaN"
                 and float(r["mean_return_100"]) >= paper[key] - 0.0005), None)
print(json.dumps({
    "id": id_, "family": fam, "level": lvl, "cell": cell, "seed": int(seed),
    "frames": summary["frames"], "wall_s": round(summary["seconds"], 2),
    "mmer": float(best["mean_return"]), "frames_to_mmer": int(best["frames"]),
    "mmer_100": max(wide) if wide else None,
    "final_greedy": ev.get("mean_return"),
    "paper_gru": paper.get("gru"), "paper_best": paper.get("best"),
    "paper_best_model": paper.get("best_model"),
    "frames_to_paper": reached("gru"), "frames_to_best": reached("best"),
    "set": sets, "presets": presets, "until": json.loads(until),
}))
EOF
  echo "popgym_suite: $id $c seed $s: $(tail -1 "$out/suite.jsonl")" >&2
}

# The paper's MMER for an id ($2: gru or best), less half its last decimal (the paper rounds to
# three), empty when the transcription has none.
paper_number() {
  python3 -c 'import json, sys
g = json.load(open("benchmarks/popgym-paper.json"))["ids"].get(sys.argv[1], {}).get(sys.argv[2])
print("" if g is None else round(g - 0.0005, 4))' "$1" "$2"
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
by = collections.defaultdict(list)
for r in rows:
    by[(r["id"], r["cell"])].append(r)
def fmt(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return "%.3f" % xs[0]
    return "%.3f ± %.3f" % (statistics.mean(xs), statistics.pstdev(xs))
def num(x):
    return "-" if x is None else "%.3f" % x
lines = ["| id | cell | MMER (100) | MMER (20) | greedy | paper GRU | paper best (model) | "
         "frames to the paper's GRU, per seed | frames | wall s |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for (id_, cell), rs in by.items():
    r0 = rs[0]
    best = "-" if r0.get("paper_best") is None else "%.3f (%s)" % (r0["paper_best"], r0["paper_best_model"])
    to = " / ".join("-" if r.get("frames_to_paper") is None else "%d" % r["frames_to_paper"] for r in rs)
    if r0.get("paper_gru") is None:
        to = "no paper number"
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %.1f |" % (
        id_, cell, fmt([r.get("mmer_100") for r in rs]), fmt([r["mmer"] for r in rs]),
        fmt([r["final_greedy"] for r in rs]), num(r0.get("paper_gru")), best, to,
        max(r["frames"] for r in rs), statistics.mean(r["wall_s"] for r in rs)))
open(out + "/suite.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
