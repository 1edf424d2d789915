//! The CubeCL fused recurrent kernels (`backend = "fused"` on burn's wgpu backend), run on
//! whatever Vulkan device wgpu finds: in CI Mesa's lavapipe, a CPU driver, so these tests
//! need no GPU (`scripts/test_gpu_kernels.sh`). Built with `--features wgpu` only.
//!
//! - the PyTorch/TorchRL reference vectors (`$RECUR_REFERENCE_DIR/rnn`): outputs, loss and
//!   every gradient, `recompute` none and full, `[B, T]` and flat layouts, each precision with
//!   its tolerance;
//! - on random shapes and resets: the kernels == the CPU fused backend (itself checked against
//!   the reference and `pad`/`scan`), outputs and every gradient; a sequential step-by-step
//!   rollout == one recurrent-mode call; nothing crosses an `is_init` boundary (bit for bit,
//!   and zero gradient);
//! - a hidden size wider than a cube (units stride over hidden units), the inference path
//!   (no autodiff) and the config checks.

/// The backend under test (autodiff) and the same without autodiff.
type G = recur_rnn::burn_backend::WgpuAutodiff;
type Plain = recur_rnn::burn_backend::Wgpu;

mod support;

include!("cube/cases.rs");
