//! The environment registry: id -> constructor, spaces and time limit. The actor, the spec
//! check and the learner's config validation all ask it which environments exist; the built-in
//! tasks register through the same public API a user crate calls.
//!
//! ```
//! use common::envs::{ActionRef, Env, Registry, Space, StepResult};
//!
//! /// A one-step task: answer 1 to get a reward.
//! struct Guess;
//! impl Env for Guess {
//!     fn id(&self) -> &str { "Guess-v0" }
//!     fn observation_space(&self) -> Space { Space::Box { low: vec![0.0], high: vec![1.0] } }
//!     fn action_space(&self) -> Space { Space::Discrete { n: 2 } }
//!     fn reset(&mut self, _seed: u64, obs: &mut [f32]) { obs[0] = 1.0 }
//!     fn step(&mut self, a: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
//!         obs[0] = 0.0;
//!         let reward = f64::from(matches!(a, ActionRef::Discrete(1)));
//!         StepResult { reward, terminated: true, truncated: false }
//!     }
//! }
//!
//! let mut registry = Registry::builtin();
//! registry.register("Guess-v0", None, || Guess)?;
//! let spec = registry.spec("Guess-v0")?;
//! assert_eq!(spec.action_space, Space::Discrete { n: 2 });
//! let mut envs = registry.make_vec("Guess-v0", 4, 0)?;
//! envs.reset()?;
//! # Ok::<(), common::envs::EnvError>(())
//! ```
//!
//! Ids starting with [`GYMNASIUM_PREFIX`] are not registered: they are gymnasium ids, built by
//! Python workers through the [bridge](super::gymnasium) with the registry's
//! [`GymnasiumOptions`]. A registered id followed by [`PREVIOUS_ACTION_SUFFIX`] is that
//! environment with the previous action appended to its observations
//! ([`super::previous_action`]).

use std::sync::Arc;

use super::gymnasium::{is_gymnasium, GymVecEnv, GymnasiumOptions, GYMNASIUM_PREFIX};
use super::previous_action::{appended_space, PreviousAction, PREVIOUS_ACTION_SUFFIX};
use super::spec::EnvSpec;
use super::vector::VectorEnv;
use super::{max_episode_steps, Env, EnvError, TimeLimit, VecEnv, ENV_IDS};

type Constructor = Arc<dyn Fn() -> Box<dyn Env> + Send + Sync>;

#[derive(Clone)]
struct Entry {
    spec: EnvSpec,
    make: Constructor,
}

/// Environment ids and how to build them. Cheap to clone (constructors are shared).
#[derive(Clone)]
pub struct Registry {
    entries: Vec<Entry>,
    gymnasium: GymnasiumOptions,
}

impl Default for Registry {
    /// [`Registry::builtin`].
    fn default() -> Self {
        Self::builtin()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("ids", &self.ids())
            .field("gymnasium", &self.gymnasium)
            .finish()
    }
}

impl Registry {
    /// A registry without any environment (gymnasium ids still work).
    pub fn empty() -> Self {
        Registry {
            entries: Vec::new(),
            gymnasium: GymnasiumOptions::default(),
        }
    }

    /// The built-in environments ([`ENV_IDS`], then the native POPGym ids
    /// [`super::POPGYM_IDS`] and the native MiniGrid ids [`super::MINIGRID_IDS`] without a time
    /// limit), registered with
    /// [`Registry::register_boxed`].
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        // `make` wraps the ENV_IDS in their TimeLimit; the native POPGym and MiniGrid ports have
        // none (the packages end their episodes themselves, and register their ids without one).
        for &id in ENV_IDS
            .iter()
            .chain(super::POPGYM_IDS)
            .chain(super::MINIGRID_IDS)
        {
            let limit = ENV_IDS
                .contains(&id)
                .then(|| max_episode_steps(id).expect("a built-in id has a time limit"));
            r.register_boxed(id, limit, move || {
                super::make(id).expect("a built-in id builds")
            })
            .expect("built-in ids are unique");
        }
        r
    }

    /// The options gymnasium ids are built with (interpreter, imports, kwargs).
    pub fn with_gymnasium(mut self, options: GymnasiumOptions) -> Self {
        self.gymnasium = options;
        self
    }

    /// Registers `id`, built by `make` and wrapped in a [`TimeLimit`] of
    /// `max_episode_steps` when given. One environment is built at once to read its spaces.
    ///
    /// # Errors
    /// [`EnvError::Registration`] when `id` is taken, empty, or starts with
    /// [`GYMNASIUM_PREFIX`]; [`EnvError::ZeroTimeLimit`] for a limit of 0.
    pub fn register<E: Env + 'static>(
        &mut self,
        id: &str,
        max_episode_steps: Option<u64>,
        make: impl Fn() -> E + Send + Sync + 'static,
    ) -> Result<&mut Self, EnvError> {
        if max_episode_steps == Some(0) {
            return Err(EnvError::ZeroTimeLimit {
                max_episode_steps: 0,
            });
        }
        let constructor: Constructor = match max_episode_steps {
            Some(limit) => Arc::new(move || {
                Box::new(TimeLimit::new(make(), limit).expect("limit checked above"))
                    as Box<dyn Env>
            }),
            None => Arc::new(move || Box::new(make()) as Box<dyn Env>),
        };
        self.insert(id, max_episode_steps, constructor)
    }

    /// Registers `id` built by `make` as is (the constructor applies any time limit itself;
    /// `max_episode_steps` only documents it in the [`EnvSpec`]).
    ///
    /// # Errors
    /// As [`Registry::register`].
    pub fn register_boxed(
        &mut self,
        id: &str,
        max_episode_steps: Option<u64>,
        make: impl Fn() -> Box<dyn Env> + Send + Sync + 'static,
    ) -> Result<&mut Self, EnvError> {
        self.insert(id, max_episode_steps, Arc::new(make))
    }

    fn insert(
        &mut self,
        id: &str,
        max_episode_steps: Option<u64>,
        make: Constructor,
    ) -> Result<&mut Self, EnvError> {
        let refuse = |reason: &str| {
            Err(EnvError::Registration {
                id: id.to_string(),
                reason: reason.to_string(),
            })
        };
        if id.trim().is_empty() {
            return refuse("an id must not be empty");
        }
        if id.starts_with(GYMNASIUM_PREFIX) {
            return refuse("ids starting with \"gymnasium:\" name gymnasium environments");
        }
        if self.contains(id) {
            return refuse("already registered");
        }
        let probe = make();
        if let Err(e) = probe.observation_space().check_observation() {
            return refuse(&format!("its observation space: {e}"));
        }
        if !probe.action_space().is_action_space() {
            return refuse(&format!(
                "its action space {} is not Discrete, Box or MultiDiscrete",
                probe.action_space().describe()
            ));
        }
        let spec = EnvSpec {
            id: id.to_string(),
            observation_space: probe.observation_space(),
            action_space: probe.action_space(),
            max_episode_steps,
        };
        self.entries.push(Entry { spec, make });
        Ok(self)
    }

    /// The registered ids, in registration order (gymnasium ids are not listed).
    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.spec.id.clone()).collect()
    }

    /// Whether `id` is registered (or a registered id with a wrapper suffix), or a gymnasium
    /// id.
    pub fn contains(&self, id: &str) -> bool {
        bridged(id) || self.resolve(id).is_ok()
    }

    /// The spec and constructor of `id`: a registered environment, or one with the
    /// [`PREVIOUS_ACTION_SUFFIX`] wrapper.
    fn resolve(&self, id: &str) -> Result<Entry, EnvError> {
        let Some(base) = id.strip_suffix(PREVIOUS_ACTION_SUFFIX) else {
            return self.entry(id).cloned();
        };
        if is_gymnasium(base) {
            return Err(EnvError::Wrapper {
                id: id.to_string(),
                reason: format!(
                    "{PREVIOUS_ACTION_SUFFIX} wraps registered environments only; wrap a \
                     gymnasium environment in Python (popgym's PreviousAction wrapper)"
                ),
            });
        }
        let inner = self.entry(base)?.clone();
        let observation_space =
            appended_space(id, &inner.spec.observation_space, &inner.spec.action_space)?;
        let wrapped = id.to_string();
        Ok(Entry {
            spec: EnvSpec {
                id: wrapped.clone(),
                observation_space,
                ..inner.spec
            },
            make: Arc::new(move || {
                Box::new(PreviousAction::new((inner.make)(), &wrapped).expect("a box observation"))
                    as Box<dyn Env>
            }),
        })
    }

    fn entry(&self, id: &str) -> Result<&Entry, EnvError> {
        self.entries
            .iter()
            .find(|e| e.spec.id == id)
            .ok_or_else(|| EnvError::UnknownId {
                id: id.to_string(),
                known: self.ids(),
            })
    }

    /// One registered environment (not gymnasium ids: those only run vectorised).
    ///
    /// # Errors
    /// [`EnvError::UnknownId`] naming `id` and the registered ids.
    pub fn make(&self, id: &str) -> Result<Box<dyn Env>, EnvError> {
        Ok((self.resolve(id)?.make)())
    }

    /// The spaces and time limit of `id`. For a gymnasium id this starts a Python worker
    /// with one environment (seconds).
    ///
    /// # Errors
    /// [`EnvError::UnknownId`]; for gymnasium ids whatever the worker reports.
    pub fn spec(&self, id: &str) -> Result<EnvSpec, EnvError> {
        if bridged(id) {
            return Ok(GymVecEnv::start(id, &self.gymnasium, 1, 0)?.spec().clone());
        }
        Ok(self.resolve(id)?.spec)
    }

    /// `num_envs` environments `id` stepped together: a [`VecEnv`] for Rust environments, a
    /// [`GymVecEnv`] for gymnasium ids. Both reset env `j`'s episode `n` with
    /// [`super::episode_seed`]`(seed, j, n)`.
    ///
    /// # Errors
    /// [`EnvError::NoEnvs`], [`EnvError::UnknownId`], and the bridge's errors.
    pub fn make_vec(
        &self,
        id: &str,
        num_envs: usize,
        seed: u64,
    ) -> Result<Box<dyn VectorEnv>, EnvError> {
        if num_envs == 0 {
            return Err(EnvError::NoEnvs { num_envs });
        }
        if bridged(id) {
            return Ok(Box::new(GymVecEnv::start(
                id,
                &self.gymnasium,
                num_envs,
                seed,
            )?));
        }
        let entry = self.resolve(id)?;
        let envs = (0..num_envs).map(|_| (entry.make)()).collect();
        Ok(Box::new(VecEnv::from_envs(id, envs, seed)?))
    }
}

/// Whether `id` goes to the gymnasium bridge (a gymnasium id without a wrapper suffix).
fn bridged(id: &str) -> bool {
    is_gymnasium(id) && !id.ends_with(PREVIOUS_ACTION_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{ActionRef, CartPole, Space, StepResult, VecActions};

    #[test]
    fn builtins_are_registered_with_their_limits() {
        let r = Registry::builtin();
        let native: Vec<&str> = ENV_IDS
            .iter()
            .chain(super::super::POPGYM_IDS)
            .chain(super::super::MINIGRID_IDS)
            .copied()
            .collect();
        assert_eq!(r.ids(), native);
        for &id in ENV_IDS {
            let spec = r.spec(id).unwrap();
            assert_eq!(spec.max_episode_steps, Some(max_episode_steps(id).unwrap()));
            let env = r.make(id).unwrap();
            assert_eq!(env.observation_space(), spec.observation_space);
        }
        assert!(r.contains("gymnasium:CartPole-v1"));
    }

    /// `<id>+prev-action`: the same episodes (observations bit for bit, rewards, ends), each
    /// observation followed by the one-hot of the action just taken (zeros where an episode
    /// starts), for a discrete and a multi-discrete action space; a saved state resumes.
    #[test]
    fn the_previous_action_suffix_appends_the_action_to_the_same_episodes() {
        let r = Registry::builtin();
        let multi = super::super::POPGYM_IDS
            .iter()
            .find(|id| {
                let spec = r.spec(id).unwrap();
                matches!(spec.action_space, Space::MultiDiscrete { .. })
                    && matches!(spec.observation_space, Space::Box { .. })
            })
            .expect("a popgym id with multi-discrete actions and box observations");
        for id in [
            "CartPole-v1",
            "popgym-NoisyPositionOnlyCartPoleEasy-v0",
            multi,
        ] {
            let wrapped_id = format!("{id}{PREVIOUS_ACTION_SUFFIX}");
            let (plain_spec, spec) = (r.spec(id).unwrap(), r.spec(&wrapped_id).unwrap());
            let nvec = match &plain_spec.action_space {
                Space::Discrete { n } => vec![*n],
                Space::MultiDiscrete { nvec } => nvec.clone(),
                other => panic!("{other:?}"),
            };
            let (d, extra) = (
                plain_spec.observation_space.dim(),
                nvec.iter().sum::<usize>(),
            );
            assert_eq!(spec.id, wrapped_id);
            assert_eq!(spec.observation_space.dim(), d + extra);
            assert_eq!(
                (spec.action_space.clone(), spec.max_episode_steps),
                (
                    plain_spec.action_space.clone(),
                    plain_spec.max_episode_steps
                )
            );
            assert!(r.contains(&wrapped_id));
            let e = 3;
            let mut plain = r.make_vec(id, e, 11).unwrap();
            let mut wrapped = r.make_vec(&wrapped_id, e, 11).unwrap();
            assert_eq!(wrapped.observation_space(), spec.observation_space);
            let check = |p: &[f32], w: &[f32], actions: Option<&[i64]>, init: &[bool]| {
                for j in 0..e {
                    let (w_obs, w_prev) = w[j * (d + extra)..(j + 1) * (d + extra)].split_at(d);
                    assert_eq!(w_obs, &p[j * d..(j + 1) * d], "{id} env {j}");
                    let mut expected = vec![0.0; extra];
                    if let (Some(a), false) = (actions, init[j]) {
                        let mut offset = 0;
                        for (k, n) in nvec.iter().enumerate() {
                            expected[offset + a[j * nvec.len() + k] as usize] = 1.0;
                            offset += n;
                        }
                    }
                    assert_eq!(w_prev, expected, "{id} env {j}");
                }
            };
            let first = plain.reset().unwrap().obs.clone();
            check(&first, &wrapped.reset().unwrap().obs, None, &[true; 3]);
            let mut x = 7u64;
            let mut actions = vec![0i64; e * nvec.len()];
            let (mut saved, mut after) = (None, None);
            for step in 0..400 {
                for (i, a) in actions.iter_mut().enumerate() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    *a = ((x >> 33) % nvec[i % nvec.len()] as u64) as i64;
                }
                let p = plain.step(VecActions::Discrete(&actions)).unwrap().clone();
                let w = wrapped
                    .step(VecActions::Discrete(&actions))
                    .unwrap()
                    .clone();
                assert_eq!(
                    (&p.reward, &p.terminated, &p.truncated, &p.is_init),
                    (&w.reward, &w.terminated, &w.truncated, &w.is_init),
                    "{id} step {step}"
                );
                check(&p.obs, &w.obs, Some(&actions), &p.is_init);
                match step {
                    200 => saved = wrapped.save_state(),
                    201 => after = Some((actions.clone(), w.obs)),
                    _ => {}
                }
            }
            // The state saved after step 200 resumes step 201 (where the env saves one).
            if let (Some(state), Some((actions, obs))) = (saved, after) {
                let mut resumed = r.make_vec(&wrapped_id, e, 11).unwrap();
                resumed.reset().unwrap();
                resumed.load_state(&state).unwrap();
                let step = resumed.step(VecActions::Discrete(&actions)).unwrap();
                assert_eq!(step.obs, obs, "{id}");
            }
        }
        let err = r
            .spec(&format!("gymnasium:CartPole-v1{PREVIOUS_ACTION_SUFFIX}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("registered environments only"), "{err}");
        assert!(!r.contains(&format!("gymnasium:CartPole-v1{PREVIOUS_ACTION_SUFFIX}")));
        let err = r
            .make_vec("Nope-v0+prev-action", 1, 0)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("\"Nope-v0\""), "{err}");
    }

    struct Blind;
    impl Env for Blind {
        fn id(&self) -> &str {
            "Blind-v0"
        }
        fn observation_space(&self) -> Space {
            Space::Box {
                low: vec![0.0],
                high: vec![1.0],
            }
        }
        fn action_space(&self) -> Space {
            Space::Discrete { n: 3 }
        }
        fn reset(&mut self, _seed: u64, obs: &mut [f32]) {
            obs[0] = 0.0;
        }
        fn step(&mut self, _: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
            obs[0] = 1.0;
            StepResult {
                reward: 1.0,
                terminated: false,
                truncated: false,
            }
        }
    }

    #[test]
    fn user_envs_register_with_a_time_limit() {
        let mut r = Registry::empty();
        r.register("Blind-v0", Some(3), || Blind).unwrap();
        let mut envs = r.make_vec("Blind-v0", 2, 0).unwrap();
        assert_eq!(envs.action_space(), Space::Discrete { n: 3 });
        envs.reset().unwrap();
        let flags: Vec<bool> = (0..3)
            .map(|_| envs.step(VecActions::Discrete(&[0, 1])).unwrap().truncated[0])
            .collect();
        assert_eq!(flags, [false, false, true]);
    }

    #[test]
    fn registration_errors_name_the_id() {
        let mut r = Registry::builtin();
        let taken = r
            .register("CartPole-v1", None, CartPole::new)
            .err()
            .unwrap()
            .to_string();
        assert!(
            taken.contains("\"CartPole-v1\"") && taken.contains("already"),
            "{taken}"
        );
        let gym = r
            .register("gymnasium:X", None, CartPole::new)
            .err()
            .unwrap()
            .to_string();
        assert!(gym.contains("gymnasium"), "{gym}");
        let unknown = Registry::empty().make("Nope-v0").err().unwrap().to_string();
        assert!(unknown.contains("\"Nope-v0\""), "{unknown}");
        assert!(matches!(
            r.register("Z", Some(0), CartPole::new),
            Err(EnvError::ZeroTimeLimit { .. })
        ));
    }
}
