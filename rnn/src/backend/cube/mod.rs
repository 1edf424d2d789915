//! `fused` on a CubeCL device: the GPU twin of the CPU fused backend (TorchRL's `triton`).
//!
//! Built with the `cuda` or `wgpu` feature; runs on burn's CUDA and wgpu backends, with or
//! without autodiff ([`available`]). Per layer: the input projection of every step as one
//! burn matmul (`[B*T, in] x [in, G*H]`), then **one kernel launch** for the whole time loop
//! ([`kernel`]: one cube per tile of batch rows, the stored state loaded at every step that
//! starts a segment). Under autodiff each layer is one custom burn autodiff node, as on the
//! CPU: its backward is one more launch (the reverse time loop, which writes the gate
//! gradients), then burn matmuls for `dx`, `dW_ih`, `dW_hh` (split over `B*T`:
//! [`weight_grad`]) and the biases. With `recompute = "full"` the forward keeps nothing but its
//! output and the backward relaunches the forward to get the gates back.
//!
//! Layers are chained as burn tensors (dropout between them is burn's op) by the CPU fused
//! backend's `run_layers`; the module writes `next` at the segment ends from the per-step
//! states. No autotuning: the launch shape follows from `H`, the batch and the device's
//! multiprocessor count and shared memory ([`launch_of`]), and burn's matmul is built without
//! its `autotune` feature here.
//!
//! Precision ([`MatmulPrecision`]): `tf32` and `bf16` round the operands of the recurrent
//! product (see [`kernel`]); everything else is `f32`.

mod kernel;

use std::any::{Any, TypeId};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime};

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

/// `a x b` at the call's precision. `ieee` runs cubek's unit (register) matmul: burn's own
/// matmul stages `f32` operands as `tf32` on any device with tensor cores (cubek-matmul 0.2,
/// `adjust_dtypes`), so on an H100 every product of the layer would round to 10 bits of
/// mantissa. `tf32` and `bf16` keep burn's matmul (tensor cores where the device has them).
fn matmul<R: CubeRuntime, BT: BoolElement, const D: usize>(
    a: Tensor<Cube<R, BT>, D>,
    b: Tensor<Cube<R, BT>, D>,
    precision: u32,
) -> Tensor<Cube<R, BT>, D> {
    if precision != kernel::IEEE {
        return a.matmul(b);
    }
    use burn::tensor::DType;
    use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use cubek::matmul::launch::{launch_ref, Strategy};
    use cubek::matmul::routines::simple_unit::SimpleUnitSelectionArgs;
    use cubek::matmul::routines::{BlueprintStrategy, TileSizeSelection};
    use cubek::std::InputBinding;
    // Transposed operands stay views: cubek reads either layout (burn's matmul passes them
    // the same way), and the naive fallback makes its own copy where it needs one.
    let (a, b) = (a.into_primitive().tensor(), b.into_primitive().tensor());
    let out = burn_cubecl::kernel::matmul::init_matmul_output(&a, &b, DType::F32);
    let launch = |strategy: &Strategy| {
        let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
            lhs: a.dtype.into(),
            rhs: b.dtype.into(),
            out: out.dtype.into(),
        });
        launch_ref(
            strategy,
            &out.client,
            InputBinding::new(a.clone().binding(), a.dtype.into()),
            InputBinding::new(b.clone().binding(), b.dtype.into()),
            out.clone().binding(),
            &mut dtypes,
        )
    };
    let unit = Strategy::SimpleUnit(BlueprintStrategy::Inferred(SimpleUnitSelectionArgs {
        tile_size: TileSizeSelection::MaxTileSize,
    }));
    // The naive kernel takes any shape the tiled one refuses (both multiply in f32).
    if let Err(unit_err) = launch(&unit) {
        launch(&Strategy::Naive).unwrap_or_else(|naive_err| {
            panic!("no f32 matmul launches: unit {unit_err:?}, naive {naive_err:?}")
        });
    }
    wrap::<R, BT, D>(out)
}

/// Rows of `B*T`, at least, per part of a split weight gradient ([`weight_grad`]).
const SPLIT_ROWS: usize = 1024;
/// Parts of a split weight gradient, at most.
const MAX_SPLITS: usize = 32;

/// `aᵀ b` for `a` `[n, p]` and `b` `[n, q]`: a layer's weight gradient, whose `n = B*T` runs to
/// hundreds of thousands over an output of a few hundred rows and columns. One matmul over all
/// of `n` gives the device a few dozen output tiles, each a loop over `n`, and leaves most of it
/// idle. So `n` is split into parts (split-K): up to [`MAX_SPLITS`] of at least [`SPLIT_ROWS`]
/// rows, a divisor of `n`, multiplied as one batched matmul and summed. `RECUR_CUBE_SPLIT_K`
/// sets the number of parts instead (1: no split), for benchmarks.
fn weight_grad<R: CubeRuntime, BT: BoolElement>(
    a: Tensor<Cube<R, BT>, 2>,
    b: Tensor<Cube<R, BT>, 2>,
    precision: u32,
) -> CubeTensor<R> {
    let ([n, p], q) = (a.dims(), b.dims()[1]);
    let wanted = match std::env::var("RECUR_CUBE_SPLIT_K") {
        Ok(v) => match v.parse::<usize>() {
            Ok(parts) if parts > 0 => parts,
            _ => panic!("RECUR_CUBE_SPLIT_K = {v:?}: expected a number of parts, at least 1"),
        },
        Err(_) => MAX_SPLITS.min(n / SPLIT_ROWS),
    };
    let parts = divisor_at_most(n, wanted.min(n));
    if parts == 1 {
        return prim(matmul(a.transpose(), b, precision));
    }
    let a = a.reshape([parts, n / parts, p]).swap_dims(1, 2);
    let b = b.reshape([parts, n / parts, q]);
    prim(matmul(a, b, precision).sum_dim(0).reshape([p, q]))
}

/// The largest divisor of `n` that is at most `k` (1 at the least): how many equal parts of
/// `n` rows [`weight_grad`] and [`column_sum`] use.
fn divisor_at_most(n: usize, k: usize) -> usize {
    (1..=k.max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

/// The column sums of `t` `[n, q]`: a layer's bias gradient, summed over `n = B*T` rows. burn's
/// `sum_dim(0)` over all of `n` runs one loop of `n` steps per column: 32 ms of an LSTM's
/// 112 ms fwd+bwd at B 2048, T 128 on an H100, per bias. Reshaped to `[parts, n / parts, q]`
/// (`parts` the largest divisor of `n` up to `√n`), the first sum has `parts * q` loops of
/// `n / parts` steps and the second `q` loops of `parts`.
fn column_sum<R: CubeRuntime, BT: BoolElement>(t: Tensor<Cube<R, BT>, 2>) -> CubeTensor<R> {
    let [n, q] = t.dims();
    let parts = divisor_at_most(n, n.isqrt());
    let t = t.reshape([parts, n / parts, q]).sum_dim(1);
    prim(t.sum_dim(0).reshape([q]))
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

/// What the backward of one layer call needs.
#[derive(Clone, Debug)]
struct LayerState<R: CubeRuntime> {
    how: How,
    inputs: Inputs<R>,
    /// The forward's output `[K, B, T, H]`.
    out: CubeTensor<R>,
    /// The saved gates (`recompute = "none"`).
    saved: Option<CubeTensor<R>>,
}

/// The backward step of one CubeCL fused layer. Parents: `x`, `h0`, `c0`, `w_ih`, `w_hh`,
/// `b_ih`, `b_hh` (absent ones are untracked placeholders).
#[derive(Debug)]
struct CubeLayerBackward;

impl<R: CubeRuntime, BT: BoolElement> Backward<Cube<R, BT>, 7> for CubeLayerBackward {
    type State = LayerState<R>;

    fn backward(self, ops: Ops<Self::State, 7>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [nx, nh, nc, nwi, nwh, nbi, nbh] = ops.parents;
        let dout = into_contiguous(grads.consume::<Cube<R, BT>>(&ops.node));
        let LayerState {
            how,
            inputs,
            out,
            saved,
        } = ops.state;
        let saved =
            saved.unwrap_or_else(|| forward::<R, BT>(how, &inputs, true).1.expect("kept gates"));
        let [rows, steps, input, hidden] = inputs.dims();
        let gh = how.cell.gates() * hidden;
        let lstm = how.cell.has_cell_state();
        let device = &out.device;
        let flat =
            |t: CubeTensor<R>, width: usize| wrap::<R, BT, 3>(t).reshape([rows * steps, width]);
        let empty = |shape: [usize; 3]| prim(Tensor::<Cube<R, BT>, 3>::empty(shape, device));
        let launch = launch_of(how, &out, rows, hidden);
        let (dg_ih, dh0) = (empty([rows, steps, gh]), empty([rows, steps, hidden]));
        // LSTM/GRU: `W_hh`'s gate gradients (a GRU's own, an LSTM's are `dg_ih`), the entering
        // states and `dc0`; minGRU has no recurrent weights.
        let mut recurrent = None;
        if how.cell == CellKind::MinGru {
            let (h0, start) = (&inputs.h0, &inputs.start);
            kernel::mingru_backward(launch, h0, start, &out, &saved, &dout, &dg_ih, &dh0);
        } else {
            let dummy = || prim(Tensor::<Cube<R, BT>, 1>::zeros([1], device));
            let (dg_hh, dc0) = if lstm {
                (dummy(), empty([rows, steps, hidden]))
            } else {
                (empty([rows, steps, gh]), dummy())
            };
            let h_in = empty([rows, steps, hidden]);
            let c0 = inputs.c0.clone().unwrap_or_else(dummy);
            let w_hh = inputs.w_hh.clone().expect("LSTM and GRU layers have W_hh");
            let w = rounded::<R, BT>(w_hh, how.precision);
            kernel::backward(
                launch,
                &w,
                &inputs.h0,
                &c0,
                &inputs.start,
                &out,
                &saved,
                &dout,
                &dg_ih,
                &dg_hh,
                &h_in,
                &dh0,
                &dc0,
            );
            recurrent = Some((dg_hh, h_in, dc0));
        }
        let dgi = flat(dg_ih, gh);
        let mut give = |node: Option<NodeId>, value: &dyn Fn() -> CubeTensor<R>| {
            if let Some(node) = node {
                grads.register::<Cube<R, BT>>(node, value());
            }
        };
        give(nx.map(|n| n.id), &|| {
            prim(
                matmul(
                    dgi.clone(),
                    wrap::<R, BT, 2>(inputs.w_ih.clone()),
                    how.precision,
                )
                .reshape([rows, steps, input]),
            )
        });
        give(nh.map(|n| n.id), &|| dh0.clone());
        give(nwi.map(|n| n.id), &|| {
            weight_grad(dgi.clone(), flat(inputs.x.clone(), input), how.precision)
        });
        give(nbi.map(|n| n.id), &|| column_sum(dgi.clone()));
        let Some((dg_hh, h_in, dc0)) = recurrent else {
            return;
        };
        let dgh = if lstm { dgi.clone() } else { flat(dg_hh, gh) };
        if lstm {
            give(nc.map(|n| n.id), &|| dc0.clone());
        }
        give(nwh.map(|n| n.id), &|| {
            weight_grad(dgh.clone(), flat(h_in.clone(), hidden), how.precision)
        });
        give(nbh.map(|n| n.id), &|| column_sum(dgh.clone()));
    }
}

/// One layer as a node of burn's autodiff graph on `Autodiff<Cube<R, BT>>`.
fn autodiff_layer<R: CubeRuntime, BT: BoolElement>(
    how: How,
    start: CubeTensor<R>,
    call: Call<Autodiff<Cube<R, BT>>>,
) -> Tensor<Autodiff<Cube<R, BT>>, 4> {
    type AdTensor<R, BT> = burn::tensor::ops::FloatTensor<Autodiff<Cube<R, BT>>>;
    fn ad<R: CubeRuntime, BT: BoolElement, const D: usize>(
        t: Tensor<Autodiff<Cube<R, BT>>, D>,
    ) -> AdTensor<R, BT> {
        t.into_primitive().tensor()
    }
    let device = call.x.device();
    let placeholder =
        || AdTensor::<R, BT>::new(prim(Tensor::<Cube<R, BT>, 1>::zeros([1], &device)));
    let x = ad(call.x);
    let h0 = ad(call.h0);
    let c0 = call.c0.map(ad);
    let w_ih = ad(call.w_ih);
    let w_hh = call.w_hh.map(ad);
    let b_ih = call.b_ih.map(ad);
    let b_hh = call.b_hh.map(ad);
    let node = |t: &Option<AdTensor<R, BT>>| t.clone().unwrap_or_else(placeholder).node;
    let nodes = [
        x.node.clone(),
        h0.node.clone(),
        node(&c0),
        w_ih.node.clone(),
        node(&w_hh),
        node(&b_ih),
        node(&b_hh),
    ];
    let contiguous = |t: &AdTensor<R, BT>| into_contiguous(t.primitive.clone());
    let inputs = Inputs {
        x: contiguous(&x),
        h0: contiguous(&h0),
        c0: c0.as_ref().map(contiguous),
        w_ih: contiguous(&w_ih),
        w_hh: w_hh.as_ref().map(contiguous),
        b_ih: b_ih.as_ref().map(contiguous),
        b_hh: b_hh.as_ref().map(contiguous),
        start: into_contiguous(start),
    };
    let prepared = <CubeLayerBackward as Backward<Cube<R, BT>, 7>>::prepare::<NoCheckpointing>(
        CubeLayerBackward,
        nodes,
    );
    let output = match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let keep = how.recompute == Recompute::None;
            let (out, saved) = forward::<R, BT>(how, &inputs, keep);
            let state = LayerState {
                how,
                inputs,
                out: out.clone(),
                saved,
            };
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward::<R, BT>(how, &inputs, false).0),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}
