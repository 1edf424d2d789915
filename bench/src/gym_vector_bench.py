"""gymnasium's own vector envs stepping E environments with random actions: the baseline rows
of `recur-bench actor --env gymnasium:<id>` (bench/src/actor.rs runs this with
`python -c`). Prints one JSON line {"sync": steps/s, "async": steps/s} (those of `baselines`):
medians over `iters` timed runs of at least `min_seconds` each (environment steps, all E
counted).
"""
import json
import sys
import time

import gymnasium as gym
import numpy as np

config = json.loads(sys.argv[1])
for m in config["imports"]:
    __import__(m)


def rate(vec):
    vec.reset(seed=config["seed"])
    vec.action_space.seed(config["seed"])
    actions = [vec.action_space.sample() for _ in range(64)]
    for k in range(32):  # warm-up
        vec.step(actions[k % 64])
    rates = []
    for _ in range(config["iters"]):
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < config["min_seconds"]:
            for k in range(32):
                vec.step(actions[k % 64])
            n += 32
        rates.append(n * vec.num_envs / (time.perf_counter() - start))
    vec.close()
    return float(np.median(rates))


def make():
    return gym.make(config["id"], **config["kwargs"])


e = config["envs"]
out = {}
if "sync" in config["baselines"]:
    out["sync"] = rate(gym.vector.SyncVectorEnv([make] * e))
if "async" in config["baselines"]:
    out["async"] = rate(gym.vector.AsyncVectorEnv([make] * e))
print(json.dumps(out))
