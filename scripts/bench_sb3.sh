#!/usr/bin/env bash
# The SB3 side of benchmarks/history/2026-11.md "recur vs SB3 RecurrentPPO vs TorchRL": sb3-contrib's
# RecurrentPPO with rl-baselines3-zoo's tuned `ppo_lstm` hyperparameters, trained per seed with
# deterministic evaluation (rl-zoo's EvalCallback) along the way and at the end.
# A developer script, not part of CI: it pip-installs sb3-contrib and rl_zoo3 (with a CPU
# torch) into ~/.cache/recur-bench-venv the first time.
#
#   scripts/bench_sb3.sh [--envs "CartPoleNoVel-v1 PendulumNoVel-v1"] [--seeds "0 1 2"]
#                        [--frames N] [--eval-every N] [--eval-episodes N] [--out DIR]
#
# CartPoleNoVel-v1 / PendulumNoVel-v1 are rl-zoo's velocity-masked envs: the same
# observations as recur's MaskedCartPole-v1 ([x, theta]) / MaskedPendulum-v1
# ([cos theta, sin theta]). Prints one JSON line per (env, seed): frames, wall seconds (the
# training run, evaluations included, as rl-zoo runs them), the evaluation curve and the
# final deterministic evaluation; the lines are also appended to OUT/sb3.jsonl.
set -euo pipefail

ENVS="CartPoleNoVel-v1 PendulumNoVel-v1"
SEEDS="0 1 2"
FRAMES=""
EVAL_EVERY=5000
EVAL_EPISODES=10
OUT="${TMPDIR:-/tmp}/recur-bench-sb3"
while [ $# -gt 0 ]; do
    case "$1" in
        --envs) ENVS="$2"; shift 2 ;;
        --seeds) SEEDS="$2"; shift 2 ;;
        --frames) FRAMES="$2"; shift 2 ;;
        --eval-every) EVAL_EVERY="$2"; shift 2 ;;
        --eval-episodes) EVAL_EPISODES="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

# One torch thread by default (the 2-core machine kind runs the learner and the environment
# on the same cores); set OMP_NUM_THREADS to change it.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
VENV="$HOME/.cache/recur-bench-venv"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import sb3_contrib, rl_zoo3" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    # The CPU-only wheel where download.pytorch.org is reachable, else PyPI's.
    "$VENV/bin/pip" install --quiet torch --index-url https://download.pytorch.org/whl/cpu \
        || "$VENV/bin/pip" install --quiet torch
    "$VENV/bin/pip" install --quiet sb3-contrib rl_zoo3
fi
PY="$VENV/bin/python"
mkdir -p "$OUT"

for env in $ENVS; do
    for seed in $SEEDS; do
        log="$OUT/logs-$env-$seed"
        rm -rf "$log"
        frames_arg=()
        [ -n "$FRAMES" ] && frames_arg=(-n "$FRAMES")
        start=$(date +%s.%N)
        # rl-zoo's train script with its tuned ppo_lstm hyperparameters for $env; the
        # EvalCallback evaluates deterministically every EVAL_EVERY frames (rl-zoo divides
        # --eval-freq by n_envs itself).
        "$PY" -m rl_zoo3.train --algo ppo_lstm --env "$env" --seed "$seed" "${frames_arg[@]}" \
            --eval-freq "$EVAL_EVERY" --eval-episodes "$EVAL_EPISODES" --n-eval-envs 1 \
            --log-folder "$log" --verbose 0 > "$log.out" 2>&1
        end=$(date +%s.%N)
        "$PY" - "$log" "$env" "$seed" "$start" "$end" "$EVAL_EPISODES" <<'PY' | tee -a "$OUT/sb3.jsonl"
import glob, json, sys
import numpy as np
log, env, seed, start, end, episodes = sys.argv[1:7]
npz = sorted(glob.glob(f"{log}/ppo_lstm/{env}_*/evaluations.npz"))[-1]
data = np.load(npz)
curve = [[int(t), float(r.mean())] for t, r in zip(data["timesteps"], data["results"])]
# The final model, evaluated deterministically on its own seeds.
from rl_zoo3 import import_envs  # noqa: F401  registers the NoVel envs
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
run = npz.rsplit("/", 1)[0]
model = RecurrentPPO.load(f"{run}/{env}.zip", device="cpu")
venv = make_vec_env(env, n_envs=1, seed=1_000_000 + int(seed))
stats = glob.glob(f"{run}/{env}/vecnormalize.pkl")
if stats:
    venv = VecNormalize.load(stats[0], venv)
    venv.training = False
    venv.norm_reward = False
rets, _ = evaluate_policy(model, venv, n_eval_episodes=int(episodes), deterministic=True,
                          return_episode_rewards=True)
print(json.dumps({
    "impl": "sb3-contrib RecurrentPPO (rl-zoo ppo_lstm)", "env": env, "seed": int(seed),
    "frames": curve[-1][0] if curve else None, "seconds": float(end) - float(start),
    "final_eval_return": float(np.mean(rets)), "final_eval_episodes": len(rets),
    "eval_curve": curve,
}))
PY
    done
done
