//! `scan`: a time loop over the original `[B, T]` rows; at every step the rows that start a
//! segment take their stored state (`mask_where`), the others carry theirs. No padding, and
//! the cost does not grow with the number of resets.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{row_mask, steps_of, CellState, Segments, Starting};
use crate::{RecurrentCore, RecurrentState};

/// Returns, per layer, the post-step `h` (and `c`) `[B, T, H]`.
pub(crate) fn run<B: Backend>(
    core: &RecurrentCore<B>,
    x: Tensor<B, 3>,
    segments: &Segments,
    stored: RecurrentState<B, 4>,
) -> Vec<CellState3<B>> {
    let device = x.device();
    let [rows, _, _] = x.dims();
    let hidden = core.hidden_size();
    // Which rows reset at each step, and their masks, once for all layers.
    let starting: Vec<Starting> = (0..segments.steps)
        .map(|t| segments.starting_at(t))
        .collect();
    let masks: Vec<_> = starting
        .iter()
        .map(|s| match s {
            Starting::Some(flags) => Some(row_mask::<B>(flags.clone(), hidden, &device)),
            _ => None,
        })
        .collect();
    // The stored state of layer `l` at step `t`, `[B, H]`.
    let stored_at = |entry: &Tensor<B, 4>, l: usize, t: usize| -> Tensor<B, 2> {
        entry
            .clone()
            .slice_dim(1, t..t + 1)
            .slice_dim(2, l..l + 1)
            .reshape([rows, hidden])
    };
    let per_layer = core.run_layers(steps_of(x), |l, t, previous| {
        let stored = || {
            (
                stored_at(&stored.rs_h, l, t),
                stored.rs_c.as_ref().map(|c| stored_at(c, l, t)),
            )
        };
        match (&starting[t], previous) {
            (Starting::All, _) | (_, None) => stored(),
            (Starting::None, Some(carried)) => carried,
            (Starting::Some(_), Some((h, c))) => {
                let mask = masks[t].clone().expect("a mask for every partial reset");
                let (stored_h, stored_c) = stored();
                let c = c.zip(stored_c).map(|(c, s)| c.mask_where(mask.clone(), s));
                (h.mask_where(mask, stored_h), c)
            }
        }
    });
    per_layer.into_iter().map(stack_steps).collect()
}

/// Post-step `h` (and `c`) of one layer at every step, `[R, T, H]`.
pub(crate) type CellState3<B> = (Tensor<B, 3>, Option<Tensor<B, 3>>);

/// Stacks per-step states `T x [R, H]` into `[R, T, H]`.
pub(crate) fn stack_steps<B: Backend>(states: Vec<CellState<B>>) -> CellState3<B> {
    let (hs, cs): (Vec<_>, Vec<_>) = states.into_iter().unzip();
    let cs: Option<Vec<_>> = cs.into_iter().collect();
    (Tensor::stack(hs, 1), cs.map(|cs| Tensor::stack(cs, 1)))
}
