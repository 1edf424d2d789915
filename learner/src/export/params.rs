//! A policy's parameters under the names and in the layouts of the PyTorch module that
//! `scripts/recur_policy.py` builds (its `state_dict` keys), and the architecture that module
//! is built from (`policy.json`).

use common::backend::{to_vec, Cpu};
use common::policy::{ActionSpec, CriticCore, Policy, OBS_NORM_ROWS};
use recur_rnn::encoder::EncoderConfig;
use recur_rnn::RecurrentCore;
use serde::Serialize;

/// What `policy.json` says `policy.json` is, and the version of its layout.
pub const FORMAT: &str = "recur-policy";
pub const FORMAT_VERSION: u32 = 1;
/// The version of an export with images (`images` in `policy.json`, a `pixels` input): a
/// reader of version 1 cannot build it. Exports without images stay version 1, byte for byte
/// what they were before images existed.
pub const FORMAT_VERSION_IMAGES: u32 = 2;
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
///   (none when the observation has no values lane, `obs_dim` 0)
/// - `encoder.{i}.weight` `[out, in]`, `encoder.{i}.bias` `[out]` (`nn.Linear`)
/// - per image `k` of the pixels lane: `cnn.{k}.convs.{i}.weight` `[out, in, kernel, kernel]`
///   and `cnn.{k}.convs.{i}.bias` `[out]` (`nn.Conv2d`; `i` indexes the cnn's `layers`,
///   max-pools included, which hold no parameters), `cnn.{k}.linear.weight` `[features, flat]`,
///   `cnn.{k}.linear.bias`
/// - `core.weight_ih_l{k}` ... (`nn.LSTM` / `nn.GRU` names; minGRU `core.weight_z_l{k}` ...)
/// - `critic_core.*` (a separate critic core only)
/// - `policy_head.weight` `[K, H]`, `policy_head.bias`, `value_head.weight` `[1, H]`,
///   `value_head.bias`
pub fn named_tensors(policy: &Policy<Cpu>) -> Vec<Named> {
    let d = policy.config().obs_dim;
    let norm = to_vec(policy.obs_norm.val());
    debug_assert_eq!(
        norm.len(),
        OBS_NORM_ROWS * common::policy::obs_norm_width(d)
    );
    let mut out = Vec::new();
    if d > 0 {
        out.extend([
            Named::new("obs_norm.mean", vec![d], norm[..d].to_vec()),
            Named::new("obs_norm.var", vec![d], norm[d..2 * d].to_vec()),
            Named::new("obs_norm.count", vec![1], vec![norm[2 * d]]),
            Named::new("obs_norm.clip", vec![d], norm[3 * d..4 * d].to_vec()),
        ]);
    }
    for (i, layer) in policy.encoder.iter().enumerate() {
        out.extend(linear(&format!("encoder.{i}"), layer));
    }
    for (k, cnn) in policy.cnn.iter().enumerate() {
        let prefix = cnn_prefix(k);
        out.extend(
            (cnn.torch_params().into_iter())
                .map(|(name, shape, values)| Named::new(format!("{prefix}.{name}"), shape, values)),
        );
    }
    out.extend(core("core", &policy.core));
    if let Some(critic) = &policy.critic_core {
        out.extend(core("critic_core", critic));
    }
    out.extend(linear("policy_head", &policy.policy_head));
    out.extend(linear("value_head", &policy.value_head));
    out
}

/// The prefix of the parameters of image `k`'s encoder: `cnn.{k}`.
pub fn cnn_prefix(k: usize) -> String {
    format!("cnn.{k}")
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
    /// The images of the `pixels` input and their convolutional encoders (absent without
    /// images).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImagesSpec>,
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

/// The pixels input and the image encoders. The core's input is the encoder MLP's output
/// (when `obs_dim` > 0) followed by each image's features, in `parts` order.
#[derive(Clone, Debug, Serialize)]
pub struct ImagesSpec {
    /// Bytes of one step's pixels input: every image, back to back, each `[H, W, C]`
    /// row-major (recur's pixels lane).
    pub pixels: usize,
    /// `"uint8"`: byte values, scaled by `cnn.scale` inside the network.
    pub dtype: &'static str,
    pub parts: Vec<ImagePartSpec>,
    /// The encoder every image has (each with parameters of its own).
    pub cnn: CnnSpec,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImagePartSpec {
    /// The observation key (`""` for an observation that is one image).
    pub key: String,
    /// `[H, W, C]`.
    pub shape: [usize; 3],
    /// Where the image starts in the pixels input.
    pub offset: usize,
    /// The prefix of its encoder's tensors (`cnn.{k}`).
    pub prefix: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct CnnSpec {
    /// `layers` (`{"type": "conv", out_channels, kernel, stride, padding}` or
    /// `{"type": "maxpool", kernel}`), `scale`, `features`.
    #[serde(flatten)]
    pub config: EncoderConfig,
    /// After every convolution and after the linear layer.
    pub activation: &'static str,
    /// The order of the flatten before the linear layer: `"chw"` (PyTorch's NCHW).
    pub flatten: &'static str,
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

/// The encoder MLP's hidden widths: the policy's layers (none when `obs_dim` is 0, whatever
/// the config's `encoder` says).
pub fn encoder_widths(policy: &Policy<Cpu>) -> Vec<usize> {
    (policy.encoder.iter())
        .map(|l| l.weight.val().dims()[1])
        .collect()
}

/// The images of `policy` as `policy.json` states them (`None` without images).
pub fn images_spec(policy: &Policy<Cpu>) -> Option<ImagesSpec> {
    let first = policy.cnn.first()?;
    let parts = (policy.cnn.iter().enumerate())
        .map(|(k, cnn)| ImagePartSpec {
            key: cnn.spec().part.key.clone(),
            shape: cnn.spec().part.shape,
            offset: cnn.spec().offset,
            prefix: cnn_prefix(k),
        })
        .collect();
    Some(ImagesSpec {
        pixels: policy.config().pixels(),
        dtype: "uint8",
        parts,
        cnn: CnnSpec {
            config: first.spec().config.clone(),
            activation: "relu",
            flatten: "chw",
        },
    })
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

    fn image(key: &str, shape: [usize; 3]) -> common::envs::ImagePart {
        common::envs::ImagePart {
            key: key.into(),
            shape,
        }
    }

    /// A Dict observation (values and two images): the MLP's tensors, then each image's
    /// encoder under `cnn.{k}` (convolutions at their index in `layers`, the max-pool's index
    /// skipped), the core reading the concatenation; `policy.json`'s images say where each
    /// image's bytes are. The values are the encoder's own (`torch_params`).
    #[test]
    fn image_encoders_carry_pytorch_names_per_image() {
        let config = PolicyConfig::new(4, ActionSpec::Discrete { n: 3 })
            .with_hidden_size(8)
            .with_encoder(vec![5])
            .with_images(vec![image("image", [7, 7, 3]), image("map", [7, 7, 1])])
            .with_cnn(Some(EncoderConfig::minigrid()));
        let policy = config.init_seeded::<Cpu>(4, &cpu_device()).unwrap();
        let named = named_tensors(&policy);
        let shapes: Vec<(&str, Vec<usize>)> = (named.iter())
            .map(|n| (n.name.as_str(), n.shape.clone()))
            .filter(|(n, _)| n.starts_with("cnn.") || n.starts_with("core.weight_ih"))
            .collect();
        let mut want: Vec<(String, Vec<usize>)> = Vec::new();
        for (k, c) in [(0, 3), (1, 1)] {
            want.extend([
                (format!("cnn.{k}.convs.0.weight"), vec![16, c, 2, 2]),
                (format!("cnn.{k}.convs.0.bias"), vec![16]),
                (format!("cnn.{k}.convs.2.weight"), vec![32, 16, 2, 2]),
                (format!("cnn.{k}.convs.2.bias"), vec![32]),
                (format!("cnn.{k}.convs.3.weight"), vec![64, 32, 2, 2]),
                (format!("cnn.{k}.convs.3.bias"), vec![64]),
                (format!("cnn.{k}.linear.weight"), vec![128, 64]),
                (format!("cnn.{k}.linear.bias"), vec![128]),
            ]);
        }
        want.push(("core.weight_ih_l0".into(), vec![32, 5 + 2 * 128]));
        let want: Vec<(&str, Vec<usize>)> =
            want.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        assert_eq!(shapes, want);
        for (k, cnn) in policy.cnn.iter().enumerate() {
            for (name, _, values) in cnn.torch_params() {
                let full = format!("cnn.{k}.{name}");
                let got = named.iter().find(|n| n.name == full).unwrap();
                assert_eq!(got.values, values, "{full}");
            }
        }
        // The second image's values differ from the first's: its own parameters.
        let find = |name: &str| &named.iter().find(|n| n.name == name).unwrap().values;
        assert_ne!(find("cnn.0.linear.weight"), find("cnn.1.linear.weight"));

        let images = images_spec(&policy).unwrap();
        assert_eq!(images.pixels, 7 * 7 * 3 + 7 * 7);
        let parts: Vec<(&str, usize, &str)> = (images.parts.iter())
            .map(|p| (p.key.as_str(), p.offset, p.prefix.as_str()))
            .collect();
        assert_eq!(parts, [("image", 0, "cnn.0"), ("map", 147, "cnn.1")]);
        let json = serde_json::to_value(&images).unwrap();
        assert_eq!(json["cnn"]["layers"][1]["type"], "maxpool");
        assert_eq!(json["cnn"]["layers"][2]["out_channels"], 32);
        assert_eq!(json["cnn"]["features"], 128);
        assert_eq!(encoder_widths(&policy), [5]);
    }

    /// An observation of one image and no values: no normalizer tensors and no MLP (whatever
    /// the config's `encoder` widths say), the core reading the image's features alone.
    #[test]
    fn an_image_alone_has_no_values_part() {
        let config = PolicyConfig::new(0, ActionSpec::Discrete { n: 2 })
            .with_hidden_size(8)
            .with_images(vec![image("", [64, 64, 1])])
            .with_cnn(Some(EncoderConfig::nature()));
        let policy = config.init_seeded::<Cpu>(5, &cpu_device()).unwrap();
        let names: Vec<String> = named_tensors(&policy).into_iter().map(|n| n.name).collect();
        assert_eq!(names[0], "cnn.0.convs.0.weight");
        assert!(!names
            .iter()
            .any(|n| n.starts_with("obs_norm") || n.starts_with("encoder")));
        assert!(encoder_widths(&policy).is_empty());
        assert_eq!(core_spec(&policy).input_size, 512);
        assert_eq!(images_spec(&policy).unwrap().parts[0].key, "");
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
