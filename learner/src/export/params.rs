//! A policy's parameters under the names and in the layouts of the PyTorch module that
//! `scripts/recur_policy.py` builds (its `state_dict` keys), and the architecture that module
//! is built from (`policy.json`).

use common::backend::{to_vec, Cpu};
use common::policy::{ActionSpec, CriticCore, Policy, OBS_NORM_ROWS};
use recur_rnn::RecurrentCore;
use serde::Serialize;

/// What `policy.json` says `policy.json` is, and the version of its layout.
pub const FORMAT: &str = "recur-policy";
pub const FORMAT_VERSION: u32 = 1;
/// The normalizer's `eps`: `(obs - mean) / sqrt(var + eps)` (as `Policy::normalize`).
pub const OBS_NORM_EPS: f32 = 1e-8;

/// One tensor: its name (a `state_dict` key), PyTorch shape and row-major `f32` values.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

impl Named {
    fn new(name: impl Into<String>, shape: Vec<usize>, values: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Named {
            name: name.into(),
            shape,
            values,
        }
    }
}

/// Every tensor of `policy`'s `state_dict` in `recur_policy.py`, in module order:
///
/// - `obs_norm.mean`, `obs_norm.var`, `obs_norm.clip` `[obs_dim]`, `obs_norm.count` `[1]`
/// - `encoder.{i}.weight` `[out, in]`, `encoder.{i}.bias` `[out]` (`nn.Linear`)
/// - `core.weight_ih_l{k}` ... (`nn.LSTM` / `nn.GRU` names; minGRU `core.weight_z_l{k}` ...)
/// - `critic_core.*` (a separate critic core only)
/// - `policy_head.weight` `[K, H]`, `policy_head.bias`, `value_head.weight` `[1, H]`,
///   `value_head.bias`
pub fn named_tensors(policy: &Policy<Cpu>) -> Vec<Named> {
    let d = policy.config().obs_dim;
    let norm = to_vec(policy.obs_norm.val());
    debug_assert_eq!(norm.len(), OBS_NORM_ROWS * d);
    let mut out = vec![
        Named::new("obs_norm.mean", vec![d], norm[..d].to_vec()),
        Named::new("obs_norm.var", vec![d], norm[d..2 * d].to_vec()),
        Named::new("obs_norm.count", vec![1], vec![norm[2 * d]]),
        Named::new("obs_norm.clip", vec![d], norm[3 * d..4 * d].to_vec()),
    ];
    for (i, layer) in policy.encoder.iter().enumerate() {
        out.extend(linear(&format!("encoder.{i}"), layer));
    }
    out.extend(core("core", &policy.core));
    if let Some(critic) = &policy.critic_core {
        out.extend(core("critic_core", critic));
    }
    out.extend(linear("policy_head", &policy.policy_head));
    out.extend(linear("value_head", &policy.value_head));
    out
}

/// An `nn.Linear`'s `weight` `[out, in]` (burn stores `[in, out]`) and `bias`.
fn linear(prefix: &str, layer: &burn::nn::Linear<Cpu>) -> Vec<Named> {
    let [inputs, outputs] = layer.weight.val().dims();
    let weight = to_vec(layer.weight.val().transpose());
    let weight = Named::new(format!("{prefix}.weight"), vec![outputs, inputs], weight);
    let bias = (layer.bias.as_ref())
        .map(|b| Named::new(format!("{prefix}.bias"), vec![outputs], to_vec(b.val())));
    std::iter::once(weight).chain(bias).collect()
}

/// A recurrent core's parameters by their PyTorch names, under `prefix`.
fn core(prefix: &str, core: &RecurrentCore<Cpu>) -> Vec<Named> {
    core.named_parameters()
        .into_iter()
        .map(|(name, data)| {
            let shape = data.shape.to_vec();
            let values = data.to_vec::<f32>().expect("recurrent parameters are f32");
            Named::new(format!("{prefix}.{name}"), shape, values)
        })
        .collect()
}

/// `policy.json`: what `recur_policy.py` builds its module from.
#[derive(Clone, Debug, Serialize)]
pub struct PolicySpec {
    pub format: &'static str,
    pub format_version: u32,
    /// The recur that exported it.
    pub recur_version: &'static str,
    pub source: Source,
    pub obs_dim: usize,
    pub obs_norm: ObsNormSpec,
    pub encoder: EncoderSpec,
    pub core: CoreSpec,
    /// `"shared"` (the value head reads the actor core) or `"separate"` (a core of its own,
    /// `critic_core.*`, whose state follows the actor core's layers).
    pub critic_core: CriticCore,
    /// Per-environment recurrent state: `rs_h` (and `rs_c` for an LSTM) `[S, H]`, `S` the
    /// state layers (`num_layers`, twice that with a separate critic core).
    pub state: Vec<StateSpec>,
    pub action: ActionSpec,
    pub distribution: DistributionSpec,
    /// The ONNX file: its opset and its inputs and outputs in order.
    pub onnx: OnnxSpec,
}

/// Where the exported policy came from.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    /// The checkpoint directory read.
    pub checkpoint: String,
    /// The algorithm that trained it (`ppo`, `dqn`, `bc`).
    pub algo: String,
    /// The weights' version (the learner's update count when they were published).
    pub weights_version: u64,
    /// `run.env` of the run's `config.toml`, when there is one.
    pub env: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ObsNormSpec {
    /// Whether the learner kept the statistics up to date (off: mean 0, variance 1, no clip).
    pub enabled: bool,
    pub eps: f32,
    /// `clamp((obs - mean) / sqrt(var + eps), -clip, clip)`; the statistics are tensors
    /// `obs_norm.*` of `policy.safetensors`.
    pub formula: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct EncoderSpec {
    /// Widths of the hidden layers (`encoder.{i}`); empty: no encoder.
    pub widths: Vec<usize>,
    /// The activation after each layer.
    pub activation: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct CoreSpec {
    /// `lstm`, `gru` or `mingru`.
    pub cell: &'static str,
    pub input_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub bias: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct StateSpec {
    pub name: &'static str,
    /// Per environment: `[S, H]`.
    pub shape: [usize; 2],
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DistributionSpec {
    /// Logits `[n]`; greedy: argmax (the first of equal maxima).
    Categorical,
    /// One categorical per component, logits concatenated (`nvec`); greedy: argmax of each.
    MultiCategorical,
    /// `u ~ N(mean, exp(log_std))`, `log_std` clamped to `[log_std_min, log_std_max]`,
    /// action `low + (tanh(u) + 1) / 2 * (high - low)`; greedy: `u = mean`.
    TanhNormal { log_std_min: f32, log_std_max: f32 },
}

#[derive(Clone, Debug, Serialize)]
pub struct OnnxSpec {
    pub file: &'static str,
    pub opset: i64,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// The architecture of `policy` as `policy.json` states it.
pub fn core_spec(policy: &Policy<Cpu>) -> CoreSpec {
    let core = &policy.core;
    CoreSpec {
        cell: core.cell().name(),
        input_size: core.input_size(),
        hidden_size: core.hidden_size(),
        num_layers: core.num_layers(),
        bias: core.layers.first().is_some_and(|l| l.bias_ih.is_some()),
    }
}

/// The state entries of `policy` (`rs_h`, and `rs_c` for an LSTM).
pub fn state_spec(policy: &Policy<Cpu>) -> Vec<StateSpec> {
    policy
        .primer()
        .entries
        .iter()
        .map(|e| StateSpec {
            name: e.key,
            shape: e.shape,
        })
        .collect()
}

/// The action distribution of `action`.
pub fn distribution_spec(action: &ActionSpec) -> DistributionSpec {
    use common::policy::dist::{LOG_STD_MAX, LOG_STD_MIN};
    match action {
        ActionSpec::Discrete { .. } => DistributionSpec::Categorical,
        ActionSpec::MultiDiscrete { .. } => DistributionSpec::MultiCategorical,
        ActionSpec::Continuous { .. } => DistributionSpec::TanhNormal {
            log_std_min: LOG_STD_MIN,
            log_std_max: LOG_STD_MAX,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::backend::cpu_device;
    use common::policy::PolicyConfig;
    use recur_rnn::CellKind;

    /// The names are the PyTorch module's, the shapes PyTorch's layouts, and the values the
    /// policy's (a linear layer transposed).
    #[test]
    fn tensors_carry_pytorch_names_and_layouts() {
        let config = PolicyConfig::new(3, ActionSpec::Discrete { n: 2 })
            .with_hidden_size(8)
            .with_num_layers(2)
            .with_encoder(vec![5])
            .with_cell(CellKind::Gru)
            .with_critic_core(CriticCore::Separate);
        let policy = config.init_seeded::<Cpu>(1, &cpu_device()).unwrap();
        let named = named_tensors(&policy);
        let shapes: Vec<(&str, Vec<usize>)> = named
            .iter()
            .map(|n| (n.name.as_str(), n.shape.clone()))
            .collect();
        let want: Vec<(&str, Vec<usize>)> = vec![
            ("obs_norm.mean", vec![3]),
            ("obs_norm.var", vec![3]),
            ("obs_norm.count", vec![1]),
            ("obs_norm.clip", vec![3]),
            ("encoder.0.weight", vec![5, 3]),
            ("encoder.0.bias", vec![5]),
            ("core.weight_ih_l0", vec![24, 5]),
            ("core.weight_hh_l0", vec![24, 8]),
            ("core.bias_ih_l0", vec![24]),
            ("core.bias_hh_l0", vec![24]),
            ("core.weight_ih_l1", vec![24, 8]),
            ("core.weight_hh_l1", vec![24, 8]),
            ("core.bias_ih_l1", vec![24]),
            ("core.bias_hh_l1", vec![24]),
            ("critic_core.weight_ih_l0", vec![24, 5]),
            ("critic_core.weight_hh_l0", vec![24, 8]),
            ("critic_core.bias_ih_l0", vec![24]),
            ("critic_core.bias_hh_l0", vec![24]),
            ("critic_core.weight_ih_l1", vec![24, 8]),
            ("critic_core.weight_hh_l1", vec![24, 8]),
            ("critic_core.bias_ih_l1", vec![24]),
            ("critic_core.bias_hh_l1", vec![24]),
            ("policy_head.weight", vec![2, 8]),
            ("policy_head.bias", vec![2]),
            ("value_head.weight", vec![1, 8]),
            ("value_head.bias", vec![1]),
        ];
        assert_eq!(shapes, want);
        // encoder.0.weight[o][i] is burn's weight[i][o].
        let burn_w = to_vec(policy.encoder[0].weight.val());
        let torch_w = &named[4].values;
        for o in 0..5 {
            for i in 0..3 {
                assert_eq!(torch_w[o * 3 + i], burn_w[i * 5 + o]);
            }
        }
        // The identity normalizer: mean 0, variance 1, count 0, clip f32::MAX.
        assert_eq!(named[0].values, vec![0.0; 3]);
        assert_eq!(named[1].values, vec![1.0; 3]);
        assert_eq!(named[2].values, vec![0.0]);
        assert_eq!(named[3].values, vec![f32::MAX; 3]);
    }

    #[test]
    fn mingru_parameters_are_named_per_gate() {
        let config = PolicyConfig::new(2, ActionSpec::Discrete { n: 3 })
            .with_hidden_size(4)
            .with_cell(CellKind::MinGru);
        let policy = config.init_seeded::<Cpu>(2, &cpu_device()).unwrap();
        let names: Vec<String> = named_tensors(&policy)
            .into_iter()
            .map(|n| n.name)
            .filter(|n| n.starts_with("core."))
            .collect();
        assert_eq!(
            names,
            [
                "core.weight_z_l0",
                "core.weight_h_l0",
                "core.bias_z_l0",
                "core.bias_h_l0"
            ]
        );
    }
}
