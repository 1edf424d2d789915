"""MiniGrid memory rooms with the image's codes one-hot (object 11, colour 6, state 3 = 20
planes, uint8 0/1): an experiment on whether the codes' encoding holds recur back."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces
import minigrid  # noqa: F401

SIZES = (11, 6, 3)


class OneHotCodes(gym.ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        img = env.observation_space["image"]
        h, w, _ = img.shape
        d = dict(env.observation_space.spaces)
        d["image"] = spaces.Box(0, 1, (h, w, sum(SIZES)), np.uint8)
        self.observation_space = spaces.Dict(d)

    def observation(self, obs):
        img = obs["image"]
        planes = [np.eye(n, dtype=np.uint8)[np.minimum(img[:, :, k], n - 1)] for k, n in enumerate(SIZES)]
        return {**obs, "image": np.concatenate(planes, axis=2)}


for s in (7, 11):
    gym.register(f"MiniGridOneHot-MemoryS{s}-v0",
                 entry_point=lambda s=s, **kw: OneHotCodes(gym.make(f"MiniGrid-MemoryS{s}-v0", **kw)))


# Diagnostic: S7 with the agent always at x=1 (cue visible at step 0) and the hallway's objects
# in a fixed order (key above): success needs only "go up iff the cue is a key".
from minigrid.envs.memory import MemoryEnv


class EasyMemory(MemoryEnv):
    def _gen_grid(self, width, height):
        rng_elem = self._rand_elem
        calls = {"n": 0}

        def fixed(seq):
            calls["n"] += 1
            if calls["n"] == 2:  # the hallway's order
                return seq[1]  # [Key, Ball]: key above
            return rng_elem(seq)

        self._rand_elem = fixed
        super()._gen_grid(width, height)
        del self._rand_elem
        self.agent_pos = np.array((1, height // 2))


gym.register("MiniGridDiag-MemoryS7-v0", entry_point=lambda **kw: EasyMemory(size=7, **kw))


class Stamped(gym.ObservationWrapper):
    """The cue's object code stamped into view cell (0, 0) of every step: no memory needed."""

    def observation(self, obs):
        img = obs["image"].copy()
        u = self.env.unwrapped
        img[0, 0] = (5 if type(u.grid.get(1, u.height // 2 - 1)).__name__ == "Key" else 6, 1, 0)
        return {**obs, "image": img}


gym.register("MiniGridStamped-MemoryS7-v0", entry_point=lambda **kw: Stamped(EasyMemory(size=7, **kw)))
