//! recur's actor process: a vector of environments, the policy in sequential mode (inference
//! only) with one recurrent state per environment, and the writer of trajectory chunks.
//!
//! - [`rollout`]: the actor loop ([`Actor`]): init tracking, priming, chunk filling.
//! - [`attach`]: the actor attached to a learner (control socket, ring, weights).
//! - [`check`]: the spec check run at start and by `recur-actor --check-env`.

pub mod attach;
pub mod check;
pub mod rollout;

pub use rollout::{Actor, ActorConfig, ActorError, Episode};
