//! recur's actor process: a vector of environments, the policy in sequential mode (inference
//! only) with one recurrent state per environment, and the writer of trajectory chunks.
//!
//! The recurrent half of that contract is in place: [`common::recurrent`] gives the
//! sequential-mode modules and the [`Primer`](common::recurrent::Primer) from which an actor
//! creates zeroed state at every reset. The environment loop, the `recur-actor` binary and the
//! chunk writer are built on top of it.

pub use common::recurrent::{Primer, PrimerEntry};
