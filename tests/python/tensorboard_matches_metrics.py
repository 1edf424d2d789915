"""Reads a run's TensorBoard event files with TensorBoard's own EventAccumulator and checks
them against the run's metrics.csv, eval.csv and config.toml (tests/learner_cli.rs runs it):

- every metrics.csv column after `frames` and every eval.csv column after `frames` is a
  scalar under its tag (docs/recur-learner.md), with one point per row at step = frames and
  the row's value as float32 (rows whose value is not finite have no point);
- there is no other scalar tag;
- the text summary `config` (text plugin) holds config.toml.

    python3 tests/python/tensorboard_matches_metrics.py RUN_DIR

Prints one JSON line: the tags and the number of points checked.
"""

import csv
import json
import math
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

METRICS_TAGS = {
    "wall_s": "time/time_elapsed",
    "updates": "time/iterations",
    "mean_return": "rollout/ep_rew_mean",
    "policy_lag": "train/policy_lag",
    "episodes": "time/episodes",
    "loss": "train/loss",
    "policy_loss": "train/policy_loss",
    "value_loss": "train/value_loss",
    "entropy": "train/entropy",
    "approx_kl": "train/approx_kl",
    "clip_frac": "train/clip_fraction",
    "grad_norm": "train/grad_norm",
    "frames_per_s": "time/fps",
    "dropped_chunks": "rollout/dropped_chunks",
    "q_mean": "train/q_mean",
    "mean_return_100": "rollout/ep_rew_mean_100",
}
EVAL_TAGS = {
    "eval_return_mean": "eval/mean_reward",
    "eval_return_std": "eval/std_reward",
    "episodes": "eval/episodes",
    "wall_s": "eval/time_elapsed",
}
# A column only for an environment that defines success (MiniGrid's: common/src/envs/success.rs).
EVAL_SUCCESS_TAGS = {"eval_success_rate": "eval/success_rate"}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def expected_points(table, tags):
    """{tag: [(step, float32 value)]} of the rows of a CSV file."""
    points = {}
    for column, tag in tags.items():
        points[tag] = [
            (int(r["frames"]), np.float32(float(r[column])))
            for r in table
            if math.isfinite(float(r[column]))
        ]
    return points


def main(run_dir):
    metrics = rows(os.path.join(run_dir, "metrics.csv"))
    header = list(metrics[0].keys())
    assert header[0] == "frames" and set(header[1:]) == set(METRICS_TAGS), header
    expected = expected_points(metrics, METRICS_TAGS)
    eval_csv = os.path.join(run_dir, "eval.csv")
    if os.path.exists(eval_csv):
        evals = rows(eval_csv)
        eval_tags = dict(EVAL_TAGS)
        if "eval_success_rate" in evals[0]:
            eval_tags.update(EVAL_SUCCESS_TAGS)
        assert list(evals[0].keys())[0] == "frames" and set(list(evals[0].keys())[1:]) == set(
            eval_tags
        ), evals[0].keys()
        expected.update(expected_points(evals, eval_tags))

    acc = EventAccumulator(
        os.path.join(run_dir, "tb"), size_guidance={"scalars": 0, "tensors": 0}
    )
    acc.Reload()
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == sorted(t for t, p in expected.items() if p), (
        sorted(tags["scalars"]),
        sorted(expected),
    )
    checked = 0
    for tag, points in expected.items():
        if not points:
            continue
        got = [(e.step, np.float32(e.value)) for e in acc.Scalars(tag)]
        assert got == points, f"{tag}: TensorBoard {got[:5]}... metrics {points[:5]}..."
        checked += len(points)

    assert tags["tensors"] == ["config"], tags["tensors"]
    assert acc.SummaryMetadata("config").plugin_data.plugin_name == "text"
    (text,) = acc.Tensors("config")[0].tensor_proto.string_val
    with open(os.path.join(run_dir, "config.toml")) as f:
        config = f.read()
    assert config.strip() and config.strip() in text.decode(), text.decode()
    print(json.dumps({"scalar_tags": sorted(tags["scalars"]), "points": checked}))


if __name__ == "__main__":
    main(sys.argv[1])
