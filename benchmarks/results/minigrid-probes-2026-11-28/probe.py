"""Memory probes through the gymnasium bridge: a cue at step 0 only, the answer at step 4."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Probe(gym.Env):
    def __init__(self, image=False, at=0, dircue=False):
        self.image, self.at, self.dircue = image, at, dircue
        self.action_space = spaces.Discrete(2)
        if image:
            self.observation_space = spaces.Dict({"direction": spaces.Discrete(4),
                                                  "image": spaces.Box(0, 255, (7, 7, 3), np.uint8)})
        else:
            self.observation_space = spaces.Box(-1, 1, (2,), np.float32)

    def obs(self):
        if self.image:
            img = np.zeros((7, 7, 3), np.uint8)
            img[:, :, 0] = 1
            if self.t == self.at and not self.dircue:
                img[2, 6, 0] = 5 + self.cue
            d = (2 + self.cue if self.t == self.at else 0) if self.dircue else 0
            return {"direction": d if self.t < 4 else 1, "image": img}
        return np.array([(2 * self.cue - 1) if self.t == 0 else 0, float(self.t == 4)], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.cue = int(self.np_random.integers(2))
        self.t = 0
        return self.obs(), {}

    def step(self, action):
        r = 0.0
        done = self.t == 4
        if done:
            r = 1.0 if int(action) == self.cue else 0.0
        self.t += 1
        return self.obs(), r, done, False, {}


gym.register("ProbeFlat-v0", entry_point=lambda **kw: Probe(False))
gym.register("ProbeImg-v0", entry_point=lambda **kw: Probe(True))
gym.register("ProbeImgLate-v0", entry_point=lambda **kw: Probe(True, 4))
gym.register("ProbeImg1-v0", entry_point=lambda **kw: Probe(True, 1))
gym.register("ProbeDir-v0", entry_point=lambda **kw: Probe(True, 0, True))
from mg_onehot import OneHotCodes
gym.register("ProbeImgOH-v0", entry_point=lambda **kw: OneHotCodes(Probe(True)))
gym.register("ProbeImgOH1-v0", entry_point=lambda **kw: OneHotCodes(Probe(True, 1)))
