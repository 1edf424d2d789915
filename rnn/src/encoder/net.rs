//! The encoder's forward and backward over one block of frames (one thread's share), on host
//! buffers: convolutions as im2col + the fused backend's packed SIMD GEMM, max-pools with
//! their argmax, the linear layer as one GEMM over the block's frames.
//!
//! Activations are NHWC (`[frames, H, W, C]`): a convolution's GEMM writes its output pixels
//! as rows of `out_channels` values, which is NHWC as it stands, and the next layer's im2col
//! copies contiguous runs. Parameters stay in torch's layout in the [`Encoder`](super::Encoder);
//! [`Packs`] holds them reordered (`(kh, kw, c)` kernels, an `(h, w, c)` flatten) and packed for
//! the GEMMs, once per set of values.

use super::config::{Op, Plan, Stage};
use super::im2col::{self, Geometry, Pixels, Source};
use super::maxpool;
use crate::fused::{gemm_packed, vectorized, Mat, Packed, SimdLevel};

/// Floats of im2col's buffer per sub-batch of frames (512 KiB: it stays in a Zen 4 core's L2
/// between im2col and the GEMM that reads it). A layer walks a block's frames in sub-batches
/// of this size (at least one frame).
pub(crate) const COL_BUDGET: usize = 1 << 17;

/// The geometry of conv stage `s`.
pub(crate) fn geometry(s: &Stage) -> Option<Geometry> {
    match s.op {
        Op::Conv {
            kernel,
            stride,
            padding,
            ..
        } => Some(Geometry {
            input: s.input,
            output: s.output,
            kernel,
            stride,
            padding,
        }),
        Op::Maxpool { .. } => None,
    }
}

/// Frames per im2col sub-batch of a conv.
fn sub_batch(g: &Geometry, frames: usize) -> usize {
    (COL_BUDGET / (g.pixels() * g.k()).max(1)).clamp(1, frames.max(1))
}

/// Where stage `i`'s parameters sit in the encoder's list (`weight`, then `bias`): the conv
/// stages in order, then the linear layer.
pub(crate) fn param_slot(plan: &Plan, stage: usize) -> usize {
    2 * plan.stages[..stage]
        .iter()
        .filter(|s| matches!(s.op, Op::Conv { .. }))
        .count()
}

/// The linear layer's slot in the parameter list.
pub(crate) fn linear_slot(plan: &Plan) -> usize {
    param_slot(plan, plan.stages.len())
}

/// One set of parameter values laid out for the GEMMs: per conv, `W` as `[out, K]` in
/// `(kh, kw, c)` order, packed as `W^T` (forward) and as `W` (backward's input gradient); the
/// linear weight with its columns in `(h, w, c)` order, packed likewise.
pub(crate) struct Packs {
    pub level: SimdLevel,
    /// Per stage: the forward pack (a conv's) or `None` (a max-pool).
    fwd: Vec<Option<Packed>>,
    /// Per stage: the backward pack, once [`Packs::with_backward`] built them.
    bwd: Vec<Option<Packed>>,
    linear_fwd: Packed,
    linear_bwd: Option<Packed>,
    /// Per stage: a conv's `W` as `[out, K]` (`(kh, kw, c)` columns), for the backward pack.
    conv_rows: Vec<Option<Vec<f32>>>,
    /// The linear weight with `(h, w, c)` columns, for the backward pack.
    linear_rows: Vec<f32>,
}

/// `W` `[out, in, k, k]` (torch) as `[out, (kh, kw, in)]`.
fn conv_rows(w: &[f32], out: usize, input: usize, k: usize, mut r: Vec<f32>) -> Vec<f32> {
    r.resize(w.len(), 0.0);
    let kk = k * k;
    for (dst, src) in r
        .chunks_exact_mut(kk * input)
        .zip(w.chunks_exact(kk * input))
    {
        for (c, kernel) in src.chunks_exact(kk).enumerate() {
            for (khw, &v) in kernel.iter().enumerate() {
                dst[khw * input + c] = v;
            }
        }
    }
    debug_assert_eq!(r.len(), out * kk * input);
    r
}

/// The `(c, h, w)` index of flat position `(h, w, c)` of the last layer's `[H, W, C]` output,
/// for every position in `(h, w, c)` order.
pub(crate) fn chw_of_hwc(plan: &Plan) -> Vec<usize> {
    let s = plan.last_shape();
    let mut at = Vec::with_capacity(s.len());
    for h in 0..s.height {
        for w in 0..s.width {
            for c in 0..s.channels {
                at.push((c * s.height + h) * s.width + w);
            }
        }
    }
    at
}

impl Packs {
    /// The forward packs of `params` (torch layouts, the encoder's order).
    ///
    /// `old` (packs of earlier values) lends its buffers: a learner repacks every step. (Same
    /// run, Nature CNN 8x32 forward+backward on 2 cores: 71 ms with or without; kept so that
    /// a step allocates nothing once warm.)
    pub fn new(plan: &Plan, params: &[Vec<f32>], old: Option<Packs>) -> Self {
        let level = SimdLevel::current();
        let (mut old_rows, old_linear) = match old {
            // Dropping the old packs hands their buffers to the fused pool for the new ones.
            Some(p) => (p.conv_rows, p.linear_rows),
            None => (Vec::new(), Vec::new()),
        };
        old_rows.resize_with(plan.stages.len(), || None);
        let conv_rows: Vec<_> = (plan.stages.iter().zip(old_rows).enumerate())
            .map(|(i, (s, buf))| {
                let g = geometry(s)?;
                let w = &params[param_slot(plan, i)];
                let buf = buf.unwrap_or_default();
                Some(conv_rows(
                    w,
                    g.output.channels,
                    g.input.channels,
                    g.kernel,
                    buf,
                ))
            })
            .collect();
        let fwd = (plan.stages.iter().zip(&conv_rows))
            .map(|(s, rows)| {
                let (g, rows) = (geometry(s)?, rows.as_ref()?);
                Some(Packed::new(
                    Mat::rows(rows, g.output.channels, g.k()).t(),
                    level,
                ))
            })
            .collect();
        let linear_rows = Self::linear_rows(plan, &params[linear_slot(plan)], old_linear);
        let linear_fwd = Packed::new(Mat::rows(&linear_rows, plan.features, plan.flat).t(), level);
        Packs {
            level,
            fwd,
            bwd: Vec::new(),
            linear_fwd,
            linear_bwd: None,
            conv_rows,
            linear_rows,
        }
    }

    /// The linear weight `[features, flat]` with its columns in `(h, w, c)` order.
    fn linear_rows(plan: &Plan, w: &[f32], mut wp: Vec<f32>) -> Vec<f32> {
        let perm = chw_of_hwc(plan);
        wp.resize(w.len(), 0.0);
        for (dst, src) in wp
            .chunks_exact_mut(plan.flat)
            .zip(w.chunks_exact(plan.flat))
        {
            for (d, &at) in dst.iter_mut().zip(&perm) {
                *d = src[at];
            }
        }
        wp
    }

    /// Adds the backward packs (a conv's `W` for its input gradient, the linear weight) if
    /// they are not there yet.
    pub fn with_backward(&mut self, plan: &Plan) {
        if self.linear_bwd.is_some() {
            return;
        }
        let level = self.level;
        self.bwd = (plan.stages.iter().zip(&self.conv_rows).enumerate())
            .map(|(i, (s, rows))| {
                // The first layer's input is the frames: no gradient, no pack.
                let g = geometry(s).filter(|_| i > 0)?;
                Some(Packed::new(
                    Mat::rows(rows.as_ref()?, g.output.channels, g.k()),
                    level,
                ))
            })
            .collect();
        let rows = Mat::rows(&self.linear_rows, plan.features, plan.flat);
        self.linear_bwd = Some(Packed::new(rows, level));
    }
}

/// One block's activations (its frames' rows of each buffer): every layer's output
/// `[frames, H, W, C]`, the max-pools' argmax (empty for a conv), the features `[frames, F]`.
pub(crate) struct BlockActs<'a> {
    pub outs: Vec<&'a mut [f32]>,
    pub argmax: Vec<&'a mut [u32]>,
    pub features: &'a mut [f32],
}

/// The forward of `frames` frames `obs` (`[frames, H, W, C]` bytes) into `acts`; `col` is
/// scratch.
pub(crate) fn forward_block(
    plan: &Plan,
    packs: &Packs,
    params: &[Vec<f32>],
    obs: &[u8],
    frames: usize,
    acts: BlockActs<'_>,
    col: &mut Vec<f32>,
) {
    let level = packs.level;
    let BlockActs {
        mut outs,
        mut argmax,
        features,
    } = acts;
    for (i, stage) in plan.stages.iter().enumerate() {
        let (done, rest) = outs.split_at_mut(i);
        let out = &mut *rest[0];
        match (geometry(stage), i) {
            (Some(g), 0) => {
                let src = Pixels {
                    obs,
                    scale: plan.scale,
                    onehot: plan.onehot.as_ref(),
                };
                conv_forward(
                    &g,
                    packs,
                    i,
                    &params[param_slot(plan, i)..],
                    &src,
                    frames,
                    out,
                    col,
                );
            }
            (Some(g), _) => {
                let src: &[f32] = &done[i - 1][..];
                conv_forward(
                    &g,
                    packs,
                    i,
                    &params[param_slot(plan, i)..],
                    src,
                    frames,
                    out,
                    col,
                );
            }
            (None, _) => {
                let Op::Maxpool { kernel } = stage.op else {
                    unreachable!("a stage without conv geometry is a max-pool")
                };
                maxpool::forward(
                    stage.input,
                    kernel,
                    frames,
                    &done[i - 1][..],
                    out,
                    argmax[i],
                );
            }
        }
    }
    let last = outs.last().expect("a plan has a layer");
    gemm_packed(
        Mat::rows(&last[..], frames, plan.flat),
        &packs.linear_fwd,
        0.0,
        features,
        plan.features,
    );
    bias_relu(level, features, &params[linear_slot(plan) + 1]);
}

/// One convolution with ReLU over `frames` frames of `src` into `out`; `params` starts at the
/// layer's weight (then its bias).
#[allow(clippy::too_many_arguments)]
fn conv_forward<S: Source + ?Sized>(
    g: &Geometry,
    packs: &Packs,
    stage: usize,
    params: &[Vec<f32>],
    src: &S,
    frames: usize,
    out: &mut [f32],
    col: &mut Vec<f32>,
) {
    let pack = packs.fwd[stage]
        .as_ref()
        .expect("a conv stage has its pack");
    let (k, rows_per_frame, out_len) = (g.k(), g.pixels(), g.output.len());
    let sub = sub_batch(g, frames);
    grow(col, sub * rows_per_frame * k);
    for f0 in (0..frames).step_by(sub) {
        let fs = sub.min(frames - f0);
        let rows = fs * rows_per_frame;
        im2col::im2col(g, src, f0, fs, col);
        let y = &mut out[f0 * out_len..(f0 + fs) * out_len];
        gemm_packed(
            Mat::rows(&col[..rows * k], rows, k),
            pack,
            0.0,
            y,
            g.output.channels,
        );
        bias_relu(packs.level, y, &params[1]);
    }
}

/// `buf` with at least `len` elements (grown, never shrunk: a workspace kept across calls).
pub(crate) fn grow<T: Default + Clone>(buf: &mut Vec<T>, len: usize) {
    if buf.len() < len {
        buf.resize(len, T::default());
    }
}

/// `y = relu(y + bias)` over rows of `bias.len()` (NaN stays NaN, as in torch).
fn bias_relu(level: SimdLevel, y: &mut [f32], bias: &[f32]) {
    vectorized(
        level,
        #[inline(always)]
        || {
            for row in y.chunks_exact_mut(bias.len()) {
                for (v, &b) in row.iter_mut().zip(bias) {
                    let x = *v + b;
                    *v = if x < 0.0 { 0.0 } else { x };
                }
            }
        },
    );
}

/// `d = d * (y > 0)`: ReLU's backward from its output.
fn relu_backward(level: SimdLevel, d: &mut [f32], y: &[f32]) {
    vectorized(
        level,
        #[inline(always)]
        || {
            for (g, &v) in d.iter_mut().zip(y) {
                if v <= 0.0 {
                    *g = 0.0;
                }
            }
        },
    );
}

/// `acc[j] += sum over rows of d[r * n + j]` (`n = acc.len()`): a bias gradient.
fn add_column_sums(level: SimdLevel, acc: &mut [f32], d: &[f32]) {
    vectorized(
        level,
        #[inline(always)]
        || {
            for row in d.chunks_exact(acc.len()) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a += v;
                }
            }
        },
    );
}

/// One thread's parameter gradients in the GEMMs' layouts, overwritten by each
/// [`backward_block`]: per stage, `dW^T` `[K, out]` (`(kh, kw, c)` rows) and `db` (empty for a
/// max-pool); the linear layer's `dW^T` `[flat, F]` (`(h, w, c)` rows) and `db`.
#[derive(Default)]
pub(crate) struct BlockGrads {
    pub conv_w: Vec<Vec<f32>>,
    pub conv_b: Vec<Vec<f32>>,
    pub linear_w: Vec<f32>,
    pub linear_b: Vec<f32>,
}

/// One thread's buffers for the backward, kept across calls.
#[derive(Default)]
pub(crate) struct Scratch {
    pub col: Vec<f32>,
    dcol: Vec<f32>,
    d_out: Vec<f32>,
    d_in: Vec<f32>,
    pub grads: BlockGrads,
}

/// One block's activations as the forward left them.
#[derive(Clone)]
pub(crate) struct BlockTape<'a> {
    pub obs: &'a [u8],
    pub outs: Vec<&'a [f32]>,
    pub argmax: Vec<&'a [u32]>,
    pub features: &'a [f32],
}

/// The parameter gradients of `sum(features * grad_features)` over one block of `frames`
/// frames, into `scratch.grads` (added with `accumulate`, else overwritten). Needs the
/// backward packs.
pub(crate) fn backward_block(
    plan: &Plan,
    packs: &Packs,
    tape: BlockTape<'_>,
    frames: usize,
    grad_features: &[f32],
    scratch: &mut Scratch,
    accumulate: bool,
) {
    let level = packs.level;
    let beta = if accumulate { 1.0 } else { 0.0 };
    let Scratch {
        col,
        dcol,
        d_out,
        d_in,
        grads,
    } = scratch;
    let (nf, flat) = (plan.features, plan.flat);
    grads.conv_w.resize_with(plan.stages.len(), Vec::new);
    grads.conv_b.resize_with(plan.stages.len(), Vec::new);
    let widest = plan
        .stages
        .iter()
        .map(|s| s.output.len())
        .max()
        .unwrap_or(0);
    // Layer outputs' gradients (every input but the first layer's is one) and `dz`.
    grow(d_out, frames * widest.max(nf));
    grow(d_in, frames * widest.max(nf));

    // Linear: dz = g * (features > 0); dW^T = X^T dz; db = sum dz; dX = dz W.
    let dz = &mut d_in[..frames * nf];
    dz.copy_from_slice(grad_features);
    relu_backward(level, dz, tape.features);
    let x = tape.outs.last().expect("a plan has a layer");
    grads.linear_w.resize(flat * nf, 0.0);
    let dz_pack = Packed::new(Mat::rows(dz, frames, nf), level);
    gemm_packed(
        Mat::rows(x, frames, flat).t(),
        &dz_pack,
        beta,
        &mut grads.linear_w,
        nf,
    );
    drop(dz_pack);
    if !accumulate {
        grads.linear_b.clear();
    }
    grads.linear_b.resize(nf, 0.0);
    add_column_sums(level, &mut grads.linear_b, dz);
    let linear_bwd = packs.linear_bwd.as_ref().expect("backward packs are built");
    gemm_packed(
        Mat::rows(dz, frames, nf),
        linear_bwd,
        0.0,
        &mut d_out[..frames * flat],
        flat,
    );

    for (i, stage) in plan.stages.iter().enumerate().rev() {
        let dy = &mut d_out[..frames * stage.output.len()];
        // The first layer's input is the frames: no gradient.
        let dx = (i > 0).then(|| &mut d_in[..frames * stage.input.len()]);
        match geometry(stage) {
            Some(g) => {
                relu_backward(level, dy, tape.outs[i]);
                let (w, b) = (&mut grads.conv_w[i], &mut grads.conv_b[i]);
                if !accumulate {
                    b.clear();
                }
                b.resize(g.output.channels, 0.0);
                add_column_sums(level, b, dy);
                w.resize(g.k() * g.output.channels, 0.0);
                let pack = packs.bwd.get(i).and_then(Option::as_ref);
                if i == 0 {
                    let src = Pixels {
                        obs: tape.obs,
                        scale: plan.scale,
                        onehot: plan.onehot.as_ref(),
                    };
                    conv_backward(&g, pack, &src, frames, dy, (w, beta), dx, col, dcol);
                } else {
                    let src: &[f32] = tape.outs[i - 1];
                    conv_backward(&g, pack, src, frames, dy, (w, beta), dx, col, dcol);
                }
            }
            None => {
                let dx = dx.expect("a max-pool is never the first layer");
                dx.fill(0.0);
                maxpool::backward(stage.input.len(), dy, tape.argmax[i], frames, dx);
            }
        }
        std::mem::swap(d_out, d_in);
    }
}

/// A conv's weight gradient `dW^T = beta0 dW^T + col^T dy` and, with
/// `dx`, its input gradient (`col2im(dy W)`, `dx` zeroed first).
#[allow(clippy::too_many_arguments)]
fn conv_backward<S: Source + ?Sized>(
    g: &Geometry,
    pack: Option<&Packed>,
    src: &S,
    frames: usize,
    dy: &[f32],
    (dw, beta0): (&mut [f32], f32),
    mut dx: Option<&mut [f32]>,
    col: &mut Vec<f32>,
    dcol: &mut Vec<f32>,
) {
    let level = SimdLevel::current();
    let (k, rows_per_frame, out_c) = (g.k(), g.pixels(), g.output.channels);
    let sub = sub_batch(g, frames);
    grow(col, sub * rows_per_frame * k);
    if let Some(dx) = dx.as_deref_mut() {
        dx.fill(0.0);
        grow(dcol, sub * rows_per_frame * k);
    }
    for f0 in (0..frames).step_by(sub) {
        let fs = sub.min(frames - f0);
        let rows = fs * rows_per_frame;
        let dy = &dy[f0 * rows_per_frame * out_c..(f0 + fs) * rows_per_frame * out_c];
        im2col::im2col(g, src, f0, fs, col);
        let dy_pack = Packed::new(Mat::rows(dy, rows, out_c), level);
        let beta = if f0 == 0 { beta0 } else { 1.0 };
        gemm_packed(
            Mat::rows(&col[..rows * k], rows, k).t(),
            &dy_pack,
            beta,
            dw,
            out_c,
        );
        drop(dy_pack);
        if let Some(dx) = dx.as_deref_mut() {
            let w = pack.expect("a conv after the first has its backward pack");
            gemm_packed(Mat::rows(dy, rows, out_c), w, 0.0, &mut dcol[..rows * k], k);
            let in_len = g.input.len();
            im2col::col2im(
                g,
                &dcol[..rows * k],
                fs,
                &mut dx[f0 * in_len..(f0 + fs) * in_len],
            );
        }
    }
}
