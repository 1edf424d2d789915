"""Records random-action episodes of the installed popgym package, for common/tests/popgym_parity.rs.

Usage: python3 popgym_trace.py STEPS SEED[,SEED...] ID [ID ...]

For each id and seed: one env from gymnasium.make(id) (as recur's gymnasium bridge builds it),
episodes reset with seed = SEED * 1000 + episode, random actions (Python's random.Random, seeded
from the id and SEED; in Battleship, MineSweeper, Concentration and the labyrinths 50%, 15% or none of them, for seeds 1, 2, 3
mod 3, are drawn among moves that make progress, and in the CartPole variants 90%, 50% or none come from a
balancing controller, see helpful_action; Box actions, the Pendulum variants' torques, are uniform float32
in the space's bounds) until at least STEPS steps have been taken, finishing the last episode.
Writes one JSON line per (id, seed) on stdout:

  {"id", "seed", "obs_dim", "episodes": [{"seed", "obs", "steps": [[action, obs, reward_bits,
   terminated, truncated], ...]}]}

Observations are flattened by the bridge's own `flattener`, imported from common/src/envs/gym_worker.py (Box as
float32 in C order, Discrete one-hot, MultiDiscrete concatenated one-hots, Tuple/Dict parts in
order) and sent sparsely as [[index, float32 bits], ...] for every entry whose bits are not 0.
Rewards are sent as the bits of float(reward) (float64). Actions are handed to the env as the
bridge hands them: Discrete as a Python int, MultiDiscrete as an array of the space's dtype,
Box as an array of the space's dtype.
"""

import json
import os
import random
import struct
import sys
import warnings

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import popgym  # noqa: F401  (registers the popgym-* ids)

# The bridge's worker, imported for its observation flattener (its protocol set-up runs only
# when it is the worker).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "envs"))
from gym_worker import flattener as bridge_flattener  # noqa: E402

# gymnasium's passive env checker warns about popgym's shared info dicts; not our concern.
warnings.simplefilter("ignore")


def flattener(space):
    """(size, write(value, out)): the bridge's own flattener (gym_worker.py), without the bounds."""
    size, _low, _high, write = bridge_flattener(space)
    return size, write


def action_sampler(space, rng):
    """(sample() -> (JSON action, env action)) as the bridge's action_codec decodes them."""
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)

        def sample():
            a = rng.randrange(n)
            return [a], start + a

        return sample
    if isinstance(space, spaces.MultiDiscrete):
        nvec = [int(x) for x in space.nvec]
        starts = np.asarray(space.start, dtype=np.int64)

        def sample():
            a = [rng.randrange(n) for n in nvec]
            return a, (np.asarray(a, dtype=np.int64) + starts).astype(space.dtype)

        return sample
    if isinstance(space, spaces.Box):
        lo = np.broadcast_to(space.low, space.shape).reshape(-1)
        hi = np.broadcast_to(space.high, space.shape).reshape(-1)

        def sample():
            a = np.array([rng.uniform(float(l), float(h)) for l, h in zip(lo, hi)],
                         dtype=np.float32)
            bits = [struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in a]
            return bits, a.astype(space.dtype).reshape(space.shape)

        return sample
    raise ValueError("unsupported action space %r" % (space,))


def helpful_action(env, rng):
    """For the board games, a move that makes progress (an unguessed ship square, a clear
    square, a face-down card matching the one in play), or None. Mixed in with the random
    actions so that episodes also end by winning, not only by losing or running out of time.
    Any action sequence is a valid replay: the Rust side only repeats the recorded actions."""
    u = env.unwrapped
    name = type(u).__name__
    if name.startswith("Battleship"):
        cells = np.argwhere((u.board == 1) & (u.guesses == 0))
    elif name.startswith("MineSweeper"):
        cells = np.argwhere(u.hidden_grid == 0)
    elif "CartPole" in name:
        # A linear balancing controller on the hidden full state, so that episodes also last
        # to popgym's max_episode_length (truncation), not only fall over.
        x, x_dot, theta, theta_dot = u.state
        return [int(theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0)]
    elif name.startswith("Labyrinth"):
        # The first move of a shortest path to the exit (Escape) or to the nearest square not
        # visited yet (Explore), by breadth-first search over the squares the agent can enter.
        grid, explored = u.maze.grid, u.explored
        if name.startswith("LabyrinthEscape"):
            wanted = lambda p: grid[p] == 3
        else:
            wanted = lambda p: grid[p] != 1 and explored[p] == 0
        start = tuple(u.position)
        first = {start: None}
        queue = [start]
        for p in queue:
            if wanted(p):
                return [first[p]]
            for a, (dy, dx) in enumerate([(0, -1), (0, 1), (-1, 0), (1, 0)]):
                q = (p[0] + dy, p[1] + dx)
                if (0 <= q[0] < grid.shape[0] and 0 <= q[1] < grid.shape[1]
                        and grid[q] != 1 and q not in first):
                    first[q] = a if first[p] is None else first[p]
                    queue.append(q)
        return None
    elif name.startswith("Concentration"):
        hidden = [p for p in range(u.deck.num_cards)
                  if p not in u.deck["face_up_idx"] and p not in u.deck["in_play_idx"]]
        if u.deck["in_play_idx"]:
            want = u.deck_idx_type[u.deck.idx[u.deck["in_play_idx"][0]]]
            hidden = [p for p in hidden if u.deck_idx_type[u.deck.idx[p]] == want] or hidden
        return [rng.choice(hidden)] if hidden else None
    else:
        return None
    if len(cells) == 0:
        return None
    return [int(x) for x in cells[rng.randrange(len(cells))]]


def sparse(write, size, value):
    out = np.zeros(size, dtype=np.float32)
    write(value, out)
    bits = out.view(np.uint32)
    nz = np.flatnonzero(bits)
    return [[int(i), int(bits[i])] for i in nz]


def f64bits(x):
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def trace(env_id, seed, steps):
    env = gym.make(env_id)
    size, write = flattener(env.observation_space)
    rng = random.Random("%s/%d" % (env_id, seed))
    sample = action_sampler(env.action_space, rng)
    # Seeds 1, 2, 3 (mod 3): half, 15% and none of the actions helpful (CartPole: 90%, half,
    # none).
    if "CartPole" in type(env.unwrapped).__name__:
        help_rate = {1: 0.9, 2: 0.5, 0: 0.0}[seed % 3]
    else:
        help_rate = {1: 0.5, 2: 0.15, 0: 0.0}[seed % 3]
    episodes, taken = [], 0
    while taken < steps:
        reset_seed = seed * 1000 + len(episodes)
        obs, _ = env.reset(seed=reset_seed)
        record = {"seed": reset_seed, "obs": sparse(write, size, obs), "steps": []}
        while True:
            action, env_action = sample()
            if rng.random() < help_rate:
                hint = helpful_action(env, rng)
                if hint is not None:
                    action = hint
                    env_action = hint[0] if len(hint) == 1 else np.asarray(
                        hint, dtype=env.action_space.dtype)
            obs, reward, terminated, truncated, _ = env.step(env_action)
            record["steps"].append([action, sparse(write, size, obs), f64bits(reward),
                                    bool(terminated), bool(truncated)])
            taken += 1
            if terminated or truncated:
                break
            if len(record["steps"]) > 1_000_000:
                raise RuntimeError("%s: an episode did not end" % env_id)
        episodes.append(record)
    env.close()
    return {"id": env_id, "seed": seed, "obs_dim": size, "episodes": episodes}


def main():
    steps = int(sys.argv[1])
    seeds = [int(s) for s in sys.argv[2].split(",")]
    out = sys.stdout
    for env_id in sys.argv[3:]:
        for seed in seeds:
            out.write(json.dumps(trace(env_id, seed, steps), separators=(",", ":")) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
