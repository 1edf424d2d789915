"""SB3-contrib RecurrentPPO on POPGym ids, measured as scripts/popgym_suite.sh measures recur.

A developer tool for the side-by-side in docs/BENCHMARKS.md, not part of CI. Run it with the
Python that has sb3-contrib, rl_zoo3, popgym and mazelib (`pip install sb3-contrib rl_zoo3 popgym
mazelib`):

  python3 scripts/sb3_popgym.py --env popgym-RepeatPreviousEasy-v0 \
      --seed 0 --frames 100000 [--out FILE.jsonl]

Hyperparameters: rl-baselines3-zoo's `ppo_lstm` entry for CartPoleNoVel-v1 (its tuned
recurrent PPO for a masked, memory task; read from the installed rl_zoo3 so they stay the zoo's),
on 8 `DummyVecEnv` copies of the popgym id, with the zoo's `normalize: true` (VecNormalize of
rewards, and of Box observations). Observations: SB3 one-hot encodes Discrete and
MultiDiscrete spaces itself; Tuple spaces are flattened by gymnasium's FlattenObservation into
the same one-hots recur's bridge uses.

The metric is recur's: after every rollout the mean return of the last 20 finished episodes
(`stats_window_size=20`, recur's `mean_return` window); MMER is the max over rollouts. After
training, 100 greedy (deterministic) episodes on env seeds 1000000.. give the final return.
One JSON line: env, seed, frames, wall_s (training only), mmer, frames_to_mmer,
mmer_every_512_frames (the same maximum taken once per 512 frames, the presets' usual cadence),
mmer_100 (the maximum, after every rollout, of the mean of the last 100 finished episodes:
recur's `mean_return_100`, and the window of RLlib's `episode_reward_mean` that the POPGym paper's
MMER maximizes), final_greedy.
"""

import argparse
import json
import os
import time
from collections import deque

import gymnasium as gym
import numpy as np
import popgym  # noqa: F401  (registers the popgym-* ids)
import torch
import yaml
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
import stable_baselines3.common.torch_layers as sb3_layers

# SB3 2.9 sizes a MultiDiscrete observation's one-hot as numpy's int64 sum of `nvec`, which
# torch >= 2.10's LSTM refuses as `input_size` (popgym's card games, e.g. CountRecall): the same
# size, as a Python int.
_flat_dim = sb3_layers.get_flattened_obs_dim
sb3_layers.get_flattened_obs_dim = lambda space: int(_flat_dim(space))


def zoo_hyperparams(zoo_env="CartPoleNoVel-v1"):
    import rl_zoo3

    path = os.path.join(os.path.dirname(rl_zoo3.__file__), "hyperparams", "ppo_lstm.yml")
    hp = dict(yaml.safe_load(open(path))[zoo_env])
    n_envs = hp.pop("n_envs", 8)
    normalize = bool(hp.pop("normalize", False))
    for key in ("n_timesteps", "policy", "env_wrapper", "frame_stack"):
        hp.pop(key, None)

    def schedule(value):
        if isinstance(value, str) and value.startswith("lin_"):
            v = float(value[4:])
            return lambda progress: progress * v
        return value

    for key in ("learning_rate", "clip_range"):
        if key in hp:
            hp[key] = schedule(hp[key])
    if "policy_kwargs" in hp and isinstance(hp["policy_kwargs"], str):
        hp["policy_kwargs"] = eval(hp["policy_kwargs"], {"nn": torch.nn, "dict": dict})
    return n_envs, normalize, hp


def make(env_id):
    env = gym.make(env_id)
    if isinstance(env.observation_space, (spaces.Tuple, spaces.Dict)):
        env = gym.wrappers.FlattenObservation(env)
    return env


class Mmer(BaseCallback):
    """MMER at SB3's own cadence (after every rollout: n_envs * n_steps frames) and once per
    `every` frames (the first rollout at or past each multiple): recur logs its mean return once
    per update, 512 frames in the shared card preset (HigherLowerEasy's 256 equal SB3's own
    cadence). A maximum over a noisy mean grows with the number of times it is taken, so the
    like-for-like figure is the one at the recur preset's cadence. Also the same maximum over
    the last 100 episodes (`best_100`), at SB3's cadence."""

    def __init__(self, every=512):
        super().__init__()
        self.best, self.best_frames = float("-inf"), 0
        self.every, self.next_at = every, every
        self.best_every = float("-inf")
        # recur's `mean_return_100`: the last 100 finished episodes (fewer before there are 100).
        self.last_100, self.best_100 = deque(maxlen=100), float("-inf")

    def _on_step(self):
        for info in self.locals.get("infos", []):
            if "episode" in info:
                self.last_100.append(float(info["episode"]["r"]))
        return True

    def _on_rollout_end(self):
        if self.last_100:
            self.best_100 = max(self.best_100, float(np.mean(self.last_100)))
        buf = self.model.ep_info_buffer
        if buf:
            mean = float(np.mean([e["r"] for e in buf]))
            if mean > self.best:
                self.best, self.best_frames = mean, self.num_timesteps
            if self.num_timesteps >= self.next_at:
                self.best_every = max(self.best_every, mean)
        while self.next_at <= self.num_timesteps:
            self.next_at += self.every


def greedy(model, env_id, norm, episodes=100, seed=1_000_000):
    returns = []
    for k in range(episodes):
        env = make(env_id)
        obs, _ = env.reset(seed=seed + k)
        state, start, total, done = None, np.ones((1,), dtype=bool), 0.0, False
        while not done:
            seen = norm.normalize_obs(obs) if norm is not None and norm.norm_obs else obs
            action, state = model.predict(seen, state=state, episode_start=start, deterministic=True)
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            start = np.zeros((1,), dtype=bool)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    n_envs, normalize, hp = zoo_hyperparams()
    venv = make_vec_env(lambda: make(args.env), n_envs=n_envs, seed=args.seed)
    norm = None
    if normalize:
        # rl-zoo's `normalize: true`: VecNormalize with the run's gamma. SB3 normalizes Box
        # observations only; one-hot (Discrete/MultiDiscrete) ones are left as they are.
        box = isinstance(venv.observation_space, spaces.Box)
        venv = norm = VecNormalize(venv, norm_obs=box, norm_reward=True, gamma=hp["gamma"])
    model = RecurrentPPO("MlpLstmPolicy", venv, seed=args.seed, stats_window_size=20, verbose=0, **hp)
    cb = Mmer()
    t0 = time.time()
    model.learn(total_timesteps=args.frames, callback=cb)
    wall = time.time() - t0
    line = json.dumps({
        "env": args.env, "seed": args.seed, "frames": int(model.num_timesteps),
        "wall_s": round(wall, 2), "mmer": cb.best, "frames_to_mmer": cb.best_frames,
        "mmer_every_512_frames": cb.best_every, "mmer_100": cb.best_100,
        "final_greedy": greedy(model, args.env, norm), "hyperparams": "rl-zoo ppo_lstm CartPoleNoVel-v1",
        "torch_threads": torch.get_num_threads(),
    })
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
