//! The fused kernels on plain host slices, for callers that run a whole network's forward and
//! backward without burn's autodiff (the learner's fused PPO update): one recurrent layer's
//! training forward, its backward, and the SIMD GEMM for the dense layers around it.
//!
//! Layouts are PyTorch's, as everywhere in this backend: `W_ih` `[G*H, in]`, `W_hh`
//! `[G*H, H]`, inputs and outputs `[B, T, features]`, `start[b * T + t]` where a step takes
//! its stored state (`t = 0` always does).

/// A layer call's shape.
pub use super::kernel::Dims as LayerDims;
use super::kernel::{self, CellOut, Keep, Packs, Params, Saved, Stored, Wanted};
use super::simd::{gemm, vectorized, Level};
use super::{keep_for, pool, threads, Mat};
use crate::math::{tanh_in_place as tanh_with_fma, OneRounding};
use crate::{CellKind, Recompute};

/// Batch rows per thread below which a layer call runs on the calling thread alone. On 2
/// cores of a Zen 4, a small policy's minibatch of 8 slices ran fwd+bwd in 0.54 ms on one
/// thread and 1.18 ms split over two (4 rows each: half-empty 8-row micro-tiles, and a worker
/// pulls the packed weights into its own core's cache every call); 32 slices split 16/16 over
/// rayon's pool took a PPO update (LSTM-64, slice 32) from 3.9 to 3.0 ms.
pub const MIN_ROWS_PER_THREAD: usize = 16;

/// Row-steps (`rows x steps`) per thread below which a layer call runs on the calling thread
/// alone: waking a pool worker whose core went idle takes tens of microseconds in a VM, more
/// than a few steps of a small policy (the PPO critic's one-step bootstrap over 32 rows took
/// a wake-up per update).
pub const MIN_ROW_STEPS_PER_THREAD: usize = 128;

/// The threads a layer call over `rows` batch rows of `steps` steps uses.
pub fn threads_for(rows: usize, steps: usize) -> usize {
    (threads())
        .min(rows / MIN_ROWS_PER_THREAD)
        .min(rows * steps / MIN_ROW_STEPS_PER_THREAD)
        .max(1)
}

/// `c = beta * c + op(a) * op(b)`, all row-major: `a` is `[m, k]` (or `[k, m]` read
/// transposed with `a_t`), `b` is `[k, n]` (or `[n, k]` with `b_t`), `c` is `[m, n]`. `beta`
/// 0 overwrites `c` (its old values do not matter).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_t: bool,
    b: &[f32],
    b_t: bool,
    beta: f32,
    c: &mut [f32],
) {
    assert_eq!(a.len(), m * k, "a has m * k elements");
    assert_eq!(b.len(), k * n, "b has k * n elements");
    assert_eq!(c.len(), m * n, "c is [m, n]");
    if k == 0 {
        if beta == 0.0 {
            c.fill(0.0);
        } else {
            c.iter_mut().for_each(|x| *x *= beta);
        }
        return;
    }
    let am = if a_t {
        Mat::rows(a, k, m).t()
    } else {
        Mat::rows(a, m, k)
    };
    let bm = if b_t {
        Mat::rows(b, n, k).t()
    } else {
        Mat::rows(b, k, n)
    };
    if beta == 0.0 {
        // The kernel reads `c` when beta is 0 only to scale it: stale NaNs must not leak.
        c.fill(0.0);
    }
    gemm(Level::current(), am, bm, beta, c, n);
}

/// `x = tanh(x)`, vectorized for the machine's SIMD level (the kernels' `tanh`, within a few
/// ulp of libm's).
pub fn tanh_in_place(x: &mut [f32]) {
    vectorized(
        Level::current(),
        #[inline(always)]
        || tanh_with_fma::<OneRounding>(x),
    );
}

/// The stored recurrent states of a call, `[B, T, layers, H]` (`c` for an LSTM), of which a
/// layer reads its own.
#[derive(Clone, Copy)]
pub struct StoredStates<'a> {
    pub h: &'a [f32],
    pub c: Option<&'a [f32]>,
    pub layers: usize,
}

/// One LSTM or GRU layer's parameters (minGRU layers have no host path yet).
#[derive(Clone, Copy)]
pub struct LayerParams<'a> {
    pub w_ih: &'a [f32],
    pub w_hh: &'a [f32],
    pub b_ih: Option<&'a [f32]>,
    pub b_hh: Option<&'a [f32]>,
    /// These values' weights as [`pack_layer`] laid them out, for calls that share them until
    /// the values change; `None`: every call packs its own.
    pub packs: Option<&'a LayerPacks>,
}

/// A layer's weights laid out for the kernels' GEMMs (forward and backward), valid for the
/// parameter values they were packed from: a caller that runs several calls on the same
/// values (a critic pass, its bootstrap, a minibatch's forward and backward) packs once.
pub struct LayerPacks(Packs);

/// `p`'s weights packed for layers of shape `d` (any rows and steps).
pub fn pack_layer(d: &LayerDims, p: &LayerParams<'_>) -> LayerPacks {
    LayerPacks(Packs::new(d, &kernel_params(p), true, true))
}

/// What [`layer_forward`] kept for [`layer_backward`].
pub struct Tape {
    dims: LayerDims,
    saved: Saved,
}

fn kernel_params<'a>(p: &LayerParams<'a>) -> Params<'a> {
    Params {
        w_ih: p.w_ih,
        w_hh: p.w_hh,
        b_ih: p.b_ih,
        b_hh: p.b_hh,
        packs: p.packs.map(|k| &k.0),
    }
}

/// The forward of layer `layer`, keeping `keep` for a backward: the post-step `h` of every
/// step into `out_h` `[B, T, H]` and, for an LSTM, the post-step `c` at every segment end into
/// this layer's slots of `next_c` `[B, T, layers, H]`.
#[allow(clippy::too_many_arguments)]
fn forward(
    d: &LayerDims,
    p: &LayerParams<'_>,
    x: &[f32],
    start: &[bool],
    stored: StoredStates<'_>,
    layer: usize,
    keep: Keep,
    out_h: &mut [f32],
    next_c: Option<&mut [f32]>,
) -> Saved {
    assert!(d.cell != CellKind::MinGru, "host layers are LSTM or GRU");
    let layers = stored.layers;
    let out_c = next_c.map(|buf| CellOut {
        buf,
        layers,
        layer,
        ends_only: true,
    });
    kernel::forward(
        d,
        kernel_params(p),
        x,
        start,
        Stored {
            h: stored.h,
            c: stored.c,
            layers,
            layer,
        },
        keep,
        threads_for(d.rows, d.steps),
        out_h,
        out_c,
    )
}

/// The training forward of layer `layer` over `x` `[B, T, in]`: writes the post-step `h` of
/// every step to `out_h` `[B, T, H]`; the layer's stored states in `stored` are read where
/// `start` is set. Returns what the backward needs (per `recompute`).
#[allow(clippy::too_many_arguments)]
pub fn layer_forward(
    d: &LayerDims,
    p: &LayerParams<'_>,
    x: &[f32],
    start: &[bool],
    stored: StoredStates<'_>,
    layer: usize,
    recompute: Recompute,
    out_h: &mut [f32],
) -> Tape {
    // An LSTM's `c` is needed only at segment ends (`next`), which nobody reads here.
    let mut scratch = d
        .cell
        .has_cell_state()
        .then(|| pool::take(d.rows * d.steps * stored.layers * d.hidden));
    let keep = keep_for(recompute);
    let saved = forward(
        d,
        p,
        x,
        start,
        stored,
        layer,
        keep,
        out_h,
        scratch.as_deref_mut(),
    );
    if let Some(buf) = scratch {
        pool::give(buf);
    }
    Tape { dims: *d, saved }
}

/// The inference forward of layer `layer` (nothing kept for a backward): the post-step `h` of
/// every step into `out_h` `[B, T, H]` and, for an LSTM, the post-step `c` at every segment
/// end (the last step, or a step whose successor takes its stored state) into this layer's
/// slots of `next_c` `[B, T, layers, H]` (other slots untouched).
#[allow(clippy::too_many_arguments)]
pub fn layer_inference(
    d: &LayerDims,
    p: &LayerParams<'_>,
    x: &[f32],
    start: &[bool],
    stored: StoredStates<'_>,
    layer: usize,
    out_h: &mut [f32],
    next_c: Option<&mut [f32]>,
) {
    forward(d, p, x, start, stored, layer, Keep::Nothing, out_h, next_c);
}

/// Gradients of one layer call.
pub struct LayerGrads {
    /// `[B, T, in]`, when asked for.
    pub x: Option<Vec<f32>>,
    pub w_ih: Vec<f32>,
    pub w_hh: Vec<f32>,
    pub b_ih: Option<Vec<f32>>,
    pub b_hh: Option<Vec<f32>>,
}

/// The backward of [`layer_forward`] (same `p`, `x`, `start`): `dh` `[B, T, H]` is
/// the gradient of the outputs. The stored states get no gradient (they are data).
pub fn layer_backward(
    tape: Tape,
    p: &LayerParams<'_>,
    x: &[f32],
    start: &[bool],
    dh: &[f32],
    want_x: bool,
) -> LayerGrads {
    let d = tape.dims;
    let slab = d.rows * d.steps * d.hidden;
    // The `c` outputs (LSTM) carry no gradient.
    let dout: std::borrow::Cow<'_, [f32]> = if d.cell.has_cell_state() {
        let mut both = vec![0.0f32; 2 * slab];
        both[..slab].copy_from_slice(dh);
        both.into()
    } else {
        dh.into()
    };
    let g = kernel::backward(
        &d,
        kernel_params(p),
        x,
        start,
        tape.saved,
        &dout,
        Wanted {
            x: want_x,
            h0: false,
            c0: false,
            weights: true,
        },
    );
    LayerGrads {
        x: g.x,
        w_ih: g.w_ih.expect("weights wanted"),
        w_hh: g.w_hh.expect("weights wanted"),
        b_ih: g.b_ih,
        b_hh: g.b_hh,
    }
}
