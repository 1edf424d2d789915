//! Built-in environments: the [`Env`] trait, the [`TimeLimit`] wrapper, the auto-resetting
//! [`VecEnv`] the actor steps, the tasks (CartPole, Pendulum and their masked variants,
//! RepeatPrevious, every POPGym id natively) and the gymnasium bridge.
//!
//! ```
//! use common::envs::{make, ActionRef};
//!
//! let mut env = make("CartPole-v1")?;
//! let mut obs = vec![0.0f32; env.observation_space().dim()];
//! env.reset(42, &mut obs);
//! let mut steps = 0;
//! loop {
//!     // Push the cart toward the side the pole leans to.
//!     let action = ActionRef::Discrete(i64::from(obs[2] > 0.0));
//!     let r = env.step(action, &mut obs);
//!     steps += 1;
//!     if r.terminated || r.truncated {
//!         break;
//!     }
//! }
//! assert!(steps <= 500);
//! # Ok::<(), common::envs::EnvError>(())
//! ```
//!
//! | id | observation | action | episode end |
//! | --- | --- | --- | --- |
//! | `CartPole-v1` | `[x, x_dot, theta, theta_dot]` | `Discrete(2)` | out of bounds, or 500 steps |
//! | `MaskedCartPole-v1` | `[x, theta]` (velocities hidden) | `Discrete(2)` | as CartPole |
//! | `Pendulum-v1` | `[cos theta, sin theta, theta_dot]` | `Box([-2], [2])` torque | 200 steps |
//! | `MaskedPendulum-v1` | `[cos theta, sin theta]` (velocity hidden) | as Pendulum | 200 steps |
//! | `RepeatPrevious-v0` | one-hot suit `[4]` | `Discrete(4)` suit | 51 steps |
//! | `PixelCartPole-v1` | a `[64, 64, 1]` grayscale image of the cart and pole, nothing else ([`pixel_cartpole`]) | `Discrete(2)` | as CartPole |
//! | `popgym-RepeatFirst{Easy,Medium,Hard}-v0` | one-hot suit `[4]` | `Discrete(4)` | terminates after the last card (51 / 415 / 831 steps) |
//! | `popgym-RepeatPrevious{Easy,Medium,Hard}-v0` | one-hot suit `[4]` | `Discrete(4)` | terminates after the last card (51 / 103 / 155 steps) |
//! | `popgym-CountRecall{Easy,Medium,Hard}-v0` | one-hot dealt and queried kind `[2d]`, `d` = 2 / 4 / 13 | `Discrete(27 / 27 / 17)` count | terminates after the last card (51 / 103 / 207 steps) |
//! | `popgym-Autoencode{Easy,Medium,Hard}-v0` | one-hot mode `[2]` + suit `[4]` | `Discrete(4)` | terminates after reciting (103 / 207 / 311 steps) |
//! | `popgym-HigherLower{Easy,Medium,Hard}-v0` | one-hot rank `[13]` | `Discrete(2)` higher/lower | terminates after the last card (51 / 103 / 155 steps) |
//! | `popgym-MultiarmedBandit{Easy,Medium,Hard}-v0` | one-hot payout `[2]` | `Discrete(10 / 20 / 30)` | truncates at 200 / 400 / 600 steps |
//! | `popgym-Concentration{Easy,Medium,Hard}-v0` | one-hot per card `[52·3 / 104·3 / 52·14]` | `Discrete(52 / 104 / 52)` | all pairs found, or truncates at 104 / 208 / 104 steps |
//! | `popgym-Battleship{Easy,Medium,Hard}-v0` | one-hot hit `[2]` | `MultiDiscrete([b, b])`, `b` = 8 / 10 / 12 | all ships sunk, or truncates at `b²` steps |
//! | `popgym-MineSweeper{Easy,Medium,Hard}-v0` | one-hot count `[3 / 7 / 10]` | `MultiDiscrete([s, s])`, `s` = 4 / 6 / 8 | a mine or the board cleared, or truncates at 14 / 30 / 54 steps |
//! | `popgym-PositionOnlyCartPole{Easy,Medium,Hard}-v0` | `[x, theta]` | `Discrete(2)` | as CartPole, or truncates at 200 / 400 / 600 steps |
//! | `popgym-NoisyPositionOnlyCartPole{Easy,Medium,Hard}-v0` | `[x, theta]` + N(0, 0.1 / 0.2 / 0.3) noise, clipped | `Discrete(2)` | as CartPole, or truncates at 200 steps |
//! | `popgym-VelocityOnlyCartpole{Easy,Medium,Hard}-v0` | `[x_dot, theta_dot]` (`[x, theta]` at reset, as popgym) | `Discrete(2)` | as CartPole, or truncates at 200 / 400 / 600 steps |
//! | `popgym-PositionOnlyPendulum{Easy,Medium,Hard}-v0` | `[cos theta, sin theta]` | `Box([-2], [2])` torque | truncates at 200 / 150 / 100 steps |
//! | `popgym-NoisyPositionOnlyPendulum{Easy,Medium,Hard}-v0` | `[cos theta, sin theta]` + N(0, 0.1 / 0.2 / 0.3) noise, clipped to `[-1, 1]` | `Box([-2], [2])` torque | truncates at 200 steps |
//! | `MiniGrid-MemoryS{7,9,11,13,13Random,17Random}-v0` | `Dict`: one-hot `direction` `[4]`, `image` `[7, 7, 3]` codes ([`minigrid`]) | `Discrete(7)` | beside the matching or the other object, or truncates at `5 * size²` steps |
//!
//! The `MiniGrid-Memory*` ids ([`MINIGRID_IDS`], module [`minigrid`]) are native ports of the
//! `minigrid` package's memory rooms, step for step equal to it, with the observation the bridge
//! makes of it with `env_keys = ["direction", "image"]`; like the POPGym ids they end their
//! episodes themselves.
//!
//! The `popgym-*` ids ([`POPGYM_IDS`], module [`popgym`]) are native ports of the Python
//! `popgym` package's environments of the same ids, step for step equal to it (observations
//! flattened as the gymnasium bridge flattens them; `docs/popgym.md`). They end their episodes
//! themselves and have no [`TimeLimit`]; they are not in [`ENV_IDS`] (which [`max_episode_steps`]
//! covers) but [`make`] and [`Registry::builtin`] build them.
//!
//! Dynamics follow gymnasium 1.4 exactly (float64 state, float32 observations; checked against
//! reference rollouts in `common/tests/reference_envs.rs`). Reset randomness comes from
//! `rand`'s `StdRng` seeded with the reset seed: the same distributions as gymnasium, not the
//! same random streams.

mod cartpole;
pub mod gymnasium;
pub mod minigrid;
mod pendulum;
pub mod pixel_cartpole;
pub mod popgym;
mod previous_action;
mod registry;
mod repeat_previous;
mod space;
mod spec;
mod success;
mod time_limit;
mod vector;

pub use cartpole::{CartPole, MaskedCartPole};
pub use gymnasium::{is_gymnasium, GymVecEnv, GymnasiumOptions, GYMNASIUM_PREFIX};
pub use minigrid::MINIGRID_IDS;
pub use pendulum::{MaskedPendulum, Pendulum};
pub use pixel_cartpole::PixelCartPole;
pub use popgym::POPGYM_IDS;
pub use previous_action::{PreviousAction, PREVIOUS_ACTION_SUFFIX};
pub use registry::Registry;
pub use repeat_previous::RepeatPrevious;
pub use space::{ActionRef, ImagePart, Space};
pub use spec::EnvSpec;
pub use success::Success;
pub use time_limit::TimeLimit;
pub use vector::{episode_seed, VecActions, VecEnv, VecStep, VectorEnv};

/// The built-in ids ([`make`] and [`Registry::builtin`]), in the order they are documented.
pub const ENV_IDS: &[&str] = &[
    "CartPole-v1",
    "MaskedCartPole-v1",
    "Pendulum-v1",
    "MaskedPendulum-v1",
    "RepeatPrevious-v0",
    "PixelCartPole-v1",
];

/// What one [`Env::step`] reports besides the observation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepResult {
    /// Reward for this transition.
    pub reward: f64,
    /// The episode reached a terminal state of the task (bootstrapping must stop).
    pub terminated: bool,
    /// The episode was cut short (time limit); the state is not terminal.
    pub truncated: bool,
}

/// A single environment stepped one transition at a time.
///
/// Observations are written into caller-owned buffers of length
/// `observation_space().dim()`; a buffer of another length panics. After an episode ends
/// (`terminated || truncated`) call [`Env::reset`] before stepping again.
pub trait Env: Send {
    /// The environment id, e.g. `"CartPole-v1"`.
    fn id(&self) -> &str;
    /// The space every observation lies in.
    fn observation_space(&self) -> Space;
    /// The space of valid actions.
    fn action_space(&self) -> Space;
    /// Starts a new episode; writes the first observation into `obs` (len = observation dim).
    /// The episode is a deterministic function of `seed`.
    fn reset(&mut self, seed: u64, obs: &mut [f32]);
    /// One step; writes the next observation into `obs`.
    ///
    /// # Panics
    /// On an action outside [`Env::action_space`] (the caller validates actions beforehand) or
    /// an `obs` buffer of the wrong length.
    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult;
    /// Writes the pixels lane of the current observation (the one the last
    /// [`Env::reset`] or [`Env::step`] wrote the values of) into `out`, of length
    /// `observation_space().pixels()` (see [`Space`]). The default, for an environment
    /// without images, writes nothing.
    fn pixels(&self, out: &mut [u8]) {
        debug_assert!(out.is_empty(), "{} has no pixels", self.id());
    }
    /// The environment's state mid-episode as bytes, so that a resumed run continues the
    /// episode exactly ([`Env::load_state`] restores it). `None` (the default): this
    /// environment cannot be saved, and a resumed run starts new episodes.
    fn save_state(&self) -> Option<Vec<u8>> {
        None
    }
    /// Restores what [`Env::save_state`] wrote.
    ///
    /// # Errors
    /// [`EnvError::State`] for bytes that are not such a state (or an environment that cannot
    /// restore one: the default).
    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let _ = state;
        Err(EnvError::cannot_restore(self.id()))
    }
}

/// `value` as the bytes of an [`Env::save_state`].
pub fn encode_state<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("plain values encode")
}

/// What [`encode_state`] wrote, for environment `id`: the whole of `bytes`, or
/// [`EnvError::State`].
pub fn decode_state<T: serde::de::DeserializeOwned>(id: &str, bytes: &[u8]) -> Result<T, EnvError> {
    let reason = match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
        Ok((value, used)) if used == bytes.len() => return Ok(value),
        Ok((_, used)) => format!("{} bytes left over after the state", bytes.len() - used),
        Err(e) => format!("not a saved state: {e}"),
    };
    Err(EnvError::State {
        id: id.to_owned(),
        reason,
    })
}

/// Errors of environment construction.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// [`make`] got an id it does not know.
    #[error(
        "unknown environment id {id:?}{}; `recur-actor --list-envs` lists them all (or \
         gymnasium:<id>)",
        did_you_mean(id, known).map_or(String::new(), |m| format!("; {m}"))
    )]
    UnknownId {
        /// The id asked for.
        id: String,
        /// The ids that exist (the registry's).
        known: Vec<String>,
    },
    /// [`Registry::register`] refused an id.
    #[error("cannot register environment {id:?}: {reason}")]
    Registration { id: String, reason: String },
    /// The Python interpreter, numpy or gymnasium is missing.
    #[error(
        "{id}: the gymnasium bridge needs Python 3 with gymnasium and numpy \
         (`{python} -m pip install gymnasium numpy`, or point RECUR_PYTHON at an interpreter \
         that has them); starting {python:?} failed: {error}"
    )]
    PythonMissing {
        id: String,
        python: String,
        error: String,
    },
    /// The gymnasium side raised (import, `gymnasium.make`, a step): the Python exception.
    #[error("{id}: {message}")]
    Gymnasium { id: String, message: String },
    /// An observation or action space the bridge cannot flatten or act in.
    #[error("{id}: {which} space {space} is not supported (supported: {supported})")]
    UnsupportedSpace {
        id: String,
        which: &'static str,
        space: String,
        supported: &'static str,
    },
    /// A gymnasium worker died or hung.
    #[error("{id}: {message}")]
    WorkerFailed { id: String, message: String },
    /// A wrapper named by an id suffix that cannot wrap that environment.
    #[error("{id}: {reason}")]
    Wrapper { id: String, reason: String },
    /// A saved state that does not restore ([`Env::load_state`]).
    #[error("{id}: cannot restore the saved environment state: {reason}")]
    State { id: String, reason: String },
    /// [`VecEnv::new`] was asked for no environments.
    #[error("num_envs must be at least 1, got {num_envs}")]
    NoEnvs { num_envs: usize },
    /// [`TimeLimit::new`] was given a limit of zero steps.
    #[error("max_episode_steps must be at least 1, got {max_episode_steps}")]
    ZeroTimeLimit { max_episode_steps: u64 },
}

impl EnvError {
    /// What an environment that saves no state answers a `load_state` with (the default of
    /// [`Env::load_state`] and [`VectorEnv::load_state`]).
    fn cannot_restore(id: &str) -> Self {
        EnvError::State {
            id: id.to_owned(),
            reason: "this environment cannot restore a saved state".into(),
        }
    }
}

/// The time limit [`make`] wraps `id` in: gymnasium's registered `max_episode_steps` (500 for
/// both CartPoles, 200 for Pendulum) and 51 for RepeatPrevious (one step per card after the
/// first).
///
/// # Errors
/// [`EnvError::UnknownId`] for an id not in [`ENV_IDS`].
pub fn max_episode_steps(id: &str) -> Result<u64, EnvError> {
    match id {
        "CartPole-v1" | "MaskedCartPole-v1" | "PixelCartPole-v1" => Ok(500),
        "Pendulum-v1" | "MaskedPendulum-v1" => Ok(200),
        "RepeatPrevious-v0" => Ok(RepeatPrevious::EPISODE_STEPS),
        _ => Err(unknown(id)),
    }
}

/// Builds the environment `id` (one of [`ENV_IDS`]) wrapped in a [`TimeLimit`] of
/// [`max_episode_steps`]`(id)`, or one of [`POPGYM_IDS`] or [`MINIGRID_IDS`] as is (those end
/// their episodes themselves). Call [`Env::reset`] before the first step.
///
/// # Errors
/// [`EnvError::UnknownId`] naming `id` and the closest known ids.
pub fn make(id: &str) -> Result<Box<dyn Env>, EnvError> {
    if let Some(env) = popgym::make(id).or_else(|| minigrid::make(id)) {
        // popgym and minigrid end their episodes themselves: no TimeLimit, as the packages
        // register them.
        return Ok(env);
    }
    let limit = max_episode_steps(id)?;
    Ok(match id {
        "CartPole-v1" => Box::new(TimeLimit::new(CartPole::new(), limit)?),
        "MaskedCartPole-v1" => Box::new(TimeLimit::new(MaskedCartPole::new(), limit)?),
        "Pendulum-v1" => Box::new(TimeLimit::new(Pendulum::new(), limit)?),
        "MaskedPendulum-v1" => Box::new(TimeLimit::new(MaskedPendulum::new(), limit)?),
        "RepeatPrevious-v0" => Box::new(TimeLimit::new(RepeatPrevious::new(), limit)?),
        "PixelCartPole-v1" => Box::new(TimeLimit::new(PixelCartPole::new(), limit)?),
        _ => return Err(unknown(id)),
    })
}

/// `did you mean "A" or "B"?`: the one or two of `known` nearest to `id` (edit distance,
/// case-insensitive), when they are near enough to be a slip (a case or a `-v0`/`-v1` one).
pub fn did_you_mean(id: &str, known: &[String]) -> Option<String> {
    let id = id.to_lowercase();
    let mut near: Vec<(usize, &String)> = known
        .iter()
        .map(|k| (edit_distance(&id, &k.to_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 5))
        .collect();
    near.sort();
    match near.as_slice() {
        [] => None,
        [(_, a)] => Some(format!("did you mean {a:?}?")),
        [(_, a), (_, b), ..] => Some(format!("did you mean {a:?} or {b:?}?")),
    }
}

/// Levenshtein distance of `a` and `b` (in chars).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn unknown(id: &str) -> EnvError {
    EnvError::UnknownId {
        id: id.to_owned(),
        known: ENV_IDS
            .iter()
            .chain(POPGYM_IDS)
            .chain(MINIGRID_IDS)
            .map(|s| s.to_string())
            .collect(),
    }
}

/// Copies `src` into the caller's observation buffer, panicking with the env id on a length
/// mismatch.
fn write_obs(id: &str, dst: &mut [f32], src: &[f32]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "{id}: observation buffer has length {}, expected {}",
        dst.len(),
        src.len()
    );
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_knows_every_id() {
        for &id in ENV_IDS {
            let mut env = make(id).unwrap();
            assert_eq!(env.id(), id);
            let space = env.observation_space();
            let mut obs = vec![f32::NAN; space.dim()];
            env.reset(3, &mut obs);
            assert!(space.contains_obs(&obs), "{id}: {obs:?} not in {space:?}");
        }
    }

    #[test]
    fn unknown_id_names_it_and_the_closest_known_ones() {
        for (id, hint) in [
            ("CartPole-v0", "; did you mean \"CartPole-v1\"?"),
            ("MaskedCartpole-v1", "; did you mean \"MaskedCartPole-v1\"?"),
            ("maskedpendulum-v0", "; did you mean \"MaskedPendulum-v1\"?"),
            ("xyzzy", "; `recur-actor --list-envs`"),
        ] {
            let msg = make(id).err().expect("an error").to_string();
            assert!(msg.contains(&format!("{id:?}{hint}")), "{msg}");
            assert!(msg.contains("--list-envs") && !msg.contains("RepeatPrevious-v0"));
        }
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert!(matches!(
            max_episode_steps("nope"),
            Err(EnvError::UnknownId { .. })
        ));
    }

    #[test]
    fn time_limits_are_gymnasiums() {
        assert_eq!(max_episode_steps("CartPole-v1").unwrap(), 500);
        assert_eq!(max_episode_steps("MaskedCartPole-v1").unwrap(), 500);
        assert_eq!(max_episode_steps("Pendulum-v1").unwrap(), 200);
        assert_eq!(max_episode_steps("RepeatPrevious-v0").unwrap(), 51);
    }

    #[test]
    fn pendulum_truncates_at_200_through_make() {
        let mut env = make("Pendulum-v1").unwrap();
        let mut obs = [0.0f32; 3];
        env.reset(0, &mut obs);
        for t in 1..=200 {
            let r = env.step(ActionRef::Continuous(&[0.0]), &mut obs);
            assert!(!r.terminated);
            assert_eq!(r.truncated, t == 200, "step {t}");
        }
    }
}
