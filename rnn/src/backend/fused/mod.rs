//! `fused`: hand-written recurrent-mode forward and backward kernels on the CPU.
//!
//! On [`CpuAutodiff`] each layer is one custom burn autodiff node (its backward is the
//! hand-written BPTT in [`kernel`], so losses use it without knowing); layers are chained as
//! burn tensors, so dropout between layers is burn's own op ([`run`]). On [`Cpu`] (inference,
//! no dropout) the whole call runs on host buffers, all layers and the `next` state
//! ([`inference`]).
//!
//! The module is generic over its backend; this backend runs only on the two CPU backends
//! ([`available`]). `RecurrentCore::new` rejects `backend = "fused"` on any other backend and
//! `auto` falls back to `scan` there, so [`run`] never sees another one.
//!
//! Each autodiff layer call's output is `[K, B, T, H]`: the post-step `h` of every step and,
//! for an LSTM (`K = 2`), the post-step `c` (for the `next` state). Its parents are the layer
//! input `[B, T, in]`, the layer's stored states `[B, T, H]` (read where a step starts a
//! segment), and the four parameters; gradients flow to all of them.
//!
//! Large scratch buffers come from a [`pool`] kept across calls (no page faults per call).

mod gemm;
pub mod host;
mod kernel;
mod mat;
mod mingru;
mod pool;
#[allow(unsafe_code)]
mod simd;
mod views;

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::ndarray::NdArrayTensor;
use burn::nn::DropoutConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};
use ndarray::{ArcArray, IxDyn};

pub use gemm::{blocks, parallel, single_threaded, square_gemm_peak, step_gemm_rate, threads};
use kernel::{CellOut, Dims, Keep, Params, Saved, Stored, Wanted};
pub use mat::Mat;
pub use simd::vectorized;
pub use simd::Level as SimdLevel;
pub use simd::{gemm_packed, Packed};
use views::slab;
pub(crate) use views::{keep_rows, reshape};

use super::scan::CellState3;
use super::Segments;
use crate::burn_backend::{Cpu, CpuAutodiff};
use crate::{CellKind, Recompute, RecurrentCore, RecurrentOutput, RecurrentState};

/// burn's autodiff tensor over [`Cpu`] (its `primitive` and graph `node`).
type AdTensor = burn::tensor::ops::FloatTensor<CpuAutodiff>;

/// Whether the fused backend runs on backend `B` (the CPU backends [`Cpu`] and
/// [`CpuAutodiff`]).
pub fn available<B: Backend>() -> bool {
    let id = TypeId::of::<B>();
    id == TypeId::of::<Cpu>() || id == TypeId::of::<CpuAutodiff>()
}

/// Bytes one forward+backward call keeps between the forward and the backward pass, summed
/// over layers: per step and batch row, the states entering the step (`h`, and `c` for an
/// LSTM) and, with `recompute = "none"`, the post-activation gates (`G*H`) plus, for a GRU,
/// `h W_hn^T + b_hn` (`H`). The layer inputs are not counted: the autodiff graph holds them
/// anyway (the caller's input, the previous layer's output).
pub fn saved_bytes(
    cell: CellKind,
    batch: usize,
    steps: usize,
    hidden: usize,
    layers: usize,
    recompute: Recompute,
) -> usize {
    if cell == CellKind::MinGru {
        // `P` (`[B*T, 2H]`) without recompute; the output and stored states are the graph's.
        return match recompute {
            Recompute::None => layers * batch * steps * 2 * hidden * 4,
            Recompute::Full => 0,
        };
    }
    let dims = Dims {
        cell,
        rows: batch,
        steps,
        input: hidden,
        hidden,
    };
    layers * kernel::saved_bytes(&dims, keep_for(recompute))
}

fn keep_for(recompute: Recompute) -> Keep {
    match recompute {
        Recompute::None => Keep::Gates,
        Recompute::Full => Keep::States,
    }
}

/// The whole recurrent-mode call on [`Cpu`] (no autodiff), or `None` on any other backend.
///
/// Every layer runs on host buffers with no burn op in between: the kernel reads each layer's
/// stored states straight out of `[B, T, L, H]`, layers hand their outputs to the next through
/// pool buffers, and `next` is written at the segment ends only. (Through burn's ops, slicing a
/// layer's states, splitting `h` from `c`, stacking and masking `next` each copied whole
/// `[B, T, H]` tensors: a third of a forward-only call.)
pub(crate) fn inference<B: Backend>(
    core: &RecurrentCore<B>,
    x: &Tensor<B, 3>,
    segments: &Segments,
    stored: &RecurrentState<B, 4>,
) -> Option<RecurrentOutput<B, 3, 4>> {
    if TypeId::of::<B>() != TypeId::of::<Cpu>() {
        return None;
    }
    fn cpu<B: Backend, const D: usize>(t: Tensor<B, D>) -> NdArrayTensor {
        same_type::<_, Tensor<Cpu, D>>(t).into_primitive().tensor()
    }
    let [rows, steps, input_size] = x.dims();
    let (layers, hidden, cell) = (core.layers.len(), core.hidden_size(), core.cell());
    let lstm = cell.has_cell_state();
    let x = cpu(x.clone());
    let (stored_h, stored_c) = (cpu(stored.rs_h.clone()), stored.rs_c.clone().map(cpu));
    let (stored_h, stored_c) = (host(&stored_h), stored_c.as_ref().map(host));
    let slab = rows * steps * hidden;
    let ends: Vec<usize> = segments
        .ends()
        .iter()
        .enumerate()
        .filter_map(|(pos, &end)| end.then_some(pos))
        .collect();
    let mut next_h = vec![0.0f32; slab * layers];
    let mut next_c = lstm.then(|| vec![0.0f32; slab * layers]);
    let mut input = host(&x);
    for (l, layer) in core.layers.iter().enumerate() {
        let w_ih = cpu(layer.weight_ih.val());
        let b_ih = layer.bias_ih.as_ref().map(|b| cpu(b.val()));
        let d = Dims {
            cell,
            rows,
            steps,
            input: if l == 0 { input_size } else { hidden },
            hidden,
        };
        // The kernel writes every element. The last layer's `h` becomes the features
        // tensor (burn owns it from then on), so it is not a pool buffer.
        let mut out_h = if l + 1 == layers {
            vec![0.0f32; slab]
        } else {
            pool::take(slab)
        };
        let states = Stored {
            h: &stored_h,
            c: stored_c.as_deref(),
            layers,
            layer: l,
        };
        if cell == CellKind::MinGru {
            mingru::forward(
                &d,
                &host(&w_ih),
                b_ih.as_ref().map(host).as_deref(),
                &input,
                &segments.start,
                states,
                host::threads_for(rows, steps),
                &mut out_h,
                false,
            );
        } else {
            let w_hh = cpu(layer.weight_hh.as_ref().expect("LSTM/GRU W_hh").val());
            let b_hh = layer.bias_hh.as_ref().map(|b| cpu(b.val()));
            let host_params = HostParams::new(&w_ih, &w_hh, b_ih.as_ref(), b_hh.as_ref());
            // `c` goes straight to `next` at the segment ends; no step needs it afterwards.
            let out_c = next_c.as_deref_mut().map(|buf| CellOut {
                buf,
                layers,
                layer: l,
                ends_only: true,
            });
            kernel::forward(
                &d,
                host_params.params(),
                &input,
                &segments.start,
                states,
                Keep::Nothing,
                host::threads_for(rows, steps),
                &mut out_h,
                out_c,
            );
        }
        for &pos in &ends {
            let at = (pos * layers + l) * hidden;
            next_h[at..at + hidden].copy_from_slice(&out_h[pos * hidden..(pos + 1) * hidden]);
        }
        if let Cow::Owned(previous) = std::mem::replace(&mut input, Cow::Owned(out_h)) {
            pool::give(previous);
        }
    }
    let state = |values| cpu_tensor(primitive(values, &[rows, steps, layers, hidden]));
    let output = RecurrentOutput::<Cpu, 3, 4> {
        features: cpu_tensor(primitive(input.into_owned(), &[rows, steps, hidden])),
        next: RecurrentState {
            rs_h: state(next_h),
            rs_c: next_c.map(state),
        },
    };
    Some(same_type(output))
}

/// Returns, per layer, the post-step `h` (and `c`) `[B, T, H]`.
pub(crate) fn run<B: Backend>(
    core: &RecurrentCore<B>,
    x: Tensor<B, 3>,
    segments: &Segments,
    stored: RecurrentState<B, 4>,
) -> Vec<CellState3<B>> {
    let cell = core.cell();
    let recompute = core.config().recompute;
    let start: Arc<[bool]> = segments.start.clone().into();
    run_layers(core, x, stored, |call| {
        dispatch(cell, recompute, start.clone(), call)
    })
}

/// Chains the layers of `core`, each one call of `layer` (`[K, B, T, H]`, see the module
/// docs), with burn's dropout between layers; returns, per layer, the post-step `h` (and `c`)
/// `[B, T, H]`. Shared with the CubeCL fused backend.
pub(crate) fn run_layers<B: Backend>(
    core: &RecurrentCore<B>,
    x: Tensor<B, 3>,
    stored: RecurrentState<B, 4>,
    mut layer_call: impl FnMut(Call<B>) -> Tensor<B, 4>,
) -> Vec<CellState3<B>> {
    let [rows, steps, _] = x.dims();
    let shape = [rows, steps, core.hidden_size()];
    let cell = core.cell();
    let dropout = DropoutConfig::new(core.config().dropout).init();
    let layers = core.layers.len();
    let mut input = x;
    let mut out = Vec::with_capacity(layers);
    for (l, layer) in core.layers.iter().enumerate() {
        // (burn's slice and reshape each copy on the CPU: one layer needs no slice.)
        let of_layer = |e: &Tensor<B, 4>| {
            let own = if layers == 1 {
                e.clone()
            } else {
                e.clone().slice_dim(2, l..l + 1)
            };
            reshape(own, shape)
        };
        let call = Call {
            x: input,
            h0: of_layer(&stored.rs_h),
            c0: stored.rs_c.as_ref().map(of_layer),
            w_ih: layer.weight_ih.val(),
            w_hh: layer.weight_hh.as_ref().map(|w| w.val()),
            b_ih: layer.bias_ih.as_ref().map(|b| b.val()),
            b_hh: layer.bias_hh.as_ref().map(|b| b.val()),
        };
        let both = layer_call(call);
        let h = slab(&both, 0, shape);
        let c = cell.has_cell_state().then(|| slab(&both, 1, shape));
        input = if l + 1 < layers {
            dropout.forward(h.clone())
        } else {
            h.clone()
        };
        out.push((h, c));
    }
    out
}

/// The tensors of one layer call: the layer input `x` `[B, T, in]`, its stored states `h0`,
/// `c0` `[B, T, H]` and its parameters (no `w_hh`, `b_hh` for minGRU).
pub(crate) struct Call<B: Backend> {
    pub x: Tensor<B, 3>,
    pub h0: Tensor<B, 3>,
    pub c0: Option<Tensor<B, 3>>,
    pub w_ih: Tensor<B, 2>,
    pub w_hh: Option<Tensor<B, 2>>,
    pub b_ih: Option<Tensor<B, 1>>,
    pub b_hh: Option<Tensor<B, 1>>,
}

/// Runs one layer on the concrete backend `B` is; `[K, B, T, H]`.
fn dispatch<B: Backend>(
    cell: CellKind,
    recompute: Recompute,
    start: Arc<[bool]>,
    call: Call<B>,
) -> Tensor<B, 4> {
    let call: Box<dyn Any> = Box::new(call);
    match call.downcast::<Call<CpuAutodiff>>() {
        Ok(call) if cell == CellKind::MinGru => {
            same_type(mingru::autodiff_layer(recompute, start, *call))
        }
        Ok(call) => same_type(autodiff_layer(cell, recompute, start, *call)),
        Err(_) => panic!(
            "the fused recurrent backend's layer-by-layer path runs on {} only (got {}); \
             {} goes through `inference` and RecurrentCore::new rejects other backends",
            std::any::type_name::<CpuAutodiff>(),
            std::any::type_name::<B>(),
            std::any::type_name::<Cpu>(),
        ),
    }
}

/// `t` as `U` when they are the same type (checked by the caller's downcast).
pub(crate) fn same_type<T: 'static, U: 'static>(t: T) -> U {
    *(Box::new(t) as Box<dyn Any>)
        .downcast::<U>()
        .expect("dispatch picked this type")
}

/// A CPU tensor's values, row-major, borrowed when its storage is contiguous.
fn host(t: &NdArrayTensor) -> Cow<'_, [f32]> {
    match t {
        NdArrayTensor::F32(storage) => {
            let view = storage.view();
            match view.to_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(view.iter().copied().collect()),
            }
        }
        other => panic!(
            "the fused recurrent backend computes in f32, got a {:?} tensor",
            burn::tensor::TensorMetadata::dtype(other)
        ),
    }
}

/// A layer's parameters as host values (borrowed where contiguous).
struct HostParams<'a> {
    w_ih: Cow<'a, [f32]>,
    w_hh: Cow<'a, [f32]>,
    b_ih: Option<Cow<'a, [f32]>>,
    b_hh: Option<Cow<'a, [f32]>>,
}

impl<'a> HostParams<'a> {
    fn new(
        w_ih: &'a NdArrayTensor,
        w_hh: &'a NdArrayTensor,
        b_ih: Option<&'a NdArrayTensor>,
        b_hh: Option<&'a NdArrayTensor>,
    ) -> Self {
        Self {
            w_ih: host(w_ih),
            w_hh: host(w_hh),
            b_ih: b_ih.map(host),
            b_hh: b_hh.map(host),
        }
    }

    fn params(&self) -> Params<'_> {
        Params {
            w_ih: &self.w_ih,
            w_hh: &self.w_hh,
            b_ih: self.b_ih.as_deref(),
            b_hh: self.b_hh.as_deref(),
            packs: None,
        }
    }
}

/// Registers `values` (of shape `shape`) as the gradient of `node`, where the node is tracked
/// and the gradient was computed.
fn register_grad(
    grads: &mut Gradients,
    node: Option<NodeId>,
    values: Option<Vec<f32>>,
    shape: &[usize],
) {
    if let (Some(node), Some(values)) = (node, values) {
        grads.register::<Cpu>(node, primitive(values, shape));
    }
}

fn cpu_tensor<const D: usize>(t: NdArrayTensor) -> Tensor<Cpu, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The primitive and graph node of an autodiff tensor.
fn ad<const D: usize>(t: Tensor<CpuAutodiff, D>) -> AdTensor {
    t.into_primitive().tensor()
}

/// The untracked parent that stands in for an absent parameter.
fn placeholder() -> AdTensor {
    AdTensor::new(primitive(vec![0.0], &[1]))
}

fn primitive(values: Vec<f32>, shape: &[usize]) -> NdArrayTensor {
    NdArrayTensor::from(
        ArcArray::from_shape_vec(IxDyn(shape), values).expect("values match the shape"),
    )
}

/// The sizes of a layer call on `x` `[B, T, in]` with `hidden` units.
fn dims_of(cell: CellKind, x: &NdArrayTensor, hidden: usize) -> Dims {
    let xs = x.shape();
    Dims {
        cell,
        rows: xs[0],
        steps: xs[1],
        input: xs[2],
        hidden,
    }
}

/// What the backward of one layer call needs.
#[derive(Clone)]
struct LayerState {
    dims: Dims,
    start: Arc<[bool]>,
    /// The layer input and the parameters (shared with the graph, not copied).
    x: NdArrayTensor,
    w_ih: NdArrayTensor,
    w_hh: NdArrayTensor,
    b_ih: Option<NdArrayTensor>,
    b_hh: Option<NdArrayTensor>,
    /// What the forward kept, taken by the backward.
    saved: Arc<std::sync::Mutex<Option<Saved>>>,
}

impl std::fmt::Debug for LayerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerState")
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

/// The backward step of one fused layer. Parents: `x`, `h0`, `c0`, `w_ih`, `w_hh`, `b_ih`,
/// `b_hh` (absent ones are untracked placeholders).
#[derive(Debug)]
struct FusedLayerBackward;

impl Backward<Cpu, 7> for FusedLayerBackward {
    type State = LayerState;

    fn backward(self, ops: Ops<Self::State, 7>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [nx, nh, nc, nwi, nwh, nbi, nbh] = ops.parents;
        let dout = grads.consume::<Cpu>(&ops.node);
        let state = ops.state;
        let saved = state
            .saved
            .lock()
            .expect("fused layer state lock")
            .take()
            .expect("a fused layer's backward runs once");
        let d = state.dims;
        let host_params = HostParams::new(
            &state.w_ih,
            &state.w_hh,
            state.b_ih.as_ref(),
            state.b_hh.as_ref(),
        );
        let params = host_params.params();
        let wanted = Wanted {
            x: nx.is_some(),
            h0: nh.is_some(),
            c0: nc.is_some() && d.cell.has_cell_state(),
            weights: nwi.is_some() || nwh.is_some() || nbi.is_some() || nbh.is_some(),
        };
        let g = kernel::backward(
            &d,
            params,
            &host(&state.x),
            &state.start,
            saved,
            &host(&dout),
            wanted,
        );
        let (b, t, h, i, w) = (d.rows, d.steps, d.hidden, d.input, d.width());
        register_grad(grads, nx.map(|n| n.id), g.x, &[b, t, i]);
        register_grad(grads, nh.map(|n| n.id), g.h0, &[b, t, h]);
        register_grad(grads, nc.map(|n| n.id), g.c0, &[b, t, h]);
        register_grad(grads, nwi.map(|n| n.id), g.w_ih, &[w, i]);
        register_grad(grads, nwh.map(|n| n.id), g.w_hh, &[w, h]);
        register_grad(grads, nbi.map(|n| n.id), g.b_ih, &[w]);
        register_grad(grads, nbh.map(|n| n.id), g.b_hh, &[w]);
    }
}

/// One layer as a node of burn's autodiff graph on [`CpuAutodiff`].
fn autodiff_layer(
    cell: CellKind,
    recompute: Recompute,
    start: Arc<[bool]>,
    call: Call<CpuAutodiff>,
) -> Tensor<CpuAutodiff, 4> {
    let x = ad(call.x);
    let h0 = ad(call.h0);
    let c0 = call.c0.map(ad);
    let w_ih = ad(call.w_ih);
    let w_hh = ad(call.w_hh.expect("LSTM and GRU layers have W_hh"));
    let b_ih = call.b_ih.map(ad);
    let b_hh = call.b_hh.map(ad);
    let node = |t: &Option<AdTensor>| t.clone().unwrap_or_else(placeholder).node;
    let nodes = [
        x.node.clone(),
        h0.node.clone(),
        node(&c0),
        w_ih.node.clone(),
        w_hh.node.clone(),
        node(&b_ih),
        node(&b_hh),
    ];
    let d = dims_of(cell, &x.primitive, w_hh.primitive.shape()[1]);
    let run = |keep: Keep| {
        let host_params = HostParams::new(
            &w_ih.primitive,
            &w_hh.primitive,
            b_ih.as_ref().map(|b| &b.primitive),
            b_hh.as_ref().map(|b| &b.primitive),
        );
        let params = host_params.params();
        let c0h = c0.as_ref().map(|c| host(&c.primitive));
        let slab = d.rows * d.steps * d.hidden;
        // Written whole by the kernel.
        let mut out = vec![0.0f32; d.slabs() * slab];
        let (out_h, out_c) = out.split_at_mut(slab);
        let saved = kernel::forward(
            &d,
            params,
            &host(&x.primitive),
            &start,
            Stored::single(&host(&h0.primitive), c0h.as_deref()),
            keep,
            threads(),
            out_h,
            d.cell.has_cell_state().then(|| CellOut::every_step(out_c)),
        );
        let shape = [d.slabs(), d.rows, d.steps, d.hidden];
        (primitive(out, &shape), saved)
    };
    let output = match FusedLayerBackward
        .prepare::<NoCheckpointing>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let keep = keep_for(recompute);
            let (out, saved) = run(keep);
            debug_assert_eq!(saved.bytes(), kernel::saved_bytes(&d, keep));
            let state = LayerState {
                dims: d,
                start: start.clone(),
                x: x.primitive.clone(),
                w_ih: w_ih.primitive.clone(),
                w_hh: w_hh.primitive.clone(),
                b_ih: b_ih.as_ref().map(|b| b.primitive.clone()),
                b_hh: b_hh.as_ref().map(|b| b.primitive.clone()),
                saved: Arc::new(std::sync::Mutex::new(Some(saved))),
            };
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(Keep::Nothing).0),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

#[cfg(test)]
mod tests {
    use burn::module::{AutodiffModule, Module};
    use burn::tensor::{Bool, TensorData};

    use super::*;
    use crate::burn_backend::cpu_device;
    use crate::{
        set_recurrent_mode, FusedKernels, RecurrentBackend, RecurrentConfig, RecurrentMode,
    };

    fn values<const D: usize, B: Backend>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    /// Features, `next` h and `next` c of one call with resets and distinct stored states.
    fn run<B: Backend>(core: &RecurrentCore<B>, grad: bool) -> [Vec<f32>; 3] {
        let device = Default::default();
        let (b, t) = (3, 7);
        let x: Vec<f32> = (0..b * t * 2).map(|i| (i as f32 * 0.37).sin()).collect();
        let flags: Vec<bool> = (0..b * t).map(|i| i % 5 == 2).collect();
        let mut x = Tensor::<B, 3>::from_data(TensorData::new(x, [b, t, 2]), &device);
        if grad {
            x = x.require_grad();
        }
        let is_init = Tensor::<B, 2, Bool>::from_data(TensorData::new(flags, [b, t]), &device);
        // Every row, step and layer its own stored state (a wrong layer offset shows).
        let stored = |s: f32| {
            let v: Vec<f32> = (0..b * t * 2 * 4).map(|i| (i as f32 * s).cos()).collect();
            Tensor::<B, 4>::from_data(TensorData::new(v, [b, t, 2, 4]), &device)
        };
        let state = RecurrentState {
            rs_h: stored(0.3),
            rs_c: core.cell().has_cell_state().then(|| stored(-0.2)),
        };
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        let out = core.forward_batch(x, is_init, state).unwrap();
        let c = out.next.rs_c.map(values).unwrap_or_default();
        [values(out.features), values(out.next.rs_h), c]
    }

    /// Inference on `Cpu`, the untracked and the tracked autodiff paths compute the same bits.
    #[test]
    fn cpu_and_autodiff_paths_agree() {
        for cell in [CellKind::Lstm, CellKind::Gru, CellKind::MinGru] {
            let config = RecurrentConfig::new(2, 4)
                .with_num_layers(2)
                .with_backend(RecurrentBackend::Auto);
            let core = RecurrentCore::<CpuAutodiff>::new(&config, cell, &cpu_device()).unwrap();
            assert_eq!(core.backend(), RecurrentBackend::Fused, "auto picks fused");
            let tracked = run(&core, true);
            let untracked = run(&core.clone().no_grad(), false);
            let inference = run(&core.valid(), false);
            assert_eq!(tracked, untracked, "{cell:?}");
            assert_eq!(tracked, inference, "{cell:?}");
            assert!(tracked[0].iter().any(|&v| v != 0.0));
            assert_eq!(tracked[2].is_empty(), cell != CellKind::Lstm);
        }
    }

    #[test]
    fn fused_needs_a_cpu_backend_and_recompute_needs_fused() {
        let config = RecurrentConfig::new(2, 4).with_backend(RecurrentBackend::Fused);
        assert!(config.validate(CellKind::Gru, FusedKernels::Cpu).is_ok());
        let err = config
            .validate(CellKind::Gru, FusedKernels::Unavailable)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"fused\"") && err.contains("CPU"), "{err}");
        let full = RecurrentConfig::new(2, 4).with_recompute(Recompute::Full);
        assert!(
            full.validate(CellKind::Lstm, FusedKernels::Cpu).is_ok(),
            "auto -> fused"
        );
        let err = full
            .validate(CellKind::Lstm, FusedKernels::Unavailable)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"full\"") && err.contains("LstmModule"),
            "{err}"
        );
        assert_eq!(
            "fused".parse::<RecurrentBackend>().unwrap(),
            RecurrentBackend::Fused
        );
    }

    #[test]
    fn saved_bytes_shrink_with_recompute() {
        let none = saved_bytes(CellKind::Lstm, 128, 64, 256, 1, Recompute::None);
        let full = saved_bytes(CellKind::Lstm, 128, 64, 256, 1, Recompute::Full);
        // LSTM: h, c and 4 gates per row and step vs h and c.
        assert_eq!(none, 4 * 128 * 64 * 256 * 6);
        assert_eq!(full, 4 * 128 * 64 * 256 * 2);
        let gru = saved_bytes(CellKind::Gru, 128, 64, 256, 2, Recompute::Full);
        assert_eq!(gru, 2 * 4 * 128 * 64 * 256);
        // minGRU: its pre-activations P [B*T, 2H], nothing with recompute.
        let mingru = saved_bytes(CellKind::MinGru, 128, 64, 256, 1, Recompute::None);
        assert_eq!(mingru, 4 * 128 * 64 * 512);
        assert_eq!(
            saved_bytes(CellKind::MinGru, 128, 64, 256, 1, Recompute::Full),
            0
        );
    }
}
