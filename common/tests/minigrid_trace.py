"""Records random-action episodes of the installed minigrid package, for common/tests/minigrid_parity.rs.

Usage: python3 minigrid_trace.py STEPS SEED[,SEED...] ID [ID ...]

For each id and seed: one env from gymnasium.make(id) (as recur's gymnasium bridge builds it),
episodes reset with seed = SEED * 1000 + episode, actions from Python's random.Random seeded from
the id and SEED until at least STEPS steps have been taken, finishing the last episode. Random
actions go forward half of the time, turn 35%, and take one of pickup, drop, toggle and done
15%; for seeds 2 and 3 (mod 3), 50% and 90% of the actions instead walk toward one end of the
split (chosen per episode), so that both ends, and successes at many step counts, are reached. Writes one JSON line per (id,
seed) on stdout:

  {"id", "seed", "max_steps", "episodes": [{"seed", "direction", "image",
   "steps": [[action, direction, image, reward_bits, terminated, truncated], ...]}]}

`image` is the observation's uint8 image as hex, in the array's C order (as the bridge's
pixels lane carries it); `direction` the agent's direction (0-3); rewards the bits of
float(reward) (float64).
"""

import json
import random
import struct
import sys

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)


def helpful_action(env, target):
    """The move along the shortest path to `target` (the hallway's row, east, then the end)."""
    u = env.unwrapped
    (ax, ay), d, mid = tuple(int(v) for v in u.agent_pos), u.agent_dir, u.height // 2
    tx, ty = target
    if ay != mid and ax < tx:
        want = 1 if ay < mid else 3
    elif ax < tx:
        want = 0
    else:
        want = 1 if ty > ay else 3
    if want == d:
        return 2
    return 1 if (want - d) % 4 == 1 else 0


def trace(env_id, seed, steps):
    env = gym.make(env_id)
    rng = random.Random("%s/%d" % (env_id, seed))
    episodes, taken = [], 0
    while taken < steps:
        reset_seed = seed * 1000 + len(episodes)
        obs, _ = env.reset(seed=reset_seed)
        episode = {"seed": reset_seed, "direction": int(obs["direction"]),
                   "image": obs["image"].tobytes().hex(), "steps": []}
        target = rng.choice([env.unwrapped.success_pos, env.unwrapped.failure_pos])
        helpful = [0.0, 0.5, 0.9][(seed - 1) % 3]
        while True:
            u = rng.random()
            if rng.random() < helpful:
                action = helpful_action(env, target)
            else:
                action = 2 if u < 0.5 else (0 if u < 0.675 else (1 if u < 0.85 else rng.choice([3, 4, 5, 6])))
            obs, reward, terminated, truncated, _ = env.step(action)
            bits = struct.unpack("<Q", struct.pack("<d", float(reward)))[0]
            episode["steps"].append([action, int(obs["direction"]), obs["image"].tobytes().hex(),
                                     bits, bool(terminated), bool(truncated)])
            taken += 1
            if terminated or truncated:
                break
        episodes.append(episode)
    return {"id": env_id, "seed": seed, "max_steps": env.unwrapped.max_steps,
            "episodes": episodes}


def main():
    steps = int(sys.argv[1])
    seeds = [int(s) for s in sys.argv[2].split(",")]
    for env_id in sys.argv[3:]:
        for seed in seeds:
            print(json.dumps(trace(env_id, seed, steps)), flush=True)


if __name__ == "__main__":
    main()
