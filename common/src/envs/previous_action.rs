//! The previous-action wrapper: the action just taken, appended to each observation. The
//! POPGym paper's baselines trained with it (popgym's `PreviousAction` and `Antialias`
//! wrappers): a policy that samples its actions cannot otherwise tell from its own memory
//! which action the environment received. Named by the id suffix
//! [`PREVIOUS_ACTION_SUFFIX`] (`popgym-NoisyPositionOnlyCartPoleEasy-v0+prev-action`), which
//! the [`super::Registry`] resolves for every registered environment.
//!
//! The appended values: a one-hot of a discrete action (one per component of a
//! multi-discrete one), or a box action's values; all zeros after a reset, which no discrete
//! action encodes to (popgym needs its `Antialias` flag for that, having a null action `0`).

use super::{ActionRef, Env, EnvError, Space, StepResult};

/// The id suffix that wraps a registered environment in [`PreviousAction`].
pub const PREVIOUS_ACTION_SUFFIX: &str = "+prev-action";

/// Wraps an environment; its observations gain the previous action ([`appended_space`]).
pub struct PreviousAction {
    env: Box<dyn Env>,
    id: String,
    /// The wrapped environment's observation length.
    dim: usize,
    observation_space: Space,
    action_space: Space,
}

/// The observation space of `observation` with the encoding of `action` appended, or why
/// there is none (the observation must be a box).
pub fn appended_space(id: &str, observation: &Space, action: &Space) -> Result<Space, EnvError> {
    let Space::Box { low, high } = observation else {
        return Err(EnvError::UnsupportedSpace {
            id: id.to_string(),
            which: "observation",
            space: format!("{observation:?}"),
            supported: "Box (the previous action is appended to it)",
        });
    };
    if !action.is_action_space() {
        return Err(EnvError::UnsupportedSpace {
            id: id.to_string(),
            which: "action",
            space: action.describe(),
            supported: "Discrete, Box, MultiDiscrete",
        });
    }
    let (mut low, mut high) = (low.clone(), high.clone());
    // One-hot values: one per index (of every component of a multi-discrete action).
    let one_hot = match action {
        Space::Discrete { n } => *n,
        Space::MultiDiscrete { nvec } => nvec.iter().sum(),
        Space::Box {
            low: a_low,
            high: a_high,
        } => {
            // Zeros after a reset: within the bounds too.
            low.extend(a_low.iter().map(|l| l.min(0.0)));
            high.extend(a_high.iter().map(|h| h.max(0.0)));
            0
        }
        Space::Image { .. } | Space::Dict { .. } => unreachable!("checked above"),
    };
    low.extend(std::iter::repeat_n(0.0, one_hot));
    high.extend(std::iter::repeat_n(1.0, one_hot));
    Ok(Space::Box { low, high })
}

impl PreviousAction {
    /// Wraps `env` as environment `id` (its id with [`PREVIOUS_ACTION_SUFFIX`]).
    ///
    /// # Errors
    /// [`EnvError::UnsupportedSpace`] for an observation space other than a box.
    pub fn new(env: Box<dyn Env>, id: &str) -> Result<Self, EnvError> {
        let observation = env.observation_space();
        let action_space = env.action_space();
        Ok(PreviousAction {
            dim: observation.dim(),
            observation_space: appended_space(id, &observation, &action_space)?,
            env,
            id: id.to_string(),
            action_space,
        })
    }
}

impl Env for PreviousAction {
    fn id(&self) -> &str {
        &self.id
    }

    fn observation_space(&self) -> Space {
        self.observation_space.clone()
    }

    fn action_space(&self) -> Space {
        self.action_space.clone()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        let (inner, previous) = obs.split_at_mut(self.dim);
        self.env.reset(seed, inner);
        previous.fill(0.0);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let (inner, previous) = obs.split_at_mut(self.dim);
        let result = self.env.step(action, inner);
        previous.fill(0.0);
        match (action, &self.action_space) {
            (ActionRef::Discrete(a), _) => previous[a as usize] = 1.0,
            (ActionRef::MultiDiscrete(a), Space::MultiDiscrete { nvec }) => {
                let mut offset = 0;
                for (&a, &n) in a.iter().zip(nvec) {
                    previous[offset + a as usize] = 1.0;
                    offset += n;
                }
            }
            (ActionRef::Continuous(a), _) => previous.copy_from_slice(a),
            (ActionRef::MultiDiscrete(_), _) => unreachable!("the inner step checked the action"),
        }
        result
    }

    // The appended values are the last action, which the caller's observation holds: the
    // wrapped environment's state is the whole state.
    fn pixels(&self, out: &mut [u8]) {
        self.env.pixels(out);
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        self.env.save_state()
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        self.env.load_state(state)
    }
}
