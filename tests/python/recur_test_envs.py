"""Tiny gymnasium environments for recur's bridge tests (tests/gymnasium.rs).

Imported with `--env-import recur_test_envs` (PYTHONPATH=tests/python), registers:

- `RecurTest/Spaces-v0`: observation and action spaces chosen by kwargs (`obs`: box, box2d,
  discrete, multidiscrete, tuple, dict, text, and with images: image (6x5 RGB), gray (4x3),
  dictimage (MiniGrid's keys: image, direction, mission); `action`: discrete, box,
  multidiscrete, unbounded).
  Observation at step t of an episode is a deterministic function of t (`expected_obs` for the
  values lane, `expected_pixels` for the pixels lane), the reward is the sum of the action's
  values, episodes last `length` steps (terminated). With `bad_at` (counted over the process),
  that step's `image` key (dictimage) comes as float32 of another shape.
- `RecurTest/Faulty-v0`: a 2-value Box observation counting steps, Discrete(2) actions; at step
  `nan_at` (counted over the process) the observation holds NaN, at `crash_at` the worker
  process exits (status 7), at `hang_at` it sleeps forever. With `once_file`, a fault happens
  only if that file does not exist yet (it is created first), so a restarted actor runs clean.
  With `hang_at_init`, the constructor sleeps forever (a worker that never finishes starting);
  with `init_seconds`, it sleeps that long (a slow start).
"""
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

OBS_SPACES = {
    "box": lambda: spaces.Box(-10.0, 10.0, (3,), np.float32),
    "box2d": lambda: spaces.Box(-10.0, 10.0, (2, 2), np.float32),
    "discrete": lambda: spaces.Discrete(5, start=1),
    "multidiscrete": lambda: spaces.MultiDiscrete([3, 2]),
    "tuple": lambda: spaces.Tuple((spaces.Discrete(3), spaces.Box(-10.0, 10.0, (2,), np.float32))),
    "dict": lambda: spaces.Dict({"b": spaces.Box(-10.0, 10.0, (2,), np.float32), "a": spaces.Discrete(2)}),
    "text": lambda: spaces.Text(5),
    "image": lambda: spaces.Box(0, 255, (6, 5, 3), np.uint8),
    "gray": lambda: spaces.Box(0, 255, (4, 3), np.uint8),
    "dictimage": lambda: spaces.Dict({
        "image": spaces.Box(0, 255, (6, 5, 3), np.uint8),
        "direction": spaces.Discrete(4),
        "mission": spaces.Text(5),
    }),
}


def image(shape, t):
    return ((np.arange(int(np.prod(shape))) * 7 + t) % 256).astype(np.uint8).reshape(shape)

ACTION_SPACES = {
    "discrete": lambda: spaces.Discrete(3),
    "box": lambda: spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32)),
    "multidiscrete": lambda: spaces.MultiDiscrete([2, 3]),
    "unbounded": lambda: spaces.Box(-np.inf, np.inf, (1,), np.float32),
}


def raw_obs(kind, t):
    """The observation at step t of an episode, in the space's own form."""
    if kind == "box":
        return np.array([t, -t, 0.5], np.float32)
    if kind == "box2d":
        return np.array([[t, 1], [2, -t]], np.float32)
    if kind == "discrete":
        return 1 + t % 5
    if kind == "multidiscrete":
        return np.array([t % 3, (t + 1) % 2])
    if kind == "tuple":
        return (t % 3, np.array([t, 1.5], np.float32))
    if kind == "dict":
        return {"b": np.array([t, 2.5], np.float32), "a": t % 2}
    if kind == "image":
        return image((6, 5, 3), t)
    if kind == "gray":
        return image((4, 3), t)
    if kind == "dictimage":
        return {"image": image((6, 5, 3), t), "direction": t % 4, "mission": "go"}
    return "a"


def expected_pixels(kind, t):
    """The pixels lane (uint8, flat) recur's bridge must produce for raw_obs(kind, t)."""
    if kind in ("image", "dictimage"):
        return image((6, 5, 3), t).reshape(-1)
    if kind == "gray":
        return image((4, 3), t).reshape(-1)
    return np.zeros(0, np.uint8)


def expected_obs(kind, t):
    """The flat float32 vector recur's bridge must produce for raw_obs(kind, t)."""
    if kind == "box":
        return [t, -t, 0.5]
    if kind == "box2d":
        return [t, 1, 2, -t]
    if kind == "discrete":
        return [1.0 if i == t % 5 else 0.0 for i in range(5)]
    if kind == "multidiscrete":
        return [1.0 if i == t % 3 else 0.0 for i in range(3)] + [1.0 if i == (t + 1) % 2 else 0.0 for i in range(2)]
    if kind == "tuple":
        return [1.0 if i == t % 3 else 0.0 for i in range(3)] + [t, 1.5]
    if kind == "dict":
        # gymnasium's Dict sorts plain-dict keys: "a" then "b".
        return [1.0 if i == t % 2 else 0.0 for i in range(2)] + [t, 2.5]
    if kind in ("image", "gray"):
        return []
    if kind == "dictimage":
        # The kept keys: "direction" (one-hot) in the values lane, "image" in the pixels.
        return [1.0 if i == t % 4 else 0.0 for i in range(4)]
    raise ValueError(kind)


class SpacesEnv(gym.Env):
    steps = 0  # over the process

    def __init__(self, obs="box", action="discrete", length=5, bad_at=-1):
        self.kind, self.length, self.bad_at = obs, length, bad_at
        self.observation_space = OBS_SPACES[obs]()
        self.action_space = ACTION_SPACES[action]()
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return raw_obs(self.kind, 0), {}

    def step(self, action):
        assert self.action_space.contains(action), f"action {action!r} not in {self.action_space}"
        self.t += 1
        SpacesEnv.steps += 1
        reward = float(np.sum(action))
        obs = raw_obs(self.kind, self.t)
        if SpacesEnv.steps == self.bad_at:
            obs["image"] = np.zeros((6, 5), np.float32)
        return obs, reward, self.t >= self.length, False, {}


class FaultyEnv(gym.Env):
    steps = 0  # over the process

    def __init__(self, nan_at=-1, crash_at=-1, hang_at=-1, once_file=None, hang_at_init=False,
                 init_seconds=0.0):
        while hang_at_init:
            time.sleep(1)
        time.sleep(init_seconds)
        self.nan_at, self.crash_at, self.hang_at, self.once_file = nan_at, crash_at, hang_at, once_file
        self.observation_space = spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def fault(self, at):
        if FaultyEnv.steps != at:
            return False
        if self.once_file is not None:
            if os.path.exists(self.once_file):
                return False
            open(self.once_file, "w").close()
        return True

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        FaultyEnv.steps += 1
        self.t += 1
        if self.fault(self.crash_at):
            os._exit(7)
        if self.fault(self.hang_at):
            while True:
                time.sleep(1)
        obs = np.array([self.t, FaultyEnv.steps], np.float32)
        if self.fault(self.nan_at):
            obs[1] = np.nan
        return obs, 1.0, self.t >= 20, False, {}


gym.register(id="RecurTest/Spaces-v0", entry_point=SpacesEnv)
gym.register(id="RecurTest/Faulty-v0", entry_point=FaultyEnv)
