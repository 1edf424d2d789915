"""Replays a dataset recorded through recur's gymnasium bridge in gymnasium itself and checks
every step bit for bit (tests/gymnasium.rs).

    python3 tests/python/replay_cartpole.py DATASET_DIR

Seed contract: env i of actor a with run seed s was first reset with seed s + a * E + i, later
resets pass no seed. Prints one JSON line: steps checked, episodes, resets.
"""
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from read_dataset import read_dataset  # noqa: E402


def main(path):
    meta, chunks, _ = read_dataset(path)
    assert meta["env"].startswith("gymnasium:"), meta["env"]
    env_id, seed = meta["env"][len("gymnasium:"):], meta["seed"]
    kwargs = meta.get("env_kwargs") or {}
    for m in meta.get("env_imports", []):
        __import__(m)
    e = meta["schema"]["envs"]
    by_actor = {}
    for c in sorted(chunks, key=lambda c: (c["actor_id"], c["seq"])):
        by_actor.setdefault(c["actor_id"], []).append(c)
    steps = episodes = 0
    for a, cs in by_actor.items():
        cols = {k: np.concatenate([c[k] for c in cs], axis=1) for k in
                ("observation", "action", "next.observation", "next.reward", "next.terminated",
                 "next.truncated", "is_init")}
        for i in range(e):
            env = gym.make(env_id, **kwargs)
            obs, _ = env.reset(seed=seed + a * e + i)
            for t in range(cols["action"].shape[1]):
                where = f"actor {a} env {i} step {t}"
                if not np.array_equal(np.asarray(obs, np.float32), cols["observation"][i, t]):
                    raise AssertionError(f"{where}: observation {cols['observation'][i, t]} != gymnasium {obs}")
                assert cols["is_init"][i, t] == (1 if t == 0 or done else 0), f"{where}: is_init"
                obs, r, term, trunc, _ = env.step(int(cols["action"][i, t]))
                checks = [
                    ("next.observation", np.asarray(obs, np.float32), cols["next.observation"][i, t]),
                    ("next.reward", np.float32(r), cols["next.reward"][i, t]),
                    ("next.terminated", int(term), int(cols["next.terminated"][i, t])),
                    ("next.truncated", int(trunc), int(cols["next.truncated"][i, t])),
                ]
                for name, want, got in checks:
                    if not np.array_equal(want, got):
                        raise AssertionError(f"{where}: {name} recorded {got}, gymnasium {want}")
                done = term or trunc
                steps += 1
                if done:
                    episodes += 1
                    obs, _ = env.reset()
    print(json.dumps({"steps": steps, "episodes": episodes, "actors": len(by_actor)}))


if __name__ == "__main__":
    main(sys.argv[1])
