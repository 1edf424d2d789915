//! What the learner decides for its actors: [`ActorArgs`], one value that travels whole.
//!
//! The learner builds one `ActorArgs` per run, with the policy config it fitted to the
//! environment's spaces (its `[policy]` section) whole. Its own actors get it on their command
//! line as JSON (`recur-actor --connect SOCKET --actor-args '<json>'`, written by the
//! supervisor), remote actors in [`LearnerMsg::Welcome`](crate::remote::LearnerMsg::Welcome)
//! (bincode). A human's `recur-actor --env ... --hidden ...` flags are parsed into the same
//! value, so an actor process has one path from `ActorArgs` to a running actor.
//!
//! ```
//! use common::actor_args::ActorArgs;
//! use common::policy::policy_config_for;
//!
//! let policy = policy_config_for("CartPole-v1").unwrap().with_hidden_size(32);
//! let args = ActorArgs { env: "CartPole-v1".into(), envs: 8, policy, ..ActorArgs::default() };
//! let json = args.to_json();
//! assert_eq!(ActorArgs::from_json(&json).unwrap(), args);
//! // Every field is required, and none other is accepted.
//! assert!(ActorArgs::from_json(r#"{"env": "CartPole-v1"}"#).is_err());
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::policy::{policy_config_for, ActionSpec, CriticCore, PolicyConfig};
use crate::rollout::{EpsilonSchedule, Exploration};
use recur_rnn::{CellKind, RecurrentBackend};

/// Everything an actor runs with that its learner decides: the environment (and the gymnasium
/// bridge's imports and kwargs), the vector size, the chunk length, the policy (fitted to the
/// environment), the seed and the exploration. The actor's identity (`--actor-id`,
/// `--incarnation`) is not part of it: it differs per actor.
///
/// The defaults are `recur-actor`'s flag defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorArgs {
    /// Environment id: a registered one or `gymnasium:<id>`.
    pub env: String,
    /// Python modules imported before `gymnasium.make` (gymnasium ids).
    pub env_imports: Vec<String>,
    /// Keyword arguments of `gymnasium.make` (gymnasium ids). A JSON object in JSON; JSON
    /// text in bincode (which cannot carry a self-describing value).
    #[serde(with = "json_object")]
    pub env_kwargs: Option<Map<String, Value>>,
    /// The keys of a gymnasium `Dict` observation to keep (`None`: all of them).
    pub env_keys: Option<Vec<String>>,
    /// Environments stepped together (`E`).
    pub envs: usize,
    /// Steps per chunk (`T`).
    pub steps: usize,
    /// The policy the actors run, whole: the observation and action sizes it was fitted to,
    /// the encoder MLP widths, recurrent cell, hidden size and stacked layers, whether the
    /// value head reads the actor's recurrent core or has its own, and the learner's settings
    /// (backend, observation normalization). A learner's is its `[policy]` section fitted to
    /// the spaces its actor binary describes; `recur-actor`'s flags give theirs on the default
    /// environment's spaces. An actor runs it on the spaces of the environment it builds
    /// ([`PolicyConfig::fitted_to`]): the same ones, or the learner refuses it at registration
    /// naming both.
    #[serde(with = "PolicyConfigDef")]
    pub policy: PolicyConfig,
    /// Seeds the environments, the sampling and the initial weights (each actor and
    /// incarnation derives its own from it).
    pub seed: u64,
    /// How actions are chosen (`sample` or `greedy`) and the epsilon schedule.
    #[serde(with = "ExplorationDef")]
    pub exploration: Exploration,
}

impl Default for ActorArgs {
    fn default() -> Self {
        ActorArgs {
            env: "MaskedCartPole-v1".into(),
            env_imports: Vec::new(),
            env_kwargs: None,
            env_keys: None,
            envs: 64,
            steps: 32,
            policy: policy_config_for("MaskedCartPole-v1").expect("a built-in environment"),
            seed: 0,
            exploration: Exploration::default(),
        }
    }
}

/// Actor arguments that do not parse or do not make sense.
#[derive(Debug, thiserror::Error)]
pub enum ActorArgsError {
    #[error("actor arguments are not the JSON of ActorArgs: {0}")]
    Json(#[from] serde_json::Error),
    #[error("actor argument {field} = {value}: expected {expected}")]
    Invalid {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl ActorArgs {
    /// One line of JSON (what `recur-actor --actor-args` reads).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("actor arguments serialize to JSON")
    }

    /// Parses and [validates](Self::validate) the JSON of [`to_json`](Self::to_json).
    pub fn from_json(text: &str) -> Result<Self, ActorArgsError> {
        let args: ActorArgs = serde_json::from_str(text)?;
        args.validate()?;
        Ok(args)
    }

    /// Checks the sizes (at least 1; an empty encoder is allowed, a width of 0 is not; the
    /// policy's hidden size and layers are named as `recur-actor`'s flags name them, `hidden`
    /// and `layers`), the environment id (not empty) and the epsilon schedule (probabilities in
    /// `[0, 1]`).
    pub fn validate(&self) -> Result<(), ActorArgsError> {
        let invalid = |field, value: String, expected| {
            Err(ActorArgsError::Invalid {
                field,
                value,
                expected,
            })
        };
        if self.env.trim().is_empty() {
            return invalid("env", format!("{:?}", self.env), "an environment id");
        }
        for (field, value) in [
            ("envs", self.envs),
            ("steps", self.steps),
            ("hidden", self.policy.hidden_size),
            ("layers", self.policy.num_layers),
        ] {
            if value == 0 {
                return invalid(field, value.to_string(), "at least 1");
            }
        }
        if self.policy.encoder.contains(&0) {
            return invalid(
                "encoder",
                format!("{:?}", self.policy.encoder),
                "widths of at least 1",
            );
        }
        let eps = self.exploration.schedule();
        for (field, p) in [("epsilon start", eps.start), ("epsilon end", eps.end)] {
            if !(0.0..=1.0).contains(&p) {
                return invalid(field, p.to_string(), "a probability in [0, 1]");
            }
        }
        Ok(())
    }
}

/// serde's description of [`PolicyConfig`] (burn's `Config` derive accepts unknown fields):
/// every field required (but those added since checkpoints were first written, which older
/// manifests lack), none other accepted.
#[derive(Serialize, Deserialize)]
#[serde(remote = "PolicyConfig", deny_unknown_fields)]
pub(crate) struct PolicyConfigDef {
    obs_dim: usize,
    action: ActionSpec,
    images: Vec<crate::envs::ImagePart>,
    encoder: Vec<usize>,
    // Absent from checkpoints written before images reached the policy: none.
    #[serde(with = "cnn_text", default)]
    cnn: Option<recur_rnn::encoder::EncoderConfig>,
    cell: CellKind,
    hidden_size: usize,
    num_layers: usize,
    backend: RecurrentBackend,
    obs_norm: bool,
    obs_clip: f32,
    critic_core: CriticCore,
    // Absent from checkpoints written before `policy.memory` existed: a policy with memory.
    #[serde(default = "with_memory")]
    memory: bool,
    // Absent from checkpoints written before `policy.forget_bias` existed: 0 (it only shapes
    // the initial weights, which a checkpoint already holds).
    #[serde(default)]
    forget_bias: f32,
}

fn with_memory() -> bool {
    true
}

/// A [`PolicyConfig`] from JSON as [`PolicyConfigDef`] reads it: the fields added since
/// checkpoints were first written may be absent (a checkpoint's `policy.json`).
pub(crate) fn policy_from_json(bytes: &[u8]) -> serde_json::Result<PolicyConfig> {
    #[derive(Deserialize)]
    struct Read(#[serde(with = "PolicyConfigDef")] PolicyConfig);
    serde_json::from_slice::<Read>(bytes).map(|r| r.0)
}

/// serde's description of [`EpsilonSchedule`] (defined in `rollout`, which has no serde).
#[derive(Serialize, Deserialize)]
#[serde(remote = "EpsilonSchedule", deny_unknown_fields)]
struct EpsilonScheduleDef {
    start: f32,
    end: f32,
    decay_versions: u64,
}

/// serde's description of [`Exploration`]: `{"sample": {schedule}}` or `{"greedy": ...}`.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Exploration", rename_all = "lowercase")]
enum ExplorationDef {
    Sample(#[serde(with = "EpsilonScheduleDef")] EpsilonSchedule),
    Greedy(#[serde(with = "EpsilonScheduleDef")] EpsilonSchedule),
}

/// The policy's conv encoder: itself in human-readable formats (JSON), its JSON text in binary
/// ones (its layers are an internally tagged enum, which bincode cannot deserialize).
mod cnn_text {
    use recur_rnn::encoder::EncoderConfig;
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<EncoderConfig>, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            v.serialize(s)
        } else {
            v.as_ref()
                .map(|c| serde_json::to_string(c).expect("an encoder config serializes"))
                .serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EncoderConfig>, D::Error> {
        if d.is_human_readable() {
            Option::<EncoderConfig>::deserialize(d)
        } else {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    serde_json::from_str(&text).map_err(|e| {
                        D::Error::custom(format!("policy.cnn {text:?}: not an encoder config: {e}"))
                    })
                })
                .transpose()
        }
    }
}

/// An optional JSON object: itself in human-readable formats (JSON), its JSON text in binary
/// ones (bincode cannot deserialize a self-describing value).
mod json_object {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::{Map, Value};

    pub fn serialize<S: Serializer>(
        v: &Option<Map<String, Value>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            v.serialize(s)
        } else {
            v.as_ref()
                .map(|m| serde_json::to_string(m).expect("a JSON map serializes"))
                .serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Map<String, Value>>, D::Error> {
        if d.is_human_readable() {
            Option::<Map<String, Value>>::deserialize(d)
        } else {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    serde_json::from_str(&text).map_err(|e| {
                        D::Error::custom(format!("env_kwargs {text:?}: not a JSON object: {e}"))
                    })
                })
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_field_set() -> ActorArgs {
        let mut kwargs = Map::new();
        kwargs.insert("length".into(), Value::from(7));
        kwargs.insert("nested".into(), serde_json::json!({"a": [1.5, null, "x"]}));
        ActorArgs {
            env: "gymnasium:RecurTest/Faulty-v0".into(),
            env_imports: vec!["popgym".into(), "recur_test_envs".into()],
            env_kwargs: Some(kwargs),
            env_keys: Some(vec!["direction".into(), "image".into()]),
            envs: 3,
            steps: 17,
            policy: PolicyConfig {
                obs_dim: 5,
                action: ActionSpec::Continuous {
                    low: vec![-2.0, 0.1],
                    high: vec![2.0, 0.7],
                },
                images: vec![crate::envs::ImagePart {
                    key: "image".into(),
                    shape: [7, 5, 3],
                }],
                encoder: vec![],
                cnn: Some(recur_rnn::encoder::EncoderConfig::minigrid()),
                cell: CellKind::MinGru,
                hidden_size: 12,
                num_layers: 2,
                backend: RecurrentBackend::Scan,
                obs_norm: true,
                obs_clip: 5.5,
                critic_core: CriticCore::Separate,
                memory: false,
                forget_bias: 1.5,
            },
            seed: u64::MAX - 5,
            exploration: Exploration::Greedy(EpsilonSchedule {
                start: 1.0,
                end: 0.05,
                decay_versions: 200,
            }),
        }
    }

    #[test]
    fn json_and_bincode_round_trip_every_field() {
        let multi_discrete = ActorArgs {
            policy: PolicyConfig::new(3, ActionSpec::MultiDiscrete { nvec: vec![4, 2] }),
            ..every_field_set()
        };
        for args in [ActorArgs::default(), every_field_set(), multi_discrete] {
            let json = args.to_json();
            assert_eq!(ActorArgs::from_json(&json).unwrap(), args, "{json}");
            let bytes = bincode::serde::encode_to_vec(&args, bincode::config::standard()).unwrap();
            let (back, used): (ActorArgs, usize) =
                bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
            assert_eq!((back, used), (args, bytes.len()));
        }
        // The JSON reads as a person would write it.
        let json: Value = serde_json::from_str(&every_field_set().to_json()).unwrap();
        assert_eq!(json["policy"]["cell"], "mingru");
        assert_eq!(json["policy"]["critic_core"], "separate");
        assert_eq!(json["policy"]["hidden_size"], 12);
        assert_eq!(json["env_kwargs"]["length"], 7);
        assert_eq!(json["exploration"]["greedy"]["decay_versions"], 200);
        // Written before the policy had `cnn`, `memory` and `forget_bias` (older
        // checkpoints' manifests): read as no cnn, with memory, no forget bias.
        let mut old: Value = serde_json::from_str(&ActorArgs::default().to_json()).unwrap();
        let policy = old["policy"].as_object_mut().unwrap();
        policy.remove("cnn");
        policy.remove("memory");
        policy.remove("forget_bias");
        let back = ActorArgs::from_json(&old.to_string()).unwrap();
        assert_eq!(back, ActorArgs::default());
        assert!(back.policy.memory && back.policy.cnn.is_none());
        // So is a checkpoint's policy.json.
        let policy = policy_from_json(old["policy"].to_string().as_bytes()).unwrap();
        assert_eq!(policy, ActorArgs::default().policy);
    }

    #[test]
    fn malformed_and_senseless_arguments_are_named() {
        let good: Value = serde_json::from_str(&ActorArgs::default().to_json()).unwrap();
        let with = |key: &str, value: Value| {
            let mut v = good.clone();
            v[key] = value;
            v.to_string()
        };
        let without = |key: &str| {
            let mut v = good.clone();
            v.as_object_mut().unwrap().remove(key);
            v.to_string()
        };
        let with_policy = |key: &str, value: Value| {
            let mut v = good.clone();
            v["policy"][key] = value;
            v.to_string()
        };
        let without_policy = |key: &str| {
            let mut v = good.clone();
            v["policy"].as_object_mut().unwrap().remove(key);
            v.to_string()
        };
        let cases = [
            ("{not json".to_string(), "key must be a string"),
            (without("steps"), "missing field `steps`"),
            (with("hiden", Value::from(3)), "unknown field `hiden`"),
            (with_policy("cell", "rnn".into()), "unknown variant `rnn`"),
            (without_policy("obs_dim"), "missing field `obs_dim`"),
            (
                with_policy("hiden_size", Value::from(3)),
                "unknown field `hiden_size`",
            ),
            (with("envs", Value::from(-1)), "invalid value: integer `-1`"),
            (
                with("env_kwargs", Value::from(3)),
                "invalid type: integer `3`",
            ),
            (
                with("envs", Value::from(0)),
                "actor argument envs = 0: expected at least 1",
            ),
            (with("env", "".into()), "actor argument env = \"\""),
            (
                with_policy("encoder", serde_json::json!([64, 0])),
                "actor argument encoder = [64, 0]",
            ),
            (
                with(
                    "exploration",
                    serde_json::json!({"sample": {"start": 0.5, "end": 1.5, "decay_versions": 9}}),
                ),
                "actor argument epsilon end = 1.5: expected a probability in [0, 1]",
            ),
        ];
        for (text, expected) in cases {
            let err = ActorArgs::from_json(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
