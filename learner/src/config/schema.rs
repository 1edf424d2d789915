//! The config files' schema: one serde struct per TOML section (`deny_unknown_fields`), the
//! defaults of optional keys, and the algorithm a config selects ([`AlgoConfig`]).

use common::backend::TrainDevice;
use common::policy::CriticCore;
use recur_rnn::{CellKind, RecurrentBackend};
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

recur_rnn::config_names!(Algo, String "algo", Ppo => "ppo", Dqn => "dqn", Bc => "bc");

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
    /// TLS 1.3 on the `listen` port: `"auto"` (default: on unless the address is a loopback
    /// one), `"on"` (any address; `--tls`) or `"insecure-plaintext"` (token and chunks in
    /// clear; `--insecure-plaintext`).
    #[serde(default, skip_serializing_if = "is_auto")]
    pub tls: common::tls::TlsMode,
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
    /// The episodes whose training mean counts against `target_return`: 20 (recur's
    /// `mean_return`, default) or 100 (`mean_return_100`, RLlib's window, which the POPGym
    /// paper's MMER maximizes). The window must be full.
    #[serde(default = "default_target_window")]
    pub target_window: usize,
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
    /// The keys of a `Dict` observation to keep (`gymnasium:` ids only), e.g.
    /// `["direction", "image"]` for MiniGrid, whose `mission` string a policy cannot take.
    /// Unset: every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_keys: Option<Vec<String>>,
    /// Also write the metrics and evaluations as TensorBoard scalars and the config as text,
    /// to `RUN_DIR/tb/` (`learner::tensorboard`).
    #[serde(default = "yes")]
    pub tensorboard: bool,
}

impl RunSection {
    /// `env_kwargs` as JSON (an object), the form the actors and the gymnasium bridge take.
    pub fn env_kwargs_json(&self) -> Option<serde_json::Value> {
        let table = self.env_kwargs.as_ref()?;
        Some(serde_json::to_value(table).expect("a TOML table is JSON"))
    }
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
    /// A local actor that sends no heartbeat for this long (seconds; it beats every 250 ms
    /// while it waits and after every chunk, so this must exceed the longest chunk collection)
    /// is stalled (SIGSTOP, hung): SIGKILLed and restarted under a new incarnation. 0: never.
    #[serde(default = "default_stall_timeout")]
    pub stall_timeout_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    pub cell: CellKind,
    pub hidden_size: usize,
    #[serde(default = "one")]
    pub num_layers: usize,
    /// The MLP's widths (`encoder = [64]`), or a table with `mlp` and `cnn` (images).
    #[serde(default)]
    pub encoder: super::encoder::EncoderSection,
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
    /// `false`: a feedforward policy with the same layers (the core starts from zeros at every
    /// step): the floor for a task that needs memory.
    #[serde(default = "yes")]
    pub memory: bool,
    /// Added to the LSTM's forget-gate bias at initialization (1.0: start remembering);
    /// 0 keeps PyTorch's initialization.
    #[serde(default)]
    pub forget_bias: f32,
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
    /// Which code runs a minibatch step: `"fused"` (the whole policy, loss, backward and Adam
    /// on host buffers and the fused CPU kernels), `"burn"` (burn's autodiff, the reference),
    /// or `"auto"` (default): fused where the policy allows it (CPU, LSTM/GRU core, shared
    /// critic, discrete or multi-discrete actions, no dropout), burn elsewhere.
    #[serde(default)]
    pub update: UpdatePath,
    /// How an epoch cuts the rollout into slices. `false` (default): slices end at every
    /// trajectory end and are padded to `slice_len` (SB3 RecurrentPPO's per-episode
    /// sequences), with a random head per epoch. `true`: slices tile each env row of a chunk at
    /// fixed `slice_len` steps and run across episode ends, where `is_init` restarts the core
    /// from the stored (reset) state inside the slice (Sample Factory's fixed-length chunks):
    /// no padding, so an epoch is exactly `frames_per_update / (slice_len * num_slices)`
    /// minibatches when `slice_len` divides `collector.steps`.
    #[serde(default)]
    pub pack_slices: bool,
    /// A count bonus for exploration (`algo::ppo::novelty`): each step's reward gains
    /// `novelty_bonus / sqrt(n)`, `n` the visits to that next observation this one included
    /// (within its episode or the whole run: `novelty_counts`). Added after `reward_norm` and `reward_scale`; the
    /// returns reported stay the environment's. 0 (default): none.
    #[serde(default)]
    pub novelty_bonus: f32,
    /// How `novelty_bonus` changes over the run (as `lr_schedule`).
    #[serde(default)]
    pub novelty_schedule: Schedule,
    /// What `n` of `novelty_bonus` counts: `"episode"` (default) the visits of the step's
    /// episode, `"run"` every visit since the run began (a view grows familiar for good).
    #[serde(default)]
    pub novelty_counts: NoveltyCounts,
}

/// [`PpoSection::novelty_counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoveltyCounts {
    #[default]
    Episode,
    Run,
}

recur_rnn::config_names!(NoveltyCounts, String "novelty counts",
    Episode => "episode", Run => "run");

/// [`PpoSection::update`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdatePath {
    #[default]
    Auto,
    Burn,
    Fused,
}

recur_rnn::config_names!(UpdatePath, String "update path",
    Auto => "auto", Burn => "burn", Fused => "fused");

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
    /// Keep the weights of the best evaluation so far in `RUN_DIR/best/` (`policy.json`,
    /// `weights.bin`, `best.json`), as SB3's EvalCallback keeps `best_model`; a tie goes to
    /// the later weights.
    #[serde(default = "yes")]
    pub keep_best: bool,
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
    /// Where the learner trains, as `run.device`.
    #[serde(default)]
    pub device: TrainDevice,
    /// Also write the metrics as TensorBoard scalars and the config as text, to `RUN_DIR/tb/`.
    #[serde(default = "yes")]
    pub tensorboard: bool,
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
    default_target_window: usize = 20;
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
    default_stall_timeout: f64 = 30.0;
    one: usize = 1;
    default_obs_clip: f32 = 10.0;
    default_eval_episodes_train: usize = 10;
}

impl TrainConfig {
    /// The algorithm `run.algo` selects, with its section (which a validated config has).
    pub fn algorithm(&self) -> AlgoConfig {
        self.selected()
            .expect("a validated config has its algo's section")
    }

    /// The section `run.algo` selects (`None`: the config has none).
    pub(super) fn selected(&self) -> Option<AlgoConfig> {
        AlgoConfig::select(self.run.algo, self.ppo.as_ref(), self.dqn.as_ref(), None)
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

    /// The section `replay.algo` selects (`None`: the config has none).
    pub(super) fn selected(&self) -> Option<AlgoConfig> {
        let r = self.replay.algo;
        AlgoConfig::select(r, self.ppo.as_ref(), self.dqn.as_ref(), self.bc.as_ref())
    }
}

fn is_auto(mode: &common::tls::TlsMode) -> bool {
    *mode == common::tls::TlsMode::Auto
}
