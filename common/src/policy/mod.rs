//! The policy network shared by actor and learner: observation encoder MLP -> LSTM or GRU core
//! -> policy head (categorical logits for a discrete action space, mean and log-std of a
//! tanh-squashed Gaussian for a box) and value head.
//!
//! The actor runs it in sequential mode ([`Policy::forward`] on `[E, obs_dim]`, one step of
//! `E` environments, inference backend); the learner in recurrent mode
//! ([`Policy::forward_batch`] on `[B, T, obs_dim]`, or [`Policy::forward`] on a flat packed
//! `[N]` axis) under [`set_recurrent_mode`](crate::recurrent::set_recurrent_mode).

pub mod dist;
pub mod inference;

use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::chunk::{ActionKind, Chunk, ChunkSchema};
use crate::envs::{EnvError, EnvSpec, Registry, Space};
use crate::recurrent::{
    set_recurrent_mode, CellKind, RecurrentBackend, RecurrentConfig, RecurrentCore, RecurrentError,
    RecurrentMode, RecurrentState,
};

/// The action space a policy acts in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionSpec {
    /// One of `n` actions; the head outputs `n` logits.
    Discrete { n: usize },
    /// A vector in the box `[low, high]`; the head outputs the mean and log-std of a Gaussian
    /// whose sample is squashed by `tanh` and scaled into the box.
    Continuous { low: Vec<f32>, high: Vec<f32> },
    /// One of `nvec[j]` choices per component `j`; the head outputs `nvec[j]` logits per
    /// component, concatenated (a factorized categorical: components are independent given
    /// the features, the log-probability is the sum of the components').
    MultiDiscrete { nvec: Vec<usize> },
}

impl ActionSpec {
    /// Outputs of the policy head: `n` logits, or `2 * dim` (mean, then log-std).
    pub fn head_size(&self) -> usize {
        match self {
            ActionSpec::Discrete { n } => *n,
            ActionSpec::Continuous { low, .. } => 2 * low.len(),
            ActionSpec::MultiDiscrete { nvec } => nvec.iter().sum(),
        }
    }

    /// Floats per action in a chunk: 1 (the index) or the box dimension.
    pub fn action_dim(&self) -> usize {
        match self {
            ActionSpec::Discrete { .. } => 1,
            ActionSpec::Continuous { low, .. } => low.len(),
            ActionSpec::MultiDiscrete { nvec } => nvec.len(),
        }
    }
}

/// The policy's action spec for an environment's action space.
pub fn action_spec(space: &Space) -> ActionSpec {
    match space {
        Space::Discrete { n } => ActionSpec::Discrete { n: *n },
        Space::Box { low, high } => ActionSpec::Continuous {
            low: low.clone(),
            high: high.clone(),
        },
        Space::MultiDiscrete { nvec } => ActionSpec::MultiDiscrete { nvec: nvec.clone() },
    }
}

/// A policy config fitted to environment `env` of the built-in registry (gymnasium ids
/// start a worker to read the spaces).
pub fn policy_config_for(env: &str) -> Result<PolicyConfig, EnvError> {
    Ok(policy_config_for_spec(&Registry::builtin().spec(env)?))
}

/// A policy config fitted to an environment's spaces.
pub fn policy_config_for_spec(spec: &EnvSpec) -> PolicyConfig {
    PolicyConfig::new(
        spec.observation_space.dim(),
        action_spec(&spec.action_space),
    )
}

/// The chunk layout of an actor running `policy` with `envs` environments and `steps` steps
/// per chunk (the learner derives the run's schema the same way).
pub fn chunk_schema(policy: &PolicyConfig, envs: usize, steps: usize) -> ChunkSchema {
    ChunkSchema {
        envs,
        steps,
        obs_dim: policy.obs_dim,
        action: match &policy.action {
            ActionSpec::Discrete { .. } => ActionKind::Discrete,
            ActionSpec::Continuous { low, .. } => ActionKind::Continuous { dim: low.len() },
            ActionSpec::MultiDiscrete { nvec } => ActionKind::MultiDiscrete { dim: nvec.len() },
        },
        cell: policy.cell,
        num_layers: policy.num_layers,
        hidden_size: policy.hidden_size,
    }
}

/// Configuration of a [`Policy`].
#[derive(Config, Debug, PartialEq)]
pub struct PolicyConfig {
    /// Observation features.
    pub obs_dim: usize,
    pub action: ActionSpec,
    /// Widths of the encoder MLP's hidden layers (tanh after each); empty = no encoder.
    #[config(default = "vec![64]")]
    pub encoder: Vec<usize>,
    #[config(default = "CellKind::Lstm")]
    pub cell: CellKind,
    /// Hidden size of the recurrent core.
    #[config(default = 64)]
    pub hidden_size: usize,
    #[config(default = 1)]
    pub num_layers: usize,
    /// Recurrent-mode backend of the core.
    #[config(default = "RecurrentBackend::Auto")]
    pub backend: RecurrentBackend,
}

/// Policy head outputs and the value for a batch, plus the recurrent state to carry on.
#[derive(Clone, Debug)]
pub struct PolicyOutput<B: Backend, const D: usize, const DS: usize> {
    /// Categorical logits `[.., n]`, or mean and log-std `[.., 2 * dim]`.
    pub head: Tensor<B, D>,
    /// State value `[.., 1]`.
    pub value: Tensor<B, D>,
    /// The recurrent core's output `[.., H]`.
    pub features: Tensor<B, D>,
    /// `("next", rs_h)` / `("next", rs_c)`.
    pub next: RecurrentState<B, DS>,
}

/// Encoder MLP -> recurrent core -> policy and value heads.
#[derive(Module, Debug)]
pub struct Policy<B: Backend> {
    pub encoder: Vec<Linear<B>>,
    pub core: RecurrentCore<B>,
    pub policy_head: Linear<B>,
    pub value_head: Linear<B>,
    #[module(skip)]
    config: PolicyConfig,
}

/// Forces burn's lazily initialised parameters to draw their values now.
struct Materialize;
impl<B: Backend> burn::module::ModuleMapper<B> for Materialize {}

/// Serialises seeded initialisation: burn draws initial weights from one process-wide RNG,
/// lazily, at a parameter's first use.
static SEEDED_INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl PolicyConfig {
    /// Builds the policy with weights that depend on `seed` alone: seeds burn's RNG and
    /// draws every parameter while holding a process-wide lock, so concurrent builders on
    /// other threads cannot interleave their draws.
    pub fn init_seeded<B: Backend>(
        &self,
        seed: u64,
        device: &B::Device,
    ) -> Result<Policy<B>, RecurrentError> {
        let _lock = SEEDED_INIT.lock().unwrap_or_else(|e| e.into_inner());
        B::seed(device, seed);
        Ok(self.init::<B>(device)?.map(&mut Materialize))
    }

    /// Builds the policy; errors name the key and the value.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<Policy<B>, RecurrentError> {
        if self.obs_dim == 0 {
            return Err(config_error("obs_dim", "0", "must be at least 1"));
        }
        if let Some(w) = self.encoder.iter().find(|&&w| w == 0) {
            return Err(config_error(
                "encoder",
                &format!("{:?}", self.encoder),
                &format!("every width must be at least 1, got {w}"),
            ));
        }
        match &self.action {
            ActionSpec::Discrete { n } if *n < 2 => {
                return Err(config_error(
                    "action.n",
                    &n.to_string(),
                    "a discrete action space needs at least 2 actions",
                ))
            }
            ActionSpec::MultiDiscrete { nvec } if nvec.is_empty() || nvec.contains(&0) => {
                return Err(config_error(
                    "action.nvec",
                    &format!("{nvec:?}"),
                    "at least one component, each with at least 1 choice",
                ))
            }
            ActionSpec::Continuous { low, high } => {
                if low.is_empty() || low.len() != high.len() {
                    return Err(config_error(
                        "action.low/high",
                        &format!("{low:?} / {high:?}"),
                        "non-empty and of equal length",
                    ));
                }
                if let Some(i) = (0..low.len())
                    .find(|&i| !(low[i].is_finite() && high[i].is_finite() && low[i] < high[i]))
                {
                    return Err(config_error(
                        "action.low/high",
                        &format!("[{i}]: {} / {}", low[i], high[i]),
                        "finite bounds with low < high",
                    ));
                }
            }
            _ => {}
        }
        let mut encoder = Vec::new();
        let mut width = self.obs_dim;
        for &w in &self.encoder {
            encoder.push(LinearConfig::new(width, w).init(device));
            width = w;
        }
        let core_config = RecurrentConfig::new(width, self.hidden_size)
            .with_num_layers(self.num_layers)
            .with_backend(self.backend);
        let core = RecurrentCore::new(&core_config, self.cell, device)?;
        // Small initial policy outputs: near-uniform actions at the start (as CleanRL's
        // 0.01-scaled policy head).
        let policy_head = LinearConfig::new(self.hidden_size, self.action.head_size())
            .with_initializer(Initializer::XavierUniform { gain: 0.01 })
            .init(device);
        let value_head = LinearConfig::new(self.hidden_size, 1)
            .with_initializer(Initializer::XavierUniform { gain: 1.0 })
            .init(device);
        Ok(Policy {
            encoder,
            core,
            policy_head,
            value_head,
            config: self.clone(),
        })
    }
}

fn config_error(key: &'static str, value: &str, expected: &str) -> RecurrentError {
    RecurrentError::Config {
        key,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

impl<B: Backend> Policy<B> {
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    pub fn action(&self) -> &ActionSpec {
        &self.config.action
    }

    fn encode<const D: usize>(&self, obs: Tensor<B, D>) -> Tensor<B, D> {
        self.encoder
            .iter()
            .fold(obs, |x, layer| layer.forward(x).tanh())
    }

    /// One call on `N` rows: `obs` `[N, obs_dim]`, `is_init` `[N]`, `state` `[N, L, H]`. In
    /// sequential mode `N` environments take one step (state zeroed at `is_init`); in recurrent
    /// mode the rows are one flat packed time axis (state replaced by the stored state at
    /// `is_init`).
    pub fn forward(
        &self,
        obs: Tensor<B, 2>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> Result<PolicyOutput<B, 2, 3>, RecurrentError> {
        check_obs(&obs.dims(), self.config.obs_dim)?;
        let out = self.core.forward(self.encode(obs), is_init, state)?;
        Ok(PolicyOutput {
            head: self.policy_head.forward(out.features.clone()),
            value: self.value_head.forward(out.features.clone()),
            features: out.features,
            next: out.next,
        })
    }

    /// One call on `[B, T]`: `obs` `[B, T, obs_dim]`, `is_init` `[B, T]`, stored `state`
    /// `[B, T, L, H]` (recurrent mode: sequences with resets at `is_init`).
    pub fn forward_batch(
        &self,
        obs: Tensor<B, 3>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> Result<PolicyOutput<B, 3, 4>, RecurrentError> {
        check_obs(&obs.dims(), self.config.obs_dim)?;
        let out = self.core.forward_batch(self.encode(obs), is_init, state)?;
        Ok(PolicyOutput {
            head: self.policy_head.forward(out.features.clone()),
            value: self.value_head.forward(out.features.clone()),
            features: out.features,
            next: out.next,
        })
    }
}

impl<B: Backend> Policy<B> {
    /// Recurrent mode over a whole chunk `[E, T]` of `schema`, each env row starting from
    /// its stored state (`rs_h`, `rs_c`) and resetting at `is_init`: what the learner's
    /// critic runs, and what reproduces the actor's step-by-step outputs.
    pub fn forward_chunk(
        &self,
        chunk: &Chunk,
        schema: &ChunkSchema,
    ) -> Result<PolicyOutput<B, 3, 4>, RecurrentError> {
        let (e, t, d) = (schema.envs, schema.steps, schema.obs_dim);
        let (l, h) = (schema.num_layers, schema.hidden_size);
        let device = self.policy_head.weight.val().device();
        let state = |v: &Vec<f32>| {
            Tensor::<B, 4>::from_data(TensorData::new(v.clone(), [e, t, l, h]), &device)
        };
        let is_init: Vec<bool> = chunk.is_init.iter().map(|&x| x == 1).collect();
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        self.forward_batch(
            Tensor::from_data(
                TensorData::new(chunk.observation.clone(), [e, t, d]),
                &device,
            ),
            Tensor::from_data(TensorData::new(is_init, [e, t]), &device),
            RecurrentState {
                rs_h: state(&chunk.rs_h),
                rs_c: chunk.rs_c.as_ref().map(state),
            },
        )
    }
}

fn check_obs(dims: &[usize], obs_dim: usize) -> Result<(), RecurrentError> {
    if dims.last() == Some(&obs_dim) {
        return Ok(());
    }
    Err(RecurrentError::Shape {
        field: "observation",
        got: dims.to_vec(),
        expected: format!("[.., {obs_dim}] (obs_dim = {obs_dim})"),
    })
}
