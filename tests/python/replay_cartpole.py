"""Replays a dataset recorded through recur's gymnasium bridge in gymnasium itself and checks
every step bit for bit (tests/gymnasium.rs).

    python3 tests/python/replay_cartpole.py DATASET_DIR

Seed contract (recur's native vectors' too): env j of actor a, incarnation k, in a run seeded s
reset its episode n (counting from 0) with seed=episode_seed(s ^ a << 32 ^ k << 48, j, n), the
bridge worker's own `episode_seed`. Prints one JSON line: steps checked, episodes, actors.
"""
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "common" / "src" / "envs"))
from gym_worker import episode_seed  # noqa: E402
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
    for c in sorted(chunks, key=lambda c: (c["actor_id"], c["incarnation"], c["seq"])):
        by_actor.setdefault((c["actor_id"], c["incarnation"]), []).append(c)
    steps = episodes = 0
    for (a, k), cs in by_actor.items():
        vector_seed = seed ^ (a << 32) ^ (k << 48)
        cols = {k: np.concatenate([c[k] for c in cs], axis=1) for k in
                ("observation", "action", "next.observation", "next.reward", "next.terminated",
                 "next.truncated", "is_init")}
        for i in range(e):
            env = gym.make(env_id, **kwargs)
            n = 0  # this env's episodes started
            obs, _ = env.reset(seed=episode_seed(vector_seed, i, n))
            for t in range(cols["action"].shape[1]):
                where = f"actor {a} incarnation {k} env {i} step {t}"
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
                    n += 1
                    obs, _ = env.reset(seed=episode_seed(vector_seed, i, n))
    print(json.dumps({"steps": steps, "episodes": episodes, "actors": len(by_actor)}))


if __name__ == "__main__":
    main(sys.argv[1])
