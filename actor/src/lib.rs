//! recur's actor process: a vector of environments, the policy in sequential mode (inference
//! only) with one recurrent state per environment, and the writer of trajectory chunks. The
//! actor loop itself is [`common::rollout`] (the learner's evaluation and the benchmarks run it
//! too); this crate holds what only the actor process needs.
//!
//! - [`attach`]: the actor attached to a learner (control socket, ring, weights).
//! - [`check`]: the spec check run at start and by `recur-actor --check-env`.
//! - [`cli`]: the `recur-actor` command line and what it runs (standalone, recording, attached).

pub mod attach;
pub mod check;
pub mod cli;

pub use common::rollout::{Actor, ActorConfig, ActorError, Episode};
