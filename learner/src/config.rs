//! Training configuration: TOML files under `configs/`, validated on load. Unknown keys are
//! rejected and every error names the key and the value.

use std::path::Path;

use common::backend::TrainDevice;
use common::policy::CriticCore;
use common::recurrent::{CellKind, RecurrentBackend};
use serde::{Deserialize, Serialize};

/// How actors and updates are paced (TorchRL's MultiSync / MultiAsync collectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectorMode {
    /// Actors never wait for the learner; policy lag is recorded (and bounded by
    /// `max_policy_lag`).
    Async,
    /// Each update consumes exactly one chunk per actor, all from the current weights.
    Sync,
}

/// The learning algorithm of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// Recurrent PPO (on-policy, `[ppo]`).
    #[default]
    Ppo,
    /// Recurrent DQN, R2D2-style (off-policy, `[dqn]`).
    Dqn,
    /// Behaviour cloning of recorded actions (`[bc]`; learner-only replay).
    Bc,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ppo => "ppo",
            Algo::Dqn => "dqn",
            Algo::Bc => "bc",
        }
    }
}

impl std::str::FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ppo" => Ok(Algo::Ppo),
            "dqn" => Ok(Algo::Dqn),
            "bc" => Ok(Algo::Bc),
            other => Err(format!(
                "algo {other:?}: expected \"ppo\", \"dqn\" or \"bc\""
            )),
        }
    }
}

/// Where a training slice's recurrent state starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitialState {
    /// The state the actor stored at the slice start (R2D2's stored state; the learner's
    /// architecture must match the data's).
    #[default]
    Stored,
    /// Zeros at every slice start (for data recorded by another network; pair with burn-in).
    Zeros,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    pub env: String,
    /// `ppo` (default) or `dqn`; the matching section configures it.
    #[serde(default)]
    pub algo: Algo,
    /// Environment frames to train on.
    pub frames: u64,
    #[serde(default)]
    pub seed: u64,
    /// Actor processes the learner starts itself; default: the machine's cores. 0 (with
    /// `listen`): remote actors only.
    #[serde(default)]
    pub actors: Option<u32>,
    /// Also accept remote actors over TCP on this `HOST:PORT` (e.g. `"0.0.0.0:7070"`; port 0
    /// picks a free one, logged). They present the token the learner writes to
    /// `RUN_DIR/token`. Async collection only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Write a checkpoint every this many updates (and at the end).
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u64,
    /// The mean return (last 20 episodes) that counts as solved: the run records the frames
    /// and seconds it took to reach it, and draws it on the learning curve.
    #[serde(default)]
    pub target_return: Option<f64>,
    /// End the run as soon as `target_return` is reached.
    #[serde(default)]
    pub stop_at_target: bool,
    /// Where the learner trains: `"cpu"` (default), `"cuda"` or `"cuda:N"` (a build with
    /// `--features cuda`). Actors always run on the CPU.
    #[serde(default)]
    pub device: TrainDevice,
    /// Python modules imported before `gymnasium.make` (`gymnasium:` ids only), e.g.
    /// `["popgym"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_imports: Vec<String>,
    /// Keyword arguments of `gymnasium.make` (`gymnasium:` ids only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_kwargs: Option<toml::Table>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectorSection {
    /// The actor executable (a user crate's binary calling `actor::main_with`); default: the
    /// `recur-actor` next to the learner (`--actor-bin` overrides both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_bin: Option<String>,
    #[serde(default = "default_mode")]
    pub mode: CollectorMode,
    pub envs_per_actor: usize,
    /// Steps per chunk.
    pub steps: usize,
    /// Chunks older than this many policy versions are dropped (async mode).
    #[serde(default = "default_lag")]
    pub max_policy_lag: u64,
    /// Chunks an actor may have in flight (its ring's slots). Small when the learner is the
    /// bottleneck: a deep ring only fills with chunks of old weights.
    #[serde(default = "default_slots")]
    pub ring_slots: usize,
    /// Restarts per actor within `restart_window_s` before the supervisor gives up on it; when
    /// every actor is given up on, the run ends with its final checkpoint and summary.
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// The sliding window (seconds) restarts are counted in.
    #[serde(default = "default_restart_window")]
    pub restart_window_s: f64,
    /// Delay before an actor's first restart (seconds), doubled per recent restart, at most 8 s.
    #[serde(default = "default_restart_backoff")]
    pub restart_backoff_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    pub cell: CellKind,
    pub hidden_size: usize,
    #[serde(default = "one")]
    pub num_layers: usize,
    #[serde(default = "default_encoder")]
    pub encoder: Vec<usize>,
    #[serde(default)]
    pub backend: RecurrentBackend,
    /// Observation normalization (PPO): the learner keeps a running mean and variance of the
    /// observations it trains on inside the model, so actors and learner normalize alike.
    #[serde(default)]
    pub obs_norm: bool,
    /// Normalized observations are clipped to `[-obs_clip, obs_clip]`.
    #[serde(default = "default_obs_clip")]
    pub obs_clip: f32,
    /// `"shared"` (default): the value head reads the actor's recurrent core; `"separate"`:
    /// a core of its own (PPO).
    #[serde(default)]
    pub critic_core: CriticCore,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PpoSection {
    /// Frames collected per update.
    pub frames_per_update: usize,
    pub epochs: usize,
    /// Steps per training slice (sequences start from the stored state, `is_init` at start).
    pub slice_len: usize,
    /// Slices per minibatch.
    pub num_slices: usize,
    pub lr: f64,
    pub gamma: f32,
    pub gae_lambda: f32,
    pub clip_eps: f32,
    pub value_coef: f32,
    pub entropy_coef: f32,
    pub max_grad_norm: f32,
    /// Clip the value loss like the policy ratio (PPO2's value clipping).
    #[serde(default)]
    pub clip_value: bool,
    /// Rewards are multiplied by this before advantages and value targets, keeping values
    /// near 1 so the value loss does not swamp the shared recurrent core's gradient.
    #[serde(default = "unit")]
    pub reward_scale: f32,
    /// Reward normalization: rewards (after `reward_scale`) are divided by the running
    /// standard deviation of the discounted return (SB3's VecNormalize) and clipped to +-10.
    #[serde(default)]
    pub reward_norm: bool,
    /// How `lr`, `clip_eps` and `entropy_coef` change over the run: `"constant"` (default) or
    /// `"linear"` (from the value at frame 0 down to 0 at `run.frames`).
    #[serde(default)]
    pub lr_schedule: Schedule,
    #[serde(default)]
    pub clip_schedule: Schedule,
    #[serde(default)]
    pub entropy_schedule: Schedule,
}

/// How a hyperparameter changes with the run's progress (frames done / `run.frames`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    #[default]
    Constant,
    /// `value * (1 - progress)` (rl-zoo's `lin_<value>`).
    Linear,
}

impl Schedule {
    /// The value at `progress` in `[0, 1]` of a run that starts at `value`.
    pub fn at(self, value: f64, progress: f64) -> f64 {
        match self {
            Schedule::Constant => value,
            Schedule::Linear => value * (1.0 - progress.clamp(0.0, 1.0)),
        }
    }
}

/// `[eval]`: greedy evaluation during training (rl-zoo's EvalCallback) on environments of
/// their own seeds, in a thread beside the training loop, on the weights of the moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    /// Evaluate every this many frames and at the end of the run (0: only at the end).
    pub every_frames: u64,
    /// Greedy episodes per evaluation (one per environment, all in parallel).
    #[serde(default = "default_eval_episodes_train")]
    pub episodes: usize,
    /// The evaluation environments' seed base [default: run.seed + 1_000_000, apart from
    /// the actors' seeds].
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Recurrent DQN (R2D2-style): slices from the stored state with optional burn-in, double-Q
/// target network (periodic or Polyak), n-step returns that stop at `terminated` and
/// bootstrap at `truncated` and at slice ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DqnSection {
    /// Steps per training slice, burn-in included.
    pub slice_len: usize,
    /// Leading steps of every slice that only refresh the recurrent state: no loss on them and
    /// no gradient through them (0 = TorchRL's behaviour: the stored state, loss everywhere).
    #[serde(default)]
    pub burn_in: usize,
    /// Slices per gradient step.
    pub num_slices: usize,
    pub lr: f64,
    pub gamma: f32,
    /// Steps of the n-step return.
    #[serde(default = "one")]
    pub n_step: usize,
    /// Double Q-learning: the online network picks the bootstrap action, the target network
    /// values it.
    #[serde(default = "yes")]
    pub double_q: bool,
    /// Copy the online network into the target network every this many gradient steps
    /// (ignored when `tau` is set).
    #[serde(default = "default_target_every")]
    pub target_update_every: u64,
    /// Polyak averaging after every gradient step: `target = tau * online + (1 - tau) * target`.
    #[serde(default)]
    pub tau: Option<f32>,
    /// Replay capacity in frames (online runs; learner-only replay holds the whole dataset).
    #[serde(default = "default_buffer")]
    pub buffer_size: usize,
    /// Frames stored before the first gradient step (online runs).
    #[serde(default)]
    pub learning_starts: usize,
    /// Gradient steps per received chunk (online runs).
    #[serde(default = "one")]
    pub updates_per_chunk: usize,
    pub max_grad_norm: f32,
    /// Rewards are multiplied by this before the targets.
    #[serde(default = "unit")]
    pub reward_scale: f32,
    /// Huber loss threshold on the TD error (0 = squared error).
    #[serde(default = "unit")]
    pub huber_delta: f32,
    #[serde(default)]
    pub initial_state: InitialState,
    /// Conservative Q-learning weight (CQL(H), for learner-only replay): adds
    /// `cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))` on the learned steps, pushing down
    /// the values of actions the data does not take. 0 = plain DQN.
    #[serde(default)]
    pub cql_alpha: f32,
    /// Online actors: epsilon-greedy, linear from `epsilon_start` to `epsilon_end` over the
    /// first `epsilon_decay_frames` frames (counted in policy versions, one per update).
    #[serde(default = "unit")]
    pub epsilon_start: f32,
    #[serde(default = "default_eps_end")]
    pub epsilon_end: f32,
    #[serde(default)]
    pub epsilon_decay_frames: u64,
}

/// Behaviour cloning: maximise the log-probability of the recorded actions over slices; its
/// section holds the slice training alone.
pub type BcSection = SliceTraining;

/// What DQN and behaviour cloning train on: padded slices of `slice_len` steps whose first
/// `burn_in` only build the recurrent state, `num_slices` per gradient step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceTraining {
    pub slice_len: usize,
    #[serde(default)]
    pub burn_in: usize,
    pub num_slices: usize,
    pub lr: f64,
    pub max_grad_norm: f32,
    #[serde(default)]
    pub initial_state: InitialState,
}

impl DqnSection {
    pub fn slices(&self) -> SliceTraining {
        SliceTraining {
            slice_len: self.slice_len,
            burn_in: self.burn_in,
            num_slices: self.num_slices,
            lr: self.lr,
            max_grad_norm: self.max_grad_norm,
            initial_state: self.initial_state,
        }
    }
}

/// The algorithm a config selects (`run.algo`, `replay.algo`) with its section: what a
/// learner is built from.
#[derive(Clone, Debug, PartialEq)]
pub enum AlgoConfig {
    Ppo(PpoSection),
    Dqn(DqnSection),
    Bc(BcSection),
}

impl AlgoConfig {
    /// The section `algo` selects out of a config's sections (`None`: not there).
    fn select(
        algo: Algo,
        ppo: Option<&PpoSection>,
        dqn: Option<&DqnSection>,
        bc: Option<&BcSection>,
    ) -> Option<Self> {
        match algo {
            Algo::Ppo => ppo.cloned().map(AlgoConfig::Ppo),
            Algo::Dqn => dqn.cloned().map(AlgoConfig::Dqn),
            Algo::Bc => bc.cloned().map(AlgoConfig::Bc),
        }
    }

    /// Steps the losses of one update are computed on, padding included (PPO: every stored
    /// frame once per epoch).
    pub fn trained_steps_per_update(&self) -> u64 {
        let steps = match self {
            AlgoConfig::Ppo(p) => p.frames_per_update * p.epochs,
            AlgoConfig::Dqn(d) => d.slice_len * d.num_slices * d.updates_per_chunk,
            AlgoConfig::Bc(b) => b.slice_len * b.num_slices,
        };
        steps as u64
    }
}

/// A whole training config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub run: RunSection,
    pub collector: CollectorSection,
    pub policy: PolicySection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppo: Option<PpoSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dqn: Option<DqnSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<EvalSection>,
}

/// `[replay]`: a learner-only run on a recorded dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaySection {
    /// `dqn`, `bc` or `ppo` (`--algo` overrides it).
    pub algo: Algo,
    /// Gradient steps (dqn, bc) or PPO updates.
    pub updates: u64,
    #[serde(default)]
    pub seed: u64,
    /// Greedy evaluation episodes run in-process every this many updates (0 = only at the end).
    #[serde(default = "default_eval_every")]
    pub eval_every: u64,
    #[serde(default = "default_eval_episodes")]
    pub eval_episodes: usize,
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u64,
    /// Stop as soon as an evaluation reaches this mean return.
    #[serde(default)]
    pub target_return: Option<f64>,
    /// Where the learner trains: `"cpu"` (default), `"cuda"` or `"cuda:N"` (a build with
    /// `--features cuda`).
    #[serde(default)]
    pub device: TrainDevice,
}

/// A learner-only replay config (`recur-learner replay --config`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub replay: ReplaySection,
    pub policy: PolicySection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dqn: Option<DqnSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bc: Option<BcSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppo: Option<PpoSection>,
}

/// The defaults of optional keys (`#[serde(default = "...")]`).
macro_rules! defaults {
    ($($name:ident: $t:ty = $value:expr;)*) => {
        $(fn $name() -> $t {
            $value
        })*
    };
}
defaults! {
    default_checkpoint_every: u64 = 50;
    yes: bool = true;
    default_target_every: u64 = 250;
    default_buffer: usize = 100_000;
    default_eps_end: f32 = 0.05;
    default_eval_every: u64 = 500;
    default_eval_episodes: usize = 16;
    default_mode: CollectorMode = CollectorMode::Async;
    default_lag: u64 = 4;
    unit: f32 = 1.0;
    default_slots: usize = 2;
    default_max_restarts: u32 = 5;
    default_restart_window: f64 = 60.0;
    default_restart_backoff: f64 = 0.2;
    one: usize = 1;
    default_encoder: Vec<usize> = vec![64];
    default_obs_clip: f32 = 10.0;
    default_eval_episodes_train: usize = 10;
}

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("command-line flag {flag} {value}: `{key}` = {value} is invalid: {expected} (the flag overrides {path})")]
    Flag {
        path: String,
        flag: String,
        key: String,
        value: String,
        expected: String,
    },
    #[error("config {path}: `{key}` = {value} is invalid: {expected}")]
    Invalid {
        path: String,
        key: String,
        value: String,
        expected: String,
    },
}

/// `load`, `parse` and `to_toml` of the config files, which check themselves (`validate`)
/// after parsing.
macro_rules! config_file {
    ($($config:ty),*) => {$(
        impl $config {
            /// Reads and validates `path`.
            pub fn load(path: &Path) -> Result<Self, ConfigError> {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::parse(&text, &path.display().to_string())
            }

            /// Parses and validates TOML text (`origin` names it in errors).
            pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
                let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
                    path: origin.to_string(),
                    message: e.to_string().trim().replace('\n', " "),
                })?;
                config.validate(origin)?;
                Ok(config)
            }

            /// The resolved config as TOML (written into the run directory).
            pub fn to_toml(&self) -> String {
                toml::to_string_pretty(self).expect("a config serialises")
            }
        }
    )*};
}
config_file!(TrainConfig, ReplayConfig);

impl TrainConfig {
    /// The algorithm `run.algo` selects, with its section (which a validated config has).
    pub fn algorithm(&self) -> AlgoConfig {
        self.selected()
            .expect("a validated config has its algo's section")
    }

    fn selected(&self) -> Option<AlgoConfig> {
        AlgoConfig::select(self.run.algo, self.ppo.as_ref(), self.dqn.as_ref(), None)
    }

    /// Checks every range; errors name the key and the value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let v = Checker { origin };
        v.environment(&self.run, &self.collector)?;
        v.check("run.frames", self.run.frames, Range::AtLeastOne)?;
        if let Some(a) = self.run.actors {
            if a == 0 && self.run.listen.is_none() {
                return v.fail(
                    "run.actors",
                    a,
                    "in 1..2048 (0 only with `run.listen`, for remote actors)",
                );
            }
            if a >= 2048 {
                return v.fail("run.actors", a, "in 1..2048");
            }
        }
        let c = &self.collector;
        if let Some(listen) = &self.run.listen {
            let port = listen
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
                return v.fail(
                    "run.listen",
                    format!("{listen:?}"),
                    "HOST:PORT, e.g. \"0.0.0.0:7070\" (port 0: any free port)",
                );
            }
            if c.mode == CollectorMode::Sync {
                return v.fail(
                    "collector.mode",
                    "\"sync\"",
                    "\"async\" with `run.listen` (sync collection counts the learner's own actors)",
                );
            }
        }
        v.check(
            "collector.envs_per_actor",
            c.envs_per_actor,
            Range::AtLeastOne,
        )?;
        v.check("collector.steps", c.steps, Range::AtLeastOne)?;
        if c.ring_slots < 2 {
            return v.fail("collector.ring_slots", c.ring_slots, "at least 2");
        }
        v.device("run.device", self.run.device)?;
        v.policy(&self.policy)?;
        if self.run.algo == Algo::Bc {
            return v.fail(
                "run.algo",
                "\"bc\"",
                "\"ppo\" or \"dqn\" (behaviour cloning trains from a dataset: recur-learner replay)",
            );
        }
        let chunk = c.envs_per_actor * c.steps;
        v.algorithm("run.algo", self.run.algo, self.selected(), Some(chunk))?;
        v.train_bounds(self)?;
        v.learning_quality(self.run.algo, &self.policy, self.eval.as_ref())
    }
}

impl ReplayConfig {
    /// The algorithm `replay.algo` selects, with its section (which a validated config has).
    /// One update is one gradient step (`replay.updates` counts them): `dqn.updates_per_chunk`
    /// paces online runs only.
    pub fn algorithm(&self) -> AlgoConfig {
        let mut algo = self
            .selected()
            .expect("a validated config has its algo's section");
        if let AlgoConfig::Dqn(d) = &mut algo {
            d.updates_per_chunk = 1;
        }
        algo
    }

    fn selected(&self) -> Option<AlgoConfig> {
        let r = self.replay.algo;
        AlgoConfig::select(r, self.ppo.as_ref(), self.dqn.as_ref(), self.bc.as_ref())
    }

    /// Checks the replay section, the policy and the section of `replay.algo`.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let v = Checker { origin };
        let r = &self.replay;
        v.check("replay.updates", r.updates, Range::AtLeastOne)?;
        v.check("replay.eval_episodes", r.eval_episodes, Range::AtLeastOne)?;
        v.device("replay.device", r.device)?;
        v.policy(&self.policy)?;
        v.algorithm("replay.algo", r.algo, self.selected(), None)?;
        v.replay_bounds(self)?;
        v.learning_quality(r.algo, &self.policy, None)
    }
}

/// The ranges config numbers must lie in (floats also finite), named as errors show them.
#[derive(Clone, Copy, Debug)]
enum Range {
    AtLeastOne,
    Positive,
    NonNegative,
    Unit,
    Probability,
    PositiveUnit,
}

impl Range {
    fn contains(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::AtLeastOne => v >= 1.0,
                Range::Positive => v > 0.0,
                Range::NonNegative => v >= 0.0,
                Range::Unit | Range::Probability => (0.0..=1.0).contains(&v),
                Range::PositiveUnit => v > 0.0 && v <= 1.0,
            }
    }

    fn expected(self) -> &'static str {
        match self {
            Range::AtLeastOne => "at least 1",
            Range::Positive => "a positive number",
            Range::NonNegative => "a number >= 0",
            Range::Unit => "in [0, 1]",
            Range::Probability => "a probability in [0, 1]",
            Range::PositiveUnit => "in (0, 1]",
        }
    }
}

/// A config number: shown as written, compared as `f64`.
trait Number: Copy + std::fmt::Display {
    fn value(self) -> f64;
}

macro_rules! number {
    ($($t:ty),*) => {
        $(impl Number for $t {
            fn value(self) -> f64 {
                self as f64
            }
        })*
    };
}
number!(usize, u64, f32, f64);

/// The validation of one config (`origin`): every error names the key and the value.
struct Checker<'a> {
    origin: &'a str,
}

impl Checker<'_> {
    /// `run.env` (a built-in id, `gymnasium:<id>`, or any id when `collector.actor_bin` names
    /// the user's actor, which reports the spaces), `run.env_imports` and `run.env_kwargs`
    /// (gymnasium ids only), `collector.actor_bin`.
    fn environment(
        &self,
        run: &RunSection,
        collector: &CollectorSection,
    ) -> Result<(), ConfigError> {
        use common::envs::{is_gymnasium, GYMNASIUM_PREFIX};
        let env = run.env.as_str();
        if let Some(bin) = &collector.actor_bin {
            if bin.trim().is_empty() {
                return self.fail(
                    "collector.actor_bin",
                    "\"\"",
                    "a path to an actor executable",
                );
            }
        }
        if is_gymnasium(env) {
            if env[GYMNASIUM_PREFIX.len()..].trim().is_empty() {
                return self.fail(
                    "run.env",
                    format!("{env:?}"),
                    "gymnasium:<id>, e.g. gymnasium:CartPole-v1",
                );
            }
        } else {
            if !run.env_imports.is_empty() {
                return self.fail(
                    "run.env_imports",
                    format!("{:?}", run.env_imports),
                    "imports only with a gymnasium:<id> env",
                );
            }
            if run.env_kwargs.is_some() {
                return self.fail(
                    "run.env_kwargs",
                    "a table",
                    "kwargs only with a gymnasium:<id> env",
                );
            }
            let known = common::envs::Registry::builtin();
            if collector.actor_bin.is_none() && !known.contains(env) {
                return self.fail(
                    "run.env",
                    format!("{env:?}"),
                    &format!(
                        "one of {:?}, gymnasium:<id>, or an id registered by the actor named in \
                         collector.actor_bin",
                        known.ids()
                    ),
                );
            }
        }
        if let Some(m) = run
            .env_imports
            .iter()
            .find(|m| m.trim().is_empty() || m.contains(char::is_whitespace))
        {
            return self.fail("run.env_imports", format!("{m:?}"), "Python module names");
        }
        Ok(())
    }

    fn fail(
        &self,
        key: &str,
        value: impl std::fmt::Display,
        expected: &str,
    ) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            path: self.origin.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        })
    }

    /// `key` = `value` must lie in `range`.
    fn check(&self, key: &str, value: impl Number, range: Range) -> Result<(), ConfigError> {
        if range.contains(value.value()) {
            return Ok(());
        }
        self.fail(key, value, range.expected())
    }

    /// The device must be built in (`--features cuda` for CUDA). (`fused` runs on CUDA too:
    /// the CubeCL kernels, `common::recurrent::backend::cube`.)
    fn device(&self, key: &str, device: TrainDevice) -> Result<(), ConfigError> {
        let value = format!("\"{device}\"");
        if device.check_built().is_err() {
            return self.fail(
                key,
                value,
                "\"cpu\": this binary was built without `--features cuda` (rebuild with \
                 `cargo build --release --features cuda` to train on a GPU)",
            );
        }
        Ok(())
    }

    fn policy(&self, p: &PolicySection) -> Result<(), ConfigError> {
        self.check("policy.hidden_size", p.hidden_size, Range::AtLeastOne)?;
        self.check("policy.num_layers", p.num_layers, Range::AtLeastOne)?;
        if p.encoder.contains(&0) {
            return self.fail(
                "policy.encoder",
                format!("{:?}", p.encoder),
                "widths of at least 1",
            );
        }
        Ok(())
    }

    /// The section `key` = `algo` selects (`None`: the config has none); `chunk`: frames of
    /// one chunk, when PPO updates are paced by received chunks.
    fn algorithm(
        &self,
        key: &str,
        algo: Algo,
        section: Option<AlgoConfig>,
        chunk: Option<usize>,
    ) -> Result<(), ConfigError> {
        match section {
            None => self.fail(
                algo.name(),
                "missing",
                &format!("a [{0}] section ({key} = \"{0}\")", algo.name()),
            ),
            Some(AlgoConfig::Ppo(o)) => self.ppo(&o, chunk),
            Some(AlgoConfig::Dqn(d)) => self.dqn(&d),
            Some(AlgoConfig::Bc(b)) => self.slices("bc", &b),
        }
    }

    fn ppo(&self, o: &PpoSection, chunk: Option<usize>) -> Result<(), ConfigError> {
        self.check(
            "ppo.frames_per_update",
            o.frames_per_update,
            Range::AtLeastOne,
        )?;
        self.check("ppo.epochs", o.epochs, Range::AtLeastOne)?;
        self.check("ppo.slice_len", o.slice_len, Range::AtLeastOne)?;
        self.check("ppo.num_slices", o.num_slices, Range::AtLeastOne)?;
        if let Some(chunk) = chunk.filter(|&c| !o.frames_per_update.is_multiple_of(c)) {
            return self.fail(
                "ppo.frames_per_update",
                o.frames_per_update,
                &format!(
                    "a multiple of one chunk (collector.envs_per_actor x collector.steps = \
                     {chunk})"
                ),
            );
        }
        self.check("ppo.lr", o.lr, Range::Positive)?;
        self.check("ppo.gamma", o.gamma, Range::Unit)?;
        self.check("ppo.gae_lambda", o.gae_lambda, Range::Unit)?;
        self.check("ppo.clip_eps", o.clip_eps, Range::Positive)?;
        self.check("ppo.max_grad_norm", o.max_grad_norm, Range::Positive)?;
        self.check("ppo.value_coef", o.value_coef, Range::NonNegative)?;
        self.check("ppo.entropy_coef", o.entropy_coef, Range::NonNegative)
    }

    /// Observation normalization (PPO's), its clip, and the `[eval]` section.
    fn learning_quality(
        &self,
        algo: Algo,
        p: &PolicySection,
        eval: Option<&EvalSection>,
    ) -> Result<(), ConfigError> {
        if p.obs_norm && algo != Algo::Ppo {
            return self.fail(
                "policy.obs_norm",
                true,
                &format!(
                    "false with algo \"{}\" (the normalizer is kept by PPO)",
                    algo.name()
                ),
            );
        }
        self.check("policy.obs_clip", p.obs_clip, Range::Positive)?;
        if p.critic_core == CriticCore::Separate && algo != Algo::Ppo {
            return self.fail(
                "policy.critic_core",
                "\"separate\"",
                &format!(
                    "\"shared\" with algo \"{}\" (only PPO has a value head to train)",
                    algo.name()
                ),
            );
        }
        if let Some(e) = eval {
            self.check("eval.episodes", e.episodes, Range::AtLeastOne)?;
            if e.episodes > 10_000 {
                return self.fail("eval.episodes", e.episodes, "at most 10000");
            }
        }
        Ok(())
    }

    /// The slice training of section `[name]`.
    fn slices(&self, name: &str, s: &SliceTraining) -> Result<(), ConfigError> {
        let key = |k: &str| format!("{name}.{k}");
        self.check(&key("slice_len"), s.slice_len, Range::AtLeastOne)?;
        self.check(&key("num_slices"), s.num_slices, Range::AtLeastOne)?;
        if s.burn_in >= s.slice_len {
            return self.fail(
                &key("burn_in"),
                s.burn_in,
                &format!(
                    "less than slice_len = {} (steps left to learn on)",
                    s.slice_len
                ),
            );
        }
        self.check(&key("lr"), s.lr, Range::Positive)?;
        self.check(&key("max_grad_norm"), s.max_grad_norm, Range::Positive)
    }

    fn dqn(&self, d: &DqnSection) -> Result<(), ConfigError> {
        self.slices("dqn", &d.slices())?;
        self.check("dqn.gamma", d.gamma, Range::Unit)?;
        self.check("dqn.n_step", d.n_step, Range::AtLeastOne)?;
        match d.tau {
            Some(tau) => self.check("dqn.tau", tau, Range::PositiveUnit)?,
            None if d.target_update_every == 0 => {
                return self.fail(
                    "dqn.target_update_every",
                    0,
                    "at least 1 (or set dqn.tau for Polyak updates)",
                )
            }
            None => {}
        }
        self.check("dqn.buffer_size", d.buffer_size, Range::AtLeastOne)?;
        self.check(
            "dqn.updates_per_chunk",
            d.updates_per_chunk,
            Range::AtLeastOne,
        )?;
        self.check("dqn.cql_alpha", d.cql_alpha, Range::NonNegative)?;
        self.check("dqn.huber_delta", d.huber_delta, Range::NonNegative)?;
        self.check("dqn.epsilon_start", d.epsilon_start, Range::Probability)?;
        self.check("dqn.epsilon_end", d.epsilon_end, Range::Probability)
    }
}

/// Validation after command-line overrides: `flags` maps each overriding flag to its key; an
/// invalid value a flag set is blamed on the flag, not on the file.
pub fn blame_flags(
    result: Result<(), ConfigError>,
    flags: &[(&str, &str)],
) -> Result<(), ConfigError> {
    match result {
        Err(ConfigError::Invalid {
            path,
            key,
            value,
            expected,
        }) => match flags.iter().find(|(_, k)| *k == key) {
            Some((flag, _)) => Err(ConfigError::Flag {
                path,
                flag: flag.to_string(),
                key,
                value,
                expected,
            }),
            None => Err(ConfigError::Invalid {
                path,
                key,
                value,
                expected,
            }),
        },
        other => other,
    }
}

/// Memory a run may plan to use: the machine's RAM (`MemTotal`), or 16 GiB where it cannot be
/// read.
fn memory_limit() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .map_or(16 << 30, |kib| kib * 1024)
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

/// Bytes of one stored frame at least (its recurrent state and a few scalars; observations
/// aside), and of the policy's parameters with their training copies (gradients, Adam's two
/// moments, a target network, an inference copy: 6 copies of f32).
fn frame_bytes(p: &PolicySection) -> u64 {
    (2 * p.num_layers as u64 * p.hidden_size as u64 + 16) * 4
}

fn training_bytes(p: &PolicySection) -> u64 {
    let gates = p.cell.gates() as u128;
    let h = p.hidden_size as u128;
    let input = p.encoder.last().copied().unwrap_or(8) as u128;
    // W_ih and b_ih, plus W_hh and b_hh where the cell has them.
    let per_gate = if p.cell.has_hidden_weights() {
        input + h + 2
    } else {
        input + 1
    };
    let core = gates * h * per_gate * p.num_layers as u128;
    let encoder: u128 = p
        .encoder
        .windows(2)
        .map(|w| w[0] as u128 * w[1] as u128)
        .sum::<u128>()
        + p.encoder.first().copied().unwrap_or(0) as u128 * 64;
    let params = core + encoder + h * 64;
    u64::try_from(params * 4 * 6).unwrap_or(u64::MAX)
}

impl Checker<'_> {
    /// `key` = `value` would make the run plan `bytes` of memory: refused above the machine's
    /// RAM (before anything allocates, so that an allocation cannot abort the process).
    fn memory(
        &self,
        key: &str,
        value: impl std::fmt::Display,
        bytes: u64,
        what: &str,
    ) -> Result<(), ConfigError> {
        let limit = memory_limit();
        if bytes <= limit {
            return Ok(());
        }
        self.fail(
            key,
            value,
            &format!(
                "{what} would need {} of memory; this machine has {}",
                human(bytes),
                human(limit)
            ),
        )
    }

    fn finite(&self, key: &str, value: Option<f64>) -> Result<(), ConfigError> {
        match value {
            Some(v) if !v.is_finite() => self.fail(key, v, "a finite number"),
            _ => Ok(()),
        }
    }

    /// Finite floats and sizes a training run can allocate.
    fn train_bounds(&self, c: &TrainConfig) -> Result<(), ConfigError> {
        self.finite("run.target_return", c.run.target_return)?;
        let col = &c.collector;
        self.check(
            "collector.restart_window_s",
            col.restart_window_s,
            Range::Positive,
        )?;
        self.check(
            "collector.restart_backoff_s",
            col.restart_backoff_s,
            Range::NonNegative,
        )?;
        // Durations: bounded so that they convert (and double) without overflow.
        if col.restart_window_s > 1e9 {
            return self.fail(
                "collector.restart_window_s",
                col.restart_window_s,
                "at most 1e9 seconds",
            );
        }
        if col.restart_backoff_s > 3600.0 {
            return self.fail(
                "collector.restart_backoff_s",
                col.restart_backoff_s,
                "at most 3600 seconds (doubled per restart, capped at 8 s)",
            );
        }
        if let Some(p) = &c.ppo {
            self.check("ppo.reward_scale", p.reward_scale, Range::Positive)?;
        }
        if let Some(d) = &c.dqn {
            self.check("dqn.reward_scale", d.reward_scale, Range::Positive)?;
        }
        let p = &c.policy;
        self.memory(
            "policy.hidden_size",
            p.hidden_size,
            training_bytes(p),
            "the policy with its training state",
        )?;
        let frame = frame_bytes(p);
        let actors = c.run.actors.unwrap_or(1) as u64;
        let rings = (actors as u128)
            * col.ring_slots as u128
            * col.envs_per_actor as u128
            * col.steps as u128
            * frame as u128;
        // Blamed on the largest factor; the message lists them all.
        let (key, value) = [
            ("collector.ring_slots", col.ring_slots),
            ("collector.envs_per_actor", col.envs_per_actor),
            ("collector.steps", col.steps),
        ]
        .into_iter()
        .max_by_key(|&(_, v)| v)
        .expect("three factors");
        self.memory(
            key,
            value,
            u64::try_from(rings).unwrap_or(u64::MAX),
            &format!(
                "{actors} actors x {} ring slots x {} envs x {} steps of recurrent state",
                col.ring_slots, col.envs_per_actor, col.steps
            ),
        )?;
        if let Some(d) = &c.dqn {
            self.memory(
                "dqn.buffer_size",
                d.buffer_size,
                (d.buffer_size as u64).saturating_mul(frame),
                "the replay buffer",
            )?;
        }
        if let Some(o) = &c.ppo {
            self.memory(
                "ppo.frames_per_update",
                o.frames_per_update,
                (o.frames_per_update as u64)
                    .saturating_mul(frame)
                    .saturating_mul(4),
                "one update's frames with their advantages and activations",
            )?;
        }
        Ok(())
    }

    /// Finite floats and sizes a replay run can allocate.
    fn replay_bounds(&self, c: &ReplayConfig) -> Result<(), ConfigError> {
        self.finite("replay.target_return", c.replay.target_return)?;
        if let Some(p) = &c.ppo {
            self.check("ppo.reward_scale", p.reward_scale, Range::Positive)?;
        }
        if let Some(d) = &c.dqn {
            self.check("dqn.reward_scale", d.reward_scale, Range::Positive)?;
        }
        self.memory(
            "policy.hidden_size",
            c.policy.hidden_size,
            training_bytes(&c.policy),
            "the policy with its training state",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error loading `text` as a training config, `x.toml`.
    fn train_err(text: &str) -> String {
        TrainConfig::parse(text, "x.toml").unwrap_err().to_string()
    }

    /// The error loading `text` as a replay config, `b.toml`.
    fn replay_err(text: &str) -> String {
        ReplayConfig::parse(text, "b.toml").unwrap_err().to_string()
    }

    const GOOD: &str = r#"
[run]
env = "MaskedCartPole-v1"
frames = 1000000

[collector]
envs_per_actor = 8
steps = 32

[policy]
cell = "lstm"
hidden_size = 64

[ppo]
frames_per_update = 1024
epochs = 4
slice_len = 32
num_slices = 8
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#;

    #[test]
    fn a_good_config_loads_with_defaults_and_round_trips() {
        let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
        assert_eq!(c.collector.mode, CollectorMode::Async);
        assert_eq!(c.policy.encoder, vec![64]);
        assert_eq!(c.policy.backend, RecurrentBackend::Auto);
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = train_err(&GOOD.replace("epochs = 4", "epochs = 4\nepoch = 3"));
        assert!(
            err.contains("x.toml") && err.contains("unknown field `epoch`"),
            "{err}"
        );
        let err = train_err(&GOOD.replace("gamma = 0.99", "gamma = 1.5"));
        assert!(err.contains("`ppo.gamma` = 1.5"), "{err}");
        let err = train_err(&GOOD.replace("frames_per_update = 1024", "frames_per_update = 1000"));
        assert!(
            err.contains("`ppo.frames_per_update` = 1000") && err.contains("= 256"),
            "{err}"
        );
        let err = train_err(&GOOD.replace("MaskedCartPole-v1", "Masked"));
        assert!(err.contains("`run.env` = \"Masked\""), "{err}");
        let err = train_err(&GOOD.replace("cell = \"lstm\"", "cell = \"rnn\""));
        assert!(err.contains("rnn") && err.contains("cell"), "{err}");
        let err = train_err(&GOOD.replace("[ppo]", "[ppo]\nmode = \"sync\""));
        assert!(err.contains("unknown field `mode`"), "{err}");
    }

    /// The shipped learner-only BC config, configs/replay/bc.toml.
    fn bc_toml() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/replay/bc.toml"
        ))
        .expect("configs/replay/bc.toml is readable")
    }

    /// The error loading bc.toml with `replay.device = device`.
    fn replay_device_error(device: &str) -> String {
        let toml = bc_toml().replace("device = \"cpu\"", &format!("device = \"{device}\""));
        replay_err(&toml)
    }

    fn with_device(device: &str) -> String {
        GOOD.replace(
            "frames = 1000000",
            &format!("frames = 1000000\ndevice = \"{device}\""),
        )
    }

    #[test]
    fn the_device_is_the_cpu_unless_set() {
        let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
        assert_eq!(c.run.device, TrainDevice::Cpu);
        let c = TrainConfig::parse(&with_device("cpu"), "x.toml").unwrap();
        assert_eq!(c.run.device, TrainDevice::Cpu);
        assert!(c.to_toml().contains("device = \"cpu\""), "{}", c.to_toml());
    }

    #[test]
    fn a_bad_device_is_named_with_its_value() {
        for bad in ["gpu", "cuda:x", "cuda:", "CPU"] {
            let err = train_err(&with_device(bad));
            assert!(
                err.contains("x.toml")
                    && err.contains("device")
                    && err.contains(&format!("{bad:?}"))
                    && err.contains("\"cuda:N\""),
                "{bad}: {err}"
            );
        }
        let err = replay_device_error("tpu");
        assert!(err.contains("device") && err.contains("\"tpu\""), "{err}");
    }

    /// Without the `cuda` feature a CUDA device is refused at load, saying how to build it.
    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_is_refused_without_the_cuda_feature() {
        for (device, shown) in [
            ("cuda", "cuda:0"),
            ("cuda:0", "cuda:0"),
            ("cuda:2", "cuda:2"),
        ] {
            let err = train_err(&with_device(device));
            assert!(
                err.contains(&format!("`run.device` = \"{shown}\""))
                    && err.contains("built without `--features cuda`"),
                "{err}"
            );
        }
        let err = replay_device_error("cuda:0");
        assert!(
            err.contains("`replay.device` = \"cuda:0\"") && err.contains("--features cuda"),
            "{err}"
        );
    }

    /// With the `cuda` feature a CUDA device loads (the GPU is looked for when training
    /// starts), `auto` stays `auto` (it resolves to `fused` there: the CubeCL kernels) and
    /// `fused` is accepted.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_loads_with_the_feature_and_with_fused() {
        let c = TrainConfig::parse(&with_device("cuda:1"), "x.toml").unwrap();
        assert_eq!(c.run.device, TrainDevice::Cuda(1));
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
        let fused = with_device("cuda")
            .replace("hidden_size = 64", "hidden_size = 64\nbackend = \"fused\"");
        let c = TrainConfig::parse(&fused, "x.toml").unwrap();
        assert_eq!(c.policy.backend, RecurrentBackend::Fused);
    }

    /// The learning-quality keys: schedules and normalization parse; bad values and
    /// combinations are refused naming the key.
    #[test]
    fn learning_quality_keys_are_checked() {
        let good = format!(
            "{GOOD}reward_norm = true\nlr_schedule = \"linear\"\n\n[eval]\nevery_frames = 5000\n"
        )
        .replace(
            "hidden_size = 64",
            "hidden_size = 64\nobs_norm = true\ncritic_core = \"separate\"",
        );
        let c = TrainConfig::parse(&good, "x.toml").unwrap();
        let ppo = c.ppo.as_ref().unwrap();
        assert_eq!(ppo.lr_schedule, Schedule::Linear);
        assert_eq!(ppo.clip_schedule, Schedule::Constant);
        assert_eq!(Schedule::Linear.at(1e-3, 0.25), 0.75e-3);
        assert_eq!(Schedule::Linear.at(1e-3, 2.0), 0.0);
        assert_eq!(c.eval.as_ref().unwrap().episodes, 10);
        assert!(c.policy.obs_norm && c.policy.critic_core == CriticCore::Separate);
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);

        let err = train_err(&good.replace("lr_schedule = \"linear\"", "lr_schedule = \"cosine\""));
        assert!(err.contains("cosine") && err.contains("linear"), "{err}");
        let err = train_err(&good.replace("obs_norm = true", "obs_norm = true\nobs_clip = 0.0"));
        assert!(err.contains("`policy.obs_clip` = 0"), "{err}");
        let err =
            train_err(&good.replace("every_frames = 5000", "every_frames = 5000\nepisodes = 0"));
        assert!(err.contains("`eval.episodes` = 0"), "{err}");
        let dqn = include_str!("../../configs/repeat_previous_dqn.toml");
        let err = train_err(&dqn.replace("hidden_size = 64", "hidden_size = 64\nobs_norm = true"));
        assert!(
            err.contains("`policy.obs_norm` = true") && err.contains("PPO"),
            "{err}"
        );
        let err = train_err(&dqn.replace(
            "hidden_size = 64",
            "hidden_size = 64\ncritic_core = \"separate\"",
        ));
        assert!(err.contains("`policy.critic_core`"), "{err}");
    }

    #[test]
    fn every_shipped_config_is_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
                names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        names.sort();
        assert_eq!(
            names,
            [
                "cartpole.toml",
                "masked_cartpole.toml",
                "masked_cartpole_mingru.toml",
                "masked_pendulum.toml",
                "pendulum.toml",
                "popgym_position_only_cartpole.toml",
                "popgym_repeat_previous.toml",
                "repeat_previous.toml",
                "repeat_previous_dqn.toml"
            ]
        );
    }

    #[test]
    fn every_shipped_replay_config_is_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/replay");
        let mut algos = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let config = ReplayConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                path.file_stem().unwrap().to_string_lossy(),
                config.replay.algo.name(),
                "configs/replay/<algo>.toml is the default config of --algo <algo>"
            );
            algos.push(config.replay.algo.name());
        }
        algos.sort();
        assert_eq!(algos, ["bc", "dqn", "ppo"]);
    }

    #[test]
    fn dqn_and_replay_errors_name_the_key() {
        let dqn = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/repeat_previous_dqn.toml"
        ))
        .unwrap();
        let err = train_err(&dqn.replace("burn_in = 0 ", "burn_in = 16 "));
        assert!(
            err.contains("`dqn.burn_in` = 16") && err.contains("slice_len = 16"),
            "{err}"
        );
        let err = train_err(&dqn.replace("n_step = 1", "n_step = 0"));
        assert!(err.contains("`dqn.n_step` = 0"), "{err}");
        let err = train_err(&dqn.replace("algo = \"dqn\"", "algo = \"bc\""));
        assert!(
            err.contains("`run.algo` = \"bc\"") && err.contains("replay"),
            "{err}"
        );
        let no_dqn = &dqn[..dqn.find("[dqn]").unwrap()];
        let err = train_err(no_dqn);
        assert!(err.contains("`dqn` = missing"), "{err}");
        let bc = bc_toml();
        let err = replay_err(&bc.replace("updates = 5_000", "updates = 0"));
        assert!(err.contains("`replay.updates` = 0"), "{err}");
        let err = replay_err(&bc.replace("algo = \"bc\"", "algo = \"dqn\""));
        assert!(err.contains("`dqn` = missing"), "{err}");
    }

    #[test]
    fn own_environments_are_accepted_where_an_actor_can_build_them() {
        // Unknown ids: refused with the known ones, unless a custom actor builds them.
        let err = train_err(&GOOD.replace("MaskedCartPole-v1", "TMaze-v0"));
        assert!(
            err.contains("`run.env` = \"TMaze-v0\"")
                && err.contains("CartPole-v1")
                && err.contains("collector.actor_bin"),
            "{err}"
        );
        let custom = GOOD.replace("MaskedCartPole-v1", "TMaze-v0").replace(
            "[collector]",
            "[collector]\nactor_bin = \"target/release/examples/tmaze\"",
        );
        let c = TrainConfig::parse(&custom, "x.toml").unwrap();
        assert_eq!(
            c.collector.actor_bin.as_deref(),
            Some("target/release/examples/tmaze")
        );
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
        // Gymnasium ids with imports and kwargs.
        let gym = GOOD.replace(
            "env = \"MaskedCartPole-v1\"",
            "env = \"gymnasium:popgym-RepeatPreviousEasy-v0\"\nenv_imports = [\"popgym\"]\n\
             env_kwargs = { foo = 1 }",
        );
        let c = TrainConfig::parse(&gym, "x.toml").unwrap();
        assert_eq!(c.run.env_imports, ["popgym"]);
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
        // Imports and kwargs only with gymnasium ids; an empty gymnasium id.
        let err = train_err(&GOOD.replace(
            "frames = 1000000",
            "frames = 1000000\nenv_imports = [\"popgym\"]",
        ));
        assert!(
            err.contains("`run.env_imports`") && err.contains("gymnasium"),
            "{err}"
        );
        let err = train_err(&GOOD.replace("MaskedCartPole-v1", "gymnasium:"));
        assert!(err.contains("`run.env` = \"gymnasium:\""), "{err}");
    }

    /// Issue 20: every float finite and in range, sizes that cannot abort an allocation, and
    /// values set by a flag blamed on the flag.
    #[test]
    fn listen_allows_zero_local_actors_and_is_checked() {
        let with =
            |extra: &str| GOOD.replace("frames = 1000000", &format!("frames = 1000000\n{extra}"));
        let ok =
            TrainConfig::parse(&with("actors = 0\nlisten = \"0.0.0.0:7070\""), "x.toml").unwrap();
        assert_eq!(ok.run.listen.as_deref(), Some("0.0.0.0:7070"));
        let err = train_err(&with("actors = 0"));
        assert!(
            err.contains("`run.actors` = 0") && err.contains("0 only with `run.listen`"),
            "{err}"
        );
        for bad in ["7070", ":7070", "host:port", "host:70000"] {
            let err = train_err(&with(&format!("listen = \"{bad}\"")));
            assert!(
                err.contains(&format!("`run.listen` = \"{bad}\"")) && err.contains("HOST:PORT"),
                "{err}"
            );
        }
        let sync =
            with("listen = \"127.0.0.1:0\"").replace("steps = 32", "steps = 32\nmode = \"sync\"");
        let err = train_err(&sync);
        assert!(
            err.contains("`collector.mode` = \"sync\"") && err.contains("run.listen"),
            "{err}"
        );
    }

    #[test]
    fn floats_are_finite_sizes_bounded_and_flags_blamed() {
        for (from, to, key) in [
            (
                "max_grad_norm = 0.5",
                "max_grad_norm = 0.5\nreward_scale = nan",
                "`ppo.reward_scale` = NaN",
            ),
            (
                "max_grad_norm = 0.5",
                "max_grad_norm = 0.5\nreward_scale = -1.0",
                "`ppo.reward_scale` = -1",
            ),
            (
                "frames = 1000000",
                "frames = 1000000\ntarget_return = nan",
                "`run.target_return` = NaN",
            ),
            (
                "frames = 1000000",
                "frames = 1000000\ntarget_return = inf",
                "`run.target_return` = inf",
            ),
            (
                "steps = 32",
                "steps = 32\nrestart_window_s = 0.0",
                "`collector.restart_window_s` = 0",
            ),
            (
                "steps = 32",
                "steps = 32\nrestart_window_s = 2e9",
                "`collector.restart_window_s` = 2000000000",
            ),
            (
                "steps = 32",
                "steps = 32\nrestart_backoff_s = 7200.0",
                "`collector.restart_backoff_s` = 7200",
            ),
        ] {
            let err = train_err(&GOOD.replace(from, to));
            assert!(err.contains(key) && err.contains("x.toml"), "{to}: {err}");
        }
        let err = train_err(&GOOD.replace("hidden_size = 64", "hidden_size = 1000000"));
        assert!(
            err.contains("`policy.hidden_size` = 1000000")
                && err.contains("would need")
                && err.contains("TiB of memory"),
            "{err}"
        );
        let err = train_err(&GOOD.replace("steps = 32", "steps = 32\nring_slots = 1000000000"));
        assert!(
            err.contains("`collector.ring_slots` = 1000000000") && err.contains("of memory"),
            "{err}"
        );
        // A value the file has is blamed on the file; one a flag set, on the flag.
        let mut c = TrainConfig::parse(GOOD, "good.toml").unwrap();
        c.run.actors = Some(3000);
        let flags = [("--actors", "run.actors"), ("--frames", "run.frames")];
        let err = blame_flags(c.validate("good.toml"), &flags)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("command-line flag --actors 3000: `run.actors` = 3000")
                && err.contains("in 1..2048"),
            "{err}"
        );
        let err = train_err(&GOOD.replace("frames = 1000000", "frames = 1000000\nactors = 3000"));
        let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
        assert!(blame_flags(c.validate("good.toml"), &flags).is_ok());
        assert!(
            err.starts_with("config x.toml: `run.actors` = 3000"),
            "{err}"
        );
    }
}
