//! recur's learner: the training run loop ([`train`]) and learner-only replay ([`offline`]),
//! the algorithms behind [`algo`], the [`transport`] from the actors (with the control-plane
//! server, the actor supervisor and the run directory), and the benchmarks ([`bench`], run by
//! the `recur-bench` binary).

pub mod algo;
pub mod batch;
pub mod bc;
pub mod bench;
pub mod collect;
pub mod config;
pub mod control_server;
pub mod dqn;
pub mod eval;
pub mod gae;
pub mod metrics;
pub mod offline;
pub mod optim;
pub mod policy;
pub mod ppo;
pub mod recording;
pub mod replay;
pub mod run_dir;
pub mod slice_sampler;
pub mod supervisor;
pub mod train;
pub mod transport;
