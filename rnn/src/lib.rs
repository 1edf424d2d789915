//! Recurrent modules for reinforcement learning on [burn]: LSTM, GRU and minGRU with TorchRL's
//! sequential and recurrent modes, and `is_init` resets that never leak hidden state.
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
//! use recur_rnn::burn_backend::{cpu_device, to_vec, Cpu};
//! use recur_rnn::{set_recurrent_mode, RecurrentConfig, RecurrentMode, RecurrentState};
//!
//! let device = cpu_device();
//! // input_size 3, hidden_size 4, one layer (L = 1): state entries rs_h and rs_c.
//! let lstm = RecurrentConfig::new(3, 4).init_lstm::<Cpu>(&device)?;
//!
//! // Sequential mode (the default): 2 environments, one step; the first has just reset, so
//! // its incoming state is zeroed.
//! let state = lstm.primer().zeros::<Cpu>(2, &device); // rs_h, rs_c: [N, L, H] = [2, 1, 4]
//! let is_init = Tensor::<Cpu, 1, Bool>::from_data([true, false], &device); // [N]
//! let out = lstm.forward(Tensor::ones([2, 3], &device), is_init, state)?; // input [N, 3]
//! assert_eq!(out.features.dims(), [2, 4]); // [N, H]
//! assert_eq!(out.next.rs_c.unwrap().dims(), [2, 1, 4]); // [N, L, H]
//!
//! // Recurrent mode: a batch of 2 sequences of 5 steps, the second resetting at t = 3.
//! let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
//! let mut flags = [[false; 5]; 2];
//! flags[0][0] = true;
//! flags[1][0] = true;
//! flags[1][3] = true;
//! let is_init = Tensor::<Cpu, 2, Bool>::from_data(flags, &device); // [B, T]
//! let stored = RecurrentState::lstm(
//!     Tensor::zeros([2, 5, 1, 4], &device), // rs_h [B, T, L, H]: the state at each step
//!     Tensor::zeros([2, 5, 1, 4], &device), // rs_c
//! );
//! let input = Tensor::ones([2, 5, 3], &device); // [B, T, 3]
//! let out = lstm.forward_batch(input, is_init, stored)?;
//! assert_eq!(out.features.dims(), [2, 5, 4]); // [B, T, H]
//! // Row 1 starts again at t = 3 from its stored (zero) state: the same features as at t = 0.
//! let f = to_vec(out.features);
//! let at = |b: usize, t: usize| &f[(b * 5 + t) * 4..(b * 5 + t + 1) * 4];
//! assert!(at(1, 3).iter().zip(at(1, 0)).all(|(x, y)| (x - y).abs() < 1e-6));
//! # Ok::<(), recur_rnn::RecurrentError>(())
//! ```
//!
//! # What is here
//! - [`LstmModule`], [`GruModule`] (TorchRL's `LSTMModule`/`GRUModule`) and [`MinGruModule`],
//!   typed wrappers around the multi-layer [`RecurrentCore`], built from a
//!   [`RecurrentConfig`] (PyTorch's `nn.LSTM`/`nn.GRU` options and TorchRL's). Parameters carry
//!   PyTorch's names and layouts (`weight_ih_l0` `[4H, in]`, ...): an `nn.LSTM`'s `state_dict`
//!   loads with [`RecurrentCore::load_parameters`] as it is.
//! - [`set_recurrent_mode`]: the thread-local mode switch (a guard; TorchRL's
//!   `set_recurrent_mode`), the only global state. Without a guard a module runs in its
//!   config's `default_recurrent_mode`.
//! - [`Primer`]: the recurrent-state entries a module needs (`rs_h`, and `rs_c` for an LSTM),
//!   so that an actor can zero them at every reset; [`RecurrentState`] and
//!   [`RecurrentOutput`] carry them.
//! - The recurrent-mode backends ([`RecurrentBackend`]): `pad` and `scan` on any burn backend;
//!   `fused`, one custom autodiff node per layer, with the CPU kernels ([`fused`]: a SIMD GEMM
//!   with AVX-512 and AVX2 paths picked at run time) on [`burn_backend::Cpu`] and
//!   [`burn_backend::CpuAutodiff`], and the CubeCL kernels on burn's CUDA and wgpu backends in
//!   a build with the `cuda` or `wgpu` feature ([`fused_kernels`] says which).
//! - [`burn_backend`]: the burn backends recur runs on, and a fast host read of their tensors.
//! - [`encoder`]: a convolutional image encoder on host `f32` (`uint8` frames in, im2col into
//!   the fused backend's SIMD GEMM, a hand-written backward), with the `nature` and
//!   `minigrid` presets.
//! - [`math`]: the cells' element-wise math on host `f32`, shared with the actor's inference
//!   path outside burn.
//!
//! `unsafe` code is denied in this crate except in the fused backend's SIMD kernels
//! (`backend/fused/simd.rs`), every block with a `// SAFETY:` comment.

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
pub mod encoder;
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
