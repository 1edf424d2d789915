#!/usr/bin/env bash
# Train a recurrent PPO policy with one learner and N actor processes.
#
#   scripts/train.sh [--config FILE] [--actors N] [--seed S] [--run-dir DIR] [--resume RUN_DIR]
#                    [--frames N] [--max-seconds S] [--quiet]
#
# Defaults: configs/masked_cartpole.toml (2 actors), run directory runs/<env>-<time>.
# The first call builds the release binaries (a few minutes); later calls start at once. The
# binaries are run from wherever cargo builds them (CARGO_TARGET_DIR is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/target_dir.sh
cargo build --release --quiet -p recur-actor -p recur-learner --bin recur-actor --bin recur-learner
exec "$(target_dir)/release/recur-learner" train "$@"
