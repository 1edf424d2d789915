//! recur's actor process: a vector of environments, the policy in sequential mode (inference
//! only) with one recurrent state per environment, and the writer of trajectory chunks. The
//! actor loop itself is [`common::rollout`] (the learner's evaluation and the benchmarks run it
//! too); this crate holds what only the actor process needs.
//!
//! - [`start`]: from [`ActorArgs`](common::actor_args::ActorArgs) (what the learner decides
//!   for its actors) to an actor ready to collect; every way an actor runs goes through it.
//! - [`outlet`]: the actor attached to a learner: the [`outlet::Outlet`] trait, one attach loop
//!   over it, and one outlet per medium (shared memory on this machine, authenticated TCP
//!   from another).
//! - [`check`]: the spec check run at start and by `recur-actor --check-env`.
//! - [`cli`]: the `recur-actor` command line and what it runs (standalone, recording, attached).

#![forbid(unsafe_code)]

pub mod check;
pub mod cli;
pub mod outlet;
pub mod start;

pub use common::envs::Registry;

/// The `recur-actor` program with the environments of `registry`: parses the command line and
/// runs it. A user crate registers its own [`Env`](common::envs::Env)s and calls this from
/// its `main`; the learner starts that binary (`collector.actor_bin`).
///
/// ```no_run
/// fn main() -> anyhow::Result<()> {
///     let registry = actor::Registry::builtin(); // + registry.register("MyTask-v0", ...)
///     actor::main_with(registry)
/// }
/// ```
pub fn main_with(registry: Registry) -> anyhow::Result<()> {
    use clap::Parser;
    cli::run_with(cli::Cli::parse(), registry)
}
