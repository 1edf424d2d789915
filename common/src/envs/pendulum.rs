//! Pendulum-v1 as gymnasium 1.4 implements it: swing a pendulum up and hold it upright; and
//! MaskedPendulum-v1, the same task with the angular velocity hidden.

use std::f64::consts::PI;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{write_obs, ActionRef, Env, EnvError, Space, StepResult};

/// An inverted pendulum driven by a bounded torque at its pivot.
///
/// State `[theta, theta_dot]` in float64 (radians, 0 = upright; rad/s). Observation
/// `[cos theta, sin theta, theta_dot]` as float32. Action: a torque `[u]` in N·m, clipped to
/// `[-2, 2]` and kept in float32 as gymnasium does (so `0.001 u²` and `3 u / (m l²)` are
/// float32 products added to float64 quantities). Reward
/// `-(angle_normalize(theta)² + 0.1 theta_dot² + 0.001 u²)` of the state before the step, in
/// `[-16.27, 0]`. Never terminates; [`super::make`] wraps it in a 200-step
/// [`super::TimeLimit`].
///
/// One deliberate difference: `u²` is the correctly rounded float32 product `u * u`, while
/// numpy evaluates `u**2` with the C library's `powf`, which glibc may round one float32 ulp
/// differently. In gymnasium's reference rollouts that happens at 1 step in 600 and moves the
/// reward by 2⁻³⁶ (1.5e-11); the dynamics do not use `u²` and match bit for bit.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Pendulum {
    state: [f64; 2],
}

impl Pendulum {
    /// Gravity, m/s² (gymnasium's default `g`).
    pub const G: f64 = 10.0;
    /// Mass, kg.
    pub const M: f64 = 1.0;
    /// Length, m.
    pub const L: f64 = 1.0;
    /// Integration step, s.
    pub const DT: f64 = 0.05;
    /// `|theta_dot|` is clipped to this after every step, rad/s.
    pub const MAX_SPEED: f64 = 8.0;
    /// `|u|` is clipped to this, N·m.
    pub const MAX_TORQUE: f32 = 2.0;

    /// The pendulum upright and at rest (`[0, 0]`); [`Env::reset`] starts a random episode.
    pub fn new() -> Self {
        Self::default()
    }

    /// A pendulum in `state = [theta, theta_dot]` (used to replay recorded episodes).
    pub fn from_state(state: [f64; 2]) -> Self {
        Self { state }
    }

    /// The float64 state `[theta, theta_dot]`.
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// The observation `[cos theta, sin theta, theta_dot]` (float32).
    pub fn observation(&self) -> [f32; 3] {
        let [theta, theta_dot] = self.state;
        [theta.cos() as f32, theta.sin() as f32, theta_dot as f32]
    }

    /// The torque of `action`, clipped to `[-2, 2]` in float32 (gymnasium's
    /// `np.clip(u, -max_torque, max_torque)[0]`). Shared with the POPGym variants, whose `id`
    /// it names in panics.
    ///
    /// # Panics
    /// Unless `action` is `Continuous` with exactly one value.
    pub(crate) fn torque(id: &str, action: ActionRef<'_>) -> f32 {
        match action {
            ActionRef::Continuous(&[u]) => u.clamp(-Self::MAX_TORQUE, Self::MAX_TORQUE),
            other => panic!("{id}: action must be Continuous([torque]), got {other:?}"),
        }
    }

    /// One step under the clipped torque `u`; returns gymnasium's reward `-costs` of the state
    /// before the step. `square` and `square_f32` compute numpy's `x**2` on float64 and float32
    /// scalars: [`Pendulum`] uses the correctly rounded products, the POPGym variants glibc's
    /// `pow`/`powf` (what numpy calls), bit for bit.
    pub(crate) fn advance(
        &mut self,
        u: f32,
        square: fn(f64) -> f64,
        square_f32: fn(f32) -> f32,
    ) -> f64 {
        let [th, thdot] = self.state;
        let costs =
            square(angle_normalize(th)) + 0.1 * square(thdot) + f64::from(0.001f32 * square_f32(u));
        let accel = 3.0 * Self::G / (2.0 * Self::L) * th.sin()
            + f64::from((3.0 / (Self::M * Self::L * Self::L)) as f32 * u);
        let newthdot = (thdot + accel * Self::DT).clamp(-Self::MAX_SPEED, Self::MAX_SPEED);
        let newth = th + newthdot * Self::DT;
        self.state = [newth, newthdot];
        -costs
    }
}

/// `x` wrapped into `[-pi, pi)`: numpy's `((x + pi) % (2 pi)) - pi` (floored modulo).
fn angle_normalize(x: f64) -> f64 {
    (x + PI).rem_euclid(2.0 * PI) - PI
}

impl Env for Pendulum {
    fn id(&self) -> &str {
        "Pendulum-v1"
    }

    /// `Box([-1, -1, -8], [1, 1, 8])`.
    fn observation_space(&self) -> Space {
        Space::symmetric(&[1.0, 1.0, Self::MAX_SPEED as f32])
    }

    /// `Box([-2], [2])`.
    fn action_space(&self) -> Space {
        Space::symmetric(&[Self::MAX_TORQUE])
    }

    /// Draws `theta` uniformly in `[-pi, pi)` and `theta_dot` in `[-1, 1)` from
    /// `StdRng::seed_from_u64(seed)` (gymnasium's distribution, not its stream).
    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        let mut rng = StdRng::seed_from_u64(seed);
        let theta = rng.random_range(-PI..PI);
        let theta_dot = rng.random_range(-1.0..1.0);
        self.state = [theta, theta_dot];
        write_obs(self.id(), obs, &self.observation());
    }

    /// # Panics
    /// Unless `action` is `Continuous` with exactly one value.
    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let u = Self::torque("Pendulum-v1", action);
        let reward = self.advance(u, |x| x * x, |u| u * u);
        write_obs(self.id(), obs, &self.observation());
        StepResult {
            reward,
            terminated: false,
            truncated: false,
        }
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        Some(super::encode_state(&self.state))
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        self.state = super::decode_state(self.id(), state)?;
        Ok(())
    }
}

/// Pendulum-v1 with the angular velocity hidden (observation `[cos theta, sin theta]`): the
/// policy must infer it from successive angles (rl-zoo's `PendulumNoVel-v1`). Same dynamics,
/// reward, reset and 200-step limit as [`Pendulum`].
#[derive(Clone, Debug, Default)]
pub struct MaskedPendulum {
    pendulum: Pendulum,
}

impl MaskedPendulum {
    pub fn new() -> Self {
        Self::default()
    }

    /// `[cos theta, sin theta]` (float32).
    pub fn observation(&self) -> [f32; 2] {
        let [c, s, _] = self.pendulum.observation();
        [c, s]
    }
}

impl Env for MaskedPendulum {
    fn id(&self) -> &str {
        "MaskedPendulum-v1"
    }

    /// `Box([-1, -1], [1, 1])`.
    fn observation_space(&self) -> Space {
        Space::symmetric(&[1.0, 1.0])
    }

    fn action_space(&self) -> Space {
        self.pendulum.action_space()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.pendulum.reset(seed, &mut [0.0; 3]);
        write_obs(self.id(), obs, &self.observation());
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let r = self.pendulum.step(action, &mut [0.0; 3]);
        write_obs(self.id(), obs, &self.observation());
        r
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        self.pendulum.save_state()
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        self.pendulum.load_state(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_pendulum_is_pendulum_without_theta_dot() {
        let (mut full, mut masked) = (Pendulum::new(), MaskedPendulum::new());
        let (mut a, mut b) = ([0.0f32; 3], [0.0f32; 2]);
        full.reset(7, &mut a);
        masked.reset(7, &mut b);
        assert_eq!(b, [a[0], a[1]]);
        for k in 0..30 {
            let u = [(k as f32 * 0.37).sin() * 2.5];
            let ra = full.step(ActionRef::Continuous(&u), &mut a);
            let rb = masked.step(ActionRef::Continuous(&u), &mut b);
            assert_eq!(ra, rb);
            assert_eq!(b, [a[0], a[1]]);
            assert_eq!(masked.pendulum.state(), full.state());
            assert!(masked.observation_space().contains_obs(&b));
        }
    }

    #[test]
    fn angle_normalize_is_floored() {
        assert!((angle_normalize(3.0 * PI / 2.0) + PI / 2.0).abs() < 1e-12);
        assert!((angle_normalize(-3.0 * PI / 2.0) - PI / 2.0).abs() < 1e-12);
        assert_eq!(angle_normalize(0.25), 0.25);
        assert!((angle_normalize(-PI) + PI).abs() < 1e-12);
    }

    #[test]
    fn upright_at_rest_costs_nothing_and_stays() {
        let mut env = Pendulum::from_state([0.0, 0.0]);
        let mut obs = [0.0f32; 3];
        let r = env.step(ActionRef::Continuous(&[0.0]), &mut obs);
        assert_eq!(r.reward, 0.0);
        assert_eq!(obs, [1.0, 0.0, 0.0]);
        assert!(!r.terminated && !r.truncated);
    }

    #[test]
    fn torque_is_clipped_and_speed_limited() {
        let mut a = Pendulum::from_state([1.0, 0.0]);
        let mut b = Pendulum::from_state([1.0, 0.0]);
        let mut obs = [0.0f32; 3];
        let ra = a.step(ActionRef::Continuous(&[5.0]), &mut obs);
        let rb = b.step(ActionRef::Continuous(&[2.0]), &mut obs);
        assert_eq!(ra, rb);
        assert_eq!(a.state(), b.state());
        let mut fast = Pendulum::from_state([0.0, 7.99]);
        fast.step(ActionRef::Continuous(&[2.0]), &mut obs);
        assert_eq!(fast.state()[1], Pendulum::MAX_SPEED);
        assert_eq!(obs[2], 8.0);
    }

    #[test]
    fn reset_is_seeded_and_in_range() {
        let mut env = Pendulum::new();
        let mut obs = [0.0f32; 3];
        for seed in 0..50 {
            env.reset(seed, &mut obs);
            let [th, thdot] = env.state();
            assert!((-PI..PI).contains(&th) && (-1.0..1.0).contains(&thdot));
            assert!(env.observation_space().contains_obs(&obs));
        }
        let mut other = Pendulum::new();
        other.reset(49, &mut obs);
        assert_eq!(other.state(), env.state());
    }

    #[test]
    #[should_panic(expected = "got Discrete(1)")]
    fn discrete_action_panics() {
        Pendulum::new().step(ActionRef::Discrete(1), &mut [0.0; 3]);
    }
}
