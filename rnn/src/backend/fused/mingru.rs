//! minGRU's fused recurrent mode on the CPU: one GEMM for both gates of every step, then a
//! segmented linear scan over time, blocked over batch rows and vectorized across `H`.
//!
//! Per layer, with `P = X W^T + b` (`[B*T, 2H]`, `W` = `weight_z` over `weight_h`):
//! `z = sigmoid(P_z)`, `h~ = g(P_h)` (`g(v) = v + 0.5` for `v >= 0`, else `sigmoid(v)`),
//! `h_t = h_{t-1} + z (h~ - h_{t-1})`, where `h_{t-1}` is the stored state at every step that
//! starts a segment. The recurrence is linear in `h` with coefficients `1 - z` that depend on
//! the input only, so the time loop is a scan of `H` independent lanes per row: no GEMM
//! inside it, unlike LSTM/GRU.
//!
//! The forward is three passes over a block of rows: the GEMM, the activations (in place,
//! `P` becomes `A = [z | h~]`), and the scan, which is then only multiply-adds.
//!
//! Backward (the reverse scan): with `dh_t = dout_t + dh_carry`,
//! `dz = dh_t (h~ - h_{t-1})`, `dh~ = dh_t z`, `dh_{t-1} = dh_t (1 - z)`, which goes to the
//! stored state at a segment start (and the carry restarts at zero) or on to step `t - 1`.
//! The activations' derivatives come from `A` alone: `z (1 - z)`, and `g'` is 1 where
//! `h~ >= 0.5` (exactly where `v >= 0`) and `h~ (1 - h~)` below. Then `dP` gives `dX = dP W`,
//! `dW = dP^T X` and `db` = the column sums of `dP`.
//!
//! `recompute = "full"` keeps nothing from the forward: the backward recomputes `A` (one
//! GEMM and the activations). Otherwise the forward keeps `A`, and the backward overwrites it
//! with `dP`.

use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ndarray::NdArrayTensor;
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};

use super::gemm::{blocks, parallel, split_mut};
use super::kernel::{Dims, Stored};
use super::mat::Mat;
use super::simd::{gemm, gemm_packed, vectorized, Level, Packed};
use super::{ad, dims_of, host, placeholder, pool, primitive, register_grad, Call};
use crate::burn_backend::{Cpu, CpuAutodiff};
use crate::math::{mingru_g_with, mingru_hidden, sigmoid_in_place, OneRounding};
use crate::{CellKind, Recompute};

/// Fused multiply-adds in the activations, as in the LSTM/GRU kernels.
type Fma = OneRounding;

/// `g'` from `h~ = g(v)`: 1 where `h~ >= 0.5` (that is, `v >= 0`), else `h~ (1 - h~)`
/// (`h~ = sigmoid(v)` there).
#[inline(always)]
fn g_grad(candidate: f32) -> f32 {
    if candidate >= 0.5 {
        1.0
    } else {
        candidate * (1.0 - candidate)
    }
}

/// `P` -> `A` in place, row by row (`[.., 2H]`): `z = sigmoid(P_z)`, `h~ = g(P_h)`.
fn activate(level: Level, p: &mut [f32], h: usize) {
    vectorized(
        level,
        #[inline(always)]
        || {
            for row in p.chunks_exact_mut(2 * h) {
                let (z, candidate) = row.split_at_mut(h);
                sigmoid_in_place::<Fma>(z);
                for v in candidate {
                    *v = mingru_g_with::<Fma>(*v);
                }
            }
        },
    );
}

/// `p <- x W^T + b` for one block of rows: `x` `[n, in]`, `p` `[n, 2H]`.
fn project(d: &Dims, x: &[f32], n: usize, w_t: &Packed, b: Option<&[f32]>, p: &mut [f32]) {
    let width = 2 * d.hidden;
    gemm_packed(Mat::rows(x, n, d.input), w_t, 0.0, p, width);
    if let Some(b) = b {
        for row in p.chunks_exact_mut(width) {
            for (v, &bias) in row.iter_mut().zip(b) {
                *v += bias;
            }
        }
    }
}

/// The forward scan of batch rows `first..first + a.len() / (T * 2H)`: `out` (`[rows][T][H]`
/// of those rows) from the activated gates `a` (`[z | h~]` per step) and the stored states.
fn scan(
    d: &Dims,
    level: Level,
    first: usize,
    a: &[f32],
    start: &[bool],
    stored: &Stored<'_>,
    out: &mut [f32],
) {
    let (t_len, h) = (d.steps, d.hidden);
    vectorized(
        level,
        #[inline(always)]
        || {
            for (r, out_row) in out.chunks_exact_mut(t_len * h).enumerate() {
                let b = first + r;
                for t in 0..t_len {
                    let pos = b * t_len + t;
                    let (z, candidate) = a[(r * t_len + t) * 2 * h..][..2 * h].split_at(h);
                    let (before, now) = out_row.split_at_mut(t * h);
                    let now = &mut now[..h];
                    let prev: &[f32] = if start[pos] {
                        &stored.h[stored.offset(d.steps, h, b, t)..][..h]
                    } else {
                        &before[(t - 1) * h..][..h]
                    };
                    // Zipped slices of one length: no bounds checks, so the loop vectorizes.
                    for (((y, &z), &c), &x) in now.iter_mut().zip(z).zip(candidate).zip(prev) {
                        *y = mingru_hidden(z, c, x);
                    }
                }
            }
        },
    );
}

/// One layer's forward over every row: writes `out` (`[B, T, H]`, every element) and returns
/// the activated gates `A` (`[B*T, 2H]`) when `keep`. `w` is `[2H, in]` row-major, `b` `[2H]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward(
    d: &Dims,
    w: &[f32],
    b: Option<&[f32]>,
    x: &[f32],
    start: &[bool],
    stored: Stored<'_>,
    threads: usize,
    out: &mut [f32],
    keep: bool,
) -> Option<Vec<f32>> {
    let (t_len, h, i) = (d.steps, d.hidden, d.input);
    let level = Level::current();
    let w_t = Packed::new(Mat::rows(w, 2 * h, i).t(), level);
    let mut p = pool::take(d.rows * t_len * 2 * h);
    let parts = blocks(d.rows, threads);
    let p_parts = split_mut(&mut p, parts.iter().map(|&(_, n)| n), t_len * 2 * h);
    let out_parts = split_mut(out, parts.iter().map(|&(_, n)| n), t_len * h);
    let jobs: Vec<_> = parts
        .iter()
        .zip(p_parts)
        .zip(out_parts)
        .map(|((&(first, n), p), out)| {
            let w_t = &w_t;
            let stored = &stored;
            move || {
                project(
                    d,
                    &x[first * t_len * i..][..n * t_len * i],
                    n * t_len,
                    w_t,
                    b,
                    p,
                );
                activate(level, p, h);
                scan(d, level, first, p, start, stored, out);
            }
        })
        .collect();
    parallel(jobs);
    if keep {
        Some(p)
    } else {
        pool::give(p);
        None
    }
}

/// Gradients of one layer call (each `None` where not wanted).
pub(crate) struct Grads {
    pub x: Option<Vec<f32>>,
    pub h0: Option<Vec<f32>>,
    pub w: Option<Vec<f32>>,
    pub b: Option<Vec<f32>>,
}

/// One layer's backward. `a` is the forward's `A` (or `None` to recompute it), `out` the
/// forward's output `[B, T, H]`, `h0` the stored states `[B, T, H]`, `dout` `d loss / d out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    d: &Dims,
    w: &[f32],
    b: Option<&[f32]>,
    x: &[f32],
    start: &[bool],
    h0: &[f32],
    out: &[f32],
    dout: &[f32],
    a: Option<Vec<f32>>,
    threads: usize,
    wanted_x: bool,
    wanted_h0: bool,
    wanted_w: bool,
) -> Grads {
    let (t_len, h, i) = (d.steps, d.hidden, d.input);
    let positions = d.rows * t_len;
    let level = Level::current();
    let mut dp = match a {
        Some(a) => a,
        None => {
            // recompute = "full": A again, one GEMM and the activations (the scan's outputs
            // are `out` already).
            let w_t = Packed::new(Mat::rows(w, 2 * h, i).t(), level);
            let mut p = pool::take(positions * 2 * h);
            let parts = blocks(positions, threads);
            let jobs: Vec<_> = parts
                .iter()
                .zip(split_mut(&mut p, parts.iter().map(|&(_, n)| n), 2 * h))
                .map(|(&(first, n), p)| {
                    let w_t = &w_t;
                    move || {
                        project(d, &x[first * i..][..n * i], n, w_t, b, p);
                        activate(level, p, h);
                    }
                })
                .collect();
            parallel(jobs);
            p
        }
    };
    let mut dh0 = wanted_h0.then(|| vec![0.0f32; positions * h]);
    let mut dx = wanted_x.then(|| vec![0.0f32; positions * i]);
    // Phase 1, per block of batch rows: the reverse scan turns A into dP in place, then
    // dX = dP W for those rows.
    {
        let parts = blocks(d.rows, threads);
        let lens = || parts.iter().map(|&(_, n)| n);
        let dp_parts = split_mut(&mut dp, lens(), t_len * 2 * h);
        let mut dh0_parts = dh0.as_deref_mut().map(|v| split_mut(v, lens(), t_len * h));
        let mut dx_parts = dx.as_deref_mut().map(|v| split_mut(v, lens(), t_len * i));
        let jobs: Vec<_> = parts
            .iter()
            .zip(dp_parts)
            .enumerate()
            .map(|(k, (&(first, n), dp))| {
                let dh0 = dh0_parts.as_mut().map(|v| std::mem::take(&mut v[k]));
                let dx = dx_parts.as_mut().map(|v| std::mem::take(&mut v[k]));
                move || {
                    reverse_scan(d, level, first, dp, start, h0, out, dout, dh0);
                    if let Some(dx) = dx {
                        gemm(
                            level,
                            Mat::rows(dp, n * t_len, 2 * h),
                            Mat::rows(w, 2 * h, i),
                            0.0,
                            dx,
                            i,
                        );
                    }
                }
            })
            .collect();
        parallel(jobs);
    }
    // Phase 2, per block of the 2H gate columns: dW = dP^T X and db = column sums of dP.
    let (mut dw, mut db) = (None, None);
    if wanted_w {
        let width = 2 * h;
        let mut w_grad = vec![0.0f32; width * i];
        let mut b_grad = vec![0.0f32; width];
        let parts = blocks(width, threads);
        let lens = || parts.iter().map(|&(_, n)| n);
        let dw_parts = split_mut(&mut w_grad, lens(), i);
        let db_parts = split_mut(&mut b_grad, lens(), 1);
        let dp = &dp;
        let jobs: Vec<_> = parts
            .iter()
            .zip(dw_parts)
            .zip(db_parts)
            .map(|((&(j0, n), dw), db)| {
                move || {
                    let cols = Mat::strided(&dp[j0..], positions, n, width);
                    gemm(level, cols.t(), Mat::rows(x, positions, i), 0.0, dw, i);
                    for row in dp.chunks_exact(width) {
                        for (s, &v) in db.iter_mut().zip(&row[j0..j0 + n]) {
                            *s += v;
                        }
                    }
                }
            })
            .collect();
        parallel(jobs);
        dw = Some(w_grad);
        db = b.is_some().then_some(b_grad);
    }
    pool::give(dp);
    Grads {
        x: dx,
        h0: dh0,
        w: dw,
        b: db,
    }
}

/// The reverse scan of one block of batch rows (from `first`): `dp` holds the block's `A` on
/// entry and its `dP` on return; `dh0` (the block's `[rows][T][H]`) receives the gradient of
/// the stored state at every segment start.
#[allow(clippy::too_many_arguments)]
fn reverse_scan(
    d: &Dims,
    level: Level,
    first: usize,
    dp: &mut [f32],
    start: &[bool],
    h0: &[f32],
    out: &[f32],
    dout: &[f32],
    mut dh0: Option<&mut [f32]>,
) {
    let (t_len, h) = (d.steps, d.hidden);
    let mut carry = vec![0.0f32; h];
    vectorized(
        level,
        #[inline(always)]
        || {
            for (r, dp_row) in dp.chunks_exact_mut(t_len * 2 * h).enumerate() {
                let b = first + r;
                carry.fill(0.0);
                for t in (0..t_len).rev() {
                    let pos = b * t_len + t;
                    let prev = if start[pos] {
                        &h0[pos * h..][..h]
                    } else {
                        &out[(pos - 1) * h..][..h]
                    };
                    let dout = &dout[pos * h..][..h];
                    let (az, ah) = dp_row[t * 2 * h..][..2 * h].split_at_mut(h);
                    // Zipped slices of one length: no bounds checks, so the loop vectorizes.
                    for ((((gz, gh), c), &x), &dy) in az
                        .iter_mut()
                        .zip(ah.iter_mut())
                        .zip(carry.iter_mut())
                        .zip(prev)
                        .zip(dout)
                    {
                        let dh = dy + *c;
                        let (z, candidate) = (*gz, *gh);
                        *gz = dh * (candidate - x) * z * (1.0 - z);
                        *gh = dh * z * g_grad(candidate);
                        *c = dh * (1.0 - z);
                    }
                    if start[pos] {
                        if let Some(dh0) = dh0.as_deref_mut() {
                            dh0[(r * t_len + t) * h..][..h].copy_from_slice(&carry);
                        }
                        carry.fill(0.0);
                    }
                }
            }
        },
    );
}

/// What the backward of one autodiff layer call needs (tensors shared with the graph).
#[derive(Clone)]
struct LayerState {
    dims: Dims,
    start: Arc<[bool]>,
    x: NdArrayTensor,
    h0: NdArrayTensor,
    w: NdArrayTensor,
    b: Option<NdArrayTensor>,
    /// The layer's output `[1, B, T, H]`: the scan's `h`, which the backward reads as the
    /// state entering each next step.
    out: NdArrayTensor,
    /// `A`, taken by the backward (`None` with `recompute = "full"`).
    a: Arc<Mutex<Option<Vec<f32>>>>,
}

impl std::fmt::Debug for LayerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MinGruLayerState")
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

/// The backward step of one fused minGRU layer. Parents: `x`, `h0`, `w` (`[2H, in]`), `b`
/// (an untracked placeholder without bias).
#[derive(Debug)]
struct MinGruBackward;

impl Backward<Cpu, 4> for MinGruBackward {
    type State = LayerState;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [nx, nh, nw, nb] = ops.parents;
        let dout = grads.consume::<Cpu>(&ops.node);
        let s = ops.state;
        let a = s.a.lock().expect("minGRU layer state lock").take();
        let d = s.dims;
        let g = backward(
            &d,
            &host(&s.w),
            s.b.as_ref().map(host).as_deref(),
            &host(&s.x),
            &s.start,
            &host(&s.h0),
            &host(&s.out),
            &host(&dout),
            a,
            super::threads(),
            nx.is_some(),
            nh.is_some(),
            nw.is_some() || nb.is_some(),
        );
        let (rows, t, h, i) = (d.rows, d.steps, d.hidden, d.input);
        register_grad(grads, nx.map(|n| n.id), g.x, &[rows, t, i]);
        register_grad(grads, nh.map(|n| n.id), g.h0, &[rows, t, h]);
        register_grad(grads, nw.map(|n| n.id), g.w, &[2 * h, i]);
        register_grad(grads, nb.map(|n| n.id), g.b, &[2 * h]);
    }
}

/// One minGRU layer as a node of burn's autodiff graph on [`CpuAutodiff`]: `[1, B, T, H]`.
pub(crate) fn autodiff_layer(
    recompute: Recompute,
    start: Arc<[bool]>,
    call: Call<CpuAutodiff>,
) -> Tensor<CpuAutodiff, 4> {
    let x = ad(call.x);
    let h0 = ad(call.h0);
    let w = ad(call.w_ih);
    let b = call.b_ih.map(ad);
    let nodes = [
        x.node.clone(),
        h0.node.clone(),
        w.node.clone(),
        b.clone().unwrap_or_else(placeholder).node,
    ];
    let d = dims_of(CellKind::MinGru, &x.primitive, w.primitive.shape()[0] / 2);
    let run = |keep: bool| {
        let mut out = vec![0.0f32; d.rows * d.steps * d.hidden];
        let p = forward(
            &d,
            &host(&w.primitive),
            b.as_ref().map(|b| host(&b.primitive)).as_deref(),
            &host(&x.primitive),
            &start,
            Stored::single(&host(&h0.primitive), None),
            super::threads(),
            &mut out,
            keep,
        );
        (primitive(out, &[1, d.rows, d.steps, d.hidden]), p)
    };
    let output = match MinGruBackward
        .prepare::<NoCheckpointing>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (out, a) = run(recompute == Recompute::None);
            let state = LayerState {
                dims: d,
                start,
                x: x.primitive.clone(),
                h0: h0.primitive.clone(),
                w: w.primitive.clone(),
                b: b.as_ref().map(|b| b.primitive.clone()),
                out: out.clone(),
                a: Arc::new(Mutex::new(a)),
            };
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(false).0),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}
