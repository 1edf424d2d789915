//! Zero-copy reshapes and slabs and a one-pass row mask of CPU tensors, each with its autodiff
//! node on [`CpuAutodiff`]; other backends get burn's own ops.
//!
//! burn's CPU backend copies on every `reshape` (`to_shape` gives a view, `into_shared` copies
//! it) and every `slice`, and `mask_fill` with a broadcast mask copies the tensor and walks a
//! materialized `[B, T, H]` boolean tensor. Around one fused layer call those were whole
//! `[B, T, H]` copies on one thread: an eighth of a forward+backward at T = 64.

use std::any::TypeId;
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ndarray::NdArrayTensor;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData, TensorMetadata, TensorPrimitive};
use ndarray::{ArcArray, IxDyn};

use super::{cpu_tensor, host, primitive, same_type, AdTensor};
use crate::burn_backend::{Cpu, CpuAutodiff};

/// `t` as `shape` (same element count), sharing `t`'s storage where it is contiguous on the CPU
/// backends; burn's `reshape` elsewhere.
pub(crate) fn reshape<B: Backend, const D1: usize, const D2: usize>(
    t: Tensor<B, D1>,
    shape: [usize; D2],
) -> Tensor<B, D2> {
    let id = TypeId::of::<B>();
    if id == TypeId::of::<Cpu>() {
        let t: Tensor<Cpu, D1> = same_type(t);
        let out = reshaped(t.into_primitive().tensor(), &shape);
        return same_type(cpu_tensor::<D2>(out));
    }
    if id == TypeId::of::<CpuAutodiff>() {
        let t: Tensor<CpuAutodiff, D1> = same_type(t);
        return same_type(autodiff_reshape::<D2>(t.into_primitive().tensor(), &shape));
    }
    t.reshape(shape)
}

/// `t` (an f32 CPU tensor) as `shape`: the same storage where `t` is in standard layout, else a
/// standard-layout copy.
fn reshaped(t: NdArrayTensor, shape: &[usize]) -> NdArrayTensor {
    let NdArrayTensor::F32(storage) = t else {
        panic!(
            "the fused recurrent backend computes in f32, got {:?}",
            t.dtype()
        );
    };
    assert_eq!(
        storage.len(),
        shape.iter().product::<usize>(),
        "reshape of {:?} to {shape:?}",
        storage.shape()
    );
    let storage = storage.into_shared();
    let storage = if storage.is_standard_layout() {
        storage
    } else {
        storage.as_standard_layout().into_owned().into_shared()
    };
    let out: ArcArray<f32, IxDyn> = storage
        .into_shape_with_order(IxDyn(shape))
        .expect("a standard-layout array takes any shape of its size");
    NdArrayTensor::from(out)
}

/// The backward of [`autodiff_reshape`]: the gradient reshaped back (no copy).
#[derive(Debug)]
struct ReshapeBackward;

impl Backward<Cpu, 1> for ReshapeBackward {
    /// The input's shape.
    type State = Vec<usize>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Cpu>(&ops.node);
        if let Some(parent) = parent {
            grads.register::<Cpu>(parent.id, reshaped(grad, &ops.state));
        }
    }
}

fn autodiff_reshape<const D: usize>(t: AdTensor, shape: &[usize]) -> Tensor<CpuAutodiff, D> {
    let input_shape = t.primitive.shape().to_vec();
    let out = reshaped(t.primitive.clone(), shape);
    node(ReshapeBackward, &t, input_shape, out)
}

/// `out` as the output of the one-parent node `op` on `input`, keeping `state` for the
/// backward where the graph tracks `input`.
fn node<Op: Backward<Cpu, 1>, const D: usize>(
    op: Op,
    input: &AdTensor,
    state: Op::State,
    out: NdArrayTensor,
) -> Tensor<CpuAutodiff, D> {
    let output = match op
        .prepare::<NoCheckpointing>([input.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(state, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

/// Slab `k` of a layer call's `[K, B, T, H]` output as `[B, T, H]`: a [`reshape`] where `K = 1`
/// (a GRU's output is its `h`), a view of the output on [`CpuAutodiff`], burn's slice and
/// reshape elsewhere.
pub(crate) fn slab<B: Backend>(both: &Tensor<B, 4>, k: usize, shape: [usize; 3]) -> Tensor<B, 3> {
    if both.dims()[0] == 1 {
        return reshape(both.clone(), shape);
    }
    if TypeId::of::<B>() == TypeId::of::<CpuAutodiff>() {
        return same_type(autodiff_slab(same_type(both.clone()), k));
    }
    both.clone().slice_dim(0, k..k + 1).reshape(shape)
}

/// Which slab [`SlabBackward`] took, of how many.
#[derive(Clone, Debug)]
struct SlabState {
    k: usize,
    slabs: usize,
    shape: [usize; 3],
}

/// The backward of [`autodiff_slab`]: the slab's gradient placed in a zeroed `[K, B, T, H]`.
#[derive(Debug)]
struct SlabBackward;

impl Backward<Cpu, 1> for SlabBackward {
    type State = SlabState;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Cpu>(&ops.node);
        if let Some(parent) = parent {
            let SlabState { k, slabs, shape } = ops.state;
            let n: usize = shape.iter().product();
            let mut full = vec![0.0f32; slabs * n];
            full[k * n..(k + 1) * n].copy_from_slice(&host(&grad));
            let [b, t, h] = shape;
            grads.register::<Cpu>(parent.id, primitive(full, &[slabs, b, t, h]));
        }
    }
}

/// Slab `k` of `[K, B, T, H]` as `[B, T, H]`, sharing the output's memory. burn's slice and
/// reshape copied the slab, and the slice's backward filled a zero `[K, B, T, H]` one element
/// at a time.
fn autodiff_slab(both: Tensor<CpuAutodiff, 4>, k: usize) -> Tensor<CpuAutodiff, 3> {
    let both: AdTensor = both.into_primitive().tensor();
    let NdArrayTensor::F32(storage) = &both.primitive else {
        panic!("the fused recurrent backend computes in f32");
    };
    let all = storage.clone().into_shared();
    let &[slabs, b, t, h] = all.shape() else {
        panic!(
            "a layer call's output is [K, B, T, H], got {:?}",
            all.shape()
        );
    };
    let out = NdArrayTensor::from(all.index_axis_move(ndarray::Axis(0), k));
    let state = SlabState {
        k,
        slabs,
        shape: [b, t, h],
    };
    node(SlabBackward, &both, state, out)
}

/// `t` (`[B, T, H]`) with the rows `(b, t)` where `keep[b * T + t]` is false set to zero.
/// On the CPU backends one pass (zeros, then the kept rows copied; the gradient the same way);
/// elsewhere burn's `mask_fill` with the mask broadcast over `H`.
pub(crate) fn keep_rows<B: Backend>(t: Tensor<B, 3>, keep: &Arc<[bool]>) -> Tensor<B, 3> {
    let [b, steps, h] = t.dims();
    assert_eq!(keep.len(), b * steps, "keep is [B, T]");
    let id = TypeId::of::<B>();
    if id == TypeId::of::<Cpu>() {
        let t: Tensor<Cpu, 3> = same_type(t);
        let out = kept(&t.into_primitive().tensor(), keep, h);
        return same_type(cpu_tensor::<3>(out));
    }
    if id == TypeId::of::<CpuAutodiff>() {
        let t: Tensor<CpuAutodiff, 3> = same_type(t);
        return same_type(autodiff_keep_rows(t.into_primitive().tensor(), keep, h));
    }
    let drop: Vec<bool> = keep.iter().map(|k| !k).collect();
    let drop = Tensor::<B, 1, Bool>::from_data(TensorData::new(drop, [b * steps]), &t.device())
        .reshape([b, steps, 1])
        .expand([b, steps, h]);
    t.mask_fill(drop, 0.0)
}

/// The rows of `t` (rows of `h` values) that `keep` marks, zeros elsewhere.
fn kept(t: &NdArrayTensor, keep: &[bool], h: usize) -> NdArrayTensor {
    let values = host(t);
    let mut out = vec![0.0f32; values.len()];
    for (r, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
        out[r * h..(r + 1) * h].copy_from_slice(&values[r * h..(r + 1) * h]);
    }
    primitive(out, &t.shape().to_vec())
}

/// The backward of [`autodiff_keep_rows`]: the gradient of the kept rows, zeros elsewhere.
#[derive(Debug)]
struct KeepRowsBackward;

impl Backward<Cpu, 1> for KeepRowsBackward {
    /// The kept rows and `H`.
    type State = (Arc<[bool]>, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Cpu>(&ops.node);
        if let Some(parent) = parent {
            let (keep, h) = ops.state;
            grads.register::<Cpu>(parent.id, kept(&grad, &keep, h));
        }
    }
}

fn autodiff_keep_rows(t: AdTensor, keep: &Arc<[bool]>, h: usize) -> Tensor<CpuAutodiff, 3> {
    let out = kept(&t.primitive, keep, h);
    node(KeepRowsBackward, &t, (keep.clone(), h), out)
}

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;

    use super::*;
    use crate::burn_backend::cpu_device;

    fn values<const D: usize, B: Backend>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    fn ramp<B: Backend<Device = burn::backend::ndarray::NdArrayDevice>, const D: usize>(
        shape: [usize; D],
    ) -> Tensor<B, D> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        Tensor::from_data(TensorData::new(v, shape), &cpu_device())
    }

    /// Each view and mask gives burn's own op's values and, on autodiff, its gradients
    /// (against a non-uniform upstream gradient, so a misplaced element shows).
    #[test]
    fn views_match_burn_ops_and_their_gradients() {
        let keep: Arc<[bool]> = (0..6).map(|i| i % 4 != 1).collect::<Vec<_>>().into();
        let weights = ramp::<CpuAutodiff, 3>([2, 3, 4]);
        // Values on both CPU backends.
        let x = ramp::<Cpu, 4>([2, 1, 3, 4]);
        assert_eq!(
            values(reshape(x.clone(), [2, 3, 4])),
            values(x.clone().reshape([2, 3, 4]))
        );
        let x3 = ramp::<Cpu, 3>([2, 3, 4]);
        let drop: Vec<bool> = keep.iter().map(|k| !k).collect();
        let mask = Tensor::<Cpu, 1, Bool>::from_data(TensorData::new(drop, [6]), &cpu_device())
            .reshape([2, 3, 1])
            .expand([2, 3, 4]);
        let burn_masked = values(x3.clone().mask_fill(mask, 0.0));
        assert_eq!(values(keep_rows(x3.clone(), &keep)), burn_masked);
        // A transposed (not standard-layout) input is copied into the new shape.
        let xt = ramp::<Cpu, 2>([3, 4]).transpose();
        assert_eq!(
            values(reshape(xt.clone(), [12])),
            values(xt.clone().reshape([12]))
        );
        // Gradients on autodiff: ours against burn's ops on the same graph.
        let grads_of = |ours: bool| {
            let x = ramp::<CpuAutodiff, 4>([2, 2, 3, 4]).require_grad();
            let (h, c) = if ours {
                (slab(&x, 0, [2, 3, 4]), slab(&x, 1, [2, 3, 4]))
            } else {
                let s = |k: usize| x.clone().slice_dim(0, k..k + 1).reshape([2, 3, 4]);
                (s(0), s(1))
            };
            let masked = if ours {
                keep_rows(c, &keep)
            } else {
                let drop: Vec<bool> = keep.iter().map(|k| !k).collect();
                let mask = Tensor::<CpuAutodiff, 1, Bool>::from_data(
                    TensorData::new(drop, [6]),
                    &cpu_device(),
                )
                .reshape([2, 3, 1])
                .expand([2, 3, 4]);
                c.mask_fill(mask, 0.0)
            };
            let flat: Tensor<CpuAutodiff, 2> = if ours {
                reshape(masked.clone() * 2.0 + h.clone() * weights.clone(), [6, 4])
            } else {
                (masked.clone() * 2.0 + h.clone() * weights.clone()).reshape([6, 4])
            };
            let loss = (flat.clone() * flat).sum();
            let grads = loss.backward();
            (
                values(masked),
                x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap(),
            )
        };
        let (ours, burns) = (grads_of(true), grads_of(false));
        assert_eq!(ours.0, burns.0, "masked values");
        assert_eq!(ours.1, burns.1, "gradients");
        assert!(ours.1.iter().any(|&g| g != 0.0));
        // A one-slab (GRU) output's gradient is the slab's, reshaped.
        let x = ramp::<CpuAutodiff, 4>([1, 2, 3, 4]).require_grad();
        let h = slab(&x, 0, [2, 3, 4]);
        let grads = (h.clone() * h).sum().backward();
        let g = x.grad(&grads).unwrap();
        assert_eq!(g.dims(), [1, 2, 3, 4]);
        let expected: Vec<f32> = values(ramp::<Cpu, 4>([1, 2, 3, 4]) * 2.0);
        assert_eq!(g.into_data().to_vec::<f32>().unwrap(), expected);
    }
}
