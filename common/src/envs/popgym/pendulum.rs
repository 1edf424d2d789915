//! `popgym-PositionOnlyPendulum{Easy,Medium,Hard}-v0` and
//! `popgym-NoisyPositionOnlyPendulum{Easy,Medium,Hard}-v0`
//! (`popgym/envs/position_only_pendulum.py`, `noisy_position_only_pendulum.py`): gymnasium's
//! Pendulum ([`crate::envs::Pendulum`]'s dynamics) without the angular velocity.

use std::f64::consts::PI;

use super::libm::{pow_square, powf_square};
use super::numpy_rng::Generator;
use super::{check_obs, id_of, Difficulty};
use crate::envs::{ActionRef, Env, Pendulum, Space, StepResult};

/// Swing up gymnasium's Pendulum seeing only `[cos theta, sin theta]` (float32,
/// `Box([-1, -1], [1, 1])`).
///
/// Action: a torque `Box([-2], [2])`, as gymnasium's. The noisy variant adds
/// `np_random.normal(0, sigma)` noise per component (sigma 0.1 / 0.2 / 0.3), cast to float32,
/// added and clipped to `[-1, 1]`, at reset and every step. Never terminates; truncated at
/// `max_episode_length` steps: 200 / 150 / 100 for Easy / Medium / Hard (200 at every level
/// for the noisy variant). The reward is gymnasium's reward `r` in `[-16.27, 0]` mapped to
/// `(r + 8.1368022) / 8.1368022 / max_episode_length`, popgym's `reward_transform`; `r`'s
/// squares are numpy's (glibc `pow`/`powf`, [`super::libm`]), so it is the package's to the
/// bit. The reset state is gymnasium's `np_random.uniform(-[pi, 1], [pi, 1])`, drawn from the
/// [`numpy_rng`](super::numpy_rng) port.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PopgymPendulum {
    #[serde(skip)]
    id: &'static str,
    /// The noise's standard deviation; `None` for `PositionOnlyPendulum`.
    noise_sigma: Option<f64>,
    max_episode_length: u32,
    rng: Generator,
    pendulum: Pendulum,
    num_steps: u32,
}

impl PopgymPendulum {
    /// `popgym-PositionOnlyPendulum<level>-v0`.
    pub fn position_only(level: Difficulty) -> Self {
        let max_episode_length = level.pick([200, 150, 100]);
        Self::new(
            id_of("PositionOnlyPendulum", level),
            None,
            max_episode_length,
        )
    }

    /// `popgym-NoisyPositionOnlyPendulum<level>-v0`.
    pub fn noisy_position_only(level: Difficulty) -> Self {
        let sigma = level.pick([0.1, 0.2, 0.3]);
        Self::new(id_of("NoisyPositionOnlyPendulum", level), Some(sigma), 200)
    }

    fn new(id: &'static str, noise_sigma: Option<f64>, max_episode_length: u32) -> Self {
        Self {
            id,
            noise_sigma,
            max_episode_length,
            rng: Generator::from_seed(0),
            pendulum: Pendulum::new(),
            num_steps: 0,
        }
    }

    /// `[cos theta, sin theta]`, plus the noise of the noisy variant.
    fn write(&mut self, obs: &mut [f32]) {
        let [c, s, _] = self.pendulum.observation();
        obs.copy_from_slice(&[c, s]);
        if let Some(sigma) = self.noise_sigma {
            for o in obs.iter_mut() {
                let noise = self.rng.normal(0.0, sigma) as f32;
                *o = (*o + noise).clamp(-1.0, 1.0);
            }
        }
    }
}

impl Env for PopgymPendulum {
    // Observation `Box([-1, -1], [1, 1])`; action `Box([-2], [2])`.
    super::popgym_env!(env => observation: Space::Box { low: vec![-1.0; 2], high: vec![1.0; 2] },
        action: Space::Box { low: vec![-Pendulum::MAX_TORQUE], high: vec![Pendulum::MAX_TORQUE] });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 2);
        self.rng = Generator::from_seed(seed);
        self.num_steps = 0;
        let theta = self.rng.uniform(-PI, PI);
        let theta_dot = self.rng.uniform(-1.0, 1.0);
        self.pendulum = Pendulum::from_state([theta, theta_dot]);
        self.write(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 2);
        let u = Pendulum::torque(self.id, action);
        let reward = self.pendulum.advance(u, pow_square, powf_square);
        self.num_steps += 1;
        let truncated = self.num_steps >= self.max_episode_length;
        // popgym's reward_transform, with low, high = -16.2736044, 0.
        let half = (0.0 - -16.2736044f64) / 2.0;
        let reward = (reward + half) / half / f64::from(self.max_episode_length);
        self.write(obs);
        StepResult {
            reward,
            terminated: false,
            truncated,
        }
    }
}
