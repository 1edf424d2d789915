//! recur's learner: the run loop over the transport ([`collect`]), the control-plane server,
//! the actor supervisor, and the benchmarks ([`bench`], run by the `recur-bench` binary).

#![forbid(unsafe_code)]

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
pub mod ppo;
pub mod replay;
pub mod slice_sampler;
pub mod supervisor;
pub mod train;
