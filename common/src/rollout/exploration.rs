//! How an actor chooses actions from the policy head: [`Exploration`] (sample or greedy) with an
//! [`EpsilonSchedule`] of uniformly random actions over policy versions.

/// How an actor chooses actions from the policy head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exploration {
    /// Sample from the policy's distribution (PPO); with probability `epsilon(version)` take a
    /// uniformly random action instead (a mixed-quality behaviour policy).
    Sample(EpsilonSchedule),
    /// The head's argmax (a Q-network's greedy action, or a policy's mode); with probability
    /// `epsilon(version)` a uniformly random action (epsilon-greedy DQN actors; 0 = greedy
    /// evaluation).
    Greedy(EpsilonSchedule),
}

impl Default for Exploration {
    fn default() -> Self {
        Exploration::Sample(EpsilonSchedule::constant(0.0))
    }
}

impl Exploration {
    /// The `--exploration` name.
    pub fn name(&self) -> &'static str {
        match self {
            Exploration::Sample(_) => "sample",
            Exploration::Greedy(_) => "greedy",
        }
    }

    pub fn schedule(&self) -> EpsilonSchedule {
        match *self {
            Exploration::Sample(s) | Exploration::Greedy(s) => s,
        }
    }
}

/// Probability of a uniformly random action, linear in the policy version from `start` (version
/// 0) to `end` (version `decay_versions` and later).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpsilonSchedule {
    pub start: f32,
    pub end: f32,
    pub decay_versions: u64,
}

impl EpsilonSchedule {
    pub fn constant(epsilon: f32) -> Self {
        EpsilonSchedule {
            start: epsilon,
            end: epsilon,
            decay_versions: 0,
        }
    }

    /// Epsilon at policy version `version`.
    pub fn at(&self, version: u64) -> f32 {
        if version >= self.decay_versions {
            return self.end;
        }
        let frac = version as f32 / self.decay_versions as f32;
        self.start + (self.end - self.start) * frac
    }
}

impl std::fmt::Display for EpsilonSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.decay_versions == 0 || self.start == self.end {
            write!(f, "{}", self.end)
        } else {
            write!(f, "{}:{}:{}", self.start, self.end, self.decay_versions)
        }
    }
}

impl std::str::FromStr for EpsilonSchedule {
    type Err = String;
    /// `EPS` (constant) or `START:END:DECAY_VERSIONS`.
    fn from_str(s: &str) -> Result<Self, String> {
        let prob = |v: &str| -> Result<f32, String> {
            let x: f32 = v
                .trim()
                .parse()
                .map_err(|e| format!("epsilon {v:?}: {e}"))?;
            if (0.0..=1.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("epsilon {x} is not a probability in [0, 1]"))
            }
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [eps] => Ok(EpsilonSchedule::constant(prob(eps)?)),
            [start, end, decay] => Ok(EpsilonSchedule {
                start: prob(start)?,
                end: prob(end)?,
                decay_versions: decay
                    .trim()
                    .parse()
                    .map_err(|e| format!("epsilon decay versions {decay:?}: {e}"))?,
            }),
            _ => Err(format!(
                "epsilon {s:?}: expected EPS or START:END:DECAY_VERSIONS (e.g. 0.3 or 1:0.05:200)"
            )),
        }
    }
}
