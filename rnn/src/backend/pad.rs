//! `pad`: split every row at `is_init`, gather the segments into a padded `[S, T_max]` batch
//! that starts each segment from its stored state, run the layers without resets, and scatter
//! the results back to the `[B, T]` grid (TorchRL's split/pad path). Its cost grows with the
//! number of segments `S`.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::scan::{stack_steps, CellState3};
use super::{steps_of, Segments};
use crate::{RecurrentCore, RecurrentState};

/// Returns, per layer, the post-step `h` (and `c`) `[B, T, H]`.
pub(crate) fn run<B: Backend>(
    core: &RecurrentCore<B>,
    x: Tensor<B, 3>,
    segments: &Segments,
    stored: RecurrentState<B, 4>,
) -> Vec<CellState3<B>> {
    let device = x.device();
    let [rows, steps, input] = x.dims();
    let (layers, hidden) = (core.num_layers(), core.hidden_size());
    let list = segments.list();
    let count = list.len();
    let longest = list.iter().map(|&(_, _, len)| len).max().unwrap_or(0);

    // gather[j * longest + k]: the flat [B*T] position of step k of segment j (padding
    // repeats the segment's last step; its results are never read back).
    // unpad[b * T + t]: the padded position holding step (b, t).
    let mut gather = Vec::with_capacity(count * longest);
    let mut unpad = vec![0i64; rows * steps];
    let mut first = Vec::with_capacity(count);
    for (j, &(b, s, len)) in list.iter().enumerate() {
        let base = (b * steps + s) as i64;
        first.push(base);
        for k in 0..longest {
            gather.push(base + k.min(len - 1) as i64);
        }
        for k in 0..len {
            unpad[b * steps + s + k] = (j * longest + k) as i64;
        }
    }
    let index = |v: Vec<i64>| {
        let n = v.len();
        Tensor::<B, 1, Int>::from_data(TensorData::new(v, [n]), &device)
    };
    let (gather, unpad, first) = (index(gather), index(unpad), index(first));

    let padded = x
        .reshape([rows * steps, input])
        .select(0, gather)
        .reshape([count, longest, input]);
    // The stored state at every segment's first step, [S, L, H] per entry.
    let initial = stored.map(|e| {
        e.reshape([rows * steps, layers, hidden])
            .select(0, first.clone())
    });
    let initial_at =
        |e: &Tensor<B, 3>, l: usize| e.clone().slice_dim(1, l..l + 1).reshape([count, hidden]);

    let per_layer = core.run_layers(steps_of(padded), |l, _t, previous| match previous {
        Some(carried) => carried,
        None => (
            initial_at(&initial.rs_h, l),
            initial.rs_c.as_ref().map(|c| initial_at(c, l)),
        ),
    });
    let unpad_entry = |e: Tensor<B, 3>| {
        e.reshape([count * longest, hidden])
            .select(0, unpad.clone())
            .reshape([rows, steps, hidden])
    };
    per_layer
        .into_iter()
        .map(|states| {
            let (h, c) = stack_steps(states);
            (unpad_entry(h), c.map(unpad_entry))
        })
        .collect()
}
