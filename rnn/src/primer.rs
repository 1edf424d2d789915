//! The primer: what recurrent-state entries a module needs, so that an actor can create them
//! (zeroed) at every reset without manual wiring (TorchRL's `make_tensordict_primer`).

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};

use super::RecurrentState;

/// One recurrent-state entry: its key, its per-environment shape `[L, H]` and its dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimerEntry {
    /// `"rs_h"` or `"rs_c"`.
    pub key: &'static str,
    /// Per-environment shape: `[num_layers, hidden_size]`.
    pub shape: [usize; 2],
    pub dtype: DType,
}

/// The recurrent-state entries of a module: `rs_h` (and `rs_c` for an LSTM).
#[derive(Clone, Debug, PartialEq)]
pub struct Primer {
    pub entries: Vec<PrimerEntry>,
}

impl Primer {
    /// The entry named `key`, if the module has it.
    pub fn entry(&self, key: &str) -> Option<&PrimerEntry> {
        self.entries.iter().find(|e| e.key == key)
    }

    /// Zeroed state for `num_envs` environments: every entry `[num_envs, L, H]`.
    pub fn zeros<B: Backend>(&self, num_envs: usize, device: &B::Device) -> RecurrentState<B, 3> {
        let zeros = |key| {
            self.entry(key)
                .map(|e| Tensor::zeros([num_envs, e.shape[0], e.shape[1]], device))
        };
        RecurrentState {
            rs_h: zeros("rs_h").expect("every primer declares rs_h"),
            rs_c: zeros("rs_c"),
        }
    }
}
