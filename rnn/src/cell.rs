//! The cell equations: LSTM and GRU (PyTorch's convention, gate order i,f,g,o and r,z,n) and
//! minGRU (Feng et al. 2024, gates z,h from the input only).

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// Which recurrent cell a module runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    /// `[i,f,g,o] = x W_ih^T + b_ih + h W_hh^T + b_hh`; `c' = f*c + i*g`; `h' = o * tanh(c')`.
    Lstm,
    /// `r, z` from sigmoid; `n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))`;
    /// `h' = (1 - z) * n + z * h`.
    Gru,
    /// minGRU: `z = sigmoid(x W_z^T + b_z)`, `h~ = g(x W_h^T + b_h)` with `g(v) = v + 0.5`
    /// for `v >= 0` and `sigmoid(v)` otherwise, `h' = (1 - z) * h + z * h~`. The gates read
    /// the input only (no `W_hh`), so recurrent mode is one GEMM plus a linear scan over time.
    #[serde(rename = "mingru")]
    MinGru,
}

impl CellKind {
    /// Row blocks of `H` rows in the stacked gate weights: 4 for LSTM, 3 for GRU, 2 for
    /// minGRU (`z`, `h`).
    pub fn gates(self) -> usize {
        match self {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
            CellKind::MinGru => 2,
        }
    }

    /// Whether the gates also read the incoming state (`W_hh`, `b_hh`): not for minGRU.
    pub fn has_hidden_weights(self) -> bool {
        !matches!(self, CellKind::MinGru)
    }

    /// Whether the cell carries a cell state `c` (`rs_c`) beside `h` (`rs_h`).
    pub fn has_cell_state(self) -> bool {
        matches!(self, CellKind::Lstm)
    }

    /// `"LstmModule"`, `"GruModule"` or `"MinGruModule"`, for error messages.
    pub fn module_name(self) -> &'static str {
        match self {
            CellKind::Lstm => "LstmModule",
            CellKind::Gru => "GruModule",
            CellKind::MinGru => "MinGruModule",
        }
    }
}

config_names!(CellKind, "cell", Lstm => "lstm", Gru => "gru", MinGru => "mingru");

/// The recurrent weights of one layer, prepared once per call (none for minGRU).
pub(crate) struct StepWeights<B: Backend> {
    /// `W_hh^T`, `[H, G*H]`.
    pub whh_t: Option<Tensor<B, 2>>,
    /// `b_hh`, `[1, G*H]`, when the layer has biases.
    pub bhh: Option<Tensor<B, 2>>,
}

/// One step of one layer for `N` rows.
///
/// `xw` is the input projection `x W_ih^T + b_ih`, `[N, G*H]`; `h` and `c` (LSTM only) are the
/// incoming state `[N, H]`. Returns the post-step `(h', c')`.
pub(crate) fn step<B: Backend>(
    cell: CellKind,
    xw: Tensor<B, 2>,
    h: Tensor<B, 2>,
    c: Option<Tensor<B, 2>>,
    w: &StepWeights<B>,
) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
    if cell == CellKind::MinGru {
        let mut x = xw.chunk(2, 1).into_iter();
        let z = sigmoid(x.next().unwrap());
        let h_tilde = mingru_g(x.next().unwrap());
        // (1 - z) * h + z * h~, written with one product less.
        return (h.clone() + z * (h_tilde - h), None);
    }
    let whh_t = w.whh_t.clone().expect("LSTM and GRU layers have W_hh");
    let mut hw = h.clone().matmul(whh_t);
    if let Some(bhh) = &w.bhh {
        hw = hw + bhh.clone();
    }
    match cell {
        CellKind::Lstm => {
            let c = c.expect("an LSTM step needs the cell state");
            let mut g = (xw + hw).chunk(4, 1).into_iter();
            let (i, f, gg, o) = (
                sigmoid(g.next().unwrap()),
                sigmoid(g.next().unwrap()),
                g.next().unwrap().tanh(),
                sigmoid(g.next().unwrap()),
            );
            let c_next = f * c + i * gg;
            let h_next = o * c_next.clone().tanh();
            (h_next, Some(c_next))
        }
        CellKind::Gru => {
            let mut x = xw.chunk(3, 1).into_iter();
            let mut hh = hw.chunk(3, 1).into_iter();
            let r = sigmoid(x.next().unwrap() + hh.next().unwrap());
            let z = sigmoid(x.next().unwrap() + hh.next().unwrap());
            let n = (x.next().unwrap() + r * hh.next().unwrap()).tanh();
            // (1 - z) * n + z * h, written with one product less.
            let h_next = n.clone() + z * (h - n);
            (h_next, None)
        }
        CellKind::MinGru => unreachable!("handled above"),
    }
}

/// minGRU's candidate activation `g(v) = v + 0.5` for `v >= 0`, `sigmoid(v)` otherwise
/// (continuous at 0, positive everywhere).
fn mingru_g<B: Backend>(v: Tensor<B, 2>) -> Tensor<B, 2> {
    let non_negative = v.clone().greater_equal_elem(0.0);
    sigmoid(v.clone()).mask_where(non_negative, v + 0.5)
}
