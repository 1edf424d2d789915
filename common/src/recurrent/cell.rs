//! The LSTM and GRU cell equations (PyTorch's convention, gate order i,f,g,o and r,z,n).

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
}

impl CellKind {
    /// Row blocks of `H` rows in the stacked gate weights: 4 for LSTM, 3 for GRU.
    pub fn gates(self) -> usize {
        match self {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
        }
    }

    /// Whether the cell carries a cell state `c` (`rs_c`) beside `h` (`rs_h`).
    pub fn has_cell_state(self) -> bool {
        matches!(self, CellKind::Lstm)
    }

    /// `"lstm"` or `"gru"`.
    pub fn name(self) -> &'static str {
        match self {
            CellKind::Lstm => "lstm",
            CellKind::Gru => "gru",
        }
    }

    /// `"LstmModule"` or `"GruModule"`, for error messages.
    pub fn module_name(self) -> &'static str {
        match self {
            CellKind::Lstm => "LstmModule",
            CellKind::Gru => "GruModule",
        }
    }
}

impl std::str::FromStr for CellKind {
    type Err = super::RecurrentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lstm" => Ok(CellKind::Lstm),
            "gru" => Ok(CellKind::Gru),
            other => Err(super::RecurrentError::Config {
                key: "cell",
                value: format!("{other:?}"),
                expected: "one of \"lstm\", \"gru\"".into(),
            }),
        }
    }
}

/// The recurrent weights of one layer, prepared once per call.
pub(crate) struct StepWeights<B: Backend> {
    /// `W_hh^T`, `[H, G*H]`.
    pub whh_t: Tensor<B, 2>,
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
    let mut hw = h.clone().matmul(w.whh_t.clone());
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
    }
}
