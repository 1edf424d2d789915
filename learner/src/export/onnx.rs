//! The policy's sequential-mode step as an ONNX graph (opset 17), built from primitive ops so
//! that it computes what recur's actor computes (`common::policy::inference`), op for op:
//!
//! ```text
//! inputs:  obs [B, obs_dim] f32 (absent when obs_dim is 0), pixels [B, P] u8 (with images
//!          only), is_init [B] bool, rs_h [B, S, H] f32 (, rs_c [B, S, H] f32)
//! outputs: logits [B, K]            (discrete, multi-discrete)
//!          | mean, log_std [B, A]   (box: log_std clamped to [-5, 2], as the distribution uses it)
//!          action [B] i64 | [B, K] i64 | [B, A] f32   (the greedy action)
//!          value [B] f32
//!          next_rs_h [B, S, H] f32 (, next_rs_c [B, S, H] f32)
//! ```
//!
//! The step: normalize (`clamp((obs - mean) / sqrt(var + 1e-8), -clip, clip)`), the encoder
//! (`Gemm` + `Tanh` per layer); each image `k` of `pixels` (bytes `offset..offset + H*W*C`)
//! cast to f32, reshaped to `[B, H, W, C]` (with one-hot codes: each channel `Slice`d,
//! `Equal` to its codes `0..n`, `Cast` to f32, the planes `Concat`enated), transposed to NCHW
//! and multiplied by the cnn's `scale`, through its layers (`Conv` + `Relu`, `MaxPool`),
//! `Flatten` (CHW order), `Gemm` + `Relu` (`onnx/image.rs`); the MLP's output and the images' features `Concat`enated in that order (the
//! core's input, as `common::policy::Policy` encodes it); then each recurrent layer `k` reads
//! its state `rs_h[:, k]` (zeroed where `is_init`: the primer's state at a reset), runs its
//! cell (LSTM, GRU, minGRU equations of docs/recurrent-cells.md) and writes `next_rs_h[:, k]`;
//! a separate critic core reads layers `L..2L`. `B` is symbolic (`"batch"`).

use prost::Message;

use common::backend::Cpu;
use common::policy::image::ImageSpec;
use common::policy::{ActionSpec, CriticCore, Policy, PolicyConfig};
use recur_rnn::CellKind;

use super::onnx_proto::*;
use super::params::{Named, OBS_NORM_EPS};

mod image;
use image::image_encoder;

/// The opset the graph is written for (`Split` with a `split` input, `Squeeze`/`Unsqueeze`
/// with an `axes` input: opset 13 and later).
pub const OPSET: i64 = 17;
/// The IR version that goes with opset 17.
const IR_VERSION: i64 = 8;

/// What the graph is built from: the architecture and the named tensors (PyTorch names).
pub struct StepModel<'a> {
    pub config: &'a PolicyConfig,
    /// Layers of the encoder MLP (none when `obs_dim` is 0).
    pub encoder_layers: usize,
    /// Each image's encoder: its part of the pixels and its layers.
    pub images: Vec<ImageSpec>,
    pub tensors: &'a [Named],
    pub producer_version: &'a str,
}

impl<'a> StepModel<'a> {
    /// The step of `policy`, whose parameters are `tensors` ([`named_tensors`] of it).
    ///
    /// [`named_tensors`]: super::params::named_tensors
    pub fn of(policy: &'a Policy<Cpu>, tensors: &'a [Named], producer_version: &'a str) -> Self {
        StepModel {
            config: policy.config(),
            encoder_layers: policy.encoder.len(),
            images: policy.cnn.iter().map(|c| c.spec().clone()).collect(),
            tensors,
            producer_version,
        }
    }
}

/// The graph's input names, in order: `obs` (when `obs_dim` > 0), `pixels` (with images),
/// `is_init`, `rs_h` (, `rs_c`).
pub fn input_names(config: &PolicyConfig) -> Vec<String> {
    let mut names = Vec::new();
    if config.obs_dim > 0 {
        names.push("obs".to_string());
    }
    if !config.images.is_empty() {
        names.push("pixels".into());
    }
    names.extend(["is_init".to_string(), "rs_h".into()]);
    if config.cell.has_cell_state() {
        names.push("rs_c".into());
    }
    names
}

/// The graph's output names, in order.
pub fn output_names(cell: CellKind, action: &ActionSpec) -> Vec<String> {
    let mut names: Vec<String> = match action {
        ActionSpec::Continuous { .. } => vec!["mean".into(), "log_std".into()],
        _ => vec!["logits".into()],
    };
    names.extend(["action".into(), "value".into(), "next_rs_h".into()]);
    if cell.has_cell_state() {
        names.push("next_rs_c".into());
    }
    names
}

/// Nodes and initializers, with fresh names for intermediate values.
#[derive(Default)]
struct Graph {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    next_id: usize,
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i: Some(value),
        ints: Vec::new(),
        r#type: AttributeType::Int as i32,
    }
}

fn ints_attr(name: &str, values: &[usize]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i: None,
        ints: values.iter().map(|&v| v as i64).collect(),
        r#type: AttributeType::Ints as i32,
    }
}

impl Graph {
    /// Adds a node with `outputs` fresh outputs; returns their names.
    fn op_n(
        &mut self,
        op: &str,
        inputs: &[&str],
        outputs: usize,
        attribute: Vec<AttributeProto>,
    ) -> Vec<String> {
        self.next_id += 1;
        let id = self.next_id;
        let output: Vec<String> = (0..outputs)
            .map(|i| format!("{}_{id}_{i}", op.to_lowercase()))
            .collect();
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: output.clone(),
            name: format!("{op}_{id}"),
            op_type: op.into(),
            attribute,
        });
        output
    }

    /// Adds a node with one fresh output; returns its name.
    fn op(&mut self, op: &str, inputs: &[&str]) -> String {
        self.op_n(op, inputs, 1, Vec::new()).remove(0)
    }

    fn op_attr(&mut self, op: &str, inputs: &[&str], attribute: Vec<AttributeProto>) -> String {
        self.op_n(op, inputs, 1, attribute).remove(0)
    }

    /// Renames the output of the last node to `name` (a graph output).
    fn name_last(&mut self, name: &str) {
        let node = self.nodes.last_mut().expect("a node to name");
        node.output[0] = name.to_string();
    }

    fn f32_tensor(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len());
        self.initializers.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: DataType::Float as i32,
            name: name.into(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        name.to_string()
    }

    fn i64_tensor(&mut self, name: &str, dims: &[usize], values: &[i64]) -> String {
        self.initializers.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: DataType::Int64 as i32,
            name: name.into(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        name.to_string()
    }

    /// A scalar `f32` constant.
    fn scalar(&mut self, name: &str, value: f32) -> String {
        self.f32_tensor(name, &[], &[value])
    }
}

/// Looks up a named tensor (one the exporter made, so it exists).
fn tensor<'a>(tensors: &'a [Named], name: &str) -> &'a Named {
    tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("the exporter names tensor {name}"))
}

/// `x W^T + b` with `W` `[out, in]` (PyTorch's layout) and `b` `[out]`, if given.
fn gemm(g: &mut Graph, x: &str, weight: &str, bias: Option<&str>) -> String {
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    g.op_attr("Gemm", &inputs, vec![int_attr("transB", 1)])
}

/// Puts the named tensor into the graph as an initializer under its own name.
fn init(g: &mut Graph, tensors: &[Named], name: &str) -> String {
    let t = tensor(tensors, name);
    g.f32_tensor(&t.name, &t.shape, &t.values)
}

/// Initializes the tensor `name` if it exists (a bias), else `None`.
fn init_opt(g: &mut Graph, tensors: &[Named], name: &str) -> Option<String> {
    tensors
        .iter()
        .any(|t| t.name == name)
        .then(|| init(g, tensors, name))
}

/// The recurrent state handed to one layer: `[B, H]` of state layer `layer`, zeroed at
/// `is_init` (`reset` is `is_init` `[B, 1]`).
fn layer_state(g: &mut Graph, state: &str, layer: usize, reset: &str, zero: &str) -> String {
    let index = g.i64_tensor(&format!("const.layer_{layer}"), &[], &[layer as i64]);
    let taken = g.op_attr("Gather", &[state, &index], vec![int_attr("axis", 1)]);
    g.op("Where", &[reset, zero, &taken])
}

/// The `[B, S, H]` state from per-layer `[B, H]` states.
fn stack_layers(g: &mut Graph, layers: &[String], axis_one: &str) -> String {
    let unsqueezed: Vec<String> = layers
        .iter()
        .map(|h| g.op("Unsqueeze", &[h, axis_one]))
        .collect();
    let refs: Vec<&str> = unsqueezed.iter().map(String::as_str).collect();
    g.op_attr("Concat", &refs, vec![int_attr("axis", 1)])
}

/// Splits `x` `[B, sizes.sum()]` along axis 1.
fn split(g: &mut Graph, x: &str, sizes: &[usize], name: &str) -> Vec<String> {
    let values: Vec<i64> = sizes.iter().map(|&s| s as i64).collect();
    let sizes_name = g.i64_tensor(name, &[sizes.len()], &values);
    let axis = vec![int_attr("axis", 1)];
    g.op_n("Split", &[x, &sizes_name], sizes.len(), axis)
}

#[derive(Default)]
struct CoreOut {
    features: String,
    next_h: Vec<String>,
    next_c: Vec<String>,
}

/// One recurrent core (`prefix` = `core` or `critic_core`) on `x`, its layers at state layers
/// `offset..offset + L`; `reset` is `is_init` `[B, 1]`, `zero` the scalar 0.
fn core(
    g: &mut Graph,
    m: &StepModel,
    (prefix, offset): (&str, usize),
    x: &str,
    reset: &str,
    zero: &str,
) -> CoreOut {
    let h_dim = m.config.hidden_size;
    let mut x = x.to_string();
    let mut out = CoreOut::default();
    for k in 0..m.config.num_layers {
        let h = layer_state(g, "rs_h", offset + k, reset, zero);
        let p = |n: &str| format!("{prefix}.{n}_l{k}");
        // `xa W_a^T + b_a`, `xb W_b^T + b_b` from the layer's `weight_{a,b}`, `bias_{a,b}`
        // (biases optional): both weights, then both biases, then the two Gemms.
        let gemm2 = |g: &mut Graph, [a, b]: [&str; 2], [xa, xb]: [&str; 2]| {
            let w_a = init(g, m.tensors, &p(&format!("weight_{a}")));
            let w_b = init(g, m.tensors, &p(&format!("weight_{b}")));
            let b_a = init_opt(g, m.tensors, &p(&format!("bias_{a}")));
            let b_b = init_opt(g, m.tensors, &p(&format!("bias_{b}")));
            (
                gemm(g, xa, &w_a, b_a.as_deref()),
                gemm(g, xb, &w_b, b_b.as_deref()),
            )
        };
        let h_next = match m.config.cell {
            CellKind::Lstm => {
                let c = layer_state(g, "rs_c", offset + k, reset, zero);
                let (gx, gh) = gemm2(g, ["ih", "hh"], [&x, &h]);
                let gates = g.op("Add", &[&gx, &gh]);
                let parts = split(g, &gates, &[h_dim; 4], &format!("const.split4_{h_dim}"));
                let i = g.op("Sigmoid", &[&parts[0]]);
                let f = g.op("Sigmoid", &[&parts[1]]);
                let gg = g.op("Tanh", &[&parts[2]]);
                let o = g.op("Sigmoid", &[&parts[3]]);
                // c' = f c + i g; h' = o tanh(c')
                let fc = g.op("Mul", &[&f, &c]);
                let ig = g.op("Mul", &[&i, &gg]);
                let c_next = g.op("Add", &[&fc, &ig]);
                let tc = g.op("Tanh", &[&c_next]);
                out.next_c.push(c_next);
                g.op("Mul", &[&o, &tc])
            }
            CellKind::Gru => {
                let (gx, gh) = gemm2(g, ["ih", "hh"], [&x, &h]);
                let split_name = format!("const.split3_{h_dim}");
                let xs = split(g, &gx, &[h_dim; 3], &split_name);
                let hs = split(g, &gh, &[h_dim; 3], &split_name);
                // r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z); n = tanh(x_n + r h_n);
                // h' = n + z (h - n)
                let r_pre = g.op("Add", &[&xs[0], &hs[0]]);
                let r = g.op("Sigmoid", &[&r_pre]);
                let z_pre = g.op("Add", &[&xs[1], &hs[1]]);
                let z = g.op("Sigmoid", &[&z_pre]);
                let rh = g.op("Mul", &[&r, &hs[2]]);
                let n_pre = g.op("Add", &[&xs[2], &rh]);
                let n = g.op("Tanh", &[&n_pre]);
                let h_minus_n = g.op("Sub", &[&h, &n]);
                let zd = g.op("Mul", &[&z, &h_minus_n]);
                g.op("Add", &[&n, &zd])
            }
            CellKind::MinGru => {
                let (z_pre, v) = gemm2(g, ["z", "h"], [&x, &x]);
                // z = sigmoid(.); h~ = v + 0.5 where v >= 0, else sigmoid(v);
                // h' = h + z (h~ - h)
                let z = g.op("Sigmoid", &[&z_pre]);
                let half = g.scalar("const.half", 0.5);
                let lin = g.op("Add", &[&v, &half]);
                let sig = g.op("Sigmoid", &[&v]);
                let zero_f = g.scalar("const.zero", 0.0);
                let non_negative = g.op("GreaterOrEqual", &[&v, &zero_f]);
                let candidate = g.op("Where", &[&non_negative, &lin, &sig]);
                let diff = g.op("Sub", &[&candidate, &h]);
                let zd = g.op("Mul", &[&z, &diff]);
                g.op("Add", &[&h, &zd])
            }
        };
        out.next_h.push(h_next.clone());
        x = h_next;
    }
    out.features = x;
    out
}

/// The ONNX model of `m`'s sequential-mode step, encoded.
pub fn step_model(m: &StepModel) -> Vec<u8> {
    let mut g = Graph::default();
    let (pc, t) = (m.config, m.tensors);
    // The incoming state of a layer is zeroed where is_init.
    let axis_one = g.i64_tensor("const.axis_1", &[1], &[1]);
    let reset = g.op("Unsqueeze", &["is_init", &axis_one]);
    let zero = g.scalar("const.zero", 0.0);

    // The core's input: the values' part, then each image's.
    let mut parts = Vec::new();
    if pc.obs_dim > 0 {
        // Observation normalizer.
        let mean = init(&mut g, t, "obs_norm.mean");
        let var = init(&mut g, t, "obs_norm.var");
        let clip = init(&mut g, t, "obs_norm.clip");
        let eps = g.scalar("const.obs_norm_eps", OBS_NORM_EPS);
        let centred = g.op("Sub", &["obs", &mean]);
        let var_eps = g.op("Add", &[&var, &eps]);
        let std = g.op("Sqrt", &[&var_eps]);
        let scaled = g.op("Div", &[&centred, &std]);
        let neg_clip = g.op("Neg", &[&clip]);
        let lower = g.op("Max", &[&scaled, &neg_clip]);
        let mut x = g.op("Min", &[&lower, &clip]);

        // Encoder.
        for i in 0..m.encoder_layers {
            let w = init(&mut g, t, &format!("encoder.{i}.weight"));
            let b = init_opt(&mut g, t, &format!("encoder.{i}.bias"));
            let y = gemm(&mut g, &x, &w, b.as_deref());
            x = g.op("Tanh", &[&y]);
        }
        parts.push(x);
    }
    if !m.images.is_empty() {
        let attrs = vec![int_attr("to", DataType::Float as i64)];
        let px = g.op_attr("Cast", &["pixels"], attrs);
        for (k, spec) in m.images.iter().enumerate() {
            parts.push(image_encoder(&mut g, m, k, spec, &px));
        }
    }
    let x = match parts.len() {
        1 => parts.remove(0),
        _ => {
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            g.op_attr("Concat", &refs, vec![int_attr("axis", 1)])
        }
    };

    // Cores.
    let actor = core(&mut g, m, ("core", 0), &x, &reset, &zero);
    let critic = (pc.critic_core == CriticCore::Separate)
        .then(|| core(&mut g, m, ("critic_core", pc.num_layers), &x, &reset, &zero));

    // Heads.
    let w = init(&mut g, t, "policy_head.weight");
    let b = init_opt(&mut g, t, "policy_head.bias");
    let head = gemm(&mut g, &actor.features, &w, b.as_deref());
    match &pc.action {
        ActionSpec::Discrete { .. } => {
            g.op("Identity", &[&head]);
            g.name_last("logits");
            let attrs = vec![int_attr("axis", 1), int_attr("keepdims", 0)];
            g.op_attr("ArgMax", &["logits"], attrs);
            g.name_last("action");
        }
        ActionSpec::MultiDiscrete { nvec } => {
            g.op("Identity", &[&head]);
            g.name_last("logits");
            let parts = split(&mut g, "logits", nvec, "const.nvec");
            let attrs = || vec![int_attr("axis", 1), int_attr("keepdims", 1)];
            let picks: Vec<String> = (parts.iter())
                .map(|p| g.op_attr("ArgMax", &[p], attrs()))
                .collect();
            let refs: Vec<&str> = picks.iter().map(String::as_str).collect();
            g.op_attr("Concat", &refs, vec![int_attr("axis", 1)]);
            g.name_last("action");
        }
        ActionSpec::Continuous { low, high } => {
            use common::policy::dist::{LOG_STD_MAX, LOG_STD_MIN};
            let a = low.len();
            let halves = split(&mut g, &head, &[a, a], &format!("const.split2_{a}"));
            g.op("Identity", &[&halves[0]]);
            g.name_last("mean");
            let lo = g.scalar("const.log_std_min", LOG_STD_MIN);
            let hi = g.scalar("const.log_std_max", LOG_STD_MAX);
            g.op("Clip", &[&halves[1], &lo, &hi]);
            g.name_last("log_std");
            // The greedy action: low + (tanh(mean) + 1) * 0.5 * (high - low).
            let range: Vec<f32> = low.iter().zip(high).map(|(l, h)| h - l).collect();
            let low_t = g.f32_tensor("const.action_low", &[a], low);
            let range_t = g.f32_tensor("const.action_range", &[a], &range);
            let half = g.scalar("const.half", 0.5);
            let one = g.scalar("const.one", 1.0);
            let th = g.op("Tanh", &["mean"]);
            let plus = g.op("Add", &[&th, &one]);
            let halved = g.op("Mul", &[&plus, &half]);
            let scaled = g.op("Mul", &[&halved, &range_t]);
            g.op("Add", &[&low_t, &scaled]);
            g.name_last("action");
        }
    }
    let value_features = critic
        .as_ref()
        .map_or(actor.features.as_str(), |c| c.features.as_str());
    let w = init(&mut g, t, "value_head.weight");
    let b = init_opt(&mut g, t, "value_head.bias");
    let value = gemm(&mut g, value_features, &w, b.as_deref());
    g.op("Squeeze", &[&value, &axis_one]);
    g.name_last("value");

    // Next state: the actor core's layers, then the critic core's.
    let mut next_h = actor.next_h;
    let mut next_c = actor.next_c;
    if let Some(c) = critic {
        next_h.extend(c.next_h);
        next_c.extend(c.next_c);
    }
    stack_layers(&mut g, &next_h, &axis_one);
    g.name_last("next_rs_h");
    if pc.cell.has_cell_state() {
        stack_layers(&mut g, &next_c, &axis_one);
        g.name_last("next_rs_c");
    }

    // Shared constants were added once per use: keep the first of each name.
    let mut seen = std::collections::HashSet::new();
    g.initializers.retain(|t| seen.insert(t.name.clone()));

    let batch = || DimensionValue::DimParam("batch".into());
    let fixed = |n: usize| DimensionValue::DimValue(n as i64);
    let state_dims = || vec![batch(), fixed(pc.state_layers()), fixed(pc.hidden_size)];
    // The type and shape of each input and output, by name.
    let info = |name: String| {
        let (elem, dims) = match (name.as_str(), &pc.action) {
            ("obs", _) => (DataType::Float, vec![batch(), fixed(pc.obs_dim)]),
            ("pixels", _) => (DataType::Uint8, vec![batch(), fixed(pc.pixels())]),
            ("is_init", _) => (DataType::Bool, vec![batch()]),
            ("value", _) => (DataType::Float, vec![batch()]),
            ("rs_h" | "rs_c" | "next_rs_h" | "next_rs_c", _) => (DataType::Float, state_dims()),
            ("logits", _) => (DataType::Float, vec![batch(), fixed(pc.action.head_size())]),
            ("action", ActionSpec::Discrete { .. }) => (DataType::Int64, vec![batch()]),
            ("action", ActionSpec::MultiDiscrete { nvec }) => {
                (DataType::Int64, vec![batch(), fixed(nvec.len())])
            }
            // A box's mean, log_std and action.
            _ => (
                DataType::Float,
                vec![batch(), fixed(pc.action.action_dim())],
            ),
        };
        value_info(&name, elem, dims)
    };
    let inputs = input_names(pc).into_iter().map(info).collect();
    let outputs = output_names(pc.cell, &pc.action)
        .into_iter()
        .map(info)
        .collect();

    let model = ModelProto {
        ir_version: IR_VERSION,
        producer_name: "recur".into(),
        producer_version: m.producer_version.into(),
        doc_string: "recur policy, one sequential-mode step: (obs, is_init, state) -> \
                     (distribution parameters, greedy action, value, next state); the state \
                     is zeroed where is_init before the step"
            .into(),
        graph: Some(GraphProto {
            node: g.nodes,
            name: "recur_policy_step".into(),
            initializer: g.initializers,
            input: inputs,
            output: outputs,
        }),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        metadata_props: vec![StringStringEntryProto {
            key: "recur.cell".into(),
            value: pc.cell.name().into(),
        }],
    };
    model.encode_to_vec()
}

fn value_info(name: &str, elem: DataType, dims: Vec<DimensionValue>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem as i32,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .into_iter()
                        .map(|v| Dimension { value: Some(v) })
                        .collect(),
                }),
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::params::named_tensors;
    use common::backend::{cpu_device, Cpu};
    use common::policy::PolicyConfig;
    use recur_rnn::encoder::EncoderLayer;

    fn model_for(config: &PolicyConfig) -> ModelProto {
        let policy = config.init_seeded::<Cpu>(3, &cpu_device()).unwrap();
        let tensors = named_tensors(&policy);
        let bytes = step_model(&StepModel::of(&policy, &tensors, "test"));
        ModelProto::decode(&bytes[..]).expect("the model decodes")
    }

    /// Every architecture gives a well-formed graph: each node input is a graph input, an
    /// initializer or an earlier node's output; every output is produced once; every
    /// initializer is used; the graph's outputs are the documented ones.
    #[test]
    fn every_architecture_gives_a_well_formed_graph() {
        let actions = [
            ActionSpec::Discrete { n: 3 },
            ActionSpec::MultiDiscrete { nvec: vec![2, 3] },
            ActionSpec::Continuous {
                low: vec![-2.0, 0.0],
                high: vec![2.0, 1.0],
            },
        ];
        for cell in [CellKind::Lstm, CellKind::Gru, CellKind::MinGru] {
            for layers in [1, 2] {
                for critic in [CriticCore::Shared, CriticCore::Separate] {
                    for (encoder, action) in [vec![], vec![6, 5]].into_iter().zip(&actions) {
                        let config = PolicyConfig::new(4, action.clone())
                            .with_cell(cell)
                            .with_hidden_size(8)
                            .with_num_layers(layers)
                            .with_encoder(encoder)
                            .with_critic_core(critic);
                        let model = model_for(&config);
                        assert_well_formed(&model, &config, &format!("{cell:?} L={layers}"));
                    }
                }
            }
        }
    }

    /// Each node input is a graph input, an initializer or an earlier node's output; every
    /// output is produced once; every initializer is used; the graph's inputs and outputs are
    /// the documented ones. Returns the op types in order.
    fn assert_well_formed(model: &ModelProto, config: &PolicyConfig, what: &str) -> Vec<String> {
        let graph = model.graph.as_ref().unwrap();
        let mut defined: std::collections::HashSet<String> = graph
            .input
            .iter()
            .map(|i| i.name.clone())
            .chain(graph.initializer.iter().map(|t| t.name.clone()))
            .collect();
        let mut used = std::collections::HashSet::new();
        for node in &graph.node {
            for input in &node.input {
                assert!(
                    defined.contains(input),
                    "{what}: {} reads undefined {input}",
                    node.name
                );
                used.insert(input.clone());
            }
            for output in &node.output {
                assert!(defined.insert(output.clone()), "{what}: {output} twice");
            }
        }
        for init in &graph.initializer {
            assert!(used.contains(&init.name), "{what}: unused {}", init.name);
        }
        let inputs: Vec<String> = graph.input.iter().map(|o| o.name.clone()).collect();
        assert_eq!(inputs, input_names(config), "{what}");
        let outputs: Vec<String> = graph.output.iter().map(|o| o.name.clone()).collect();
        assert_eq!(outputs, output_names(config.cell, &config.action), "{what}");
        for o in &outputs {
            assert!(defined.contains(o), "{what}: {o} is never computed");
        }
        assert_eq!(model.opset_import[0].version, OPSET);
        graph.node.iter().map(|n| n.op_type.clone()).collect()
    }

    /// Image policies: an image alone (no `obs` input, no normalizer), and a Dict of values
    /// and two images (the MLP's output and both images' features concatenated, in that
    /// order); the pixels input is uint8 `[batch, P]`; convolutions carry their kernel,
    /// stride and padding, max-pools their kernel as the stride.
    #[test]
    fn image_policies_give_well_formed_graphs() {
        let part = |key: &str, shape| common::envs::ImagePart {
            key: key.into(),
            shape,
        };
        let alone = PolicyConfig::new(0, ActionSpec::Discrete { n: 2 })
            .with_hidden_size(8)
            .with_images(vec![part("", [64, 64, 1])])
            .with_cnn(Some(recur_rnn::encoder::EncoderConfig {
                layers: vec![
                    EncoderLayer::conv(4, 8, 4, 1),
                    EncoderLayer::conv(8, 3, 2, 0),
                ],
                scale: 1.0 / 255.0,
                features: 16,
                onehot: None,
            }));
        let model = model_for(&alone);
        let ops = assert_well_formed(&model, &alone, "alone");
        assert_eq!(input_names(&alone), ["pixels", "is_init", "rs_h", "rs_c"]);
        assert_eq!(ops.iter().filter(|o| *o == "Conv").count(), 2);
        assert!(
            !ops.contains(&"Sqrt".to_string()),
            "a normalizer without values"
        );
        let graph = model.graph.as_ref().unwrap();
        let conv = graph.node.iter().find(|n| n.op_type == "Conv").unwrap();
        let attr = |name: &str| &conv.attribute.iter().find(|a| a.name == name).unwrap().ints;
        assert_eq!(
            (attr("kernel_shape"), attr("strides"), attr("pads")),
            (&vec![8, 8], &vec![4, 4], &vec![1, 1, 1, 1])
        );
        let pixels = &graph.input[0];
        let tensor = pixels
            .r#type
            .as_ref()
            .unwrap()
            .tensor_type
            .as_ref()
            .unwrap();
        assert_eq!(tensor.elem_type, DataType::Uint8 as i32);
        let dims = &tensor.shape.as_ref().unwrap().dim;
        assert_eq!(dims[1].value, Some(DimensionValue::DimValue(64 * 64)));

        let dict = PolicyConfig::new(4, ActionSpec::Discrete { n: 3 })
            .with_cell(CellKind::Gru)
            .with_hidden_size(8)
            .with_images(vec![part("image", [7, 7, 3]), part("map", [7, 7, 1])])
            .with_cnn(Some(recur_rnn::encoder::EncoderConfig::minigrid()));
        let model = model_for(&dict);
        let ops = assert_well_formed(&model, &dict, "dict");
        assert_eq!(input_names(&dict), ["obs", "pixels", "is_init", "rs_h"]);
        assert_eq!(ops.iter().filter(|o| *o == "MaxPool").count(), 2);
        let graph = model.graph.as_ref().unwrap();
        // The core's input: the encoder's Tanh, then the two images' last Relu.
        let concat = (graph.node.iter())
            .find(|n| n.op_type == "Concat" && n.input.len() == 3)
            .unwrap();
        let producer = |name: &str| {
            let node = graph.node.iter().find(|n| n.output[0] == name).unwrap();
            (node.op_type.as_str(), node.input.clone())
        };
        let kinds: Vec<&str> = concat.input.iter().map(|i| producer(i).0).collect();
        assert_eq!(kinds, ["Tanh", "Relu", "Relu"]);
        for (k, input) in concat.input[1..].iter().enumerate() {
            let gemm = producer(&producer(input).1[0]).1;
            assert_eq!(gemm[1], format!("cnn.{k}.linear.weight"));
        }
        let slices: Vec<Vec<i64>> = (graph.node.iter())
            .filter(|n| n.op_type == "Slice")
            .map(|n| {
                let start = graph.initializer.iter().find(|t| t.name == n.input[1]);
                let raw = &start.unwrap().raw_data;
                vec![i64::from_le_bytes(raw[..8].try_into().unwrap())]
            })
            .collect();
        assert_eq!(slices, [vec![0], vec![147]]);
    }
}
