#!/usr/bin/env bash
# Train a recurrent PPO policy with one learner and N actor processes.
#
#   scripts/train.sh [--config FILE] [--actors N] [--seed S] [--run-dir DIR] [--resume RUN_DIR]
#                    [--frames N] [--max-seconds S] [--quiet]
#
# Defaults: configs/masked_cartpole.toml (2 actors), run directory runs/<env>-<time>-s<seed>-<id>
# in the current directory. Paths are the caller's: the script runs from wherever it is called.
# The first call builds the release binaries (a few minutes, cargo's progress shown); later
# calls start at once. The binaries are run from wherever cargo builds them (CARGO_TARGET_DIR
# is honoured).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=$(
  cd "$root"
  . scripts/target_dir.sh
  echo "building the release binaries (cargo build --release) ..." >&2
  cargo build --release -p recur-actor -p recur-learner --bin recur-actor --bin recur-learner >&2
  echo "$(target_dir)/release/recur-learner"
)
exec "$bin" train "$@"
