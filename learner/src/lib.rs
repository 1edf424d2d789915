//! recur's learner, in wings by layer with the commands on top:
//!
//! - the commands of `recur-learner`: [`train`] (actors collect, the learner trains),
//!   [`replay`] (learner-only training from a recorded dataset), [`collect`] (actors collect,
//!   nothing trains), [`eval`] (greedy evaluations, of a checkpoint or during a run) and [`export`] (a checkpoint's
//!   policy for PyTorch and ONNX), all configured by [`config`];
//! - [`algo`]: the algorithms behind one [`Algorithm`](algo::Algorithm) interface: PPO (with
//!   GAE and its update paths), DQN, behaviour cloning, the replay buffer, the slice sampler
//!   and the optimizer;
//! - [`actors`]: the run's actors: their arguments, the supervisor of the local actor
//!   processes, the control-plane server and the transports (shared memory, TCP);
//! - [`run`]: run bookkeeping: the run directory, stop signals, metrics, TensorBoard, the
//!   time profile and the recording of received chunks;
//! - [`ranks`]: the group of data-parallel learner ranks a launcher (`mpirun`, `srun`) started,
//!   over MPI (the `mpi` feature).

#![forbid(unsafe_code)]

// Defined before the modules so that `train` and `replay` see it (textual macro scope).
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
pub mod collect;
pub mod config;
pub mod eval;
pub mod export;
pub mod ranks;
pub mod replay;
pub mod run;
pub mod train;
