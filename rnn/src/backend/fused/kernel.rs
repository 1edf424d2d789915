//! The fused forward and backward of one LSTM/GRU layer in recurrent mode, on plain `f32`
//! buffers.
//!
//! Layouts: `x` `[B, T, in]`, stored states `h0`/`c0` `[B, T, H]`, outputs `[K, B, T, H]`
//! (`K = 2` for an LSTM: `h` then `c`; `K = 1` for a GRU), all row-major as burn holds them.
//! Weights in PyTorch's layout (`w_ih` `[G*H, in]`, `w_hh` `[G*H, H]`, gate blocks LSTM
//! i,f,g,o / GRU r,z,n).
//!
//! Work is split by batch rows: each thread owns a contiguous block of rows for the whole time
//! loop (rows are independent, so the threads never wait on each other). Inside a block every
//! per-step buffer is **time-major** (`[T][rows][...]`), so a step touches one contiguous slab:
//! - forward: per step, a GEMM input row `[h_in | x_t | 1]` per batch row (the state entering
//!   step `t` is the stored state where `is_init[b, t]`, and at `t = 0`). An LSTM multiplies
//!   it by `[W_hh^T; W_ih^T; bias]` in one GEMM, then one pass per row applies the gates,
//!   updates the state and writes the outputs ([`lstm_update`]); a GRU runs two GEMMs (input
//!   and hidden side), a gate pass and the update.
//! - backward: the reverse time loop turns the saved gates into pre-activation gradients in
//!   place (one GEMM per step, `dG W_hh`, carries `dh` to the step before; at a reset it goes to
//!   the stored state instead); the weight gradients are then three large GEMMs over all
//!   `T*rows` rows (`dW_hh = dG^T H_in`, `dW_ih = dG^T X`, `dX = dG W_ih`), biases column sums.
//! - `Keep::States` (`recompute = "full"`) saves only the states entering each step; the
//!   backward recomputes each step's gates from them, as the forward computed them.

use super::gemm::{blocks, parallel, split_mut};
use super::mat::Mat;
use super::pool;
use super::simd::{gemm, gemm_packed, vectorized, Level, Packed};
use crate::math::{
    gru_hidden, lstm_cell_state, sigmoid_in_place, sigmoid_with, tanh_in_place, tanh_with,
    OneRounding,
};
use crate::CellKind;

/// The activations' multiply-adds: fused (one instruction in the AVX2/AVX-512 passes, see
/// `vectorized`). Forward, recompute and backward all use it, so recomputed gates are the
/// forward's bits.
type Fma = OneRounding;

/// minGRU has its own kernel (`fused::mingru`); these paths never see it.
const MINGRU: &str = "minGRU runs in fused::mingru, not the LSTM/GRU kernel";

/// Sizes of one layer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub cell: CellKind,
    /// Batch rows `B`.
    pub rows: usize,
    /// Steps `T`.
    pub steps: usize,
    /// Input features of this layer.
    pub input: usize,
    /// `H`.
    pub hidden: usize,
}

impl Dims {
    /// `G * H`: width of the stacked gates.
    pub fn width(&self) -> usize {
        self.cell.gates() * self.hidden
    }

    /// Output slabs: `h` (and `c`).
    pub fn slabs(&self) -> usize {
        if self.cell.has_cell_state() {
            2
        } else {
            1
        }
    }
}

/// One layer's parameters, row-major in PyTorch's layout.
#[derive(Clone, Copy)]
pub(crate) struct Params<'a> {
    pub w_ih: &'a [f32],
    pub w_hh: &'a [f32],
    pub b_ih: Option<&'a [f32]>,
    pub b_hh: Option<&'a [f32]>,
    /// These values' weights packed beforehand for both passes ([`Packs::new`]), shared by
    /// calls until the values change; `None`: each call packs its own.
    pub packs: Option<&'a Packs>,
}

impl Params<'_> {
    /// The bias added to the input projection (`[G*H]`): both biases for an LSTM; for a GRU
    /// `b_ih + b_hh` on r and z, `b_in` alone on n (`b_hn` sits inside `r * (...)`).
    fn input_bias(&self, d: &Dims) -> Vec<f32> {
        let w = d.width();
        let mut bias = vec![0.0; w];
        if let Some(b) = self.b_ih {
            bias.copy_from_slice(b);
        }
        if let Some(b) = self.b_hh {
            let summed = match d.cell {
                CellKind::MinGru => unreachable!("{MINGRU}"),
                CellKind::Lstm => w,
                CellKind::Gru => 2 * d.hidden,
            };
            for (x, y) in bias[..summed].iter_mut().zip(b) {
                *x += y;
            }
        }
        bias
    }

    /// `b_hn` (`[H]`, zeros without bias).
    fn hidden_n_bias(&self, d: &Dims) -> Vec<f32> {
        match self.b_hh {
            Some(b) if d.cell == CellKind::Gru => b[2 * d.hidden..].to_vec(),
            _ => vec![0.0; d.hidden],
        }
    }
}

/// The weights packed once per layer call (or once per parameter values, [`Params::packs`])
/// for the per-step GEMMs, shared by every step and thread. A step's GEMM input is a row
/// `[h_in | x_t | 1]` per batch row ([`Block::gates`]).
pub(crate) struct Packs {
    level: Level,
    /// The layer shape they were packed for: `(cell, hidden, input)`.
    shape: (CellKind, usize, usize),
    /// LSTM: `[W_hh^T; W_ih^T; bias]` (`[H + in + 1, 4H]`, the bias of
    /// `Params::input_bias`): a step's whole pre-activation in one GEMM, in the forward and in
    /// the recompute alike.
    w_step: Option<Packed>,
    /// GRU: `W_hh^T` (`[H, 3H]`): `h W_hh^T` apart from the input side, whose n block sits
    /// inside `r * (...)`.
    w_hh_t: Option<Packed>,
    /// GRU: `[W_ih^T; bias]` (`[in + 1, 3H]`): the input side of a step.
    w_ih_aug: Option<Packed>,
    /// The backward's `dG W_hh`: LSTM all of `W_hh` (`[4H, H]`); GRU its r and z rows
    /// (`[2H, H]`).
    w_hh: Option<Packed>,
    /// GRU: the n rows of `W_hh` (`[H, H]`).
    w_hh_n: Option<Packed>,
}

impl Packs {
    pub(crate) fn new(d: &Dims, p: &Params<'_>, forward: bool, backward: bool) -> Self {
        let level = Level::current();
        let (h, w, i) = (d.hidden, d.width(), d.input);
        let lstm = d.cell == CellKind::Lstm;
        let rz = if lstm { w } else { 2 * h };
        let w_hh_t = Mat::rows(p.w_hh, w, h).t();
        let w_ih_t = Mat::rows(p.w_ih, w, i).t();
        let bias = p.input_bias(d);
        let bias = Mat::rows(&bias, 1, w);
        Self {
            level,
            shape: (d.cell, h, i),
            w_step: (forward && lstm).then(|| Packed::stacked(&[w_hh_t, w_ih_t, bias], level)),
            w_hh_t: (forward && !lstm).then(|| Packed::new(w_hh_t, level)),
            w_ih_aug: (forward && !lstm).then(|| Packed::stacked(&[w_ih_t, bias], level)),
            w_hh: backward.then(|| Packed::new(Mat::rows(&p.w_hh[..rz * h], rz, h), level)),
            w_hh_n: (backward && !lstm)
                .then(|| Packed::new(Mat::rows(&p.w_hh[rz * h..], h, h), level)),
        }
    }

    fn get(p: &Option<Packed>) -> &Packed {
        p.as_ref().expect("packed for this pass")
    }

    /// `p`'s own packs, checked against the call's shape, or `own` packed now.
    fn of<'a>(
        d: &Dims,
        p: &Params<'a>,
        forward: bool,
        backward: bool,
        own: &'a mut Option<Packs>,
    ) -> &'a Packs {
        match p.packs {
            Some(packs) => {
                assert_eq!(
                    packs.shape,
                    (d.cell, d.hidden, d.input),
                    "packs made for this layer's shape"
                );
                packs
            }
            None => own.insert(Packs::new(d, p, forward, backward)),
        }
    }
}

/// The stored states a layer reads where a step starts a segment: `h` (and `c` for an LSTM)
/// `[B, T, layers, H]`, of which this layer reads `layer`.
#[derive(Clone, Copy)]
pub(crate) struct Stored<'a> {
    pub h: &'a [f32],
    pub c: Option<&'a [f32]>,
    pub layers: usize,
    pub layer: usize,
}

impl<'a> Stored<'a> {
    /// One layer's states `[B, T, H]`.
    pub fn single(h: &'a [f32], c: Option<&'a [f32]>) -> Self {
        Self {
            h,
            c,
            layers: 1,
            layer: 0,
        }
    }

    /// Where row `b`, step `t` of this layer starts in `h` or `c`.
    fn at(&self, d: &Dims, b: usize, t: usize) -> usize {
        self.offset(d.steps, d.hidden, b, t)
    }

    /// [`at`](Self::at) for a layer of `steps` steps of `hidden` units.
    pub fn offset(&self, steps: usize, hidden: usize, b: usize, t: usize) -> usize {
        ((b * steps + t) * self.layers + self.layer) * hidden
    }
}

/// What the forward pass keeps for the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Nothing (no backward will run).
    Nothing,
    /// Post-activation gates and the states entering each step (`recompute = "none"`).
    Gates,
    /// Only the states entering each step (`recompute = "full"`).
    States,
}

/// What one thread's block of rows saved.
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockSaved {
    /// `[T][rows][H]`: `h` entering each step (after resets).
    pub h: Vec<f32>,
    /// LSTM: `[T][rows][H]`, `c` entering each step.
    pub c: Vec<f32>,
    /// `Keep::Gates`: `[T][rows][G*H]` post-activation gates.
    pub gates: Vec<f32>,
    /// `Keep::Gates`, GRU: `[T][rows][H]`, `h W_hn^T + b_hn`.
    pub hn: Vec<f32>,
}

/// What a layer's forward saved, per block of rows.
#[derive(Clone, Debug)]
pub(crate) struct Saved {
    pub keep: Keep,
    /// `(first row, rows)` per block, in order.
    pub blocks: Vec<(usize, usize)>,
    pub saved: Vec<BlockSaved>,
}

impl Saved {
    /// Bytes held for the backward pass.
    pub fn bytes(&self) -> usize {
        self.saved
            .iter()
            .map(|s| 4 * (s.h.len() + s.c.len() + s.gates.len() + s.hn.len()))
            .sum()
    }
}

/// Bytes a layer's forward keeps for the backward: `[B*T]` rows of `H` (`h` in), `H` (`c`
/// in, LSTM) and, with `Keep::Gates`, `G*H` gates plus `H` (`h W_hn^T + b_hn`, GRU).
pub(crate) fn saved_bytes(d: &Dims, keep: Keep) -> usize {
    let per_row = match keep {
        Keep::Nothing => 0,
        Keep::States => d.hidden * d.slabs(),
        Keep::Gates => {
            d.hidden * d.slabs() + d.width() + if d.cell == CellKind::Gru { d.hidden } else { 0 }
        }
    };
    4 * per_row * d.rows * d.steps
}

/// Where a layer call writes its post-step `c` (LSTM): `[B, T, layers, H]` at `layer` (a
/// `[B, T, H]` buffer is `layers = 1`), every step or only the segment ends.
pub(crate) struct CellOut<'a> {
    pub buf: &'a mut [f32],
    pub layers: usize,
    pub layer: usize,
    /// Only the steps that end a segment (what the `next` state keeps); the other elements
    /// of `buf` are left as they are.
    pub ends_only: bool,
}

impl<'a> CellOut<'a> {
    /// Every step's `c` into `buf` (`[B, T, H]`).
    pub fn every_step(buf: &'a mut [f32]) -> Self {
        Self {
            buf,
            layers: 1,
            layer: 0,
            ends_only: false,
        }
    }

    /// Per block of rows, its rows of `self`.
    fn split(self, lens: &[usize], steps: usize, hidden: usize) -> Vec<CellOut<'a>> {
        let unit = steps * self.layers * hidden;
        let (layers, layer, ends_only) = (self.layers, self.layer, self.ends_only);
        split_mut(self.buf, lens.iter().copied(), unit)
            .into_iter()
            .map(|buf| CellOut {
                buf,
                layers,
                layer,
                ends_only,
            })
            .collect()
    }

    /// Block row `r`'s `c` after step `t` (this is the block's part of the buffer).
    #[inline(always)]
    fn write(&mut self, block: &Block<'_>, r: usize, t: usize, c: &[f32]) {
        if !self.ends_only || block.ends(r, t) {
            let h = c.len();
            let at = ((r * block.d.steps + t) * self.layers + self.layer) * h;
            self.buf[at..at + h].copy_from_slice(c);
        }
    }
}

/// Runs one layer over `[B, T]`. `start[b * T + t]` marks the steps that take the stored
/// state (`t = 0` must be marked). Writes the post-step `h` of every step to `out_h`
/// `[B, T, H]` (every element: their old values do not matter) and, for an LSTM, `c` to
/// `out_c` (see [`CellOut`]); returns what `keep` asks to save.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward(
    d: &Dims,
    p: Params<'_>,
    x: &[f32],
    start: &[bool],
    stored: Stored<'_>,
    keep: Keep,
    threads: usize,
    out_h: &mut [f32],
    out_c: Option<CellOut<'_>>,
) -> Saved {
    let (b, t, h) = (d.rows, d.steps, d.hidden);
    let lstm = d.cell.has_cell_state();
    let states = b * t * stored.layers * h;
    assert_eq!(x.len(), b * t * d.input, "x is [B, T, in]");
    assert_eq!(start.len(), b * t, "start is [B, T]");
    // The state slots are pool buffers: step 0 must overwrite every row.
    assert!(
        (0..b).all(|r| t == 0 || start[r * t]),
        "every row takes its stored state at step 0"
    );
    assert!(stored.layer < stored.layers, "stored layer in range");
    assert_eq!(stored.h.len(), states, "stored h is [B, T, layers, H]");
    assert_eq!(
        stored.c.map(<[f32]>::len),
        lstm.then_some(states),
        "stored c"
    );
    assert_eq!(out_h.len(), b * t * h, "out_h is [B, T, H]");
    assert_eq!(out_c.is_some(), lstm, "out_c exactly for an LSTM");
    if let Some(c) = &out_c {
        assert_eq!(
            c.buf.len(),
            b * t * c.layers * h,
            "out_c is [B, T, layers, H]"
        );
        assert!(c.layer < c.layers, "out_c layer in range");
    }
    let parts = blocks(b, threads);
    let lens: Vec<usize> = parts.iter().map(|&(_, n)| n).collect();
    let hs = split_mut(out_h, lens.iter().copied(), t * h);
    let mut cs: Vec<Option<CellOut<'_>>> = match out_c {
        Some(out_c) => out_c.split(&lens, t, h).into_iter().map(Some).collect(),
        None => parts.iter().map(|_| None).collect(),
    };
    let bias_hn = p.hidden_n_bias(d);
    let mut own = None;
    let packs = Packs::of(d, &p, true, false, &mut own);
    let jobs: Vec<_> = parts
        .iter()
        .zip(hs)
        .zip(cs.iter_mut().map(Option::take))
        .map(|((&(first, n), oh), oc)| {
            let block = Block {
                d,
                p,
                bias_hn: &bias_hn,
                packs,
                first,
                n,
                start,
            };
            move || block.forward(x, stored, keep, oh, oc)
        })
        .collect();
    let saved = parallel(jobs);
    Saved {
        keep,
        blocks: parts,
        saved,
    }
}

/// Gradients of one layer call; `None` where not asked for.
#[derive(Debug, Default)]
pub(crate) struct Grads {
    /// `[B, T, in]`.
    pub x: Option<Vec<f32>>,
    /// `[B, T, H]`, non-zero only where a step takes the stored state.
    pub h0: Option<Vec<f32>>,
    pub c0: Option<Vec<f32>>,
    pub w_ih: Option<Vec<f32>>,
    pub w_hh: Option<Vec<f32>>,
    pub b_ih: Option<Vec<f32>>,
    pub b_hh: Option<Vec<f32>>,
}

/// Which gradients to compute.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wanted {
    pub x: bool,
    pub h0: bool,
    pub c0: bool,
    pub weights: bool,
}

/// The backward pass of [`forward`]: `dout` is the gradient of the outputs `[K, B, T, H]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    d: &Dims,
    p: Params<'_>,
    x: &[f32],
    start: &[bool],
    saved: Saved,
    dout: &[f32],
    wanted: Wanted,
) -> Grads {
    let (b, t, h, w, i) = (d.rows, d.steps, d.hidden, d.width(), d.input);
    assert!(saved.keep != Keep::Nothing, "the forward kept nothing");
    assert_eq!(dout.len(), d.slabs() * b * t * h, "dout is [K, B, T, H]");
    let bias_hn = p.hidden_n_bias(d);
    let mut own = None;
    let packs = Packs::of(d, &p, saved.keep == Keep::States, true, &mut own);
    let lens: Vec<usize> = saved.blocks.iter().map(|&(_, n)| n).collect();
    let mut dx = vec![0.0f32; if wanted.x { b * t * i } else { 0 }];
    let mut dh0 = vec![0.0f32; if wanted.h0 { b * t * h } else { 0 }];
    let mut dc0 = vec![0.0f32; if wanted.c0 { b * t * h } else { 0 }];
    let dxs = opt_split(&mut dx, &lens, t * i);
    let dh0s = opt_split(&mut dh0, &lens, t * h);
    let dc0s = opt_split(&mut dc0, &lens, t * h);
    let keep = saved.keep;
    let jobs: Vec<_> = saved
        .blocks
        .iter()
        .zip(saved.saved)
        .zip(dxs.into_iter().zip(dh0s).zip(dc0s))
        .map(|((&(first, n), s), ((dx, dh0), dc0))| {
            let block = Block {
                d,
                p,
                bias_hn: &bias_hn,
                packs,
                first,
                n,
                start,
            };
            move || block.backward(x, s, keep, dout, dx, dh0, dc0, wanted.weights)
        })
        .collect();
    let partials = parallel(jobs);
    let mut grads = Grads {
        x: wanted.x.then_some(dx),
        h0: wanted.h0.then_some(dh0),
        c0: wanted.c0.then_some(dc0),
        ..Grads::default()
    };
    if wanted.weights {
        let sum = |pick: &dyn Fn(&WeightGrads) -> &Vec<f32>| -> Vec<f32> {
            let mut total = pick(&partials[0]).clone();
            for part in &partials[1..] {
                for (a, b) in total.iter_mut().zip(pick(part)) {
                    *a += b;
                }
            }
            total
        };
        grads.w_ih = Some(sum(&|g| &g.w_ih));
        grads.w_hh = Some(sum(&|g| &g.w_hh));
        let db_x = sum(&|g| &g.b_x);
        if p.b_ih.is_some() {
            grads.b_ih = Some(db_x.clone());
        }
        if p.b_hh.is_some() {
            grads.b_hh = Some(match d.cell {
                CellKind::MinGru => unreachable!("{MINGRU}"),
                CellKind::Lstm => db_x,
                CellKind::Gru => {
                    let mut v = db_x[..2 * h].to_vec();
                    v.extend(sum(&|g| &g.b_hn));
                    v
                }
            });
        }
        debug_assert_eq!(grads.w_hh.as_ref().map(Vec::len), Some(w * h));
    }
    grads
}

/// One thread's weight-gradient partial sums.
#[derive(Default)]
struct WeightGrads {
    w_ih: Vec<f32>,
    w_hh: Vec<f32>,
    /// Column sums of the input-side gate gradients (`[G*H]`).
    b_x: Vec<f32>,
    /// GRU: column sums of `d(h W_hn^T + b_hn)` (`[H]`).
    b_hn: Vec<f32>,
}

/// One thread's rows `first .. first + n` of a layer call.
#[derive(Clone, Copy)]
struct Block<'a> {
    d: &'a Dims,
    p: Params<'a>,
    bias_hn: &'a [f32],
    packs: &'a Packs,
    first: usize,
    n: usize,
    start: &'a [bool],
}

impl Block<'_> {
    /// `(T, n, H, G*H, in)`.
    fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        let d = self.d;
        (d.steps, self.n, d.hidden, d.width(), d.input)
    }

    /// Whether block row `r` takes the stored state at step `t`.
    fn starts(&self, r: usize, t: usize) -> bool {
        self.start[(self.first + r) * self.d.steps + t]
    }

    /// The block's inputs, time-major: `[T][n][in]` (a pool buffer, every element written).
    fn inputs_time_major(&self, x: &[f32]) -> Vec<f32> {
        let (t, i) = (self.d.steps, self.d.input);
        let mut xt = pool::take(t * self.n * i);
        for r in 0..self.n {
            let row = &x[(self.first + r) * t * i..(self.first + r + 1) * t * i];
            for (s, src) in row.chunks_exact(i).enumerate() {
                xt[(s * self.n + r) * i..(s * self.n + r + 1) * i].copy_from_slice(src);
            }
        }
        xt
    }

    /// Width of a step's GEMM input row `[h_in | x_t | 1]`.
    fn step_width(&self) -> usize {
        self.d.hidden + self.d.input + 1
    }

    /// A step-input buffer (`[n][H + in + 1]`, the last column 1; the rest is written by
    /// [`Self::set_x`] and the state writes before a step reads it).
    fn step_input(&self) -> Vec<f32> {
        vec![1.0f32; self.n * self.step_width()]
    }

    /// Writes step `t`'s inputs into the `x_t` part of the step input `a`.
    fn set_x(&self, x: &[f32], t: usize, a: &mut [f32]) {
        let (steps, h, i) = (self.d.steps, self.d.hidden, self.d.input);
        for (r, row) in a.chunks_exact_mut(self.step_width()).enumerate() {
            let at = ((self.first + r) * steps + t) * i;
            row[h..h + i].copy_from_slice(&x[at..at + i]);
        }
    }

    /// Replaces the rows that start at step `t` with their stored state (`values` is
    /// `stored.h` or `stored.c`); row `r` of `state` starts at `r * stride`.
    fn reset(
        &self,
        t: usize,
        state: &mut [f32],
        stride: usize,
        stored: &Stored<'_>,
        values: &[f32],
    ) {
        let h = self.d.hidden;
        for r in 0..self.n {
            if self.starts(r, t) {
                let at = stored.at(self.d, self.first + r, t);
                state[r * stride..r * stride + h].copy_from_slice(&values[at..at + h]);
            }
        }
    }

    /// Whether block row `r`'s segment ends at step `t` (its post-step state is `next`).
    fn ends(&self, r: usize, t: usize) -> bool {
        t + 1 == self.d.steps || self.starts(r, t + 1)
    }

    /// LSTM: step `t`'s pre-activation gates into `g` (`[n][4H]`, every element written) from
    /// the step input `a` (`[n][H + in + 1]`: `[h_in | x_t | 1]`): one GEMM,
    /// `a [W_hh^T; W_ih^T; bias]`.
    fn pre_activations(&self, a: &[f32], g: &mut [f32]) {
        let w_step = Packs::get(&self.packs.w_step);
        gemm_packed(
            Mat::rows(a, self.n, self.step_width()),
            w_step,
            0.0,
            g,
            self.d.width(),
        );
    }

    /// Step `t`'s post-activation gates into `g` (`[n][G*H]`, every element written) from
    /// the step input `a` (`[n][H + in + 1]`: `[h_in | x_t | 1]`). An LSTM's pre-activations
    /// are one GEMM (`a [W_hh^T; W_ih^T; bias]`). A GRU's input and hidden sides are two, as
    /// its n gate needs `h W_hn^T + b_hn` alone: `scratch` (`[n][3H]`) receives `h W_hh^T` and
    /// `hn` (`[n][H]`) `h W_hn^T + b_hn`.
    fn gates(&self, a: &[f32], g: &mut [f32], scratch: &mut [f32], hn: &mut [f32]) {
        let (n, h, w, i) = (self.n, self.d.hidden, self.d.width(), self.d.input);
        let aw = self.step_width();
        match self.d.cell {
            CellKind::MinGru => unreachable!("{MINGRU}"),
            CellKind::Lstm => {
                self.pre_activations(a, g);
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for row in g.chunks_exact_mut(w) {
                            sigmoid_in_place::<Fma>(&mut row[..2 * h]);
                            tanh_in_place::<Fma>(&mut row[2 * h..3 * h]);
                            sigmoid_in_place::<Fma>(&mut row[3 * h..]);
                        }
                    },
                );
            }
            CellKind::Gru => {
                let w_ih_aug = Packs::get(&self.packs.w_ih_aug);
                gemm_packed(Mat::strided(&a[h..], n, i + 1, aw), w_ih_aug, 0.0, g, w);
                let w_hh_t = Packs::get(&self.packs.w_hh_t);
                gemm_packed(Mat::strided(a, n, h, aw), w_hh_t, 0.0, scratch, w);
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for ((row, s), hn_row) in g
                            .chunks_exact_mut(w)
                            .zip(scratch.chunks_exact(w))
                            .zip(hn.chunks_exact_mut(h))
                        {
                            let (rz, nn) = row.split_at_mut(2 * h);
                            for (a, b) in rz.iter_mut().zip(&s[..2 * h]) {
                                *a += b;
                            }
                            sigmoid_in_place::<Fma>(rz);
                            for ((v, &sv), &b) in
                                hn_row.iter_mut().zip(&s[2 * h..]).zip(self.bias_hn)
                            {
                                *v = sv + b;
                            }
                            for ((x, &r), &v) in nn.iter_mut().zip(&rz[..h]).zip(hn_row.iter()) {
                                *x += r * v;
                            }
                            tanh_in_place::<Fma>(nn);
                        }
                    },
                );
            }
        }
    }

    /// The forward time loop of this block; writes its rows of the outputs.
    fn forward(
        &self,
        x: &[f32],
        stored: Stored<'_>,
        keep: Keep,
        out_h: &mut [f32],
        mut out_c: Option<CellOut<'_>>,
    ) -> BlockSaved {
        let (t_len, n, h, w) = (self.d.steps, self.n, self.d.hidden, self.d.width());
        let lstm = self.d.cell.has_cell_state();
        let aw = self.step_width();
        // Pre-activations: every step's slab when saving the gates, else one slab reused by
        // each step, written whole by the step's GEMM.
        let mut xg = pool::take(if keep == Keep::Gates {
            t_len * n * w
        } else {
            n * w
        });
        // The step inputs `[h_in | x_t | 1]`, two that alternate: step t writes its `h` into
        // the other one, which step t + 1 reads (every row is reset at t = 0).
        let mut inputs = [self.step_input(), self.step_input()];
        // Saved `h` entering each step (a copy of the step input's `h` part).
        let sz = n * h;
        let mut hs = if keep == Keep::Nothing {
            Vec::new()
        } else {
            pool::take(t_len * sz)
        };
        // `c` slots: every step's entering state when saving, else two that alternate. Pool
        // buffers: slot t is written before step t reads it (every row is reset at t = 0,
        // slot t + 1 is step t's output).
        let slots = if keep == Keep::Nothing { 2 } else { t_len + 1 };
        let slot = |t: usize| if keep == Keep::Nothing { t % 2 } else { t };
        let mut cs = if lstm {
            pool::take(slots * sz)
        } else {
            Vec::new()
        };
        let gru_gates = keep == Keep::Gates && !lstm;
        // Every step writes its whole slab of `hn` (in `gates`).
        let mut hn_all = if gru_gates {
            pool::take(t_len * sz)
        } else {
            Vec::new()
        };
        let mut hn_step = vec![0.0f32; if lstm { 0 } else { sz }];
        let mut scratch = vec![0.0f32; if lstm { 0 } else { n * w }];
        for t in 0..t_len {
            let [even, odd] = &mut inputs;
            let (cur, next) = if t % 2 == 0 { (even, odd) } else { (odd, even) };
            self.reset(t, cur, aw, &stored, stored.h);
            if keep != Keep::Nothing {
                for (r, saved) in hs[t * sz..(t + 1) * sz].chunks_exact_mut(h).enumerate() {
                    saved.copy_from_slice(&cur[r * aw..r * aw + h]);
                }
            }
            self.set_x(x, t, cur);
            let g = if keep == Keep::Gates {
                &mut xg[t * n * w..(t + 1) * n * w]
            } else {
                &mut xg[..]
            };
            let hn = if gru_gates {
                &mut hn_all[t * sz..(t + 1) * sz]
            } else {
                &mut hn_step[..]
            };
            if lstm {
                let (c_cur, c_next) = two_slots(&mut cs, slot(t), slot(t + 1), sz);
                self.reset(t, c_cur, h, &stored, stored.c.expect("an LSTM has c0"));
                self.pre_activations(cur, g);
                let save_gates = keep == Keep::Gates;
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for r in 0..n {
                            let at = (r * t_len + t) * h;
                            let c_new = &mut c_next[r * h..(r + 1) * h];
                            lstm_update(
                                &mut g[r * w..(r + 1) * w],
                                &c_cur[r * h..(r + 1) * h],
                                c_new,
                                &mut next[r * aw..r * aw + h],
                                &mut out_h[at..at + h],
                                save_gates,
                            );
                            if let Some(oc) = out_c.as_mut() {
                                oc.write(self, r, t, c_new);
                            }
                        }
                    },
                );
            } else {
                self.gates(cur, g, &mut scratch, hn);
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for r in 0..n {
                            let gr = &g[r * w..(r + 1) * w];
                            let z = &gr[h..2 * h];
                            let nn = &gr[2 * h..];
                            let h_in = &cur[r * aw..r * aw + h];
                            let h_new = &mut next[r * aw..r * aw + h];
                            for (((hv, &hi), &z), &nv) in h_new.iter_mut().zip(h_in).zip(z).zip(nn)
                            {
                                *hv = gru_hidden(z, nv, hi);
                            }
                            let at = (r * t_len + t) * h;
                            out_h[at..at + h].copy_from_slice(h_new);
                        }
                    },
                );
            }
        }
        if keep == Keep::Nothing {
            for buf in [xg, cs] {
                pool::give(buf);
            }
            return BlockSaved::default();
        }
        cs.truncate(t_len * sz);
        let gates = if keep == Keep::Gates {
            xg
        } else {
            pool::give(xg);
            Vec::new()
        };
        BlockSaved {
            h: hs,
            c: cs,
            gates,
            hn: hn_all,
        }
    }

    /// The reverse time loop of this block and its weight-gradient partials.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        x: &[f32],
        s: BlockSaved,
        keep: Keep,
        dout: &[f32],
        dx: Option<&mut [f32]>,
        mut dh0: Option<&mut [f32]>,
        mut dc0: Option<&mut [f32]>,
        weights: bool,
    ) -> WeightGrads {
        let (t_len, n, h, w, i) = self.sizes();
        let lstm = self.d.cell.has_cell_state();
        let sz = n * h;
        let slab = self.d.rows * t_len * h;
        let xt = self.inputs_time_major(x);
        let BlockSaved {
            h: hs,
            c: cs,
            gates,
            hn,
        } = s;
        // With recompute, each step's gates are redone in the loop, exactly as the forward
        // computed them (the step input `[h_in | x_t | 1]`, then `gates`), before they are read.
        let (mut g_all, mut hn_all) = match keep {
            Keep::Gates => (gates, hn),
            _ => (
                pool::take(t_len * n * w),
                if lstm {
                    Vec::new()
                } else {
                    pool::take(t_len * sz)
                },
            ),
        };
        let mut scratch = vec![0.0f32; if lstm { 0 } else { n * w }];
        let mut carry_h = vec![0.0f32; sz];
        let mut carry_c = vec![0.0f32; if lstm { sz } else { 0 }];
        let mut dh = vec![0.0f32; sz];
        let mut dh_in = vec![0.0f32; sz];
        let mut tmp = vec![0.0f32; h];
        let mut b_x = vec![0.0f32; w];
        let mut b_hn = vec![0.0f32; if lstm { 0 } else { h }];
        let mut step_input = if keep == Keep::States {
            self.step_input()
        } else {
            Vec::new()
        };
        let aw = self.step_width();
        for t in (0..t_len).rev() {
            let g = &mut g_all[t * n * w..(t + 1) * n * w];
            let h_in = &hs[t * sz..(t + 1) * sz];
            if keep == Keep::States {
                for (r, saved) in h_in.chunks_exact(h).enumerate() {
                    step_input[r * aw..r * aw + h].copy_from_slice(saved);
                }
                self.set_x(x, t, &mut step_input);
                let hn_t = if lstm {
                    &mut [][..]
                } else {
                    &mut hn_all[t * sz..(t + 1) * sz]
                };
                self.gates(&step_input, g, &mut scratch, hn_t);
            }
            // dh = dL/dh_t from the output plus what step t + 1 sent back.
            vectorized(
                self.packs.level,
                #[inline(always)]
                || {
                    for r in 0..n {
                        let at = ((self.first + r) * t_len + t) * h;
                        for ((v, &o), &c) in dh[r * h..(r + 1) * h]
                            .iter_mut()
                            .zip(&dout[at..at + h])
                            .zip(&carry_h[r * h..(r + 1) * h])
                        {
                            *v = o + c;
                        }
                    }
                },
            );
            if lstm {
                let c_in_all = &cs[t * sz..(t + 1) * sz];
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for r in 0..n {
                            let at = slab + ((self.first + r) * t_len + t) * h;
                            let dc = &mut carry_c[r * h..(r + 1) * h];
                            for (v, &o) in dc.iter_mut().zip(&dout[at..at + h]) {
                                *v += o;
                            }
                            let row = &mut g[r * w..(r + 1) * w];
                            let c_in = &c_in_all[r * h..(r + 1) * h];
                            {
                                let (ig, rest) = row.split_at(h);
                                let (fg, rest) = rest.split_at(h);
                                let gg = &rest[..h];
                                for ((((v, &ci), &i), &f), &gv) in
                                    tmp.iter_mut().zip(c_in).zip(ig).zip(fg).zip(gg)
                                {
                                    *v = lstm_cell_state(i, f, gv, ci);
                                }
                            }
                            tanh_in_place::<Fma>(&mut tmp);
                            let (ig, rest) = row.split_at_mut(h);
                            let (fg, rest) = rest.split_at_mut(h);
                            let (gg, og) = rest.split_at_mut(h);
                            let dhr = &dh[r * h..(r + 1) * h];
                            for (((((((i, f), gv), o), dc), &ci), &tc), &dhv) in ig
                                .iter_mut()
                                .zip(fg.iter_mut())
                                .zip(gg.iter_mut())
                                .zip(og.iter_mut())
                                .zip(dc.iter_mut())
                                .zip(c_in)
                                .zip(tmp.iter())
                                .zip(dhr)
                            {
                                let (iv, fv, gvv, ov) = (*i, *f, *gv, *o);
                                let dct = *dc + dhv * ov * (1.0 - tc * tc);
                                *o = dhv * tc * ov * (1.0 - ov);
                                *i = dct * gvv * iv * (1.0 - iv);
                                *f = dct * ci * fv * (1.0 - fv);
                                *gv = dct * iv * (1.0 - gvv * gvv);
                                *dc = dct * fv;
                            }
                            for (a, &v) in b_x.iter_mut().zip(row.iter()) {
                                *a += v;
                            }
                        }
                    },
                );
                gemm_packed(
                    Mat::rows(g, n, w),
                    Packs::get(&self.packs.w_hh),
                    0.0,
                    &mut dh_in,
                    h,
                );
            } else {
                let hn_t = &mut hn_all[t * sz..(t + 1) * sz];
                vectorized(
                    self.packs.level,
                    #[inline(always)]
                    || {
                        for r in 0..n {
                            let row = &mut g[r * w..(r + 1) * w];
                            let (rg, rest) = row.split_at_mut(h);
                            let (zg, ng) = rest.split_at_mut(h);
                            let hnr = &mut hn_t[r * h..(r + 1) * h];
                            let h_in_r = &h_in[r * h..(r + 1) * h];
                            let dhr = &dh[r * h..(r + 1) * h];
                            let direct = &mut dh_in[r * h..(r + 1) * h];
                            for ((((((rv, zv), nv), hnv), &hi), &dhv), dd) in rg
                                .iter_mut()
                                .zip(zg.iter_mut())
                                .zip(ng.iter_mut())
                                .zip(hnr.iter_mut())
                                .zip(h_in_r)
                                .zip(dhr)
                                .zip(direct.iter_mut())
                            {
                                let (r_, z_, n_, hn_) = (*rv, *zv, *nv, *hnv);
                                let dn = dhv * (1.0 - z_) * (1.0 - n_ * n_);
                                let dz = dhv * (hi - n_);
                                *dd = dhv * z_;
                                *hnv = dn * r_;
                                *rv = dn * hn_ * r_ * (1.0 - r_);
                                *zv = dz * z_ * (1.0 - z_);
                                *nv = dn;
                            }
                            for (a, &v) in b_x.iter_mut().zip(row.iter()) {
                                *a += v;
                            }
                            for (a, &v) in b_hn.iter_mut().zip(hnr.iter()) {
                                *a += v;
                            }
                        }
                    },
                );
                gemm_packed(
                    Mat::strided(g, n, 2 * h, w),
                    Packs::get(&self.packs.w_hh),
                    1.0,
                    &mut dh_in,
                    h,
                );
                gemm_packed(
                    Mat::rows(hn_t, n, h),
                    Packs::get(&self.packs.w_hh_n),
                    1.0,
                    &mut dh_in,
                    h,
                );
            }
            // dh_in flows to step t - 1, or to the stored state where step t starts.
            for r in 0..n {
                let row = r * h..(r + 1) * h;
                if self.starts(r, t) {
                    let at = (r * t_len + t) * h;
                    if let Some(d) = dh0.as_deref_mut() {
                        d[at..at + h].copy_from_slice(&dh_in[row.clone()]);
                    }
                    carry_h[row.clone()].fill(0.0);
                    if lstm {
                        if let Some(d) = dc0.as_deref_mut() {
                            d[at..at + h].copy_from_slice(&carry_c[row.clone()]);
                        }
                        carry_c[row].fill(0.0);
                    }
                } else {
                    carry_h[row.clone()].copy_from_slice(&dh_in[row]);
                }
            }
        }
        // g_all now holds dG (input side) for every step; hn_all the GRU's d(h W_hn^T + b_hn).
        let rows = t_len * n;
        if let Some(dx) = dx {
            // Written whole by the GEMM (beta = 0 does not read it).
            let mut dxt = pool::take(rows * i);
            gemm(
                self.packs.level,
                Mat::rows(&g_all, rows, w),
                Mat::rows(self.p.w_ih, w, i),
                0.0,
                &mut dxt,
                i,
            );
            for r in 0..n {
                for t in 0..t_len {
                    dx[(r * t_len + t) * i..(r * t_len + t + 1) * i]
                        .copy_from_slice(&dxt[(t * n + r) * i..(t * n + r + 1) * i]);
                }
            }
            pool::give(dxt);
        }
        let grads = if weights {
            self.weight_grads(&g_all, &hn_all, &hs, &xt, b_x, b_hn)
        } else {
            WeightGrads::default()
        };
        for buf in [xt, g_all, hn_all, hs, cs] {
            pool::give(buf);
        }
        grads
    }

    /// The weight gradients from every step's gate gradients `g_all` (`[T][n][G*H]`), the
    /// GRU's `hn_all` (`[T][n][H]`), the states entering each step `hs` and the inputs `xt`.
    fn weight_grads(
        &self,
        g_all: &[f32],
        hn_all: &[f32],
        hs: &[f32],
        xt: &[f32],
        b_x: Vec<f32>,
        b_hn: Vec<f32>,
    ) -> WeightGrads {
        let (t_len, n, h, w, i) = self.sizes();
        let rows = t_len * n;
        let mut grads = WeightGrads {
            w_ih: vec![0.0f32; w * i],
            w_hh: vec![0.0f32; w * h],
            b_x,
            b_hn,
        };
        let h_in_all = Mat::rows(hs, rows, h);
        gemm(
            self.packs.level,
            Mat::rows(g_all, rows, w).t(),
            Mat::rows(xt, rows, i),
            0.0,
            &mut grads.w_ih,
            i,
        );
        match self.d.cell {
            CellKind::MinGru => unreachable!("{MINGRU}"),
            CellKind::Lstm => gemm(
                self.packs.level,
                Mat::rows(g_all, rows, w).t(),
                h_in_all,
                0.0,
                &mut grads.w_hh,
                h,
            ),
            CellKind::Gru => {
                gemm(
                    self.packs.level,
                    Mat::strided(g_all, rows, 2 * h, w).t(),
                    h_in_all,
                    0.0,
                    &mut grads.w_hh[..2 * h * h],
                    h,
                );
                gemm(
                    self.packs.level,
                    Mat::rows(hn_all, rows, h).t(),
                    h_in_all,
                    0.0,
                    &mut grads.w_hh[2 * h * h..],
                    h,
                );
            }
        }
        grads
    }
}

/// One LSTM row's step from its pre-activation gates `g` (`[4H]`: i, f, g, o) and entering
/// cell state `c_in`, in one pass: the activations, `c' = f c + i g` into `c_new` and
/// `h' = o tanh(c')` into `h_new` and `out_h`. With `save_gates` the activations replace the
/// pre-activations in `g` (what the backward reads); otherwise `g` is only read.
#[inline(always)]
fn lstm_update(
    g: &mut [f32],
    c_in: &[f32],
    c_new: &mut [f32],
    h_new: &mut [f32],
    out_h: &mut [f32],
    save_gates: bool,
) {
    let h = c_in.len();
    let (ig, rest) = g.split_at_mut(h);
    let (fg, rest) = rest.split_at_mut(h);
    let (gg, og) = rest.split_at_mut(h);
    let (c_new, h_new, out_h) = (&mut c_new[..h], &mut h_new[..h], &mut out_h[..h]);
    let og = &mut og[..h];
    for j in 0..h {
        let (i, f, gv, o) = (
            sigmoid_with::<Fma>(ig[j]),
            sigmoid_with::<Fma>(fg[j]),
            tanh_with::<Fma>(gg[j]),
            sigmoid_with::<Fma>(og[j]),
        );
        if save_gates {
            (ig[j], fg[j], gg[j], og[j]) = (i, f, gv, o);
        }
        let c = lstm_cell_state(i, f, gv, c_in[j]);
        c_new[j] = c;
        let hv = o * tanh_with::<Fma>(c);
        h_new[j] = hv;
        out_h[j] = hv;
    }
}

/// Per block, its rows of `buf` (`lens[i] * unit` elements each), or `None` for every block
/// when `buf` is empty (a gradient not asked for).
fn opt_split<'a>(buf: &'a mut [f32], lens: &[usize], unit: usize) -> Vec<Option<&'a mut [f32]>> {
    if buf.is_empty() {
        lens.iter().map(|_| None).collect()
    } else {
        split_mut(buf, lens.iter().copied(), unit)
            .into_iter()
            .map(Some)
            .collect()
    }
}

/// Two distinct `len`-sized slots `a` and `b` of `buf`, mutably.
fn two_slots(buf: &mut [f32], a: usize, b: usize, len: usize) -> (&mut [f32], &mut [f32]) {
    debug_assert_ne!(a, b);
    if a < b {
        let (lo, hi) = buf.split_at_mut(b * len);
        (&mut lo[a * len..(a + 1) * len], &mut hi[..len])
    } else {
        let (lo, hi) = buf.split_at_mut(a * len);
        (&mut hi[..len], &mut lo[b * len..(b + 1) * len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    struct Problem {
        d: Dims,
        w_ih: Vec<f32>,
        w_hh: Vec<f32>,
        b_ih: Vec<f32>,
        b_hh: Vec<f32>,
        x: Vec<f32>,
        start: Vec<bool>,
        h0: Vec<f32>,
        c0: Vec<f32>,
        dout: Vec<f32>,
    }

    impl Problem {
        fn new(cell: CellKind, rows: usize, steps: usize) -> Self {
            let d = Dims {
                cell,
                rows,
                steps,
                input: 3,
                hidden: 5,
            };
            let (w, h) = (d.width(), d.hidden);
            let start = (0..rows * steps)
                .map(|p| p % steps == 0 || p % 7 == 3)
                .collect();
            Self {
                w_ih: random(w * d.input, 1),
                w_hh: random(w * h, 2),
                b_ih: random(w, 3),
                b_hh: random(w, 4),
                x: random(rows * steps * d.input, 5),
                h0: random(rows * steps * h, 6),
                c0: random(rows * steps * h, 7),
                dout: random(d.slabs() * rows * steps * h, 8),
                start,
                d,
            }
        }

        fn params(&self) -> Params<'_> {
            Params {
                w_ih: &self.w_ih,
                w_hh: &self.w_hh,
                b_ih: Some(&self.b_ih),
                b_hh: Some(&self.b_hh),
                packs: None,
            }
        }

        /// The forward with the stored states in `stored`; outputs `[K, B, T, H]`.
        fn forward(&self, stored: Stored<'_>, keep: Keep, threads: usize) -> (Vec<f32>, Saved) {
            let slab = self.d.rows * self.d.steps * self.d.hidden;
            // Garbage in the outputs: the forward must write every element.
            let mut out = vec![f32::NAN; self.d.slabs() * slab];
            let (out_h, out_c) = out.split_at_mut(slab);
            let lstm = self.d.cell.has_cell_state();
            let saved = forward(
                &self.d,
                self.params(),
                &self.x,
                &self.start,
                stored,
                keep,
                threads,
                out_h,
                lstm.then_some(CellOut::every_step(out_c)),
            );
            (out, saved)
        }

        fn run(&self, keep: Keep, threads: usize) -> (Vec<f32>, Saved, Grads) {
            let c0 = self.d.cell.has_cell_state().then_some(&self.c0[..]);
            let (out, saved) = self.forward(Stored::single(&self.h0, c0), keep, threads);
            let wanted = Wanted {
                x: true,
                h0: true,
                c0: c0.is_some(),
                weights: true,
            };
            let grads = backward(
                &self.d,
                self.params(),
                &self.x,
                &self.start,
                saved.clone(),
                &self.dout,
                wanted,
            );
            (out, saved, grads)
        }
    }

    /// Rows are independent: any split over threads gives the same bits, for the outputs and
    /// the per-row gradients (weight gradients are sums of per-thread partials, so only close).
    #[test]
    fn thread_count_does_not_change_results() {
        for cell in [CellKind::Lstm, CellKind::Gru] {
            let p = Problem::new(cell, 5, 6);
            let (out1, _, g1) = p.run(Keep::Gates, 1);
            for threads in [2, 3, 8] {
                let (out, _, g) = p.run(Keep::Gates, threads);
                assert_eq!(out, out1, "{cell:?} outputs, {threads} threads");
                assert_eq!(g.x, g1.x, "{cell:?} dx");
                assert_eq!(g.h0, g1.h0, "{cell:?} dh0");
                assert_eq!(g.c0, g1.c0, "{cell:?} dc0");
                for (a, b) in g.w_hh.unwrap().iter().zip(g1.w_hh.as_ref().unwrap()) {
                    assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }

    /// Every SIMD level (AVX-512, AVX2/FMA, portable) gives the same outputs and gradients up
    /// to rounding (the kernels sum in different orders), both cells, both keeps.
    #[test]
    fn every_simd_level_agrees() {
        use super::super::simd::with_level;
        let close = |a: &[f32], b: &[f32], what: &str| {
            assert_eq!(a.len(), b.len(), "{what}");
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 2e-5 * (1.0 + y.abs()),
                    "{what}: {x} vs {y}"
                );
            }
        };
        for cell in [CellKind::Lstm, CellKind::Gru] {
            // Rows and H off the micro-tile sizes; H * G past one panel.
            let mut p = Problem::new(cell, 11, 7);
            p.d.hidden = 37;
            p.d.input = 19;
            let (w, h) = (p.d.width(), p.d.hidden);
            p.w_ih = random(w * p.d.input, 11);
            p.w_hh = random(w * h, 12);
            p.b_ih = random(w, 13);
            p.b_hh = random(w, 14);
            p.x = random(p.d.rows * p.d.steps * p.d.input, 15);
            p.h0 = random(p.d.rows * p.d.steps * h, 16);
            p.c0 = random(p.d.rows * p.d.steps * h, 17);
            p.dout = random(p.d.slabs() * p.d.rows * p.d.steps * h, 18);
            for keep in [Keep::Gates, Keep::States] {
                let (out0, _, g0) = with_level(Level::Scalar, || p.run(keep, 2));
                for level in Level::available() {
                    let (out, _, g) = with_level(level, || p.run(keep, 2));
                    let what = format!("{cell:?} {keep:?} {level:?}");
                    close(&out, &out0, &format!("{what} outputs"));
                    for (a, b, name) in [
                        (&g.x, &g0.x, "dx"),
                        (&g.h0, &g0.h0, "dh0"),
                        (&g.c0, &g0.c0, "dc0"),
                        (&g.w_ih, &g0.w_ih, "dw_ih"),
                        (&g.w_hh, &g0.w_hh, "dw_hh"),
                        (&g.b_ih, &g0.b_ih, "db_ih"),
                        (&g.b_hh, &g0.b_hh, "db_hh"),
                    ] {
                        assert_eq!(a.is_some(), b.is_some(), "{what} {name}");
                        if let (Some(a), Some(b)) = (a, b) {
                            close(a, b, &format!("{what} {name}"));
                        }
                    }
                }
            }
        }
    }

    /// A layer of a stack reads its own stored states out of `[B, T, layers, H]`.
    #[test]
    fn a_layer_reads_its_slice_of_stacked_states() {
        for cell in [CellKind::Lstm, CellKind::Gru] {
            let p = Problem::new(cell, 3, 5);
            let lstm = cell.has_cell_state();
            let (single, _) = p.forward(
                Stored::single(&p.h0, lstm.then_some(&p.c0[..])),
                Keep::Nothing,
                2,
            );
            // Layer 1 of 3: the problem's states interleaved with others.
            let stack = |own: &[f32]| -> Vec<f32> {
                own.chunks_exact(p.d.hidden)
                    .flat_map(|row| {
                        let mut three = vec![9.0; p.d.hidden];
                        three.extend_from_slice(row);
                        three.extend(vec![-9.0; p.d.hidden]);
                        three
                    })
                    .collect()
            };
            let (h3, c3) = (stack(&p.h0), stack(&p.c0));
            let stored = Stored {
                h: &h3,
                c: lstm.then_some(&c3[..]),
                layers: 3,
                layer: 1,
            };
            let (stacked, _) = p.forward(stored, Keep::Nothing, 2);
            assert_eq!(stacked, single, "{cell:?}");
            assert!(single.iter().all(|v| v.is_finite()), "{cell:?}");
        }
    }

    /// `recompute = "full"` gives the same numbers as saving the gates, keeps fewer bytes, and
    /// the byte count the benchmark prints is what the forward keeps.
    #[test]
    fn recompute_gives_the_same_gradients_from_fewer_bytes() {
        for cell in [CellKind::Lstm, CellKind::Gru] {
            let p = Problem::new(cell, 4, 9);
            let (out, saved, g) = p.run(Keep::Gates, 2);
            let (out_full, saved_full, g_full) = p.run(Keep::States, 2);
            assert_eq!(out, out_full);
            assert_eq!(saved.bytes(), saved_bytes(&p.d, Keep::Gates));
            assert_eq!(saved_full.bytes(), saved_bytes(&p.d, Keep::States));
            assert!(saved_full.bytes() * 3 <= saved.bytes(), "{cell:?}");
            assert_eq!(g.x, g_full.x);
            assert_eq!(g.h0, g_full.h0);
            assert_eq!(g.w_ih, g_full.w_ih);
            assert_eq!(g.b_hh, g_full.b_hh);
            // Gradients exist and are not all zero.
            assert!(g.w_hh.unwrap().iter().any(|&v| v != 0.0));
            // Only steps that take the stored state get a stored-state gradient.
            let h = p.d.hidden;
            for (pos, &s) in p.start.iter().enumerate() {
                let row = &g.h0.as_ref().unwrap()[pos * h..(pos + 1) * h];
                assert_eq!(s, row.iter().any(|&v| v != 0.0), "{cell:?} step {pos}");
            }
        }
    }
}
