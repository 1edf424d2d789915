//! The parameters of one recurrent layer, in PyTorch's layout.

use burn::module::{Initializer, Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::cell::StepWeights;
use super::CellKind;

/// One layer: `weight_ih` `[G*H, in]`, `weight_hh` `[G*H, H]`, `bias_ih`, `bias_hh` `[G*H]`,
/// rows in gate blocks of `H` (LSTM i,f,g,o; GRU r,z,n), exactly as `nn.LSTM`/`nn.GRU`.
///
/// minGRU has no `weight_hh`/`bias_hh`; its `weight_ih` `[2H, in]` stacks `weight_z` over
/// `weight_h` (and `bias_ih` `[2H]` stacks `bias_z` and `bias_h`), so that both gates of every
/// step are one GEMM. [`RecurrentCore`](super::RecurrentCore) names them `weight_z_l{k}` ...
#[derive(Module, Debug)]
pub struct RecurrentLayer<B: Backend> {
    pub weight_ih: Param<Tensor<B, 2>>,
    pub weight_hh: Option<Param<Tensor<B, 2>>>,
    pub bias_ih: Option<Param<Tensor<B, 1>>>,
    pub bias_hh: Option<Param<Tensor<B, 1>>>,
}

impl<B: Backend> RecurrentLayer<B> {
    /// PyTorch's initialisation: every parameter uniform in `[-1/sqrt(H), 1/sqrt(H)]` for
    /// LSTM/GRU (`nn.LSTM`, `nn.GRU`); for minGRU's input-only gates, `nn.Linear`'s bound
    /// `1/sqrt(in)`, as the paper's reference code (two `nn.Linear` layers) has it.
    pub fn init(
        cell: CellKind,
        input_size: usize,
        hidden_size: usize,
        bias: bool,
        device: &B::Device,
    ) -> Self {
        let hidden = cell.has_hidden_weights();
        let fan_in = if hidden { hidden_size } else { input_size };
        let k = 1.0 / (fan_in as f64).sqrt();
        let init = Initializer::Uniform { min: -k, max: k };
        let rows = cell.gates() * hidden_size;
        let vector = || bias.then(|| init.init([rows], device));
        Self {
            weight_ih: init.init([rows, input_size], device),
            weight_hh: hidden.then(|| init.init([rows, hidden_size], device)),
            bias_ih: vector(),
            bias_hh: if hidden { vector() } else { None },
        }
    }

    /// `x W_ih^T + b_ih` for every row of `x` `[M, in]` at once: `[M, G*H]`.
    pub(crate) fn project_input(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let xw = x.matmul(self.weight_ih.val().transpose());
        match &self.bias_ih {
            Some(b) => xw + b.val().unsqueeze_dim(0),
            None => xw,
        }
    }

    /// The recurrent weights in the form the time loop uses.
    pub(crate) fn step_weights(&self) -> StepWeights<B> {
        StepWeights {
            whh_t: self.weight_hh.as_ref().map(|w| w.val().transpose()),
            bhh: self.bias_hh.as_ref().map(|b| b.val().unsqueeze_dim(0)),
        }
    }
}
