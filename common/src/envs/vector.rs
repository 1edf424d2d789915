//! A batch of environments stepped together, with per-environment auto-reset.

use super::{make, ActionRef, Env, EnvError, Space};

/// The reset seed of environment `env_index`'s episode `episode` (counting from 0) in a
/// vector of environments seeded with `seed`, native ([`VecEnv`]) or bridged
/// ([`super::GymVecEnv`], whose worker computes the same function in Python): the high 32 bits
/// of three rounds of SplitMix64, `mix(mix(mix(seed) ^ env_index) ^ episode) >> 32`, so nearby
/// seeds, indices and episodes give unrelated reset streams.
///
/// The seed is below `2**32` because many Python environments seed numpy's legacy generator
/// (`np.random.seed`, `np.random.RandomState`), which refuses larger seeds: popgym's labyrinths
/// do, and so does dm_control.
pub fn episode_seed(seed: u64, env_index: u64, episode: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(seed) ^ env_index) ^ episode) >> 32
}

/// SplitMix64's output function (Steele, Lea & Flood 2014) applied once to `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One action per environment, borrowed from the policy's output.
#[derive(Clone, Copy, Debug)]
pub enum VecActions<'a> {
    /// For a [`Space::Discrete`] action space: `[E]` indices; for a [`Space::MultiDiscrete`]
    /// one: `[E * components]`, environment-major.
    Discrete(&'a [i64]),
    /// For a [`Space::Box`] action space: `[E * action_dim]`, environment-major.
    Continuous(&'a [f32]),
}

/// What one [`VecEnv::step`] produced, `E` environments at once. Flat buffers are
/// environment-major (`[E * D]`: environment `j`'s observation is `[j * D..(j + 1) * D]`).
/// The buffers are reused from step to step.
#[derive(Clone, Debug, Default)]
pub struct VecStep {
    /// `[E * D]` observation after the step: the terminal one where the episode ended.
    pub next_obs: Vec<f32>,
    /// `[E * P]` the pixels lane of `next_obs` (`P` = [`Space::pixels`], empty without images).
    pub next_pixels: Vec<u8>,
    /// `[E]` reward of the step.
    pub reward: Vec<f32>,
    /// `[E]` the episode reached a terminal state.
    pub terminated: Vec<bool>,
    /// `[E]` the episode was cut by its time limit.
    pub truncated: Vec<bool>,
    /// `[E]` `terminated | truncated`: the environment was reset after this step.
    pub done: Vec<bool>,
    /// `[E * D]` what the policy sees at the following step: the reset observation where
    /// `done`, else `next_obs`.
    pub obs: Vec<f32>,
    /// `[E * P]` the pixels lane of `obs`.
    pub pixels: Vec<u8>,
    /// `[E]` true where the environment was reset, so `obs` starts an episode and recurrent
    /// state must be zeroed before the following step (the `is_init` contract); equals `done`.
    pub is_init: Vec<bool>,
    /// `[E]` undiscounted return of the episode that ended on this step, `None` elsewhere.
    pub episode_return: Vec<Option<f64>>,
    /// `[E]` length in steps of the episode that ended on this step, `None` elsewhere.
    pub episode_length: Vec<Option<u64>>,
}

impl VecActions<'_> {
    /// Values held (indices or floats).
    pub fn len(&self) -> usize {
        match self {
            VecActions::Discrete(a) => a.len(),
            VecActions::Continuous(a) => a.len(),
        }
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl VecStep {
    pub(crate) fn new(num_envs: usize, obs_dim: usize, pixels: usize) -> Self {
        Self {
            next_obs: vec![0.0; num_envs * obs_dim],
            next_pixels: vec![0; num_envs * pixels],
            pixels: vec![0; num_envs * pixels],
            reward: vec![0.0; num_envs],
            terminated: vec![false; num_envs],
            truncated: vec![false; num_envs],
            done: vec![false; num_envs],
            obs: vec![0.0; num_envs * obs_dim],
            is_init: vec![false; num_envs],
            episode_return: vec![None; num_envs],
            episode_length: vec![None; num_envs],
        }
    }

    /// The step record after a reset of every environment (`obs` holds the first
    /// observations): no transition yet, `is_init` everywhere.
    pub(crate) fn after_reset(&mut self) {
        self.next_obs.fill(0.0);
        self.next_pixels.fill(0);
        self.reward.fill(0.0);
        self.terminated.fill(false);
        self.truncated.fill(false);
        self.done.fill(false);
        self.is_init.fill(true);
        self.episode_return.fill(None);
        self.episode_length.fill(None);
    }

    /// Records environment `j`'s transition and adds it to its running episode `(return,
    /// length)`; where the episode ends (`terminated || truncated`, the returned `done`), the
    /// totals go into the record and restart from 0.
    pub(crate) fn record(
        &mut self,
        j: usize,
        reward: f64,
        (terminated, truncated): (bool, bool),
        (ret, length): (&mut f64, &mut u64),
    ) -> bool {
        let done = terminated || truncated;
        *ret += reward;
        *length += 1;
        self.reward[j] = reward as f32;
        self.terminated[j] = terminated;
        self.truncated[j] = truncated;
        self.done[j] = done;
        self.is_init[j] = done;
        self.episode_return[j] = done.then_some(*ret);
        self.episode_length[j] = done.then_some(*length);
        if done {
            (*ret, *length) = (0.0, 0);
        }
        done
    }
}

/// `E` copies of one environment ([`make`]`(id)`, time limit included), stepped in lockstep;
/// an environment whose episode ends is reset at once, so every step yields an observation
/// for every environment.
///
/// Deterministic for `(id, num_envs, seed)`: environment `j`'s `n`-th episode (counting resets
/// by [`VecEnv::reset`] and automatic ones alike, from 0) is reset with
/// [`episode_seed`]`(seed, j, n)`.
///
/// ```
/// use common::envs::{VecActions, VecEnv};
///
/// let mut envs = VecEnv::new("CartPole-v1", 4, 7)?;
/// let obs = &envs.reset().obs; // [4 * 4]
/// assert_eq!(obs.len(), 16);
/// assert!(envs.is_init().iter().all(|&b| b));
/// let step = envs.step(VecActions::Discrete(&[0, 1, 0, 1]));
/// assert_eq!(step.reward, [1.0; 4]);
/// # Ok::<(), common::envs::EnvError>(())
/// ```
pub struct VecEnv {
    id: String,
    envs: Vec<Box<dyn Env>>,
    seed: u64,
    observation_space: Space,
    action_space: Space,
    obs_dim: usize,
    /// Bytes of one observation's pixels lane ([`Space::pixels`]).
    pixels: usize,
    action_dim: usize,
    /// Episodes started per environment (the next episode's index).
    episodes: Vec<u64>,
    /// Return and length of each environment's running episode.
    running_return: Vec<f64>,
    running_length: Vec<u64>,
    started: bool,
    last: VecStep,
}

impl VecEnv {
    /// `num_envs` environments `id` (see [`super::ENV_IDS`]); call [`VecEnv::reset`] before
    /// the first step.
    ///
    /// # Errors
    /// [`EnvError::NoEnvs`] when `num_envs == 0`; [`EnvError::UnknownId`] for an unknown id.
    pub fn new(id: &str, num_envs: usize, seed: u64) -> Result<Self, EnvError> {
        let envs = (0..num_envs)
            .map(|_| make(id))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_envs(id, envs, seed)
    }

    /// `envs` (copies of one environment, e.g. from a [`super::Registry`]) as a `VecEnv`
    /// named `id`, seeded as [`VecEnv::new`].
    ///
    /// # Errors
    /// [`EnvError::NoEnvs`] when `envs` is empty.
    pub fn from_envs(id: &str, envs: Vec<Box<dyn Env>>, seed: u64) -> Result<Self, EnvError> {
        let num_envs = envs.len();
        if num_envs == 0 {
            return Err(EnvError::NoEnvs { num_envs });
        }
        let observation_space = envs[0].observation_space();
        let action_space = envs[0].action_space();
        let obs_dim = observation_space.dim();
        let pixels = observation_space.pixels();
        let action_dim = action_space.dim();
        Ok(Self {
            id: id.to_owned(),
            envs,
            seed,
            observation_space,
            action_space,
            obs_dim,
            pixels,
            action_dim,
            episodes: vec![0; num_envs],
            running_return: vec![0.0; num_envs],
            running_length: vec![0; num_envs],
            started: false,
            last: VecStep::new(num_envs, obs_dim, pixels),
        })
    }

    /// Resets every env; the record whose `obs` (`[E * obs_dim]`) and `pixels` hold the
    /// observations the policy sees first; all envs are at an episode start
    /// ([`VecEnv::is_init`] is all true). Each call starts a new episode in every environment
    /// (seeded by [`episode_seed`]).
    pub fn reset(&mut self) -> &VecStep {
        let (d, p) = (self.obs_dim, self.pixels);
        let last = &mut self.last;
        for (j, env) in self.envs.iter_mut().enumerate() {
            env.reset(
                episode_seed(self.seed, j as u64, self.episodes[j]),
                &mut last.obs[j * d..(j + 1) * d],
            );
            env.pixels(&mut last.pixels[j * p..(j + 1) * p]);
            self.episodes[j] += 1;
            self.running_return[j] = 0.0;
            self.running_length[j] = 0;
        }
        last.after_reset();
        self.started = true;
        &self.last
    }

    /// `[E]` whether each environment's current observation starts an episode: all true after
    /// [`VecEnv::reset`], [`VecStep::is_init`] after a step.
    pub fn is_init(&self) -> &[bool] {
        &self.last.is_init
    }

    /// Steps env j with action j. `actions` is Discrete: `&[i64]` of len E, or Continuous:
    /// `&[f32]` of len `E * action_dim`. Environments whose episode ends are reset at once
    /// (see [`VecStep`]). Allocates nothing.
    ///
    /// # Panics
    /// Before the first [`VecEnv::reset`], when `actions` has the wrong kind or length for
    /// the action space, or when an environment rejects its action.
    pub fn step(&mut self, actions: VecActions<'_>) -> &VecStep {
        assert!(
            self.started,
            "VecEnv({}): step called before reset",
            self.id
        );
        let e = self.envs.len();
        let (d, p, ad) = (self.obs_dim, self.pixels, self.action_dim);
        match (actions, &self.action_space) {
            (VecActions::Discrete(a), Space::Discrete { .. }) => assert_eq!(
                a.len(),
                e,
                "VecEnv({}): {} discrete actions for {e} environments",
                self.id,
                a.len()
            ),
            (VecActions::Continuous(_), Space::Box { .. })
            | (VecActions::Discrete(_), Space::MultiDiscrete { .. }) => assert!(
                actions.len() == e * ad,
                "VecEnv({}): {} action values, expected {e} environments x {ad}",
                self.id,
                actions.len()
            ),
            (actions, space) => panic!(
                "VecEnv({}): actions {actions:?} do not match the action space {}",
                self.id,
                space.describe()
            ),
        }
        let multi = matches!(self.action_space, Space::MultiDiscrete { .. });
        let last = &mut self.last;
        for (j, env) in self.envs.iter_mut().enumerate() {
            let action = match actions {
                VecActions::Discrete(a) if multi => {
                    ActionRef::MultiDiscrete(&a[j * ad..(j + 1) * ad])
                }
                VecActions::Discrete(a) => ActionRef::Discrete(a[j]),
                VecActions::Continuous(a) => ActionRef::Continuous(&a[j * ad..(j + 1) * ad]),
            };
            let obs_range = j * d..(j + 1) * d;
            let px_range = j * p..(j + 1) * p;
            let r = env.step(action, &mut last.next_obs[obs_range.clone()]);
            env.pixels(&mut last.next_pixels[px_range.clone()]);
            let running = (&mut self.running_return[j], &mut self.running_length[j]);
            if last.record(j, r.reward, (r.terminated, r.truncated), running) {
                env.reset(
                    episode_seed(self.seed, j as u64, self.episodes[j]),
                    &mut last.obs[obs_range],
                );
                env.pixels(&mut last.pixels[px_range]);
                self.episodes[j] += 1;
            } else {
                let (next, obs) = (&last.next_obs[obs_range.clone()], &mut last.obs[obs_range]);
                obs.copy_from_slice(next);
                let (next, px) = (
                    &last.next_pixels[px_range.clone()],
                    &mut last.pixels[px_range],
                );
                px.copy_from_slice(next);
            }
        }
        &self.last
    }
}

/// What [`VecEnv::save_state`] writes.
#[derive(serde::Serialize, serde::Deserialize)]
struct VecEnvState {
    seed: u64,
    episodes: Vec<u64>,
    running_return: Vec<f64>,
    running_length: Vec<u64>,
    obs: Vec<f32>,
    is_init: Vec<bool>,
    envs: Vec<Vec<u8>>,
}

/// `E` environments stepped in lockstep with per-environment auto-reset: the actor's view of
/// its environments, whether Rust envs ([`VecEnv`]) or gymnasium workers ([`GymVecEnv`]).
///
/// Flat buffers are environment-major (see [`VecStep`]). After a `done`, `next_obs` holds the
/// true final observation and `obs` the reset one (`is_init` true there).
pub trait VectorEnv: Send {
    /// The environment id.
    fn id(&self) -> &str;
    /// `E`.
    fn num_envs(&self) -> usize;
    /// The space of one environment's observation.
    fn observation_space(&self) -> Space;
    /// The space of one environment's action.
    fn action_space(&self) -> Space;
    /// Resets every environment; the record whose `obs` `[E * D]` and `pixels` `[E * P]` hold
    /// the first observations (all `is_init`).
    ///
    /// # Errors
    /// A gymnasium worker that fails, crashes or does not answer in time.
    fn reset(&mut self) -> Result<&VecStep, EnvError>;
    /// Steps environment `j` with action `j`; ended episodes are reset at once.
    ///
    /// # Errors
    /// As [`VectorEnv::reset`].
    fn step(&mut self, actions: VecActions<'_>) -> Result<&VecStep, EnvError>;
    /// `[E * P]` the pixels lane of the observations the policy sees next (after a reset, a
    /// step or [`VectorEnv::load_state`]).
    fn pixels(&self) -> &[u8];
    /// Every environment's state mid-episode, for an exact resume; `None` (the default) when
    /// an environment cannot be saved (the gymnasium bridge's cannot).
    fn save_state(&self) -> Option<Vec<u8>> {
        None
    }
    /// Restores what [`VectorEnv::save_state`] wrote (after [`VectorEnv::reset`]).
    ///
    /// # Errors
    /// [`EnvError::State`].
    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let _ = state;
        Err(EnvError::cannot_restore(self.id()))
    }
    /// The contiguous groups, in order and covering `0..E`, that
    /// [`VectorEnv::begin_step`] / [`VectorEnv::end_step`] step: while one group steps (in
    /// another process), the caller works on another (the actor runs the policy on it). One
    /// group of all environments (the default) means no overlap.
    fn step_groups(&self) -> Vec<std::ops::Range<usize>> {
        std::iter::once(0..self.num_envs()).collect()
    }
    /// Starts stepping group `group` with `actions`, that group's rows only (as
    /// [`VectorEnv::step`]'s for those environments); may return before the step is done.
    /// Each group alternates `begin_step` and [`VectorEnv::end_step`], groups ending in the
    /// order they began.
    ///
    /// # Errors
    /// As [`VectorEnv::reset`].
    fn begin_step(&mut self, group: usize, actions: VecActions<'_>) -> Result<(), EnvError>;
    /// Waits for group `group`'s step; the step record, whose rows of that group hold the new
    /// step (other rows are as the last call left them).
    ///
    /// # Errors
    /// As [`VectorEnv::reset`].
    fn end_step(&mut self, group: usize) -> Result<&VecStep, EnvError>;
}

impl VectorEnv for VecEnv {
    fn id(&self) -> &str {
        &self.id
    }
    fn num_envs(&self) -> usize {
        self.envs.len()
    }
    fn observation_space(&self) -> Space {
        self.observation_space.clone()
    }
    fn action_space(&self) -> Space {
        self.action_space.clone()
    }
    fn reset(&mut self) -> Result<&VecStep, EnvError> {
        Ok(VecEnv::reset(self))
    }
    fn step(&mut self, actions: VecActions<'_>) -> Result<&VecStep, EnvError> {
        Ok(VecEnv::step(self, actions))
    }
    fn pixels(&self) -> &[u8] {
        &self.last.pixels
    }
    /// Also the vector's seed, episode counters and running returns.
    fn save_state(&self) -> Option<Vec<u8>> {
        let envs = self
            .envs
            .iter()
            .map(|env| env.save_state())
            .collect::<Option<Vec<_>>>()?;
        Some(super::encode_state(&VecEnvState {
            seed: self.seed,
            episodes: self.episodes.clone(),
            running_return: self.running_return.clone(),
            running_length: self.running_length.clone(),
            obs: self.last.obs.clone(),
            is_init: self.last.is_init.clone(),
            envs,
        }))
    }
    /// The state must come from a vector of the same id and size.
    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let saved: VecEnvState = super::decode_state(&self.id, state)?;
        let e = self.envs.len();
        if saved.envs.len() != e
            || saved.episodes.len() != e
            || saved.running_return.len() != e
            || saved.running_length.len() != e
            || saved.is_init.len() != e
            || saved.obs.len() != e * self.obs_dim
        {
            return Err(EnvError::State {
                id: self.id.clone(),
                reason: format!(
                    "saved for {} environments, this vector has {e}",
                    saved.envs.len()
                ),
            });
        }
        let p = self.pixels;
        for (j, (env, bytes)) in self.envs.iter_mut().zip(&saved.envs).enumerate() {
            env.load_state(bytes)?;
            // An environment's state is the one its current observation came from (the reset
            // one where the last step ended an episode): its pixels are drawn again.
            env.pixels(&mut self.last.pixels[j * p..(j + 1) * p]);
        }
        self.seed = saved.seed;
        self.episodes = saved.episodes;
        self.running_return = saved.running_return;
        self.running_length = saved.running_length;
        self.last.obs = saved.obs;
        self.last.is_init = saved.is_init;
        self.started = true;
        Ok(())
    }
    /// One group: steps at once (Rust environments in this thread, nothing to overlap).
    fn begin_step(&mut self, group: usize, actions: VecActions<'_>) -> Result<(), EnvError> {
        assert_eq!(group, 0, "VecEnv({}) has one step group", self.id());
        VecEnv::step(self, actions);
        Ok(())
    }
    fn end_step(&mut self, group: usize) -> Result<&VecStep, EnvError> {
        assert_eq!(group, 0, "VecEnv({}) has one step group", self.id());
        Ok(&self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Actions for step `t` of `id`'s vector of `e` (deterministic, both kinds).
    fn actions_at(space: &Space, e: usize, t: usize) -> (Vec<i64>, Vec<f32>) {
        let discrete = (0..e).map(|j| ((t * 7 + j * 3) % 2) as i64).collect();
        let discrete = match space {
            Space::Discrete { n } => (0..e).map(|j| ((t * 7 + j * 3) % *n) as i64).collect(),
            _ => discrete,
        };
        let continuous = (0..e).map(|j| ((t + j) % 5) as f32 * 0.8 - 1.6).collect();
        (discrete, continuous)
    }

    fn step_with(envs: &mut VecEnv, t: usize) -> VecStep {
        let e = envs.num_envs();
        let space = envs.action_space();
        let (d, c) = actions_at(&space, e, t);
        let actions = match space {
            Space::Box { .. } => VecActions::Continuous(&c),
            _ => VecActions::Discrete(&d),
        };
        envs.step(actions).clone()
    }

    #[test]
    fn a_saved_state_continues_every_builtin_env_exactly() {
        for &id in super::super::ENV_IDS {
            let mut a = VecEnv::new(id, 3, 11).unwrap();
            a.reset();
            // Far enough for episodes to end and restart (RepeatPrevious: 51 steps).
            for t in 0..60 {
                step_with(&mut a, t);
            }
            let saved = a.save_state().expect("built-in envs save their state");
            let mut b = VecEnv::new(id, 3, 999).unwrap();
            b.reset();
            step_with(&mut b, 5);
            b.load_state(&saved).unwrap();
            assert_eq!(b.last.obs, a.last.obs, "{id}");
            assert_eq!(b.is_init(), a.is_init(), "{id}");
            for t in 60..700 {
                let (x, y) = (step_with(&mut a, t), step_with(&mut b, t));
                assert_eq!(format!("{x:?}"), format!("{y:?}"), "{id} step {t}");
            }
            let mut wrong = VecEnv::new(id, 2, 11).unwrap();
            let err = wrong.load_state(&saved).unwrap_err().to_string();
            assert!(err.contains("3 environments") && err.contains(id), "{err}");
            let err = b
                .load_state(&saved[..saved.len() - 3])
                .unwrap_err()
                .to_string();
            assert!(err.contains("cannot restore"), "{err}");
        }
    }

    /// Replays a VecEnv against independently driven envs and checks every field.
    fn check_against_shadow(id: &str, e: usize, seed: u64, steps: usize) {
        let mut venv = VecEnv::new(id, e, seed).unwrap();
        let d = venv.observation_space().dim();
        let ad = venv.action_space().dim();
        let mut shadow: Vec<Box<dyn Env>> = (0..e).map(|_| make(id).unwrap()).collect();
        let mut episode = vec![0u64; e];
        let mut obs = vec![0.0f32; e * d];
        for (j, env) in shadow.iter_mut().enumerate() {
            env.reset(
                episode_seed(seed, j as u64, 0),
                &mut obs[j * d..(j + 1) * d],
            );
            episode[j] = 1;
        }
        assert_eq!(venv.reset().obs, obs);
        assert_eq!(venv.is_init(), vec![true; e]);
        let (mut ret, mut len) = (vec![0.0f64; e], vec![0u64; e]);
        let mut ends = 0;
        for t in 0..steps {
            // Constant pushes end CartPole episodes within a few dozen steps.
            let discrete: Vec<i64> = (0..e).map(|j| (j % 2) as i64).collect();
            let continuous: Vec<f32> = (0..e * ad)
                .map(|k| ((t * 7 + k * 3) % 9) as f32 / 2.0 - 2.0)
                .collect();
            let actions = match venv.action_space() {
                Space::Discrete { .. } => VecActions::Discrete(&discrete),
                Space::Box { .. } => VecActions::Continuous(&continuous),
                _ => unreachable!("no built-in multi-discrete env"),
            };
            let step = venv.step(actions).clone();
            for (j, env) in shadow.iter_mut().enumerate() {
                let range = j * d..(j + 1) * d;
                let a = match actions {
                    VecActions::Discrete(a) => ActionRef::Discrete(a[j]),
                    VecActions::Continuous(a) => ActionRef::Continuous(&a[j * ad..(j + 1) * ad]),
                };
                let r = env.step(a, &mut obs[range.clone()]);
                ret[j] += r.reward;
                len[j] += 1;
                let done = r.terminated || r.truncated;
                assert_eq!(
                    step.next_obs[range.clone()],
                    obs[range.clone()],
                    "t={t} j={j}"
                );
                assert_eq!(step.reward[j], r.reward as f32);
                assert_eq!(step.terminated[j], r.terminated);
                assert_eq!(step.truncated[j], r.truncated);
                assert_eq!(step.done[j], done);
                assert_eq!(step.is_init[j], done);
                if done {
                    ends += 1;
                    assert_eq!(step.episode_return[j], Some(ret[j]));
                    assert_eq!(step.episode_length[j], Some(len[j]));
                    (ret[j], len[j]) = (0.0, 0);
                    env.reset(
                        episode_seed(seed, j as u64, episode[j]),
                        &mut obs[range.clone()],
                    );
                    episode[j] += 1;
                } else {
                    assert_eq!(step.episode_return[j], None);
                    assert_eq!(step.episode_length[j], None);
                }
                assert_eq!(step.obs[range.clone()], obs[range]);
            }
            assert_eq!(venv.last.obs, step.obs);
            assert_eq!(venv.is_init(), &step.is_init[..]);
        }
        assert!(
            ends > e,
            "{id}: only {ends} episodes ended in {steps} steps"
        );
    }

    #[test]
    fn cartpole_auto_resets_exactly_at_done() {
        check_against_shadow("CartPole-v1", 3, 11, 200);
        check_against_shadow("MaskedCartPole-v1", 2, 12, 200);
    }

    #[test]
    fn pendulum_auto_resets_at_truncation() {
        check_against_shadow("Pendulum-v1", 2, 13, 450);
    }

    #[test]
    fn repeat_previous_auto_resets_at_truncation() {
        check_against_shadow("RepeatPrevious-v0", 3, 14, 120);
    }

    /// The first `steps` step records of a VecEnv under a fixed action pattern.
    fn rollout(seed: u64, steps: usize) -> Vec<(Vec<f32>, Vec<f32>, Vec<bool>)> {
        let mut venv = VecEnv::new("CartPole-v1", 4, seed).unwrap();
        let first = venv.reset().obs.clone();
        let mut out = vec![(first, vec![], vec![])];
        for t in 0..steps {
            let a: Vec<i64> = (0..4).map(|j| ((t / 3 + j) % 2) as i64).collect();
            let s = venv.step(VecActions::Discrete(&a));
            out.push((s.obs.clone(), s.reward.clone(), s.done.clone()));
        }
        out
    }

    #[test]
    fn same_seed_same_stream_different_seed_differs() {
        assert_eq!(rollout(5, 100), rollout(5, 100));
        assert_ne!(rollout(5, 100)[0], rollout(6, 100)[0]);
    }

    /// Below `2**32` (numpy's legacy seeding takes no more), and distinct across nearby seeds,
    /// environments and episodes.
    #[test]
    fn episode_seeds_fit_32_bits_and_differ() {
        let mut seen = std::collections::HashSet::new();
        for seed in [0, 1, 1 << 32, u64::MAX] {
            for j in 0..8 {
                for n in 0..64 {
                    let s = episode_seed(seed, j, n);
                    assert!(s < 1 << 32, "episode_seed({seed}, {j}, {n}) = {s}");
                    assert!(
                        seen.insert(s),
                        "episode_seed({seed}, {j}, {n}) = {s} repeats"
                    );
                }
            }
        }
    }

    #[test]
    fn repeated_resets_start_new_episodes() {
        let mut venv = VecEnv::new("Pendulum-v1", 2, 0).unwrap();
        let a = venv.reset().obs.clone();
        let b = venv.reset().obs.clone();
        assert_ne!(a, b);
        assert_ne!(a[..3], a[3..], "environments share a seed");
    }

    #[test]
    fn errors_name_the_bad_value() {
        let err = VecEnv::new("CartPole-v1", 0, 0).err().expect("an error");
        assert_eq!(err.to_string(), "num_envs must be at least 1, got 0");
        let err = VecEnv::new("Acrobot-v1", 2, 0).err().expect("an error");
        assert!(err.to_string().contains("\"Acrobot-v1\""), "{err}");
    }

    #[test]
    #[should_panic(expected = "step called before reset")]
    fn step_before_reset_panics() {
        let mut venv = VecEnv::new("CartPole-v1", 1, 0).unwrap();
        venv.step(VecActions::Discrete(&[0]));
    }

    #[test]
    #[should_panic(expected = "3 discrete actions for 2 environments")]
    fn wrong_action_count_panics() {
        let mut venv = VecEnv::new("CartPole-v1", 2, 0).unwrap();
        venv.reset();
        venv.step(VecActions::Discrete(&[0, 1, 0]));
    }

    #[test]
    #[should_panic(expected = "do not match the action space Discrete(2)")]
    fn wrong_action_kind_panics() {
        let mut venv = VecEnv::new("CartPole-v1", 1, 0).unwrap();
        venv.reset();
        venv.step(VecActions::Continuous(&[0.0]));
    }

    #[test]
    fn vec_env_can_move_to_a_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<VecEnv>();
    }

    #[test]
    fn spaces_and_dims() {
        let venv = VecEnv::new("Pendulum-v1", 3, 0).unwrap();
        assert_eq!(venv.num_envs(), 3);
        assert_eq!(venv.observation_space().dim(), 3);
        assert_eq!(venv.action_space().dim(), 1);
        assert_eq!(
            venv.action_space(),
            make("Pendulum-v1").unwrap().action_space()
        );
        assert_eq!(venv.id(), "Pendulum-v1");
    }
}
