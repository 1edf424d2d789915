//! The CubeCL kernel tests of `cube_kernels.rs` on burn's CUDA backend (GPU 0). Built with
//! `--features cuda`; run by `scripts/gpu_session.sh` on a machine with a GPU.

/// The backend under test (autodiff) and the same without autodiff.
type G = recur_rnn::burn_backend::CudaAutodiff;
type Plain = recur_rnn::burn_backend::Cuda;

mod support;

include!("cube/cases.rs");
