//! [`RecurrentCore`]: the multi-layer LSTM/GRU/minGRU shared by
//! [`LstmModule`](super::LstmModule), [`GruModule`](super::GruModule) and
//! [`MinGruModule`](super::MinGruModule), with both execution modes.

use std::collections::HashMap;

use burn::module::{Module, Param};
use burn::nn::DropoutConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, DType, Tensor, TensorData};

use super::backend::{fused, fused_kernels, pad, scan, CellState, Segments};
use super::layer::RecurrentLayer;
use super::{
    current_recurrent_mode, CellKind, Primer, PrimerEntry, RecurrentBackend, RecurrentConfig,
    RecurrentError, RecurrentMode, RecurrentOutput, RecurrentState,
};

/// A stack of LSTM, GRU or minGRU layers with TorchRL's two execution modes.
///
/// - **Sequential** ([`forward`](Self::forward) on `[N, ...]`): one step of `N` environments;
///   the incoming state is zeroed where `is_init` is true.
/// - **Recurrent** ([`forward`](Self::forward) on a flat packed `[N]` time axis, or
///   [`forward_batch`](Self::forward_batch) on `[B, T]`): at every `is_init` position (and at
///   `t = 0` of every row) the state is replaced by the state *stored at that position*;
///   `features` are the last layer's `h` at every step; the `next` state holds the post-step
///   state at the last step of every segment and zeros elsewhere. Nothing crosses an
///   `is_init` boundary, in the outputs or in the gradients.
///
/// The mode is this thread's [`set_recurrent_mode`](super::set_recurrent_mode) if a guard is
/// alive, else the module's `default_recurrent_mode`.
#[derive(Module, Debug)]
pub struct RecurrentCore<B: Backend> {
    pub layers: Vec<RecurrentLayer<B>>,
    #[module(skip)]
    cell: CellKind,
    #[module(skip)]
    config: RecurrentConfig,
}

impl<B: Backend> RecurrentCore<B> {
    /// Builds the layers with PyTorch's initialisation after validating `config`.
    pub fn new(
        config: &RecurrentConfig,
        cell: CellKind,
        device: &B::Device,
    ) -> Result<Self, RecurrentError> {
        config.validate(cell, fused_kernels::<B>())?;
        let layers = (0..config.num_layers)
            .map(|l| {
                let input = if l == 0 {
                    config.input_size
                } else {
                    config.hidden_size
                };
                RecurrentLayer::init(cell, input, config.hidden_size, config.bias, device)
            })
            .collect();
        Ok(Self {
            layers,
            cell,
            config: config.clone(),
        })
    }

    pub fn cell(&self) -> CellKind {
        self.cell
    }

    pub fn config(&self) -> &RecurrentConfig {
        &self.config
    }

    pub fn input_size(&self) -> usize {
        self.config.input_size
    }

    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    pub fn num_layers(&self) -> usize {
        self.config.num_layers
    }

    /// The backend recurrent-mode calls use (`auto` resolved for this tensor backend).
    pub fn backend(&self) -> RecurrentBackend {
        self.config
            .backend
            .resolve_for(fused_kernels::<B>().available())
    }

    /// The mode a call made now on this thread runs in.
    pub fn recurrent_mode(&self) -> RecurrentMode {
        current_recurrent_mode().unwrap_or(self.config.default_recurrent_mode)
    }

    /// The recurrent-state entries an environment needs: `rs_h` (and `rs_c` for an LSTM),
    /// `[num_layers, hidden_size]` per environment, `float32`.
    pub fn primer(&self) -> Primer {
        let keys: &[&'static str] = if self.cell.has_cell_state() {
            &["rs_h", "rs_c"]
        } else {
            &["rs_h"]
        };
        Primer {
            entries: keys
                .iter()
                .map(|&key| PrimerEntry {
                    key,
                    shape: [self.num_layers(), self.hidden_size()],
                    dtype: DType::F32,
                })
                .collect(),
        }
    }

    /// One call on `N` rows: `input` `[N, in]`, `is_init` `[N]`, `state` `[N, L, H]`.
    ///
    /// Sequential mode: `N` environments, one step each; returns `features` `[N, H]` and the
    /// post-step state `[N, L, H]`. Recurrent mode: `N` consecutive steps of one packed time
    /// axis (the flat layout a slice sampler returns), with the recurrent-mode semantics.
    pub fn forward(
        &self,
        input: Tensor<B, 2>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> Result<RecurrentOutput<B, 2, 3>, RecurrentError> {
        let [n, _] = input.dims();
        self.check_input("input", &input.dims(), &[n], "[N, input_size]")?;
        check_shape(
            "is_init",
            &is_init.dims(),
            &[n],
            "[N] (one flag per row of input)",
        )?;
        self.check_state(&state, &[n], "[N, num_layers, hidden_size]")?;
        Ok(match self.recurrent_mode() {
            RecurrentMode::Sequential => self.step(input, is_init, state),
            RecurrentMode::Recurrent => {
                let out = self.run_recurrent(
                    input.unsqueeze_dim(0),
                    is_init.unsqueeze_dim(0),
                    state.map(|e| e.unsqueeze_dim(0)),
                );
                RecurrentOutput {
                    features: out.features.squeeze_dim(0),
                    next: out.next.map(|e| e.squeeze_dim(0)),
                }
            }
        })
    }

    /// One call on a `[B, T]` batch: `input` `[B, T, in]`, `is_init` `[B, T]`, stored
    /// `state` `[B, T, L, H]`; returns `features` `[B, T, H]` and `next` `[B, T, L, H]`.
    ///
    /// Recurrent mode runs each row as a sequence (resets at `is_init`). Sequential mode, as
    /// in TorchRL, treats the `B * T` entries as independent single steps.
    pub fn forward_batch(
        &self,
        input: Tensor<B, 3>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> Result<RecurrentOutput<B, 3, 4>, RecurrentError> {
        let [b, t, _] = input.dims();
        self.check_input("input", &input.dims(), &[b, t], "[B, T, input_size]")?;
        check_shape(
            "is_init",
            &is_init.dims(),
            &[b, t],
            "[B, T] (one flag per step)",
        )?;
        self.check_state(&state, &[b, t], "[B, T, num_layers, hidden_size]")?;
        Ok(match self.recurrent_mode() {
            RecurrentMode::Recurrent => self.run_recurrent(input, is_init, state),
            RecurrentMode::Sequential => {
                let (l, h) = (self.num_layers(), self.hidden_size());
                let out = self.step(
                    input.flatten(0, 1),
                    is_init.flatten(0, 1),
                    state.map(|e| e.reshape([b * t, l, h])),
                );
                RecurrentOutput {
                    features: out.features.reshape([b, t, h]),
                    next: out.next.map(|e| e.reshape([b, t, l, h])),
                }
            }
        })
    }

    /// Sequential mode: zero the incoming state where `is_init`, then one step of every layer.
    fn step(
        &self,
        input: Tensor<B, 2>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> RecurrentOutput<B, 2, 3> {
        let [n, _] = input.dims();
        let hidden = self.hidden_size();
        // On a CubeCL device the fused kernel takes the step as one step of recurrent mode
        // from the zeroed incoming state, so both modes multiply at the core's
        // `matmul_precision` (burn's own matmul stages f32 through tf32 on tensor cores).
        #[cfg(any(feature = "cuda", feature = "wgpu"))]
        if self.backend() == RecurrentBackend::Fused && super::backend::cube::available::<B>() {
            let layers = self.num_layers();
            let reset = is_init
                .clone()
                .reshape([n, 1, 1])
                .expand([n, layers, hidden]);
            let out = self.run_recurrent(
                input.unsqueeze_dim(1),
                is_init.unsqueeze_dim(1),
                state.map(|e| e.mask_fill(reset.clone(), 0.0).unsqueeze_dim(1)),
            );
            return RecurrentOutput {
                features: out.features.reshape([n, hidden]),
                next: out.next.map(|e| e.reshape([n, layers, hidden])),
            };
        }
        let reset = is_init.unsqueeze_dim::<2>(1).expand([n, hidden]);
        let incoming = |e: &Tensor<B, 3>, l: usize| {
            e.clone()
                .slice_dim(1, l..l + 1)
                .reshape([n, hidden])
                .mask_fill(reset.clone(), 0.0)
        };
        let per_layer = self.run_layers(vec![input], |l, _t, _previous| {
            (
                incoming(&state.rs_h, l),
                state.rs_c.as_ref().map(|c| incoming(c, l)),
            )
        });
        let (hs, cs): (Vec<_>, Vec<_>) = per_layer
            .into_iter()
            .map(|mut states| states.pop().expect("one step"))
            .unzip();
        let features = hs.last().expect("at least one layer").clone();
        let cs: Option<Vec<_>> = cs.into_iter().collect();
        RecurrentOutput {
            features,
            next: RecurrentState {
                rs_h: Tensor::stack(hs, 1),
                rs_c: cs.map(|cs| Tensor::stack(cs, 1)),
            },
        }
    }

    /// Recurrent mode on `[B, T]`, shapes already checked.
    fn run_recurrent(
        &self,
        input: Tensor<B, 3>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> RecurrentOutput<B, 3, 4> {
        let [b, t, _] = input.dims();
        let flags = host_flags(is_init.into_data());
        let segments = Segments::new(flags, b, t);
        let per_layer = match self.backend() {
            RecurrentBackend::Pad => pad::run(self, input, &segments, state),
            #[cfg(any(feature = "cuda", feature = "wgpu"))]
            RecurrentBackend::Fused if super::backend::cube::available::<B>() => {
                super::backend::cube::run(self, input, &segments, state)
            }
            RecurrentBackend::Fused => {
                if let Some(out) = fused::inference(self, &input, &segments, &state) {
                    return out;
                }
                fused::run(self, input, &segments, state)
            }
            RecurrentBackend::Scan | RecurrentBackend::Auto => {
                scan::run(self, input, &segments, state)
            }
        };
        // ("next", state): the post-step state at the last step of each segment, zero elsewhere.
        let (l, h) = (self.num_layers(), self.hidden_size());
        let ends: std::sync::Arc<[bool]> = segments.ends().into();
        let features = per_layer.last().expect("at least one layer").0.clone();
        let (hs, cs): (Vec<_>, Vec<_>) = per_layer.into_iter().unzip();
        let cs: Option<Vec<_>> = cs.into_iter().collect();
        // Each layer's states masked, then stacked on the layer axis (one layer: a reshape,
        // which shares the masked tensor's storage on the CPU).
        let next = |entries: Vec<Tensor<B, 3>>| {
            let mut masked: Vec<Tensor<B, 3>> = entries
                .into_iter()
                .map(|e| fused::keep_rows(e, &ends))
                .collect();
            if l == 1 {
                fused::reshape(masked.pop().expect("one layer"), [b, t, 1, h])
            } else {
                Tensor::stack::<4>(masked, 2)
            }
        };
        RecurrentOutput {
            features,
            next: RecurrentState {
                rs_h: next(hs),
                rs_c: cs.map(next),
            },
        }
    }

    /// Runs every layer over the per-step `inputs` (`T x [R, in]`); layer `l >= 1` reads the
    /// previous layer's output, through dropout when training. `state_at(l, t, previous)` gives
    /// the state entering step `t` of layer `l`. Returns every layer's post-step states.
    pub(crate) fn run_layers(
        &self,
        inputs: Vec<Tensor<B, 2>>,
        mut state_at: impl FnMut(usize, usize, Option<CellState<B>>) -> CellState<B>,
    ) -> Vec<Vec<CellState<B>>> {
        let dropout = DropoutConfig::new(self.config.dropout).init();
        let mut inputs = inputs;
        let mut out = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let states = super::backend::unroll(self.cell, layer, inputs, |t, previous| {
                state_at(l, t, previous)
            });
            inputs = states
                .iter()
                .map(|(h, _)| dropout.forward(h.clone()))
                .collect();
            out.push(states);
        }
        out
    }

    fn check_input(
        &self,
        field: &'static str,
        got: &[usize],
        lead: &[usize],
        layout: &str,
    ) -> Result<(), RecurrentError> {
        let mut want = lead.to_vec();
        want.push(self.input_size());
        check_shape(field, got, &want, layout)
    }

    fn check_state<const D: usize>(
        &self,
        state: &RecurrentState<B, D>,
        lead: &[usize],
        layout: &str,
    ) -> Result<(), RecurrentError> {
        let mut want = lead.to_vec();
        want.extend([self.num_layers(), self.hidden_size()]);
        check_shape("rs_h", &state.rs_h.dims(), &want, layout)?;
        match (&state.rs_c, self.cell.has_cell_state()) {
            (Some(c), true) => check_shape("rs_c", &c.dims(), &want, layout),
            (None, false) => Ok(()),
            (None, true) => Err(RecurrentError::State(
                "LstmModule needs rs_c (the cell state) beside rs_h; got rs_h only".into(),
            )),
            (Some(_), false) => Err(RecurrentError::State(format!(
                "{} has no cell state, but rs_c was given",
                self.cell.module_name()
            ))),
        }
    }

    /// Parameter names in PyTorch's canonical order: per layer `weight_ih_l{k}`,
    /// `weight_hh_l{k}`, then (with bias) `bias_ih_l{k}`, `bias_hh_l{k}`; for minGRU
    /// `weight_z_l{k}`, `weight_h_l{k}`, `bias_z_l{k}`, `bias_h_l{k}`.
    pub fn param_names(&self) -> Vec<String> {
        self.named_tensors().into_iter().map(|n| n.name).collect()
    }

    /// Every parameter by PyTorch name, as data (row-major, PyTorch's layout).
    pub fn named_parameters(&self) -> Vec<(String, TensorData)> {
        self.named_tensors()
            .into_iter()
            .map(|n| (n.name, n.tensor.rows(n.rows).data()))
            .collect()
    }

    /// Replaces every parameter from `params` (PyTorch names and layouts, e.g. an
    /// `nn.LSTM`'s `state_dict`). Every parameter must be given exactly once, with its shape;
    /// unknown names are rejected.
    pub fn load_parameters(
        mut self,
        params: impl IntoIterator<Item = (String, TensorData)>,
    ) -> Result<Self, RecurrentError> {
        let mut given: HashMap<String, TensorData> = HashMap::new();
        for (name, data) in params {
            if given.insert(name.clone(), data).is_some() {
                return Err(param_error(&name, "given twice"));
            }
        }
        let named = self.named_tensors();
        let known: Vec<&str> = named.iter().map(|n| n.name.as_str()).collect();
        if let Some(unknown) = given.keys().find(|n| !known.contains(&n.as_str())) {
            return Err(param_error(
                unknown,
                &format!("not a parameter of this module (expected one of {known:?})"),
            ));
        }
        // Each layer tensor's values, its named row blocks concatenated in order.
        let mut values: HashMap<(usize, Slot), Vec<f32>> = HashMap::new();
        for n in &named {
            let mut shape = n.tensor.dims();
            shape[0] = n.rows.len();
            let data = given
                .remove(&n.name)
                .ok_or_else(|| param_error(&n.name, "missing"))?;
            if data.shape.to_vec() != shape {
                return Err(param_error(
                    &n.name,
                    &format!("has shape {:?}, expected {:?}", data.shape.to_vec(), shape),
                ));
            }
            let data = data.convert::<f32>().to_vec::<f32>().expect("f32 data");
            values.entry((n.layer, n.slot)).or_default().extend(data);
        }
        for (k, layer) in self.layers.iter_mut().enumerate() {
            let mut take = |slot: Slot| values.remove(&(k, slot)).expect("every slot is named");
            layer.weight_ih = reload(&layer.weight_ih, take(Slot::WeightIh));
            layer.weight_hh = layer
                .weight_hh
                .as_ref()
                .map(|p| reload(p, take(Slot::WeightHh)));
            layer.bias_ih = layer
                .bias_ih
                .as_ref()
                .map(|p| reload(p, take(Slot::BiasIh)));
            layer.bias_hh = layer
                .bias_hh
                .as_ref()
                .map(|p| reload(p, take(Slot::BiasHh)));
        }
        Ok(self)
    }

    /// Every named parameter: the layer tensor it lives in and its block of rows (minGRU's
    /// `weight_z`/`weight_h` are the two row halves of the layer's stacked `weight_ih`).
    fn named_tensors(&self) -> Vec<Named<B>> {
        let mut out = Vec::new();
        let h = self.hidden_size();
        for (k, layer) in self.layers.iter().enumerate() {
            let mut push = |slot: Slot, tensor: NamedTensor<B>| {
                let rows = tensor.dims()[0];
                let blocks: Vec<(String, std::ops::Range<usize>)> = match self.cell {
                    CellKind::MinGru => vec![
                        (format!("{}_z_l{k}", slot.kind()), 0..h),
                        (format!("{}_h_l{k}", slot.kind()), h..2 * h),
                    ],
                    _ => vec![(format!("{}_l{k}", slot.torch_name()), 0..rows)],
                };
                for (name, rows) in blocks {
                    out.push(Named {
                        name,
                        layer: k,
                        slot,
                        tensor: tensor.clone(),
                        rows,
                    });
                }
            };
            push(Slot::WeightIh, NamedTensor::Matrix(layer.weight_ih.val()));
            if let Some(w) = &layer.weight_hh {
                push(Slot::WeightHh, NamedTensor::Matrix(w.val()));
            }
            if let Some(b) = &layer.bias_ih {
                push(Slot::BiasIh, NamedTensor::Vector(b.val()));
            }
            if let Some(b) = &layer.bias_hh {
                push(Slot::BiasHh, NamedTensor::Vector(b.val()));
            }
        }
        out
    }
}

impl<B: AutodiffBackend> RecurrentCore<B> {
    /// The gradient of every parameter by PyTorch name (zeros where the loss did not reach it).
    pub fn named_grads(&self, grads: &B::Gradients) -> Vec<(String, TensorData)> {
        self.named_tensors()
            .into_iter()
            .map(|n| (n.name, n.tensor.grad(grads, n.rows)))
            .collect()
    }
}

/// A layer's parameter tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Slot {
    WeightIh,
    WeightHh,
    BiasIh,
    BiasHh,
}

impl Slot {
    /// `weight_ih` ... as PyTorch's RNNs name it (before the `_l{k}` suffix).
    fn torch_name(self) -> &'static str {
        match self {
            Slot::WeightIh => "weight_ih",
            Slot::WeightHh => "weight_hh",
            Slot::BiasIh => "bias_ih",
            Slot::BiasHh => "bias_hh",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Slot::WeightIh | Slot::WeightHh => "weight",
            Slot::BiasIh | Slot::BiasHh => "bias",
        }
    }
}

/// One named parameter: rows `rows` of a layer's `slot` tensor.
struct Named<B: Backend> {
    name: String,
    layer: usize,
    slot: Slot,
    tensor: NamedTensor<B>,
    rows: std::ops::Range<usize>,
}

/// A parameter of rank 2 (weights) or 1 (biases).
#[derive(Clone)]
enum NamedTensor<B: Backend> {
    Matrix(Tensor<B, 2>),
    Vector(Tensor<B, 1>),
}

impl<B: Backend> NamedTensor<B> {
    fn dims(&self) -> Vec<usize> {
        match self {
            NamedTensor::Matrix(t) => t.dims().to_vec(),
            NamedTensor::Vector(t) => t.dims().to_vec(),
        }
    }

    /// Rows `rows` (all of them: the tensor itself).
    fn rows(self, rows: std::ops::Range<usize>) -> Self {
        match self {
            NamedTensor::Matrix(t) if rows.len() < t.dims()[0] => {
                NamedTensor::Matrix(t.slice_dim(0, rows))
            }
            NamedTensor::Vector(t) if rows.len() < t.dims()[0] => {
                NamedTensor::Vector(t.slice_dim(0, rows))
            }
            whole => whole,
        }
    }

    fn data(self) -> TensorData {
        match self {
            NamedTensor::Matrix(t) => t.into_data(),
            NamedTensor::Vector(t) => t.into_data(),
        }
    }
}

impl<B: AutodiffBackend> NamedTensor<B> {
    /// The gradient of rows `rows` (zeros where the loss did not reach the tensor).
    fn grad(self, grads: &B::Gradients, rows: std::ops::Range<usize>) -> TensorData {
        match self {
            NamedTensor::Matrix(t) => t
                .grad(grads)
                .unwrap_or_else(|| t.inner().zeros_like())
                .slice_dim(0, rows)
                .into_data(),
            NamedTensor::Vector(t) => t
                .grad(grads)
                .unwrap_or_else(|| t.inner().zeros_like())
                .slice_dim(0, rows)
                .into_data(),
        }
    }
}

/// `p` with its values replaced by `values` (same shape, device and `require_grad`).
fn reload<B: Backend, const D: usize>(
    p: &Param<Tensor<B, D>>,
    values: Vec<f32>,
) -> Param<Tensor<B, D>> {
    let old = p.val();
    let data = TensorData::new(values, old.dims());
    Param::from_tensor(Tensor::from_data(data, &old.device())).set_require_grad(p.is_require_grad())
}

fn param_error(name: &str, problem: &str) -> RecurrentError {
    RecurrentError::Parameter {
        name: name.to_string(),
        problem: problem.to_string(),
    }
}

/// A bool tensor's values on the host. Backends store bools their own way (burn's wgpu
/// backend as `u32`): anything but a bool dtype is read as integers, non-zero = true.
fn host_flags(data: TensorData) -> Vec<bool> {
    match data.to_vec::<bool>() {
        Ok(flags) => flags,
        Err(_) => data
            .convert::<i32>()
            .to_vec::<i32>()
            .expect("a bool tensor's data converts to integers")
            .into_iter()
            .map(|v| v != 0)
            .collect(),
    }
}

fn check_shape(
    field: &'static str,
    got: &[usize],
    want: &[usize],
    layout: &str,
) -> Result<(), RecurrentError> {
    if got == want {
        return Ok(());
    }
    Err(RecurrentError::Shape {
        field,
        got: got.to_vec(),
        expected: format!("{want:?} ({layout})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::burn_backend::{cpu_device, Cpu};
    use crate::{set_recurrent_mode, Recompute};

    fn gru(config: RecurrentConfig) -> Result<RecurrentCore<Cpu>, RecurrentError> {
        RecurrentCore::new(&config, CellKind::Gru, &cpu_device())
    }

    #[test]
    fn invalid_configs_name_the_key_and_value() {
        let err = gru(RecurrentConfig::new(0, 4)).unwrap_err();
        assert!(
            matches!(
                err,
                RecurrentError::Config {
                    key: "input_size",
                    ..
                }
            ),
            "{err}"
        );
        let err = gru(RecurrentConfig::new(3, 4)
            .with_dropout(1.5)
            .with_num_layers(2))
        .unwrap_err();
        assert!(err.to_string().contains("`dropout` = 1.5"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4).with_dropout(0.2)).unwrap_err();
        assert!(err.to_string().contains("num_layers >= 2"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4).with_num_layers(0)).unwrap_err();
        assert!(err.to_string().contains("num_layers"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4)
            .with_backend(RecurrentBackend::Pad)
            .with_recompute(Recompute::Full))
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("GruModule") && msg.contains("\"pad\"") && msg.contains("\"full\""),
            "{msg}"
        );
        let err = "fused2".parse::<RecurrentBackend>().unwrap_err();
        assert!(err.to_string().contains("\"fused2\""), "{err}");
    }

    #[test]
    fn wrong_shapes_name_the_field() {
        let core = gru(RecurrentConfig::new(3, 4)).unwrap();
        let device = cpu_device();
        let state = core.primer().zeros::<Cpu>(2, &device);
        let is_init = Tensor::<Cpu, 1, Bool>::from_data([true, false], &device);
        let err = core
            .forward(
                Tensor::zeros([2, 5], &device),
                is_init.clone(),
                state.clone(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, RecurrentError::Shape { field: "input", got, .. } if got == &vec![2, 5]),
            "{err}"
        );
        let err = core
            .forward(
                Tensor::zeros([2, 3], &device),
                Tensor::<Cpu, 1, Bool>::from_data([true], &device),
                state.clone(),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                RecurrentError::Shape {
                    field: "is_init",
                    ..
                }
            ),
            "{err}"
        );
        let lstm_state = RecurrentState::lstm(state.rs_h.clone(), state.rs_h.clone());
        let err = core
            .forward(Tensor::zeros([2, 3], &device), is_init, lstm_state)
            .unwrap_err();
        assert!(err.to_string().contains("rs_c"), "{err}");
    }

    #[test]
    fn load_parameters_checks_names_and_shapes() {
        let core = gru(RecurrentConfig::new(3, 4)).unwrap();
        let mut params = core.named_parameters();
        assert_eq!(
            core.param_names(),
            ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
        );
        // Round trip.
        let again = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(params.clone())
            .unwrap();
        assert_eq!(again.named_parameters(), params);
        // Wrong shape, unknown name, missing parameter.
        let wrong = TensorData::new(vec![0.0f32; 12], [12, 1]);
        let mut bad = params.clone();
        bad[0].1 = wrong;
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("weight_ih_l0") && err.to_string().contains("[12, 3]"),
            "{err}"
        );
        let mut bad = params.clone();
        bad.push(("weight_ih_l1".into(), TensorData::new(vec![0.0f32; 1], [1])));
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("`weight_ih_l1`: not a parameter"),
            "{err}"
        );
        params.pop();
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(params)
            .unwrap_err();
        assert!(err.to_string().contains("`bias_hh_l0`: missing"), "{err}");
    }

    /// minGRU's parameters carry the reference's names and shapes and round-trip; a backend
    /// without fused kernels refuses `fused`, naming the module.
    #[test]
    fn mingru_parameters_are_named_and_round_trip() {
        let device = cpu_device();
        let config = RecurrentConfig::new(3, 4).with_num_layers(2);
        let core = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device).unwrap();
        assert_eq!(
            core.param_names(),
            [
                "weight_z_l0",
                "weight_h_l0",
                "bias_z_l0",
                "bias_h_l0",
                "weight_z_l1",
                "weight_h_l1",
                "bias_z_l1",
                "bias_h_l1"
            ]
        );
        let params = core.named_parameters();
        assert_eq!(params[0].1.shape.to_vec(), [4, 3]);
        assert_eq!(params[4].1.shape.to_vec(), [4, 4]);
        assert_eq!(params[3].1.shape.to_vec(), [4]);
        // Distinct values per name: loading puts each block back in its own rows.
        let numbered: Vec<(String, TensorData)> = params
            .iter()
            .enumerate()
            .map(|(k, (name, data))| {
                let n = data.num_elements();
                let v: Vec<f32> = (0..n).map(|i| (k * 100 + i) as f32).collect();
                (name.clone(), TensorData::new(v, data.shape.clone()))
            })
            .collect();
        let loaded = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device)
            .unwrap()
            .load_parameters(numbered.clone())
            .unwrap();
        assert_eq!(loaded.named_parameters(), numbered);
        let stacked = loaded.layers[0]
            .weight_ih
            .val()
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(stacked[..3], [0.0, 1.0, 2.0]);
        assert_eq!(stacked[12..15], [100.0, 101.0, 102.0]);
        assert!(loaded.layers[0].weight_hh.is_none() && loaded.layers[0].bias_hh.is_none());
        let mut bad = numbered;
        bad[1].1 = TensorData::new(vec![0.0f32; 8], [8, 1]);
        let err = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device)
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("weight_h_l0") && err.to_string().contains("[4, 3]"),
            "{err}"
        );
        let err = "mingru2".parse::<CellKind>().unwrap_err().to_string();
        assert!(err.contains("\"mingru\""), "{err}");
        assert_eq!("mingru".parse::<CellKind>().unwrap(), CellKind::MinGru);
        let err = config
            .clone()
            .with_backend(RecurrentBackend::Fused)
            .validate(CellKind::MinGru, crate::FusedKernels::Unavailable)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("MinGruModule") && err.contains("backend = \"fused\""),
            "{err}"
        );
    }

    #[test]
    fn no_bias_means_no_bias_parameters() {
        let core = gru(RecurrentConfig::new(3, 4)
            .with_bias(false)
            .with_num_layers(2))
        .unwrap();
        assert_eq!(
            core.param_names(),
            [
                "weight_ih_l0",
                "weight_hh_l0",
                "weight_ih_l1",
                "weight_hh_l1"
            ]
        );
    }

    #[test]
    fn primer_describes_the_state_entries() {
        let device = cpu_device();
        let config = RecurrentConfig::new(3, 4).with_num_layers(2);
        let lstm = RecurrentCore::<Cpu>::new(&config, CellKind::Lstm, &device).unwrap();
        let primer = lstm.primer();
        let keys: Vec<_> = primer.entries.iter().map(|e| e.key).collect();
        assert_eq!(keys, ["rs_h", "rs_c"]);
        assert!(primer
            .entries
            .iter()
            .all(|e| e.shape == [2, 4] && e.dtype == DType::F32));
        let state = primer.zeros::<Cpu>(5, &device);
        assert_eq!(state.rs_h.dims(), [5, 2, 4]);
        assert_eq!(state.rs_c.as_ref().unwrap().dims(), [5, 2, 4]);
        let sum: f32 = state.rs_h.abs().sum().into_scalar();
        assert_eq!(sum, 0.0);
        let gru = RecurrentCore::<Cpu>::new(&config, CellKind::Gru, &device).unwrap();
        assert!(gru.primer().entry("rs_c").is_none());
        assert!(gru.primer().zeros::<Cpu>(5, &device).rs_c.is_none());
    }

    /// The module's default mode applies until a guard overrides it; the same flat call then
    /// means "N environments" or "one sequence of N steps".
    #[test]
    fn default_mode_and_guard_change_the_meaning_of_a_flat_call() {
        let device = cpu_device();
        let core = gru(RecurrentConfig::new(1, 2)).unwrap();
        assert_eq!(core.recurrent_mode(), RecurrentMode::Sequential);
        let recurrent_default =
            gru(RecurrentConfig::new(1, 2).with_default_recurrent_mode(RecurrentMode::Recurrent))
                .unwrap();
        assert_eq!(recurrent_default.recurrent_mode(), RecurrentMode::Recurrent);
        {
            let _g = set_recurrent_mode(false);
            assert_eq!(
                recurrent_default.recurrent_mode(),
                RecurrentMode::Sequential
            );
        }
        // Three identical rows, only the first an is_init, zero state: sequentially all three
        // rows are the same first step; recurrently rows 2 and 3 continue the sequence.
        let x = Tensor::<Cpu, 2>::ones([3, 1], &device);
        let flags = Tensor::<Cpu, 1, Bool>::from_data([true, false, false], &device);
        let state = core.primer().zeros::<Cpu>(3, &device);
        let seq = core
            .forward(x.clone(), flags.clone(), state.clone())
            .unwrap();
        let v = seq.features.into_data().to_vec::<f32>().unwrap();
        assert_eq!(v[0..2], v[2..4]);
        let _g = set_recurrent_mode(RecurrentMode::Recurrent);
        let rec = core.forward(x, flags, state).unwrap();
        let w = rec.features.into_data().to_vec::<f32>().unwrap();
        // Equal up to the activations' rounding (recurrent mode runs the fused kernels).
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(&w[0..2], &v[0..2]), "{w:?} vs {v:?}");
        assert!(!close(&w[2..4], &v[2..4]), "{w:?} vs {v:?}");
        // next state only at the segment end (the last row).
        let next = rec.next.rs_h.into_data().to_vec::<f32>().unwrap();
        assert!(next[0..4].iter().all(|&x| x == 0.0));
        assert_eq!(next[4..6], w[4..6]);
    }
}
