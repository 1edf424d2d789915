//! Recurrent-mode execution backends and what they share: segment bookkeeping from `is_init`
//! and the per-layer time loop.
//!
//! All backends produce, for every layer, the post-step `h` (and `c`) at every step of the
//! original `[B, T]` grid; the module turns those into `features` and `("next", ...)` states.

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub mod cube;
pub mod fused;
pub(crate) mod pad;
pub(crate) mod scan;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};

use super::cell::{step, StepWeights};
use super::layer::RecurrentLayer;
use super::{CellKind, FusedKernels};

/// Which fused kernels backend `B` runs: the CPU ones on [`Cpu`](crate::burn_backend::Cpu) and
/// [`CpuAutodiff`](crate::burn_backend::CpuAutodiff), the CubeCL ones on burn's CUDA and wgpu
/// backends (with or without autodiff) in a build with the `cuda` or `wgpu` feature.
pub fn fused_kernels<B: Backend>() -> FusedKernels {
    if fused::available::<B>() {
        return FusedKernels::Cpu;
    }
    #[cfg(any(feature = "cuda", feature = "wgpu"))]
    if cube::available::<B>() {
        return FusedKernels::Cube;
    }
    FusedKernels::Unavailable
}

/// The incoming state of one layer at one step: `h` `[R, H]` and, for an LSTM, `c`.
pub(crate) type CellState<B> = (Tensor<B, 2>, Option<Tensor<B, 2>>);

/// Where trajectories start in a `[B, T]` grid, read once from `is_init` on the host.
///
/// Step `t = 0` of every row is a start whatever `is_init` says there: a row's first step has
/// no earlier step to take a state from, so it starts from its stored state.
#[derive(Clone, Debug)]
pub(crate) struct Segments {
    pub rows: usize,
    pub steps: usize,
    /// `[B * T]`, row-major.
    pub start: Vec<bool>,
}

impl Segments {
    pub fn new(mut start: Vec<bool>, rows: usize, steps: usize) -> Self {
        debug_assert_eq!(start.len(), rows * steps);
        for b in 0..rows {
            start[b * steps] = true;
        }
        Self { rows, steps, start }
    }

    /// `(row, first step, length)` of every segment, in row-major order.
    pub fn list(&self) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        for (b, row) in self.start.chunks(self.steps).enumerate() {
            // Segment starts, then the row's end as the last boundary.
            let bounds: Vec<usize> = (0..self.steps)
                .filter(|&t| row[t])
                .chain([self.steps])
                .collect();
            out.extend(bounds.windows(2).map(|w| (b, w[0], w[1] - w[0])));
        }
        out
    }

    /// `[B * T]`: true at the last step of every segment.
    pub fn ends(&self) -> Vec<bool> {
        (0..self.rows * self.steps)
            .map(|i| (i + 1) % self.steps == 0 || self.start[i + 1])
            .collect()
    }

    /// The rows that start a segment at step `t`.
    pub fn starting_at(&self, t: usize) -> Starting {
        let flags: Vec<bool> = (0..self.rows)
            .map(|b| self.start[b * self.steps + t])
            .collect();
        match flags.iter().filter(|&&f| f).count() {
            0 => Starting::None,
            n if n == self.rows => Starting::All,
            _ => Starting::Some(flags),
        }
    }
}

/// Which rows start a segment at one step.
pub(crate) enum Starting {
    None,
    All,
    /// A flag per row.
    Some(Vec<bool>),
}

/// A `[R, H]` boolean mask, true on the rows flagged.
pub(crate) fn row_mask<B: Backend>(
    flags: Vec<bool>,
    width: usize,
    device: &B::Device,
) -> Tensor<B, 2, Bool> {
    let rows = flags.len();
    Tensor::<B, 1, Bool>::from_data(TensorData::new(flags, [rows]), device)
        .unsqueeze_dim::<2>(1)
        .expand([rows, width])
}

/// Splits `x` `[R, T, in]` into its `T` steps, `[R, in]` each.
pub(crate) fn steps_of<B: Backend>(x: Tensor<B, 3>) -> Vec<Tensor<B, 2>> {
    let [rows, _, input] = x.dims();
    x.iter_dim(1).map(|xt| xt.reshape([rows, input])).collect()
}

/// Runs one layer over the per-step inputs `inputs` (`T` tensors `[R, in]`) and returns the
/// post-step state of every step. `state_at(t, previous)` gives the state that enters step `t`
/// (`previous` is the post-step state of `t - 1`, `None` at `t = 0`): this is where a backend
/// applies its resets.
///
/// The input projection is done per step rather than as one GEMM over `[R*T, in]`: under
/// burn's autodiff the backward pass of every per-step slice materialises a zero tensor the
/// size of the sliced tensor, and the inputs are 4x (LSTM) or 3x (GRU) narrower than their
/// projection. (The fused backend, with its own backward, does the single GEMM.)
pub(crate) fn unroll<B: Backend>(
    cell: CellKind,
    layer: &RecurrentLayer<B>,
    inputs: Vec<Tensor<B, 2>>,
    mut state_at: impl FnMut(usize, Option<CellState<B>>) -> CellState<B>,
) -> Vec<CellState<B>> {
    let weights: StepWeights<B> = layer.step_weights();
    let mut out: Vec<CellState<B>> = Vec::with_capacity(inputs.len());
    for (t, x) in inputs.into_iter().enumerate() {
        let (h, c) = state_at(t, out.last().cloned());
        out.push(step(cell, layer.project_input(x), h, c, &weights));
    }
    out
}
