//! CartPole-v1 (Barto, Sutton & Anderson 1983) as gymnasium 1.4 implements it, and
//! MaskedCartPole-v1, the same task with the velocities hidden.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{write_obs, ActionRef, Env, EnvError, Space, StepResult};

/// A pole hinged on a cart that moves along a frictionless track.
///
/// State `[x, x_dot, theta, theta_dot]` in float64 (metres, m/s, radians from upright, rad/s);
/// the observation is its float32 cast. Action `Discrete(2)`: 0 pushes the cart left, 1 right,
/// with a force of 10 N for 0.02 s (explicit Euler). The episode terminates once
/// `|x| > 2.4` or `|theta| > 12°`; the reward is 1 on every step, the terminating one included.
/// No time limit of its own: [`super::make`] wraps it in a 500-step [`super::TimeLimit`].
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CartPole {
    state: [f64; 4],
    /// Steps taken after the one that terminated (gymnasium rewards those with 0).
    steps_beyond_terminated: Option<u64>,
}

impl CartPole {
    /// Gravity, m/s².
    pub const GRAVITY: f64 = 9.8;
    /// Mass of the cart, kg.
    pub const MASS_CART: f64 = 1.0;
    /// Mass of the pole, kg.
    pub const MASS_POLE: f64 = 0.1;
    /// Half the pole's length, m (gymnasium's `length`).
    pub const LENGTH: f64 = 0.5;
    /// Magnitude of the push, N.
    pub const FORCE_MAG: f64 = 10.0;
    /// Integration step, s.
    pub const TAU: f64 = 0.02;
    /// `|x|` beyond which the episode terminates, m.
    pub const X_THRESHOLD: f64 = 2.4;
    /// `|theta|` beyond which the episode terminates: 12 degrees, in radians.
    pub const THETA_THRESHOLD_RADIANS: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
    /// Half-width of the uniform distribution each state component is drawn from at reset.
    pub const RESET_BOUND: f64 = 0.05;

    /// A cart at rest with the pole upright (`[0; 4]`); [`Env::reset`] starts a random episode.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cart in `state = [x, x_dot, theta, theta_dot]`, as if an episode had just started there
    /// (used to replay recorded episodes).
    pub fn from_state(state: [f64; 4]) -> Self {
        Self {
            state,
            steps_beyond_terminated: None,
        }
    }

    /// The float64 state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// The observation of the current state: its float32 cast.
    pub fn observation(&self) -> [f32; 4] {
        self.state.map(|v| v as f32)
    }

    /// gymnasium's observation bounds: `±[2 x_threshold, f32::MAX, 2 theta_threshold, f32::MAX]`.
    pub fn space() -> Space {
        Space::symmetric(&Self::high())
    }

    /// Upper observation bounds (the lower ones are their negation).
    fn high() -> [f32; 4] {
        [
            (Self::X_THRESHOLD * 2.0) as f32,
            f32::MAX,
            (Self::THETA_THRESHOLD_RADIANS * 2.0) as f32,
            f32::MAX,
        ]
    }

    /// Draws a new state uniformly in `[-0.05, 0.05)^4` (gymnasium's distribution, drawn from
    /// `StdRng::seed_from_u64(seed)`, not gymnasium's stream).
    fn reset_state(&mut self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        self.state =
            std::array::from_fn(|_| rng.random_range(-Self::RESET_BOUND..Self::RESET_BOUND));
        self.steps_beyond_terminated = None;
    }

    /// One Euler step under `action` (0 = left, 1 = right); gymnasium's arithmetic, in its order.
    /// Shared with the POPGym CartPole variants (`popgym::cartpole`), whose `id` it names in panics.
    ///
    /// # Panics
    /// On any action other than `Discrete(0)` or `Discrete(1)`.
    pub(crate) fn advance(&mut self, id: &str, action: ActionRef<'_>) -> StepResult {
        let force = match action {
            ActionRef::Discrete(1) => Self::FORCE_MAG,
            ActionRef::Discrete(0) => -Self::FORCE_MAG,
            other => panic!("{id}: action must be Discrete(0) or Discrete(1), got {other:?}"),
        };
        let total_mass = Self::MASS_POLE + Self::MASS_CART;
        let polemass_length = Self::MASS_POLE * Self::LENGTH;
        let [x, x_dot, theta, theta_dot] = self.state;
        let costheta = theta.cos();
        let sintheta = theta.sin();
        let temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
        let thetaacc = (Self::GRAVITY * sintheta - costheta * temp)
            / (Self::LENGTH * (4.0 / 3.0 - Self::MASS_POLE * (costheta * costheta) / total_mass));
        let xacc = temp - polemass_length * thetaacc * costheta / total_mass;
        let x = x + Self::TAU * x_dot;
        let x_dot = x_dot + Self::TAU * xacc;
        let theta = theta + Self::TAU * theta_dot;
        let theta_dot = theta_dot + Self::TAU * thetaacc;
        self.state = [x, x_dot, theta, theta_dot];

        let terminated = !(-Self::X_THRESHOLD..=Self::X_THRESHOLD).contains(&x)
            || !(-Self::THETA_THRESHOLD_RADIANS..=Self::THETA_THRESHOLD_RADIANS).contains(&theta);
        let reward = match (terminated, &mut self.steps_beyond_terminated) {
            (false, _) => 1.0,
            (true, first @ None) => {
                *first = Some(0);
                1.0
            }
            // Stepping on after termination: gymnasium warns and rewards 0.
            (true, Some(n)) => {
                *n += 1;
                0.0
            }
        };
        StepResult {
            reward,
            terminated,
            truncated: false,
        }
    }
}

impl Env for CartPole {
    fn id(&self) -> &str {
        "CartPole-v1"
    }

    fn observation_space(&self) -> Space {
        Self::space()
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.reset_state(seed);
        write_obs(self.id(), obs, &self.observation());
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let r = self.advance("CartPole-v1", action);
        write_obs(self.id(), obs, &self.observation());
        r
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        Some(super::encode_state(&(
            self.state,
            self.steps_beyond_terminated,
        )))
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        (self.state, self.steps_beyond_terminated) = super::decode_state(self.id(), state)?;
        Ok(())
    }
}

/// CartPole observed through `[x, theta]` only: the velocities are hidden, so a policy must
/// infer them from the history (the standard memory test). Same dynamics, rewards and
/// termination as [`CartPole`]; [`super::make`] gives it the same 500-step limit.
#[derive(Clone, Debug, Default)]
pub struct MaskedCartPole {
    cartpole: CartPole,
}

impl MaskedCartPole {
    /// Indices of the observed components of CartPole's `[x, x_dot, theta, theta_dot]`.
    pub const OBSERVED: [usize; 2] = [0, 2];

    /// A cart at rest with the pole upright; [`Env::reset`] starts a random episode.
    pub fn new() -> Self {
        Self::from_state([0.0; 4])
    }

    /// A cart in `state = [x, x_dot, theta, theta_dot]`.
    pub fn from_state(state: [f64; 4]) -> Self {
        Self {
            cartpole: CartPole::from_state(state),
        }
    }

    /// The observation `[x, theta]` (float32).
    pub fn observation(&self) -> [f32; 2] {
        let full = self.cartpole.observation();
        Self::OBSERVED.map(|i| full[i])
    }
}

impl Env for MaskedCartPole {
    fn id(&self) -> &str {
        "MaskedCartPole-v1"
    }

    fn observation_space(&self) -> Space {
        let high = CartPole::high();
        Space::symmetric(&Self::OBSERVED.map(|i| high[i]))
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.cartpole.reset_state(seed);
        write_obs(self.id(), obs, &self.observation());
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let r = self.cartpole.advance("MaskedCartPole-v1", action);
        write_obs(self.id(), obs, &self.observation());
        r
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        self.cartpole.save_state()
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        self.cartpole.load_state(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_is_seeded_and_small() {
        let (mut a, mut b) = (CartPole::new(), CartPole::new());
        let (mut oa, mut ob) = ([0.0f32; 4], [0.0f32; 4]);
        a.reset(7, &mut oa);
        b.reset(7, &mut ob);
        assert_eq!(a.state(), b.state());
        assert_eq!(oa, ob);
        assert_eq!(oa, a.observation());
        assert!(a.state().iter().all(|v| v.abs() <= 0.05));
        b.reset(8, &mut ob);
        assert_ne!(a.state(), b.state());
        assert!(a.observation_space().contains_obs(&oa));
    }

    #[test]
    fn bounds_are_gymnasiums() {
        let Space::Box { low, high } = CartPole::space() else {
            panic!("a box")
        };
        assert_eq!(high, [4.8, f32::MAX, 0.41887903, f32::MAX]);
        assert_eq!(low, [-4.8, -f32::MAX, -0.41887903, -f32::MAX]);
    }

    #[test]
    fn pushing_one_way_terminates_and_every_step_pays_one() {
        let mut env = CartPole::from_state([0.0; 4]);
        let mut obs = [0.0f32; 4];
        let mut steps = 0;
        loop {
            let r = env.step(ActionRef::Discrete(1), &mut obs);
            steps += 1;
            assert_eq!(r.reward, 1.0);
            assert!(!r.truncated);
            if r.terminated {
                break;
            }
            assert!(steps < 100, "never terminated");
        }
        assert!(env.state()[2] < -CartPole::THETA_THRESHOLD_RADIANS);
        // Stepping past termination pays nothing, as in gymnasium.
        let r = env.step(ActionRef::Discrete(1), &mut obs);
        assert!(r.terminated);
        assert_eq!(r.reward, 0.0);
    }

    #[test]
    #[should_panic(expected = "got Discrete(2)")]
    fn invalid_action_panics_naming_it() {
        CartPole::new().step(ActionRef::Discrete(2), &mut [0.0; 4]);
    }

    #[test]
    #[should_panic(expected = "observation buffer has length 2, expected 4")]
    fn wrong_buffer_panics() {
        CartPole::new().reset(0, &mut [0.0; 2]);
    }

    #[test]
    fn masked_hides_velocities_and_shares_dynamics() {
        let state = [0.01, -0.02, 0.03, 0.04];
        let (mut full, mut masked) = (
            CartPole::from_state(state),
            MaskedCartPole::from_state(state),
        );
        let (mut of, mut om) = ([0.0f32; 4], [0.0f32; 2]);
        for t in 0..30 {
            let a = ActionRef::Discrete(t % 2);
            assert_eq!(full.step(a, &mut of), masked.step(a, &mut om));
            assert_eq!(om, [of[0], of[2]]);
            assert_eq!(full.state(), masked.cartpole.state());
        }
        let space = masked.observation_space();
        assert_eq!(
            space,
            Space::Box {
                low: vec![-4.8, -0.41887903],
                high: vec![4.8, 0.41887903]
            }
        );
        masked.reset(1, &mut om);
        assert!(space.contains_obs(&om));
    }
}
