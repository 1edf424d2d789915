//! Recurrent-state tensors and module outputs.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The recurrent state entries of a batch, with the layer axis after the batch (and time)
/// axes: `[N, L, H]` for one step of `N` environments or a flat packed time axis (`D = 3`),
/// `[B, T, L, H]` for a batch of sequences (`D = 4`).
///
/// `rs_h` is the hidden state `h` of every layer; `rs_c` the LSTM cell state `c` (`None` for
/// a GRU). The names are the keys the [`Primer`](super::Primer) declares and the chunk stores.
#[derive(Clone, Debug)]
pub struct RecurrentState<B: Backend, const D: usize> {
    pub rs_h: Tensor<B, D>,
    pub rs_c: Option<Tensor<B, D>>,
}

impl<B: Backend, const D: usize> RecurrentState<B, D> {
    /// An LSTM state.
    pub fn lstm(rs_h: Tensor<B, D>, rs_c: Tensor<B, D>) -> Self {
        Self {
            rs_h,
            rs_c: Some(rs_c),
        }
    }

    /// Applies `f` to every entry.
    pub fn map<const D2: usize>(
        self,
        f: impl Fn(Tensor<B, D>) -> Tensor<B, D2>,
    ) -> RecurrentState<B, D2> {
        RecurrentState {
            rs_h: f(self.rs_h),
            rs_c: self.rs_c.map(f),
        }
    }
}

/// What a recurrent module returns: `features` (the last layer's `h` at every step) and the
/// state to write under `("next", rs_h)` / `("next", rs_c)`.
///
/// In sequential mode `next` is the post-step state of every row. In recurrent mode it holds
/// the post-step state at the last step of each segment and exact zeros elsewhere.
#[derive(Clone, Debug)]
pub struct RecurrentOutput<B: Backend, const DF: usize, const DS: usize> {
    pub features: Tensor<B, DF>,
    pub next: RecurrentState<B, DS>,
}
