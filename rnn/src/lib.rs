//! Recurrent modules: LSTM and GRU with TorchRL's sequential and recurrent modes.
//!
//! An actor calls a module in **sequential mode**, one step of `N` environments per call,
//! carrying each environment's state from `next` back into the following call; `is_init`
//! zeroes the state of the environments that just reset. The learner calls the same module
//! in **recurrent mode** over whole sequences; at every `is_init` the state is replaced by the
//! state *stored* at that position (zeros after a real reset, the actor's saved state at a
//! slice start). Both give the same numbers, and nothing crosses an `is_init` boundary.
//!
//! ```
//! use burn::tensor::{Bool, Tensor};
//! use recur_rnn::burn_backend::{cpu_device, Cpu};
//! use recur_rnn::{set_recurrent_mode, RecurrentConfig, RecurrentMode, RecurrentState};
//!
//! let device = cpu_device();
//! let gru = RecurrentConfig::new(3, 4).init_gru::<Cpu>(&device).unwrap();
//!
//! // Sequential mode (the default): 2 environments, one step.
//! let state = gru.primer().zeros::<Cpu>(2, &device);
//! let is_init = Tensor::<Cpu, 1, Bool>::from_data([true, false], &device);
//! let out = gru.forward(Tensor::ones([2, 3], &device), is_init, state).unwrap();
//! assert_eq!(out.features.dims(), [2, 4]);
//! assert_eq!(out.next.rs_h.dims(), [2, 1, 4]); // [N, L, H]
//!
//! // Recurrent mode: a batch of 2 sequences of 5 steps, the second row resetting at t = 3.
//! let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
//! let mut flags = [[false; 5]; 2];
//! flags[0][0] = true;
//! flags[1][0] = true;
//! flags[1][3] = true;
//! let is_init = Tensor::<Cpu, 2, Bool>::from_data(flags, &device);
//! let stored = RecurrentState::gru(Tensor::zeros([2, 5, 1, 4], &device));
//! let out = gru.forward_batch(Tensor::ones([2, 5, 3], &device), is_init, stored).unwrap();
//! assert_eq!(out.features.dims(), [2, 5, 4]);
//! ```

#![deny(unsafe_code)]

/// `name()` (the name used in configs and benchmark rows) and `FromStr` of a config enum, from
/// one list of its variants and their names; a parse error names `key`, the value and every
/// name accepted: a [`RecurrentError::Config`], or with `String` before the key that text (for
/// enums outside the recurrent modules).
#[macro_export]
macro_rules! config_names {
    ($ty:ident, $key:literal, $($variant:ident => $name:literal),+ $(,)?) => {
        $crate::config_names!(@impl $ty, $crate::RecurrentError, |value, expected| {
            $crate::RecurrentError::Config { key: $key, value, expected }
        }, $($variant => $name),+);
    };
    ($ty:ident, String $key:literal, $($variant:ident => $name:literal),+ $(,)?) => {
        $crate::config_names!(@impl $ty, String, |value, expected| {
            format!("{} {value}: expected {expected}", $key)
        }, $($variant => $name),+);
    };
    (@impl $ty:ident, $err:ty, $error:expr, $($variant:ident => $name:literal),+) => {
        impl $ty {
            /// The name used in configs and benchmark rows.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    other => Err(($error)(
                        format!("{other:?}"),
                        format!("one of {}", [$(format!("{:?}", $name)),+].join(", ")),
                    )),
                }
            }
        }
    };
}

pub(crate) mod backend;
pub mod burn_backend;
mod cell;
mod config;
mod error;
mod layer;
pub mod math;
mod mode;
mod modules;
mod primer;
mod recurrent_core;
mod state;

pub use backend::{fused, fused_kernels};
pub use cell::CellKind;
pub use config::{FusedKernels, MatmulPrecision, Recompute, RecurrentBackend, RecurrentConfig};
pub use error::RecurrentError;
pub use layer::RecurrentLayer;
pub use mode::{current_recurrent_mode, set_recurrent_mode, RecurrentMode, RecurrentModeGuard};
pub use modules::{GruModule, LstmModule, MinGruModule};
pub use primer::{Primer, PrimerEntry};
pub use recurrent_core::RecurrentCore;
pub use state::{RecurrentOutput, RecurrentState};
