//! `popgym-PositionOnlyCartPole{Easy,Medium,Hard}-v0`,
//! `popgym-NoisyPositionOnlyCartPole{Easy,Medium,Hard}-v0` and
//! `popgym-VelocityOnlyCartpole{Easy,Medium,Hard}-v0` (`popgym/envs/position_only_cartpole.py`,
//! `noisy_position_only_cartpole.py`, `velocity_only_cartpole.py`): gymnasium's CartPole
//! ([`crate::envs::CartPole`]'s dynamics) with part of the state hidden.

use super::numpy_rng::Generator;
use super::{check_obs, id_of, Difficulty};
use crate::envs::{ActionRef, CartPole, Env, Space, StepResult};

/// Which popgym CartPole.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum Variant {
    /// Observes `[x, theta]`.
    Position,
    /// Observes `[x, theta]` plus Gaussian noise of this standard deviation, clipped to the
    /// observation space.
    NoisyPosition(f64),
    /// Observes `[x_dot, theta_dot]` (but `[x, theta]` at reset, as popgym does).
    Velocity,
}

/// Balance gymnasium's CartPole seeing only part of its state.
///
/// * `PositionOnlyCartPole`: the observation is `[x, theta]` (float32),
///   `Box(-[4.8, 0.419], [4.8, 0.419])`.
/// * `NoisyPositionOnlyCartPole`: the same plus `np_random.normal(0, sigma)` noise per component
///   (sigma 0.1 / 0.2 / 0.3), cast to float32, added and clipped to the space, at reset and
///   every step. The episode lasts at most 200 steps at every level.
/// * `VelocityOnlyCartpole` (popgym's spelling): the observation is `[x_dot, theta_dot]`,
///   `Box(-inf, inf)` (the bridge reports `±f32::MAX`). popgym's reset returns `[x, theta]`
///   instead, and so does this port.
///
/// Action `Discrete(2)`. Episodes end when gymnasium's CartPole terminates, or are truncated at
/// `max_episode_length` steps (200 / 400 / 600 for Easy / Medium / Hard; 200 for the noisy
/// variant); both flags can be set on the same step. The reward is `1 / max_episode_length`
/// on every step (gymnasium's reward of 1 rescaled; popgym's `-1` for gymnasium's 0 only occurs
/// when stepping past termination). The reset state is gymnasium's,
/// `np_random.uniform(-0.05, 0.05, size=4)`, drawn from the [`numpy_rng`](super::numpy_rng)
/// port so it is the package's draw for the same seed.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PopgymCartPole {
    #[serde(skip)]
    id: &'static str,
    variant: Variant,
    max_episode_length: u32,
    rng: Generator,
    cartpole: CartPole,
    num_steps: u32,
}

impl PopgymCartPole {
    /// `popgym-PositionOnlyCartPole<level>-v0`.
    pub fn position_only(level: Difficulty) -> Self {
        Self::new(
            id_of("PositionOnlyCartPole", level),
            Variant::Position,
            max_len(level),
        )
    }

    /// `popgym-NoisyPositionOnlyCartPole<level>-v0`.
    pub fn noisy_position_only(level: Difficulty) -> Self {
        let sigma = level.pick([0.1, 0.2, 0.3]);
        Self::new(
            id_of("NoisyPositionOnlyCartPole", level),
            Variant::NoisyPosition(sigma),
            200,
        )
    }

    /// `popgym-VelocityOnlyCartpole<level>-v0`.
    pub fn velocity_only(level: Difficulty) -> Self {
        Self::new(
            id_of("VelocityOnlyCartpole", level),
            Variant::Velocity,
            max_len(level),
        )
    }

    fn new(id: &'static str, variant: Variant, max_episode_length: u32) -> Self {
        Self {
            id,
            variant,
            max_episode_length,
            rng: Generator::from_seed(0),
            cartpole: CartPole::new(),
            num_steps: 0,
        }
    }

    /// The observation bounds (`high`; `low` is its negation), as float32.
    fn high(&self) -> [f32; 2] {
        match self.variant {
            Variant::Position | Variant::NoisyPosition(_) => [
                (CartPole::X_THRESHOLD * 2.0) as f32,
                (CartPole::THETA_THRESHOLD_RADIANS * 2.0) as f32,
            ],
            Variant::Velocity => [f32::INFINITY; 2],
        }
    }

    /// Writes `state[a], state[b]` as float32, plus the noise of the noisy variant.
    fn write(&mut self, obs: &mut [f32], [a, b]: [usize; 2]) {
        let full = self.cartpole.observation();
        obs.copy_from_slice(&[full[a], full[b]]);
        if let Variant::NoisyPosition(sigma) = self.variant {
            // obs = clip(obs + normal(0, [sigma, sigma]).astype(float32), low, high)
            let high = self.high();
            for (o, h) in obs.iter_mut().zip(high) {
                let noise = self.rng.normal(0.0, sigma) as f32;
                *o = (*o + noise).clamp(-h, h);
            }
        }
    }
}

/// `max_episode_length` of the noiseless variants.
fn max_len(level: Difficulty) -> u32 {
    level.pick([200, 400, 600])
}

impl Env for PopgymCartPole {
    // Observation `Box(-high, high)` over 2 values, infinite bounds as `±f32::MAX` (as the
    // bridge reports them). Action `Discrete(2)`: push left or right.
    super::popgym_env!(env => observation: Space::symmetric(&env.high().map(|h| h.min(f32::MAX))),
        action: Space::Discrete { n: 2 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 2);
        self.rng = Generator::from_seed(seed);
        self.num_steps = 0;
        let state = std::array::from_fn(|_| {
            self.rng
                .uniform(-CartPole::RESET_BOUND, CartPole::RESET_BOUND)
        });
        self.cartpole = CartPole::from_state(state);
        // All three variants observe [x, theta] at reset.
        self.write(obs, [0, 2]);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 2);
        let r = self.cartpole.advance(self.id, action);
        self.num_steps += 1;
        let truncated = self.num_steps >= self.max_episode_length;
        // popgym's reward_transform: -1 where gymnasium paid 0 (math.isclose(reward, 0)).
        let reward = if r.reward == 0.0 {
            -1.0
        } else {
            1.0 / f64::from(self.max_episode_length)
        };
        let observed = match self.variant {
            Variant::Velocity => [1, 3],
            _ => [0, 2],
        };
        self.write(obs, observed);
        StepResult {
            reward,
            terminated: r.terminated,
            truncated,
        }
    }
}
