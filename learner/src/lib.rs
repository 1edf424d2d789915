//! recur's learner: the training run loop ([`train`]) and learner-only replay ([`offline`]),
//! the algorithms behind [`algo`], the [`transport`] from the actors (with the control-plane
//! server, the actor supervisor and the run directory), and the benchmarks ([`bench`], run by
//! the `recur-bench` binary).

#![forbid(unsafe_code)]

// Defined before the modules so that `train` and `offline` see it (textual macro scope).
/// Calls `$run::<B>($opts, &device)` with `B` the autodiff backend of train device `$device`
/// (errs for a CUDA device in a build without the `cuda` feature).
macro_rules! on_train_device {
    ($device:expr, $run:ident($opts:expr)) => {
        match $device {
            common::backend::TrainDevice::Cpu => {
                $run::<common::backend::CpuAutodiff>($opts, &common::backend::cpu_device())
            }
            #[cfg(feature = "cuda")]
            common::backend::TrainDevice::Cuda(i) => {
                let device = common::backend::cuda_device(i)?;
                $run::<common::backend::CudaAutodiff>($opts, &device)
            }
            #[cfg(not(feature = "cuda"))]
            device @ common::backend::TrainDevice::Cuda(_) => {
                Err(common::backend::DeviceError::NotBuilt { device }.into())
            }
        }
    };
}

pub mod actors;
pub mod algo;
pub mod bench;
pub mod collect;
pub mod config;
pub mod eval;
pub mod export;
pub mod replay;
pub mod run;
pub mod train;
