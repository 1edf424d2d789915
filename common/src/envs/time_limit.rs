//! The time-limit wrapper: truncates episodes after a fixed number of steps.

use super::{ActionRef, Env, EnvError, Space, StepResult};

/// Wraps `E` and reports `truncated = true` on the `max_episode_steps`-th step since the last
/// reset (or since construction), like gymnasium's `TimeLimit`: `truncated` is set from the
/// step count independently of `terminated`, which passes through unchanged, so a step can be
/// both.
#[derive(Clone, Debug)]
pub struct TimeLimit<E> {
    env: E,
    max_episode_steps: u64,
    elapsed_steps: u64,
}

impl<E: Env> TimeLimit<E> {
    /// Wraps `env`; its current state counts as an episode start (0 steps elapsed).
    ///
    /// # Errors
    /// [`EnvError::ZeroTimeLimit`] when `max_episode_steps == 0`.
    pub fn new(env: E, max_episode_steps: u64) -> Result<Self, EnvError> {
        if max_episode_steps == 0 {
            return Err(EnvError::ZeroTimeLimit { max_episode_steps });
        }
        Ok(Self {
            env,
            max_episode_steps,
            elapsed_steps: 0,
        })
    }

    /// The wrapped environment.
    pub fn inner(&self) -> &E {
        &self.env
    }

    /// Steps taken since the last reset (or construction).
    pub fn elapsed_steps(&self) -> u64 {
        self.elapsed_steps
    }
}

impl<E: Env> Env for TimeLimit<E> {
    fn id(&self) -> &str {
        self.env.id()
    }

    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.elapsed_steps = 0;
        self.env.reset(seed, obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let mut r = self.env.step(action, obs);
        self.elapsed_steps += 1;
        if self.elapsed_steps >= self.max_episode_steps {
            r.truncated = true;
        }
        r
    }

    fn pixels(&self, out: &mut [u8]) {
        self.env.pixels(out);
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        let inner = self.env.save_state()?;
        Some(super::encode_state(&(self.elapsed_steps, inner)))
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let (elapsed, inner): (u64, Vec<u8>) = super::decode_state(self.id(), state)?;
        self.env.load_state(&inner)?;
        self.elapsed_steps = elapsed;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{CartPole, Pendulum};

    #[test]
    fn truncates_exactly_at_the_limit_and_resets_the_count() {
        let mut env = TimeLimit::new(Pendulum::from_state([0.5, 0.0]), 3).unwrap();
        let mut obs = [0.0f32; 3];
        let a = ActionRef::Continuous(&[0.0]);
        assert!(!env.step(a, &mut obs).truncated);
        assert!(!env.step(a, &mut obs).truncated);
        assert!(env.step(a, &mut obs).truncated);
        assert_eq!(env.elapsed_steps(), 3);
        env.reset(0, &mut obs);
        assert_eq!(env.elapsed_steps(), 0);
        assert!(!env.step(a, &mut obs).truncated);
        assert_eq!(env.inner().id(), env.id());
    }

    #[test]
    fn terminated_passes_through_and_can_coincide() {
        // Pushing right from rest terminates CartPole after a few steps; a limit at that very
        // step reports both flags.
        let mut probe = CartPole::new();
        let mut obs = [0.0f32; 4];
        let mut n = 0;
        while !probe.step(ActionRef::Discrete(1), &mut obs).terminated {
            n += 1;
        }
        let mut env = TimeLimit::new(CartPole::new(), n + 1).unwrap();
        for _ in 0..n {
            let r = env.step(ActionRef::Discrete(1), &mut obs);
            assert!(!r.terminated && !r.truncated);
        }
        let r = env.step(ActionRef::Discrete(1), &mut obs);
        assert!(r.terminated && r.truncated);
    }

    #[test]
    fn zero_limit_is_an_error_naming_the_field() {
        let err = TimeLimit::new(CartPole::new(), 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_episode_steps must be at least 1, got 0"
        );
    }
}
