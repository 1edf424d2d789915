//! `fused` on a CubeCL device: the GPU twin of the CPU fused backend (TorchRL's `triton`).
//!
//! Built with the `cuda` or `wgpu` feature; runs on burn's CUDA and wgpu backends, with or
//! without autodiff ([`available`]). Per layer: the input projection of every step as one
//! burn matmul (`[B*T, in] x [in, G*H]`), then **one kernel launch** for the whole time loop
//! ([`kernel`]: one cube per tile of batch rows, the stored state loaded at every step that
//! starts a segment). Under autodiff each layer is one custom burn autodiff node, as on the
//! CPU ([`autodiff`]): its backward is one more launch (the reverse time loop, which writes the
//! gate gradients), then burn matmuls for `dx`, `dW_ih`, `dW_hh` (split over `B*T`:
//! [`weight_grad`](matmul::weight_grad)) and the biases ([`matmul`]). With
//! `recompute = "full"` the forward keeps nothing but its output and the backward relaunches
//! the forward to get the gates back.
//!
//! Layers are chained as burn tensors (dropout between them is burn's op) by the CPU fused
//! backend's `run_layers`; the module writes `next` at the segment ends from the per-step
//! states. No autotuning: the launch shape follows from `H`, the batch and the device's
//! multiprocessor count and shared memory ([`launch_of`]), and burn's matmul is built without
//! its `autotune` feature here.
//!
//! Precision ([`MatmulPrecision`]): `tf32` and `bf16` round the operands of the recurrent
//! product (see [`kernel`]); everything else is `f32`.

mod autodiff;
mod kernel;
mod matmul;

use std::any::{Any, TypeId};

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime};

use self::autodiff::autodiff_layer;
use self::matmul::matmul;
use super::fused::{run_layers, same_type, Call};
use super::scan::CellState3;
use super::Segments;
use crate::{CellKind, MatmulPrecision, Recompute, RecurrentCore, RecurrentState};

/// burn's CubeCL backend in `f32` on runtime `R` (`BT`: its bool element).
type Cube<R, BT> = CubeBackend<R, f32, i32, BT>;

/// The backends this module runs on, as `(plain, autodiff)` type ids.
fn backends() -> Vec<TypeId> {
    #[allow(unused_mut)]
    let mut ids = Vec::new();
    #[cfg(feature = "wgpu")]
    ids.extend([
        TypeId::of::<crate::burn_backend::Wgpu>(),
        TypeId::of::<crate::burn_backend::WgpuAutodiff>(),
    ]);
    #[cfg(feature = "cuda")]
    ids.extend([
        TypeId::of::<crate::burn_backend::Cuda>(),
        TypeId::of::<crate::burn_backend::CudaAutodiff>(),
    ]);
    ids
}

/// Whether the CubeCL fused kernels run on backend `B` (burn's wgpu and CUDA backends in
/// `f32`, with or without autodiff, in a build with their feature).
pub fn available<B: Backend>() -> bool {
    backends().contains(&TypeId::of::<B>())
}

/// What one layer call computes.
#[derive(Clone, Copy, Debug)]
struct How {
    cell: CellKind,
    recompute: Recompute,
    precision: u32,
}

/// Returns, per layer, the post-step `h` (and `c`) `[B, T, H]`.
pub(crate) fn run<B: Backend>(
    core: &RecurrentCore<B>,
    x: Tensor<B, 3>,
    segments: &Segments,
    stored: RecurrentState<B, 4>,
) -> Vec<CellState3<B>> {
    let how = How {
        cell: core.cell(),
        recompute: core.config().recompute,
        precision: match core.config().matmul_precision.resolve() {
            MatmulPrecision::Tf32 => kernel::TF32,
            MatmulPrecision::Bf16 => kernel::BF16,
            _ => kernel::IEEE,
        },
    };
    let flags: Vec<f32> = segments
        .start
        .iter()
        .map(|&s| if s { 1.0 } else { 0.0 })
        .collect();
    let start = Tensor::<B, 2>::from_data(
        TensorData::new(flags, [segments.rows, segments.steps]),
        &x.device(),
    );
    run_layers(core, x, stored, |call| dispatch(how, &start, call))
}

/// Runs one layer on the concrete backend `B` is; `[K, B, T, H]`.
fn dispatch<B: Backend>(how: How, start: &Tensor<B, 2>, call: Call<B>) -> Tensor<B, 4> {
    #[allow(unused_mut)]
    let mut any: Box<dyn Any> = Box::new((call, start.clone()));
    #[cfg(feature = "wgpu")]
    {
        use burn::backend::wgpu::WgpuRuntime;
        any = match try_layer::<B, WgpuRuntime, u32>(how, any) {
            Ok(out) => return out,
            Err(any) => any,
        };
    }
    #[cfg(feature = "cuda")]
    {
        use cubecl::cuda::CudaRuntime;
        any = match try_layer::<B, CudaRuntime, u8>(how, any) {
            Ok(out) => return out,
            Err(any) => any,
        };
    }
    drop(any);
    panic!(
        "the CubeCL fused recurrent backend does not run on {} (RecurrentCore::new rejects it)",
        std::any::type_name::<B>()
    )
}

/// The layer on `Cube<R, BT>` or its autodiff, if `B` is one of them (else `any` back).
fn try_layer<B: Backend, R: CubeRuntime, BT: BoolElement>(
    how: How,
    any: Box<dyn Any>,
) -> Result<Tensor<B, 4>, Box<dyn Any>> {
    type Ad<R, BT> = Autodiff<Cube<R, BT>>;
    let any = match any.downcast::<(Call<Ad<R, BT>>, Tensor<Ad<R, BT>, 2>)>() {
        Ok(both) => {
            let (call, start) = *both;
            let start = start.inner().into_primitive().tensor();
            return Ok(same_type(autodiff_layer::<R, BT>(how, start, call)));
        }
        Err(any) => any,
    };
    match any.downcast::<(Call<Cube<R, BT>>, Tensor<Cube<R, BT>, 2>)>() {
        Ok(both) => {
            let (call, start) = *both;
            let inputs = Inputs::of(call, start.into_primitive().tensor());
            let (out, _) = forward::<R, BT>(how, &inputs, false);
            Ok(same_type(wrap::<R, BT, 4>(out)))
        }
        Err(any) => Err(any),
    }
}

fn wrap<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: CubeTensor<R>,
) -> Tensor<Cube<R, BT>, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

fn prim<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: Tensor<Cube<R, BT>, D>,
) -> CubeTensor<R> {
    into_contiguous(t.into_primitive().tensor())
}

/// One layer call's tensors on the inner backend, contiguous.
#[derive(Clone, Debug)]
struct Inputs<R: CubeRuntime> {
    /// `[B, T, in]`.
    x: CubeTensor<R>,
    /// `[B, T, H]`.
    h0: CubeTensor<R>,
    c0: Option<CubeTensor<R>>,
    /// `[G*H, in]`, `[G*H, H]` (none for minGRU), `[G*H]`.
    w_ih: CubeTensor<R>,
    w_hh: Option<CubeTensor<R>>,
    b_ih: Option<CubeTensor<R>>,
    b_hh: Option<CubeTensor<R>>,
    /// `[B, T]`, 1.0 where a segment starts.
    start: CubeTensor<R>,
}

impl<R: CubeRuntime> Inputs<R> {
    fn of<BT: BoolElement>(call: Call<Cube<R, BT>>, start: CubeTensor<R>) -> Self {
        Self {
            x: prim(call.x),
            h0: prim(call.h0),
            c0: call.c0.map(prim),
            w_ih: prim(call.w_ih),
            w_hh: call.w_hh.map(prim),
            b_ih: call.b_ih.map(prim),
            b_hh: call.b_hh.map(prim),
            start: into_contiguous(start),
        }
    }

    fn dims(&self) -> [usize; 4] {
        let s = self.x.meta.shape();
        [s[0], s[1], s[2], self.h0.meta.shape()[2]]
    }
}

/// Units per cube for hidden size `h`: a warp multiple covering `h`, at most 256 (and the
/// device's limit); units stride over the hidden units beyond.
fn units<R: CubeRuntime>(t: &CubeTensor<R>, hidden: usize) -> u32 {
    let limit = t.client.properties().hardware.max_units_per_cube.min(256);
    (hidden.div_ceil(32) * 32).min(limit as usize) as u32
}

/// The forward of one layer: `out` `[K, B, T, H]` and, when `keep`, the saved gates
/// `[B, T, 4H]`.
fn forward<R: CubeRuntime, BT: BoolElement>(
    how: How,
    inputs: &Inputs<R>,
    keep: bool,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    let [rows, steps, input, hidden] = inputs.dims();
    let gh = how.cell.gates() * hidden;
    let k = if how.cell.has_cell_state() { 2 } else { 1 };
    let device = &inputs.x.device;
    // x W_ih^T + b_ih for every step: one GEMM.
    let mut xp = matmul(
        wrap::<R, BT, 3>(inputs.x.clone()).reshape([rows * steps, input]),
        wrap::<R, BT, 2>(inputs.w_ih.clone()).transpose(),
        how.precision,
    );
    if let Some(b) = &inputs.b_ih {
        xp = xp + wrap::<R, BT, 1>(b.clone()).unsqueeze_dim(0);
    }
    let xp = prim(xp.reshape([rows, steps, gh]));
    let dummy = || prim(Tensor::<Cube<R, BT>, 1>::zeros([1], device));
    // The output `[K, B, T, H]` and, when `keep`, the saved gates `[B, T, width]`.
    let buffers = |k: usize, width: usize| {
        let out = prim(Tensor::<Cube<R, BT>, 4>::empty(
            [k, rows, steps, hidden],
            device,
        ));
        let saved = keep.then(|| {
            prim(Tensor::<Cube<R, BT>, 3>::empty(
                [rows, steps, width],
                device,
            ))
        });
        (out, saved.unwrap_or_else(dummy))
    };
    let Some(w_hh) = &inputs.w_hh else {
        // minGRU: the scan over xp's [z | h~] pre-activations, no recurrent product.
        let (out, saved) = buffers(1, gh);
        let launch = launch_of(how, &out, rows, hidden);
        kernel::mingru_forward(launch, &xp, &inputs.h0, &inputs.start, &out, &saved, keep);
        return (out, keep.then_some(saved));
    };
    let w_t = rounded::<R, BT>(
        prim(wrap::<R, BT, 2>(w_hh.clone()).transpose()),
        how.precision,
    );
    let b_hh = match &inputs.b_hh {
        Some(b) => b.clone(),
        None => prim(Tensor::<Cube<R, BT>, 1>::zeros([gh], device)),
    };
    let c0 = inputs.c0.clone().unwrap_or_else(dummy);
    let (out, saved) = buffers(k, 4 * hidden);
    let launch = launch_of(how, &out, rows, hidden);
    kernel::forward(
        launch,
        &xp,
        &w_t,
        &b_hh,
        &inputs.h0,
        &c0,
        &inputs.start,
        &out,
        &saved,
        keep,
    );
    (out, keep.then_some(saved))
}

/// Most batch rows one cube of the LSTM/GRU kernels owns.
const MAX_TILE: usize = 16;

/// The launch of a layer's kernels over `rows` batch rows, refused (naming the size) where the
/// device cannot run it.
///
/// The LSTM/GRU kernels give a cube a tile of rows: every step of a cube reads all of `W_hh`
/// (1 MiB at H 256), so a cube owning `tile` rows reads it once for all of them, where one
/// cube per row reads it once per row. The tile halves from [`MAX_TILE`] until it is no wider
/// than the batch, the grid keeps a cube per multiprocessor (where the device reports their
/// number) and the backward's shared memory fits the device. A tile of 1 runs the one-row
/// kernels; minGRU's kernels run one row per cube.
fn launch_of<R: CubeRuntime>(
    how: How,
    t: &CubeTensor<R>,
    rows: usize,
    hidden: usize,
) -> kernel::Launch {
    let hw = &t.client.properties().hardware;
    // Per row, the backward's shared memory: G*H gate gradients and three H vectors.
    let shared = if how.cell.has_hidden_weights() {
        (how.cell.gates() + 3) * hidden * 4
    } else {
        0
    };
    assert!(
        shared <= hw.max_shared_memory_size,
        "the CubeCL fused {} kernel keeps {shared} bytes per batch row in shared memory for \
         hidden_size = {hidden}; this device allows {} (use backend = \"scan\")",
        how.cell.name(),
        hw.max_shared_memory_size
    );
    let mut tile = if shared > 0 { MAX_TILE } else { 1 };
    let sms = hw.num_streaming_multiprocessors.unwrap_or(1).max(1) as usize;
    while tile > 1
        && (tile > rows || tile * shared > hw.max_shared_memory_size || rows.div_ceil(tile) < sms)
    {
        tile /= 2;
    }
    assert!(
        rows.div_ceil(tile) <= hw.max_cube_count.0 as usize,
        "the CubeCL fused kernel runs one cube per {tile} batch rows; {rows} rows exceed this \
         device's {} cubes per launch (split the batch)",
        hw.max_cube_count.0
    );
    kernel::Launch {
        cell: match how.cell {
            CellKind::Lstm => kernel::LSTM,
            CellKind::Gru => kernel::GRU,
            CellKind::MinGru => kernel::MINGRU,
        },
        hidden,
        precision: how.precision,
        units: units(t, hidden),
        tile,
    }
}

/// `w` with its elements rounded at `precision` (`w` itself for `ieee`).
fn rounded<R: CubeRuntime, BT: BoolElement>(w: CubeTensor<R>, precision: u32) -> CubeTensor<R> {
    if precision == kernel::IEEE {
        return w;
    }
    let out = prim(Tensor::<Cube<R, BT>, 2>::empty(
        [w.meta.shape()[0], w.meta.shape()[1]],
        &w.device,
    ));
    kernel::round_into(&w, &out, precision);
    out
}
