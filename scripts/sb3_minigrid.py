"""SB3-contrib RecurrentPPO on MiniGrid's memory rooms, measured as recur measures them.

A developer tool for the side-by-side in docs/BENCHMARKS.md ("MiniGrid memory rooms"), not part
of CI. Run it with the Python that has sb3-contrib and minigrid (`pip install sb3-contrib
minigrid`):

  python3 scripts/sb3_minigrid.py --env MiniGrid-MemoryS7-v0 --seed 0 --frames 1000000 \
      [--eval-seed 1000] [--episodes 100] [--max-seconds S] [--progress FILE.jsonl] [--out FILE.jsonl]

Policy: `CnnLstmPolicy` over MiniGrid's image alone (`ImgObsWrapper`: the 7x7x3 codes, no
direction, no mission) with the features extractor of the minigrid documentation's SB3
example (`MinigridFeaturesExtractor`: conv 16-2x2, max-pool 2, conv 32-2x2, conv 64-2x2, ReLU
after each, then linear to 128 features; no scaling, the codes are small integers), an LSTM of
128 (`lstm_hidden_size`, recur's `hidden_size`), separate actor and critic LSTMs (SB3's
default).

Hyperparameters: recur's preset (configs/minigrid_memory_s7.toml) translated one for one, so
that the budget and the update are the same: 32 environments (recur's 2 actors x 16), 128 steps
a rollout (4096 frames a PPO update, recur's `frames_per_update`), 4 epochs of minibatches of
1024 frames (recur: 32 slices x 32 steps), lr 5e-4 decayed linearly to 0, gamma 0.99, GAE
lambda 0.95, clip 0.2, entropy 0.02, value 0.5, gradient norm 0.5. `--n-steps` etc. override
them (`--help`).

After training, `--episodes` greedy (deterministic) episodes, one per environment seed
`--eval-seed` + k, stepped together (recur-learner eval's `--seed` contract: apart from training's seeds).
Success is MiniGrid's: an episode whose final reward is positive. One JSON line: env, seed,
frames, wall_s (training only), eval_wall_s, mean_return, std_return, success_rate, episodes,
eval_seed, hyperparameters, torch_threads, and `stopped_early` (true when `--max-seconds` ended
training before `--frames`: `frames` is then what was trained). `--progress` gets a JSON line
after every rollout: frames, wall_s, and the mean return and success rate of the last 100
finished training episodes.
"""

import argparse
import json
import os
import time

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
import numpy as np
import torch
from minigrid.wrappers import ImgObsWrapper
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class MinigridFeaturesExtractor(BaseFeaturesExtractor):
    """The minigrid documentation's extractor for SB3 (docs: "Training Minigrid Environments"),
    with the max-pool of MiniGrid's own small model (rl-starter-files' ACModel): conv 16-2x2,
    max-pool 2, conv 32-2x2, conv 64-2x2, then linear to `features_dim`."""

    def __init__(self, observation_space, features_dim=128):
        super().__init__(observation_space, features_dim)
        n_input_channels = observation_space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(n_input_channels, 16, (2, 2)),
            nn.ReLU(),
            nn.MaxPool2d((2, 2)),
            nn.Conv2d(16, 32, (2, 2)),
            nn.ReLU(),
            nn.Conv2d(32, 64, (2, 2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flatten = self.cnn(torch.as_tensor(observation_space.sample()[None]).float()).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations):
        return self.linear(self.cnn(observations))


class Progress(BaseCallback):
    """A JSON line after every rollout (to `path`, if any); stops training after `max_seconds`."""

    def __init__(self, path, max_seconds):
        super().__init__()
        self.path, self.max_seconds = path, max_seconds
        self.t0, self.stopped = time.time(), False
        self.last = []

    def _on_step(self):
        for reward, done in zip(self.locals["rewards"], self.locals["dones"]):
            if done:
                self.last = (self.last + [float(reward) > 0.0])[-100:]
        if self.max_seconds is not None and time.time() - self.t0 > self.max_seconds:
            self.stopped = True
            return False
        return True

    def _on_rollout_end(self):
        if not self.path:
            return
        buf = self.model.ep_info_buffer
        line = {
            "frames": int(self.num_timesteps), "wall_s": round(time.time() - self.t0, 2),
            "mean_return_100": float(np.mean([e["r"] for e in buf])) if buf else None,
            "success_100": float(np.mean(self.last)) if self.last else None,
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def make(env_id):
    return ImgObsWrapper(gym.make(env_id))


def evaluate(model, env_id, episodes, seed):
    """Greedy episodes, one per env seed `seed + k`, all stepped in one batch (one `predict`
    call a step); success: a positive final reward."""
    envs = [make(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + k)[0] for k, env in enumerate(envs)])
    returns, last = np.zeros(episodes), np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    state, start = None, np.ones((episodes,), dtype=bool)
    while running.any():
        actions, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
        start = np.zeros((episodes,), dtype=bool)
        for k in np.flatnonzero(running):
            o, r, term, trunc, _ = envs[k].step(int(actions[k]))
            obs[k] = o
            returns[k] += float(r)
            last[k] = float(r)
            running[k] = not (term or trunc)
    return returns.tolist(), (last > 0.0).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="MiniGrid-MemoryS7-v0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--eval-seed", type=int, default=1000)
    ap.add_argument("--n-envs", type=int, default=32)
    ap.add_argument("--n-steps", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--ent-coef", type=float, default=0.02)
    ap.add_argument("--max-seconds", type=float)
    ap.add_argument("--progress")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    hp = dict(
        n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.epochs,
        learning_rate=(lambda lr: (lambda progress: progress * lr))(args.lr),
        gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=args.ent_coef, vf_coef=0.5,
        max_grad_norm=0.5,
    )
    venv = make_vec_env(lambda: make(args.env), n_envs=args.n_envs, seed=args.seed)
    policy_kwargs = dict(
        features_extractor_class=MinigridFeaturesExtractor,
        features_extractor_kwargs=dict(features_dim=128),
        lstm_hidden_size=128,
        normalize_images=False,
    )
    model = RecurrentPPO("CnnLstmPolicy", venv, seed=args.seed, policy_kwargs=policy_kwargs,
                         verbose=0, **hp)
    progress = Progress(args.progress, args.max_seconds)
    t0 = time.time()
    model.learn(total_timesteps=args.frames, callback=progress)
    wall = time.time() - t0
    t1 = time.time()
    returns, successes = evaluate(model, args.env, args.episodes, args.eval_seed)
    eval_wall = time.time() - t1
    shown = {k: v for k, v in hp.items() if k != "learning_rate"}
    shown.update(learning_rate=f"linear {args.lr}", n_envs=args.n_envs, lstm_hidden_size=128)
    line = json.dumps({
        "env": args.env, "seed": args.seed, "frames": int(model.num_timesteps),
        "wall_s": round(wall, 2), "eval_wall_s": round(eval_wall, 2),
        "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
        "success_rate": float(np.mean(successes)), "episodes": args.episodes,
        "eval_seed": args.eval_seed, "hyperparameters": shown,
        "torch_threads": torch.get_num_threads(), "stopped_early": progress.stopped,
    })
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
