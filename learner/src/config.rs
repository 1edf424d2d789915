//! Training configuration: TOML files under `configs/`, validated on load. Unknown keys are
//! rejected and every error names the key and the value.

use std::path::Path;

use common::backend::TrainDevice;
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
    /// Actor processes; default: the machine's cores.
    #[serde(default)]
    pub actors: Option<u32>,
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
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectorSection {
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

/// Behaviour cloning: maximise the log-probability of the recorded actions over slices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BcSection {
    pub slice_len: usize,
    #[serde(default)]
    pub burn_in: usize,
    pub num_slices: usize,
    pub lr: f64,
    pub max_grad_norm: f32,
    #[serde(default)]
    pub initial_state: InitialState,
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

fn default_checkpoint_every() -> u64 {
    50
}
fn yes() -> bool {
    true
}
fn default_target_every() -> u64 {
    250
}
fn default_buffer() -> usize {
    100_000
}
fn default_eps_end() -> f32 {
    0.05
}
fn default_eval_every() -> u64 {
    500
}
fn default_eval_episodes() -> usize {
    16
}
fn default_mode() -> CollectorMode {
    CollectorMode::Async
}
fn default_lag() -> u64 {
    4
}
fn unit() -> f32 {
    1.0
}
fn default_slots() -> usize {
    2
}
fn one() -> usize {
    1
}
fn default_encoder() -> Vec<usize> {
    vec![64]
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
    #[error("config {path}: `{key}` = {value} is invalid: {expected}")]
    Invalid {
        path: String,
        key: &'static str,
        value: String,
        expected: String,
    },
}

/// A TOML config that checks itself after parsing.
trait Validated: Serialize + serde::de::DeserializeOwned {
    fn check(&self, origin: &str) -> Result<(), ConfigError>;
}

fn load_config<T: Validated>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_config(&text, &path.display().to_string())
}

fn parse_config<T: Validated>(text: &str, origin: &str) -> Result<T, ConfigError> {
    let config: T = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: origin.to_string(),
        message: e.to_string().trim().replace('\n', " "),
    })?;
    config.check(origin)?;
    Ok(config)
}

/// The error-building closure of a validation: `bad(key, value, expected)`.
fn invalid(origin: &str) -> impl Fn(&'static str, String, &str) -> Result<(), ConfigError> + '_ {
    move |key, value, expected| {
        Err(ConfigError::Invalid {
            path: origin.to_string(),
            key,
            value,
            expected: expected.to_string(),
        })
    }
}

impl Validated for TrainConfig {
    fn check(&self, origin: &str) -> Result<(), ConfigError> {
        self.validate(origin)
    }
}

impl Validated for ReplayConfig {
    fn check(&self, origin: &str) -> Result<(), ConfigError> {
        self.validate(origin)
    }
}

impl TrainConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_config(path)
    }

    /// Parses and validates TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        parse_config(text, origin)
    }

    /// The resolved config as TOML (written into the run directory).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config serialises")
    }

    /// Checks every range; errors name the key and the value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = invalid(origin);
        if !common::envs::ENV_IDS.contains(&self.run.env.as_str()) {
            return bad(
                "run.env",
                format!("{:?}", self.run.env),
                &format!("one of {:?}", common::envs::ENV_IDS),
            );
        }
        if self.run.frames == 0 {
            return bad("run.frames", "0".into(), "at least 1");
        }
        if let Some(a) = self.run.actors {
            if !(1..2048).contains(&a) {
                return bad("run.actors", a.to_string(), "in 1..2048");
            }
        }
        let c = &self.collector;
        if c.envs_per_actor == 0 {
            return bad("collector.envs_per_actor", "0".into(), "at least 1");
        }
        if c.steps == 0 {
            return bad("collector.steps", "0".into(), "at least 1");
        }
        if c.ring_slots < 2 {
            return bad(
                "collector.ring_slots",
                c.ring_slots.to_string(),
                "at least 2",
            );
        }
        validate_device("run.device", self.run.device, &self.policy, &bad)?;
        validate_policy(&self.policy, &bad)?;
        match self.run.algo {
            Algo::Ppo => {
                let Some(o) = &self.ppo else {
                    return bad("ppo", "missing".into(), "a [ppo] section (run.algo = \"ppo\")");
                };
                validate_ppo(o, Some(c.envs_per_actor * c.steps), &bad)?;
            }
            Algo::Dqn => {
                let Some(d) = &self.dqn else {
                    return bad("dqn", "missing".into(), "a [dqn] section (run.algo = \"dqn\")");
                };
                validate_dqn(d, &bad)?;
            }
            Algo::Bc => {
                return bad(
                    "run.algo",
                    "\"bc\"".into(),
                    "\"ppo\" or \"dqn\" (behaviour cloning trains from a dataset: recur-learner replay)",
                )
            }
        }
        Ok(())
    }
}

type Bad<'a> = dyn Fn(&'static str, String, &str) -> Result<(), ConfigError> + 'a;

/// The device must be built in (`--features cuda` for CUDA), and `fused` has no CUDA kernel yet.
fn validate_device(
    key: &'static str,
    device: TrainDevice,
    p: &PolicySection,
    bad: &Bad,
) -> Result<(), ConfigError> {
    let value = format!("\"{device}\"");
    if device.check_built().is_err() {
        return bad(
            key,
            value,
            "\"cpu\": this binary was built without `--features cuda` (rebuild with \
             `cargo build --release --features cuda` to train on a GPU)",
        );
    }
    if device.is_cuda() && p.backend == RecurrentBackend::Fused {
        return bad(
            "policy.backend",
            "\"fused\"".into(),
            &format!(
                "\"scan\", \"pad\" or \"auto\" with {key} = {value}: the fused recurrent kernels \
                 run on the CPU only (no CUDA kernel yet; \"auto\" picks \"scan\" on CUDA)"
            ),
        );
    }
    Ok(())
}

fn validate_policy(p: &PolicySection, bad: &Bad) -> Result<(), ConfigError> {
    if p.hidden_size == 0 {
        return bad("policy.hidden_size", "0".into(), "at least 1");
    }
    if p.num_layers == 0 {
        return bad("policy.num_layers", "0".into(), "at least 1");
    }
    if p.encoder.contains(&0) {
        return bad(
            "policy.encoder",
            format!("{:?}", p.encoder),
            "widths of at least 1",
        );
    }
    Ok(())
}

/// `chunk`: frames of one chunk, when updates are paced by received chunks.
fn validate_ppo(o: &PpoSection, chunk: Option<usize>, bad: &Bad) -> Result<(), ConfigError> {
    for (key, v) in [
        ("ppo.frames_per_update", o.frames_per_update),
        ("ppo.epochs", o.epochs),
        ("ppo.slice_len", o.slice_len),
        ("ppo.num_slices", o.num_slices),
    ] {
        if v == 0 {
            return bad(key, "0".into(), "at least 1");
        }
    }
    if let Some(chunk) = chunk.filter(|&c| !o.frames_per_update.is_multiple_of(c)) {
        return bad(
            "ppo.frames_per_update",
            o.frames_per_update.to_string(),
            &format!(
                "a multiple of one chunk (collector.envs_per_actor x collector.steps = {chunk})"
            ),
        );
    }
    validate_rate("ppo.lr", o.lr, bad)?;
    for (key, v) in [("ppo.gamma", o.gamma), ("ppo.gae_lambda", o.gae_lambda)] {
        if !(0.0..=1.0).contains(&v) {
            return bad(key, v.to_string(), "in [0, 1]");
        }
    }
    for (key, v) in [
        ("ppo.clip_eps", o.clip_eps),
        ("ppo.max_grad_norm", o.max_grad_norm),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return bad(key, v.to_string(), "a positive number");
        }
    }
    for (key, v) in [
        ("ppo.value_coef", o.value_coef),
        ("ppo.entropy_coef", o.entropy_coef),
    ] {
        if !(v >= 0.0 && v.is_finite()) {
            return bad(key, v.to_string(), "a number >= 0");
        }
    }
    Ok(())
}

fn validate_rate(key: &'static str, lr: f64, bad: &Bad) -> Result<(), ConfigError> {
    if !(lr > 0.0 && lr.is_finite()) {
        return bad(key, lr.to_string(), "a positive number");
    }
    Ok(())
}

/// `keys`: the section's `slice_len`, `burn_in` and `num_slices` keys.
fn validate_slices(
    keys: [&'static str; 3],
    slice_len: usize,
    burn_in: usize,
    num_slices: usize,
    bad: &Bad,
) -> Result<(), ConfigError> {
    let [slice_key, burn_key, slices_key] = keys;
    if slice_len == 0 {
        return bad(slice_key, "0".into(), "at least 1");
    }
    if num_slices == 0 {
        return bad(slices_key, "0".into(), "at least 1");
    }
    if burn_in >= slice_len {
        return bad(
            burn_key,
            burn_in.to_string(),
            &format!("less than slice_len = {slice_len} (steps left to learn on)"),
        );
    }
    Ok(())
}

fn validate_dqn(d: &DqnSection, bad: &Bad) -> Result<(), ConfigError> {
    validate_slices(
        ["dqn.slice_len", "dqn.burn_in", "dqn.num_slices"],
        d.slice_len,
        d.burn_in,
        d.num_slices,
        bad,
    )?;
    validate_rate("dqn.lr", d.lr, bad)?;
    if !(0.0..=1.0).contains(&d.gamma) {
        return bad("dqn.gamma", d.gamma.to_string(), "in [0, 1]");
    }
    if d.n_step == 0 {
        return bad("dqn.n_step", "0".into(), "at least 1");
    }
    if let Some(tau) = d.tau {
        if !(tau > 0.0 && tau <= 1.0) {
            return bad("dqn.tau", tau.to_string(), "in (0, 1]");
        }
    } else if d.target_update_every == 0 {
        return bad(
            "dqn.target_update_every",
            "0".into(),
            "at least 1 (or set dqn.tau for Polyak updates)",
        );
    }
    if d.buffer_size == 0 {
        return bad("dqn.buffer_size", "0".into(), "at least 1");
    }
    if d.updates_per_chunk == 0 {
        return bad("dqn.updates_per_chunk", "0".into(), "at least 1");
    }
    if !(d.max_grad_norm > 0.0 && d.max_grad_norm.is_finite()) {
        return bad(
            "dqn.max_grad_norm",
            d.max_grad_norm.to_string(),
            "a positive number",
        );
    }
    if !(d.cql_alpha >= 0.0 && d.cql_alpha.is_finite()) {
        return bad("dqn.cql_alpha", d.cql_alpha.to_string(), "a number >= 0");
    }
    if !(d.huber_delta >= 0.0 && d.huber_delta.is_finite()) {
        return bad(
            "dqn.huber_delta",
            d.huber_delta.to_string(),
            "a number >= 0",
        );
    }
    for (key, v) in [
        ("dqn.epsilon_start", d.epsilon_start),
        ("dqn.epsilon_end", d.epsilon_end),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return bad(key, v.to_string(), "a probability in [0, 1]");
        }
    }
    Ok(())
}

fn validate_bc(b: &BcSection, bad: &Bad) -> Result<(), ConfigError> {
    validate_slices(
        ["bc.slice_len", "bc.burn_in", "bc.num_slices"],
        b.slice_len,
        b.burn_in,
        b.num_slices,
        bad,
    )?;
    validate_rate("bc.lr", b.lr, bad)?;
    if !(b.max_grad_norm > 0.0 && b.max_grad_norm.is_finite()) {
        return bad(
            "bc.max_grad_norm",
            b.max_grad_norm.to_string(),
            "a positive number",
        );
    }
    Ok(())
}

impl ReplayConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_config(path)
    }

    /// Parses and validates TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        parse_config(text, origin)
    }

    /// The resolved config as TOML (written into the run directory).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config serialises")
    }

    /// Checks the replay section, the policy and the section of `replay.algo`.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = invalid(origin);
        let r = &self.replay;
        if r.updates == 0 {
            return bad("replay.updates", "0".into(), "at least 1");
        }
        if r.eval_episodes == 0 {
            return bad("replay.eval_episodes", "0".into(), "at least 1");
        }
        validate_device("replay.device", r.device, &self.policy, &bad)?;
        validate_policy(&self.policy, &bad)?;
        match r.algo {
            Algo::Dqn => match &self.dqn {
                Some(d) => validate_dqn(d, &bad),
                None => bad(
                    "dqn",
                    "missing".into(),
                    "a [dqn] section (replay.algo = \"dqn\")",
                ),
            },
            Algo::Bc => match &self.bc {
                Some(b) => validate_bc(b, &bad),
                None => bad(
                    "bc",
                    "missing".into(),
                    "a [bc] section (replay.algo = \"bc\")",
                ),
            },
            Algo::Ppo => match &self.ppo {
                Some(o) => validate_ppo(o, None, &bad),
                None => bad(
                    "ppo",
                    "missing".into(),
                    "a [ppo] section (replay.algo = \"ppo\")",
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = TrainConfig::parse(
            &GOOD.replace("epochs = 4", "epochs = 4\nepoch = 3"),
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("x.toml") && err.contains("unknown field `epoch`"),
            "{err}"
        );
        let err = TrainConfig::parse(&GOOD.replace("gamma = 0.99", "gamma = 1.5"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`ppo.gamma` = 1.5"), "{err}");
        let err = TrainConfig::parse(
            &GOOD.replace("frames_per_update = 1024", "frames_per_update = 1000"),
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`ppo.frames_per_update` = 1000") && err.contains("= 256"),
            "{err}"
        );
        let err = TrainConfig::parse(&GOOD.replace("MaskedCartPole-v1", "Masked"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`run.env` = \"Masked\""), "{err}");
        let err = TrainConfig::parse(&GOOD.replace("cell = \"lstm\"", "cell = \"rnn\""), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("rnn") && err.contains("cell"), "{err}");
        let err = TrainConfig::parse(&GOOD.replace("[ppo]", "[ppo]\nmode = \"sync\""), "x.toml")
            .unwrap_err()
            .to_string();
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
        ReplayConfig::parse(&toml, "b.toml")
            .unwrap_err()
            .to_string()
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
            let err = TrainConfig::parse(&with_device(bad), "x.toml")
                .unwrap_err()
                .to_string();
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
            let err = TrainConfig::parse(&with_device(device), "x.toml")
                .unwrap_err()
                .to_string();
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
    /// starts), `auto` stays `auto` (it resolves to `scan` there) and `fused` is refused.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_loads_with_the_feature_but_not_with_fused() {
        let c = TrainConfig::parse(&with_device("cuda:1"), "x.toml").unwrap();
        assert_eq!(c.run.device, TrainDevice::Cuda(1));
        assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
        let fused = with_device("cuda")
            .replace("hidden_size = 64", "hidden_size = 64\nbackend = \"fused\"");
        let err = TrainConfig::parse(&fused, "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`policy.backend` = \"fused\"")
                && err.contains("run.device = \"cuda:0\"")
                && err.contains("\"scan\""),
            "{err}"
        );
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
                "pendulum.toml",
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
        let err = TrainConfig::parse(&dqn.replace("burn_in = 0 ", "burn_in = 16 "), "d.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`dqn.burn_in` = 16") && err.contains("slice_len = 16"),
            "{err}"
        );
        let err = TrainConfig::parse(&dqn.replace("n_step = 1", "n_step = 0"), "d.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`dqn.n_step` = 0"), "{err}");
        let err = TrainConfig::parse(&dqn.replace("algo = \"dqn\"", "algo = \"bc\""), "d.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`run.algo` = \"bc\"") && err.contains("replay"),
            "{err}"
        );
        let no_dqn = &dqn[..dqn.find("[dqn]").unwrap()];
        let err = TrainConfig::parse(no_dqn, "d.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`dqn` = missing"), "{err}");
        let bc = bc_toml();
        let err = ReplayConfig::parse(&bc.replace("updates = 5_000", "updates = 0"), "b.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`replay.updates` = 0"), "{err}");
        let err = ReplayConfig::parse(&bc.replace("algo = \"bc\"", "algo = \"dqn\""), "b.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`dqn` = missing"), "{err}");
    }
}
