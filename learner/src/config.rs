//! Training configuration: TOML files under `configs/`, validated on load. Unknown keys are
//! rejected and every error names the key and the value.

use std::path::Path;

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    pub env: String,
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

/// A whole training config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub run: RunSection,
    pub collector: CollectorSection,
    pub policy: PolicySection,
    pub ppo: PpoSection,
}

fn default_checkpoint_every() -> u64 {
    50
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

impl TrainConfig {
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
        let config: TrainConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
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

    /// Checks every range; errors name the key and the value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |key: &'static str, value: String, expected: &str| {
            Err(ConfigError::Invalid {
                path: origin.to_string(),
                key,
                value,
                expected: expected.to_string(),
            })
        };
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
        let p = &self.policy;
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
        let o = &self.ppo;
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
        let chunk = c.envs_per_actor * c.steps;
        if !o.frames_per_update.is_multiple_of(chunk) {
            return bad(
                "ppo.frames_per_update",
                o.frames_per_update.to_string(),
                &format!("a multiple of one chunk (collector.envs_per_actor x collector.steps = {chunk})"),
            );
        }
        if !(o.lr > 0.0 && o.lr.is_finite()) {
            return bad("ppo.lr", o.lr.to_string(), "a positive number");
        }
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
                "repeat_previous.toml"
            ]
        );
    }
}
