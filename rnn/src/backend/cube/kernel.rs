//! The `#[cube]` kernels of the CubeCL fused backend and their launches on burn's tensors.
//!
//! One cube per batch row, or per tile of rows, runs those rows' whole time loop in **one
//! launch per layer**: rows are independent (a row's recurrence reads only its own previous
//! state), so the only barrier a step needs is between the cube's own units (`sync_cube`),
//! never a grid-wide one. Unit `u` of a cube owns hidden units `j = u, u + D, u + 2D, ...`
//! (`D` = the cube's size) in every row it runs; the states entering the step live in shared
//! memory (`[tile, H]`), so every unit reads all of them for its column of the recurrent
//! product `h W_hh^T`.
//!
//! Two LSTM/GRU kernels per direction: [`forward_kernel`]/[`backward_kernel`] run one row per
//! cube; [`forward_tiles_kernel`]/[`backward_tiles_kernel`] run `tile` rows per cube (a
//! compile-time constant: the per-row sums are `Array`s indexed by constants, which ptxas keeps
//! in registers on an H100, with no stack frame) and read each weight once for the whole
//! tile. The launch picks the tiled kernels where the tile is 2 rows or more (the module
//! above chooses it); a tile's rows past the batch are computed on zeros and never written.
//! Measured on an H200 (benchmarks/history/), the tiled kernels halve the forward at B 2048,
//! and one row per cube stayed the faster at B 128, where the grid is one cube per row anyway.
//!
//! Layouts (all contiguous, row-major, `G` = 4 gates for an LSTM, 3 for a GRU):
//! - `xp` `[B, T, G*H]`: the input projection `x W_ih^T + b_ih` of every step (one GEMM,
//!   done by burn's matmul before the launch);
//! - `w_t` `[H, G*H]`: `W_hh^T` (so consecutive units read consecutive addresses);
//!   `w` `[G*H, H]`: `W_hh` (the backward's transposed product);
//! - `h0`, `c0` `[B, T, H]`: the stored states, read where a step starts a segment;
//! - `start` `[B, T]`: 1.0 where a step starts a segment (always at `t = 0`);
//! - `out` `[K, B, T, H]`: post-step `h` (and, for an LSTM, `c` in the second plane);
//! - `saved` `[B, T, S]`: the post-activation gates, `S = 4H` (LSTM `i,f,g,o`; GRU `r,z,n`
//!   and `h W_hn^T + b_hn`).
//!
//! Offsets are `usize` in the kernels and the launch picks the address width from the largest
//! tensor (cubecl's dynamic address type: 64-bit once a tensor has 2^32 elements or more;
//! TorchRL's triton kernel overflowed 32-bit offsets at `B*T*H >= 2^31`).

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

/// `precision` values the kernels take at compile time.
pub const IEEE: u32 = 0;
pub const TF32: u32 = 1;
pub const BF16: u32 = 2;

/// `cell` values the kernels take at compile time.
pub const LSTM: u32 = 0;
pub const GRU: u32 = 1;
/// minGRU runs its own kernels ([`mingru_forward`], [`mingru_backward`]).
pub const MINGRU: u32 = 2;

/// `x` rounded to nearest-even at `precision`'s mantissa (tf32: 10 bits, bf16: 7 bits), as a
/// tensor core rounds its operands; the identity for `ieee`.
#[cube]
fn round(x: f32, #[comptime] precision: u32) -> f32 {
    if comptime!(precision == IEEE) {
        x
    } else {
        let drop = comptime!(if precision == TF32 { 13u32 } else { 16u32 });
        let bits = u32::reinterpret(x);
        let lsb = (bits >> drop) & 1u32;
        let half = comptime!((1u32 << (drop - 1)) - 1);
        let mask = comptime!(!((1u32 << drop) - 1));
        f32::reinterpret((bits + half + lsb) & mask)
    }
}

#[cube]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `tanh` through `exp`: exact at the saturated ends on every runtime (some drivers' `tanh`
/// returns NaN for large arguments).
#[cube]
fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / ((2.0 * x).exp() + 1.0)
}

/// Every element of `input` rounded at `precision` into `output` (same shape).
#[cube(launch, address_type = "dynamic")]
fn round_kernel(input: &Tensor<f32>, output: &mut Tensor<f32>, #[comptime] precision: u32) {
    if ABSOLUTE_POS < output.len() {
        output[ABSOLUTE_POS] = round(input[ABSOLUTE_POS], precision);
    }
}

/// Hidden unit `j` of one row at `pos` (its step), given the unit's gate sums of
/// `h W_hh^T + b_hh` (`a3`: an LSTM's fourth; a GRU ignores it): the activations and the state
/// update into `out` (`plane`: its second plane, an LSTM's `c`), the gates into `saved` when
/// `keep`. Shared by the one-row and the tiled forward.
#[cube]
#[allow(clippy::too_many_arguments)]
fn forward_unit(
    xp: &Tensor<f32>,
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    out: &mut Tensor<f32>,
    saved: &mut Tensor<f32>,
    pos: usize,
    j: usize,
    plane: usize,
    starts: bool,
    a0: f32,
    a1: f32,
    a2: f32,
    a3: f32,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] keep: bool,
) {
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    let x = pos * gh + j;
    let at = pos * hidden + j;
    if comptime!(cell == LSTM) {
        let i = sigmoid(xp[x] + a0);
        let f = sigmoid(xp[x + hidden] + a1);
        let g = tanh(xp[x + 2 * hidden] + a2);
        let o = sigmoid(xp[x + 3 * hidden] + a3);
        let mut c_prev = c0[at];
        if !starts {
            c_prev = out[plane + at - hidden];
        }
        let c = f * c_prev + i * g;
        out[at] = o * tanh(c);
        out[plane + at] = c;
        if keep {
            let s = pos * 4 * hidden + j;
            saved[s] = i;
            saved[s + hidden] = f;
            saved[s + 2 * hidden] = g;
            saved[s + 3 * hidden] = o;
        }
    } else {
        let r = sigmoid(xp[x] + a0);
        let z = sigmoid(xp[x + hidden] + a1);
        let n = tanh(xp[x + 2 * hidden] + r * a2);
        // The full-precision state, not the rounded matmul operand.
        let mut h_prev = h0[at];
        if !starts {
            h_prev = out[at - hidden];
        }
        out[at] = n + z * (h_prev - n);
        if keep {
            let s = pos * 4 * hidden + j;
            saved[s] = r;
            saved[s + hidden] = z;
            saved[s + 2 * hidden] = n;
            saved[s + 3 * hidden] = a2;
        }
    }
}

/// The forward time loop of one layer (see the module docs for the layouts). One cube per row.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn forward_kernel(
    xp: &Tensor<f32>,
    w_t: &Tensor<f32>,
    b_hh: &Tensor<f32>,
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &mut Tensor<f32>,
    saved: &mut Tensor<f32>,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] keep: bool,
    #[comptime] precision: u32,
) {
    let row = CUBE_POS_X as usize;
    let unit = UNIT_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let rows = start.shape(0);
    let steps = start.shape(1);
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    // The second plane of `out` (LSTM `c`).
    let plane = rows * steps * hidden;
    let mut shared_h = SharedMemory::<f32>::new(hidden);

    for t in 0..steps {
        let pos = row * steps + t;
        let starts = start[pos] > 0.5;
        if starts {
            let mut j = unit;
            while j < hidden {
                shared_h[j] = round(h0[pos * hidden + j], precision);
                j += stride;
            }
        }
        sync_cube();
        let mut j = unit;
        while j < hidden {
            // Row j of every gate block of h W_hh^T + b_hh.
            let mut a0 = b_hh[j];
            let mut a1 = b_hh[hidden + j];
            let mut a2 = b_hh[2 * hidden + j];
            let mut a3 = 0.0f32;
            if comptime!(cell == LSTM) {
                a3 = b_hh[3 * hidden + j];
            }
            for k in 0..hidden {
                let hk = shared_h[k];
                let w = k * gh + j;
                a0 += hk * w_t[w];
                a1 += hk * w_t[w + hidden];
                a2 += hk * w_t[w + 2 * hidden];
                if comptime!(cell == LSTM) {
                    a3 += hk * w_t[w + 3 * hidden];
                }
            }
            forward_unit(
                xp, h0, c0, out, saved, pos, j, plane, starts, a0, a1, a2, a3, cell, hidden, keep,
            );
            j += stride;
        }
        sync_cube();
        // Publish this step's h as the next step's matmul operand (own units only, so no
        // barrier is needed before a reset of the next step overwrites the same slots).
        let mut j = unit;
        while j < hidden {
            shared_h[j] = round(out[pos * hidden + j], precision);
            j += stride;
        }
    }
}

/// [`forward_kernel`] over a tile of `tile` batch rows per cube: each step reads every weight
/// of `W_hh^T` once for the whole tile into per-row sums (issue 32: one cube per row
/// re-read all of `W_hh`, 1 MiB at H 256, per row and step). Launched where the tile is 2 rows
/// or more; one row per cube keeps the kernel above, measured the faster of the two there.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn forward_tiles_kernel(
    xp: &Tensor<f32>,
    w_t: &Tensor<f32>,
    b_hh: &Tensor<f32>,
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &mut Tensor<f32>,
    saved: &mut Tensor<f32>,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] tile: usize,
    #[comptime] keep: bool,
    #[comptime] precision: u32,
) {
    let first = CUBE_POS_X as usize * tile;
    let unit = UNIT_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let rows = start.shape(0);
    let steps = start.shape(1);
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    // The second plane of `out` (LSTM `c`).
    let plane = rows * steps * hidden;
    // Row `b` of the tile at `[b * H, (b + 1) * H)`.
    let mut shared_h = SharedMemory::<f32>::new(tile * hidden);
    // Per tile row, one hidden unit's four gate sums (constant indices once unrolled: registers,
    // no stack frame, per ptxas -v on an H100; benchmarks/history/).
    let mut a0 = Array::<f32>::new(tile);
    let mut a1 = Array::<f32>::new(tile);
    let mut a2 = Array::<f32>::new(tile);
    let mut a3 = Array::<f32>::new(tile);

    for t in 0..steps {
        #[unroll]
        for b in 0..tile {
            let row = first + b;
            if row < rows {
                let pos = row * steps + t;
                if start[pos] > 0.5 {
                    let mut j = unit;
                    while j < hidden {
                        shared_h[b * hidden + j] = round(h0[pos * hidden + j], precision);
                        j += stride;
                    }
                }
            } else if t == 0 {
                // A tail row past the batch: zeros, so its sums below stay finite.
                let mut j = unit;
                while j < hidden {
                    shared_h[b * hidden + j] = 0.0;
                    j += stride;
                }
            }
        }
        sync_cube();
        let mut j = unit;
        while j < hidden {
            // Row j of every gate block of h W_hh^T + b_hh, for every row of the tile: each
            // weight is read once per tile.
            #[unroll]
            for b in 0..tile {
                a0[b] = b_hh[j];
                a1[b] = b_hh[hidden + j];
                a2[b] = b_hh[2 * hidden + j];
                if comptime!(cell == LSTM) {
                    a3[b] = b_hh[3 * hidden + j];
                }
            }
            for k in 0..hidden {
                let w = k * gh + j;
                let w0 = w_t[w];
                let w1 = w_t[w + hidden];
                let w2 = w_t[w + 2 * hidden];
                let mut w3 = 0.0f32;
                if comptime!(cell == LSTM) {
                    w3 = w_t[w + 3 * hidden];
                }
                #[unroll]
                for b in 0..tile {
                    let hk = shared_h[b * hidden + k];
                    a0[b] += hk * w0;
                    a1[b] += hk * w1;
                    a2[b] += hk * w2;
                    if comptime!(cell == LSTM) {
                        a3[b] += hk * w3;
                    }
                }
            }
            #[unroll]
            for b in 0..tile {
                let row = first + b;
                if row < rows {
                    let pos = row * steps + t;
                    forward_unit(
                        xp,
                        h0,
                        c0,
                        out,
                        saved,
                        pos,
                        j,
                        plane,
                        start[pos] > 0.5,
                        a0[b],
                        a1[b],
                        a2[b],
                        a3[b],
                        cell,
                        hidden,
                        keep,
                    );
                }
            }
            j += stride;
        }
        sync_cube();
        // Publish this step's h as the next step's matmul operand (own units only, so no
        // barrier is needed before a reset of the next step overwrites the same slots).
        let mut j = unit;
        while j < hidden {
            #[unroll]
            for b in 0..tile {
                let row = first + b;
                if row < rows {
                    let pos = row * steps + t;
                    shared_h[b * hidden + j] = round(out[pos * hidden + j], precision);
                }
            }
            j += stride;
        }
    }
}

/// Hidden unit `j` of one row at `pos` (its step) in the reverse loop: from the unit's saved
/// gates and the gradient flowing into its post-step state (`carry_h[m]`, `carry_c[m]`), the
/// gate gradients (`dg_ih`, and `dg_hh` for a GRU), the entering state into `h_in`, the rounded
/// recurrent-side gate gradients into `shared_dg[d + q H]`, and into `direct[m]` the part of
/// `dh_prev` that skips `W_hh` (`m`, `d`: the unit's slots in the cube's shared memory).
/// Shared by the one-row and the tiled backward.
#[cube]
#[allow(clippy::too_many_arguments)]
fn backward_unit(
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    out: &Tensor<f32>,
    saved: &Tensor<f32>,
    dout: &Tensor<f32>,
    dg_ih: &mut Tensor<f32>,
    dg_hh: &mut Tensor<f32>,
    h_in: &mut Tensor<f32>,
    shared_dg: &mut SharedMemory<f32>,
    carry_h: &SharedMemory<f32>,
    carry_c: &mut SharedMemory<f32>,
    direct: &mut SharedMemory<f32>,
    pos: usize,
    j: usize,
    m: usize,
    d: usize,
    plane: usize,
    starts: bool,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] precision: u32,
) {
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    let at = pos * hidden + j;
    let g = pos * gh + j;
    let s = pos * 4 * hidden + j;
    let dh = dout[at] + carry_h[m];
    let mut h_prev = h0[at];
    if !starts {
        h_prev = out[at - hidden];
    }
    h_in[at] = h_prev;
    if comptime!(cell == LSTM) {
        let i = saved[s];
        let f = saved[s + hidden];
        let gg = saved[s + 2 * hidden];
        let o = saved[s + 3 * hidden];
        let c = out[plane + at];
        let mut c_prev = c0[at];
        if !starts {
            c_prev = out[plane + at - hidden];
        }
        let tc = tanh(c);
        let dc = dout[plane + at] + carry_c[m] + dh * o * (1.0 - tc * tc);
        let di = dc * gg * i * (1.0 - i);
        let df = dc * c_prev * f * (1.0 - f);
        let dgg = dc * i * (1.0 - gg * gg);
        let d_o = dh * tc * o * (1.0 - o);
        dg_ih[g] = di;
        dg_ih[g + hidden] = df;
        dg_ih[g + 2 * hidden] = dgg;
        dg_ih[g + 3 * hidden] = d_o;
        shared_dg[d] = round(di, precision);
        shared_dg[d + hidden] = round(df, precision);
        shared_dg[d + 2 * hidden] = round(dgg, precision);
        shared_dg[d + 3 * hidden] = round(d_o, precision);
        carry_c[m] = dc * f;
        direct[m] = 0.0;
    } else {
        let r = saved[s];
        let z = saved[s + hidden];
        let n = saved[s + 2 * hidden];
        let hn = saved[s + 3 * hidden];
        let dn = dh * (1.0 - z) * (1.0 - n * n);
        let dr = dn * hn * r * (1.0 - r);
        let dz = dh * (h_prev - n) * z * (1.0 - z);
        let dhn = dn * r;
        dg_ih[g] = dr;
        dg_ih[g + hidden] = dz;
        dg_ih[g + 2 * hidden] = dn;
        dg_hh[g] = dr;
        dg_hh[g + hidden] = dz;
        dg_hh[g + 2 * hidden] = dhn;
        shared_dg[d] = round(dr, precision);
        shared_dg[d + hidden] = round(dz, precision);
        shared_dg[d + 2 * hidden] = round(dhn, precision);
        direct[m] = dh * z;
    }
}

/// Hidden unit `j`'s `dh_prev` (`acc`) at `at`: into the stored state's gradient where the step
/// starts a segment (and nothing into the previous segment), else carried to the previous step
/// (`carry_h[m]`; an LSTM's `carry_c[m]` likewise). Shared by the one-row and the tiled backward.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_dh_prev(
    dh0: &mut Tensor<f32>,
    dc0: &mut Tensor<f32>,
    carry_h: &mut SharedMemory<f32>,
    carry_c: &mut SharedMemory<f32>,
    at: usize,
    m: usize,
    acc: f32,
    starts: bool,
    #[comptime] cell: u32,
) {
    if starts {
        // The state entering this step was the stored one: its gradient goes there,
        // and nothing flows into the previous segment.
        dh0[at] = acc;
        carry_h[m] = 0.0;
        if comptime!(cell == LSTM) {
            dc0[at] = carry_c[m];
            carry_c[m] = 0.0;
        }
    } else {
        dh0[at] = 0.0;
        carry_h[m] = acc;
        if comptime!(cell == LSTM) {
            dc0[at] = 0.0;
        }
    }
}

/// The backward time loop of one layer, steps in reverse. Writes, per step, the gradients of
/// the gate pre-activations on the input side (`dg_ih` `[B, T, G*H]`) and on the recurrent
/// side (`dg_hh`, GRU only: its `n` block is scaled by `r`), the state that entered the step
/// (`h_in` `[B, T, H]`, for `dW_hh`), and the gradients of the stored states (`dh0`, `dc0`
/// `[B, T, H]`: non-zero only where a step starts a segment).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn backward_kernel(
    w: &Tensor<f32>,
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &Tensor<f32>,
    saved: &Tensor<f32>,
    dout: &Tensor<f32>,
    dg_ih: &mut Tensor<f32>,
    dg_hh: &mut Tensor<f32>,
    h_in: &mut Tensor<f32>,
    dh0: &mut Tensor<f32>,
    dc0: &mut Tensor<f32>,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] precision: u32,
) {
    let row = CUBE_POS_X as usize;
    let unit = UNIT_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let rows = start.shape(0);
    let steps = start.shape(1);
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    let plane = rows * steps * hidden;
    // The recurrent-side gate gradients of the step, for dh_prev = dg_hh W_hh.
    let mut shared_dg = SharedMemory::<f32>::new(gates * hidden);
    // Per hidden unit (each slot touched by its own unit only): the gradient flowing into the
    // step's post-step h and c from the later step, and the direct part of dh_prev.
    let mut carry_h = SharedMemory::<f32>::new(hidden);
    let mut carry_c = SharedMemory::<f32>::new(hidden);
    let mut direct = SharedMemory::<f32>::new(hidden);
    let mut j = unit;
    while j < hidden {
        carry_h[j] = 0.0;
        carry_c[j] = 0.0;
        j += stride;
    }

    for back in 0..steps {
        let t = steps - 1 - back;
        let pos = row * steps + t;
        let starts = start[pos] > 0.5;
        let mut j = unit;
        while j < hidden {
            backward_unit(
                h0,
                c0,
                out,
                saved,
                dout,
                dg_ih,
                dg_hh,
                h_in,
                &mut shared_dg,
                &carry_h,
                &mut carry_c,
                &mut direct,
                pos,
                j,
                j,
                j,
                plane,
                starts,
                cell,
                hidden,
                precision,
            );
            j += stride;
        }
        sync_cube();
        let mut j = unit;
        while j < hidden {
            // dh_prev[j] = direct + sum over gate rows q of dg_hh[q] W_hh[q, j].
            let mut acc = direct[j];
            for q in 0..gh {
                acc += shared_dg[q] * w[q * hidden + j];
            }
            let at = pos * hidden + j;
            store_dh_prev(
                dh0,
                dc0,
                &mut carry_h,
                &mut carry_c,
                at,
                j,
                acc,
                starts,
                cell,
            );
            j += stride;
        }
        sync_cube();
    }
}

/// [`backward_kernel`] over a tile of `tile` batch rows per cube, as [`forward_tiles_kernel`]
/// is to the forward: each step reads every weight of `W_hh` once for the whole tile.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn backward_tiles_kernel(
    w: &Tensor<f32>,
    h0: &Tensor<f32>,
    c0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &Tensor<f32>,
    saved: &Tensor<f32>,
    dout: &Tensor<f32>,
    dg_ih: &mut Tensor<f32>,
    dg_hh: &mut Tensor<f32>,
    h_in: &mut Tensor<f32>,
    dh0: &mut Tensor<f32>,
    dc0: &mut Tensor<f32>,
    #[comptime] cell: u32,
    #[comptime] hidden: usize,
    #[comptime] tile: usize,
    #[comptime] precision: u32,
) {
    let first = CUBE_POS_X as usize * tile;
    let unit = UNIT_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let rows = start.shape(0);
    let steps = start.shape(1);
    let gates = comptime!(if cell == LSTM { 4usize } else { 3usize });
    let gh = gates * hidden;
    let plane = rows * steps * hidden;
    // The recurrent-side gate gradients of the step, for dh_prev = dg_hh W_hh (tile row `b`
    // at `[b * G*H, (b + 1) * G*H)`).
    let mut shared_dg = SharedMemory::<f32>::new(tile * gates * hidden);
    // Per tile row and hidden unit (each slot touched by its own unit only): the gradient
    // flowing into the step's post-step h and c from the later step, and the direct part of
    // dh_prev.
    let mut carry_h = SharedMemory::<f32>::new(tile * hidden);
    let mut carry_c = SharedMemory::<f32>::new(tile * hidden);
    let mut direct = SharedMemory::<f32>::new(tile * hidden);
    let mut acc = Array::<f32>::new(tile);
    let mut j = unit;
    while j < hidden {
        #[unroll]
        for b in 0..tile {
            carry_h[b * hidden + j] = 0.0;
            carry_c[b * hidden + j] = 0.0;
        }
        j += stride;
    }

    for back in 0..steps {
        let t = steps - 1 - back;
        let mut j = unit;
        while j < hidden {
            #[unroll]
            for b in 0..tile {
                let row = first + b;
                if row < rows {
                    let pos = row * steps + t;
                    backward_unit(
                        h0,
                        c0,
                        out,
                        saved,
                        dout,
                        dg_ih,
                        dg_hh,
                        h_in,
                        &mut shared_dg,
                        &carry_h,
                        &mut carry_c,
                        &mut direct,
                        pos,
                        j,
                        b * hidden + j,
                        b * gh + j,
                        plane,
                        start[pos] > 0.5,
                        cell,
                        hidden,
                        precision,
                    );
                } else {
                    // A tail row past the batch: zeros, so its sums below stay finite.
                    let d = b * gh + j;
                    shared_dg[d] = 0.0;
                    shared_dg[d + hidden] = 0.0;
                    shared_dg[d + 2 * hidden] = 0.0;
                    if comptime!(cell == LSTM) {
                        shared_dg[d + 3 * hidden] = 0.0;
                    }
                    direct[b * hidden + j] = 0.0;
                }
            }
            j += stride;
        }
        sync_cube();
        let mut j = unit;
        while j < hidden {
            // dh_prev[j] = direct + sum over gate rows q of dg_hh[q] W_hh[q, j], for every row
            // of the tile: each weight is read once per tile.
            #[unroll]
            for b in 0..tile {
                acc[b] = direct[b * hidden + j];
            }
            for q in 0..gh {
                let wq = w[q * hidden + j];
                #[unroll]
                for b in 0..tile {
                    acc[b] += shared_dg[b * gh + q] * wq;
                }
            }
            #[unroll]
            for b in 0..tile {
                let row = first + b;
                if row < rows {
                    let pos = row * steps + t;
                    let at = pos * hidden + j;
                    store_dh_prev(
                        dh0,
                        dc0,
                        &mut carry_h,
                        &mut carry_c,
                        at,
                        b * hidden + j,
                        acc[b],
                        start[pos] > 0.5,
                        cell,
                    );
                }
            }
            j += stride;
        }
        sync_cube();
    }
}

/// minGRU's candidate activation `g(v) = v + 0.5` for `v >= 0`, `sigmoid(v)` below.
#[cube]
fn mingru_g(v: f32) -> f32 {
    let mut y = v + 0.5;
    if v < 0.0 {
        y = sigmoid(v);
    }
    y
}

/// minGRU's forward scan of one layer. Its gates read the input only, so each hidden unit of
/// each row is an independent lane: unit `j` of the cube of row `b` walks `t` forward with
/// `h = h + z (h~ - h)` and needs no shared memory and no barrier. `xp` `[B, T, 2H]` holds
/// `x [W_z; W_h]^T + b`; `out` `[1, B, T, H]`; `saved` `[B, T, 2H]` receives `[z | h~]` when
/// `keep`.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn mingru_forward_kernel(
    xp: &Tensor<f32>,
    h0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &mut Tensor<f32>,
    saved: &mut Tensor<f32>,
    #[comptime] hidden: usize,
    #[comptime] keep: bool,
) {
    let row = CUBE_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let steps = start.shape(1);
    let mut j = UNIT_POS_X as usize;
    while j < hidden {
        let mut h = 0.0f32;
        for t in 0..steps {
            let pos = row * steps + t;
            if start[pos] > 0.5 {
                h = h0[pos * hidden + j];
            }
            let x = pos * 2 * hidden + j;
            let z = sigmoid(xp[x]);
            let candidate = mingru_g(xp[x + hidden]);
            h += z * (candidate - h);
            out[pos * hidden + j] = h;
            if keep {
                saved[x] = z;
                saved[x + hidden] = candidate;
            }
        }
        j += stride;
    }
}

/// minGRU's backward: the reverse scan per (row, unit). From `saved` (`[z | h~]`), the
/// forward's `out` and `dout` (`[B, T, H]`), writes the pre-activation gradients `dg`
/// `[B, T, 2H]` and the stored states' gradients `dh0` `[B, T, H]` (zero except where a step
/// starts a segment).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn mingru_backward_kernel(
    h0: &Tensor<f32>,
    start: &Tensor<f32>,
    out: &Tensor<f32>,
    saved: &Tensor<f32>,
    dout: &Tensor<f32>,
    dg: &mut Tensor<f32>,
    dh0: &mut Tensor<f32>,
    #[comptime] hidden: usize,
) {
    let row = CUBE_POS_X as usize;
    let stride = CUBE_DIM_X as usize;
    let steps = start.shape(1);
    let mut j = UNIT_POS_X as usize;
    while j < hidden {
        let mut carry = 0.0f32;
        for k in 0..steps {
            let t = steps - 1 - k;
            let pos = row * steps + t;
            let at = pos * hidden + j;
            let starts = start[pos] > 0.5;
            let mut prev = h0[at];
            if !starts {
                prev = out[at - hidden];
            }
            let x = pos * 2 * hidden + j;
            let z = saved[x];
            let candidate = saved[x + hidden];
            let dh = dout[at] + carry;
            dg[x] = dh * (candidate - prev) * z * (1.0 - z);
            // g' from h~: 1 where h~ >= 0.5 (v >= 0), else h~ (1 - h~).
            let mut g_grad = 1.0f32;
            if candidate < 0.5 {
                g_grad = candidate * (1.0 - candidate);
            }
            dg[x + hidden] = dh * z * g_grad;
            carry = dh * (1.0 - z);
            if starts {
                dh0[at] = carry;
                carry = 0.0;
            } else {
                dh0[at] = 0.0;
            }
        }
        j += stride;
    }
}

/// Launches minGRU's forward scan; `saved` is written when `keep`.
#[allow(clippy::too_many_arguments)]
pub fn mingru_forward<R: CubeRuntime>(
    l: Launch,
    xp: &CubeTensor<R>,
    h0: &CubeTensor<R>,
    start: &CubeTensor<R>,
    out: &CubeTensor<R>,
    saved: &CubeTensor<R>,
    keep: bool,
) {
    let rows = start.meta.shape()[0] as u32;
    mingru_forward_kernel::launch::<R>(
        &out.client,
        CubeCount::Static(rows, 1, 1),
        CubeDim::new_1d(l.units),
        address(&[xp, h0, out, saved]),
        xp.clone().into_tensor_arg(),
        h0.clone().into_tensor_arg(),
        start.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        saved.clone().into_tensor_arg(),
        l.hidden,
        keep,
    );
}

/// Launches minGRU's reverse scan.
#[allow(clippy::too_many_arguments)]
pub fn mingru_backward<R: CubeRuntime>(
    l: Launch,
    h0: &CubeTensor<R>,
    start: &CubeTensor<R>,
    out: &CubeTensor<R>,
    saved: &CubeTensor<R>,
    dout: &CubeTensor<R>,
    dg: &CubeTensor<R>,
    dh0: &CubeTensor<R>,
) {
    let rows = start.meta.shape()[0] as u32;
    mingru_backward_kernel::launch::<R>(
        &out.client,
        CubeCount::Static(rows, 1, 1),
        CubeDim::new_1d(l.units),
        address(&[h0, out, saved, dout, dg, dh0]),
        h0.clone().into_tensor_arg(),
        start.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        saved.clone().into_tensor_arg(),
        dout.clone().into_tensor_arg(),
        dg.clone().into_tensor_arg(),
        dh0.clone().into_tensor_arg(),
        l.hidden,
    );
}

/// What [`forward`] is asked for.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub cell: u32,
    pub hidden: usize,
    pub precision: u32,
    /// Units per cube.
    pub units: u32,
    /// Batch rows per cube (the LSTM/GRU kernels; minGRU's run one row per cube).
    pub tile: usize,
}

fn address<R: CubeRuntime>(tensors: &[&CubeTensor<R>]) -> AddressType {
    tensors
        .iter()
        .map(|t| t.required_address_type())
        .max()
        .unwrap_or_default()
}

/// `input` rounded at `precision` (a new tensor of the same shape).
pub fn round_into<R: CubeRuntime>(input: &CubeTensor<R>, output: &CubeTensor<R>, precision: u32) {
    let n = output.meta.shape().num_elements();
    let units = 256u32;
    let count = (n as u32).div_ceil(units);
    round_kernel::launch::<R>(
        &output.client,
        CubeCount::Static(count, 1, 1),
        CubeDim::new_1d(units),
        address(&[input, output]),
        input.clone().into_tensor_arg(),
        output.clone().into_tensor_arg(),
        precision,
    );
}

/// Launches the forward time loop; `saved` is written when `keep`.
#[allow(clippy::too_many_arguments)]
pub fn forward<R: CubeRuntime>(
    l: Launch,
    xp: &CubeTensor<R>,
    w_t: &CubeTensor<R>,
    b_hh: &CubeTensor<R>,
    h0: &CubeTensor<R>,
    c0: &CubeTensor<R>,
    start: &CubeTensor<R>,
    out: &CubeTensor<R>,
    saved: &CubeTensor<R>,
    keep: bool,
) {
    let cubes = start.meta.shape()[0].div_ceil(l.tile) as u32;
    // One argument list for both kernels; the tiled one takes the tile before `keep`.
    macro_rules! launch {
        ($kernel:ident $(, $tile:expr)?) => {
            $kernel::launch::<R>(
                &out.client,
                CubeCount::Static(cubes, 1, 1),
                CubeDim::new_1d(l.units),
                address(&[xp, w_t, h0, c0, out, saved]),
                xp.clone().into_tensor_arg(),
                w_t.clone().into_tensor_arg(),
                b_hh.clone().into_tensor_arg(),
                h0.clone().into_tensor_arg(),
                c0.clone().into_tensor_arg(),
                start.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                saved.clone().into_tensor_arg(),
                l.cell,
                l.hidden,
                $($tile,)?
                keep,
                l.precision,
            )
        };
    }
    if l.tile == 1 {
        launch!(forward_kernel);
    } else {
        launch!(forward_tiles_kernel, l.tile);
    }
}

/// Launches the backward time loop.
#[allow(clippy::too_many_arguments)]
pub fn backward<R: CubeRuntime>(
    l: Launch,
    w: &CubeTensor<R>,
    h0: &CubeTensor<R>,
    c0: &CubeTensor<R>,
    start: &CubeTensor<R>,
    out: &CubeTensor<R>,
    saved: &CubeTensor<R>,
    dout: &CubeTensor<R>,
    dg_ih: &CubeTensor<R>,
    dg_hh: &CubeTensor<R>,
    h_in: &CubeTensor<R>,
    dh0: &CubeTensor<R>,
    dc0: &CubeTensor<R>,
) {
    let cubes = start.meta.shape()[0].div_ceil(l.tile) as u32;
    // One argument list for both kernels; the tiled one takes the tile before the precision.
    macro_rules! launch {
        ($kernel:ident $(, $tile:expr)?) => {
            $kernel::launch::<R>(
                &out.client,
                CubeCount::Static(cubes, 1, 1),
                CubeDim::new_1d(l.units),
                address(&[out, saved, dout, dg_ih, dg_hh, h_in, dh0, dc0]),
                w.clone().into_tensor_arg(),
                h0.clone().into_tensor_arg(),
                c0.clone().into_tensor_arg(),
                start.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                saved.clone().into_tensor_arg(),
                dout.clone().into_tensor_arg(),
                dg_ih.clone().into_tensor_arg(),
                dg_hh.clone().into_tensor_arg(),
                h_in.clone().into_tensor_arg(),
                dh0.clone().into_tensor_arg(),
                dc0.clone().into_tensor_arg(),
                l.cell,
                l.hidden,
                $($tile,)?
                l.precision,
            )
        };
    }
    if l.tile == 1 {
        launch!(backward_kernel);
    } else {
        launch!(backward_tiles_kernel, l.tile);
    }
}
