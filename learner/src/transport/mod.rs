//! How chunks reach the learner and weights reach the actors: the [`Transport`] interface,
//! what a transport is started with ([`TransportConfig`]) and what it counts
//! ([`CollectSummary`]). [`ShmTransport`] serves the learner's own actors through shared
//! memory (one ring per actor incarnation, one weight segment) and, with `listen`, remote
//! actors over authenticated TCP ([`tcp`]): both kinds mix in one run, their chunks verified
//! and counted the same way.

mod shm;
pub mod tcp;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::actor_args::ActorArgs;
use common::chunk::Chunk;
use common::envs::EnvSpec;
use serde::Serialize;

pub use shm::{ActorsGone, ShmTransport};

/// The actors a transport starts and the channels it gives them.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// What every actor runs (environment, policy architecture, seed, exploration): the
    /// learner's own actors get it on their command line, remote ones in their `Welcome`.
    /// Registering actors must report its `env`.
    pub actor_args: ActorArgs,
    pub actors: u32,
    pub run_dir: PathBuf,
    /// The `recur-actor` executable.
    pub actor_program: PathBuf,
    /// Ring slots per actor.
    pub slots: usize,
    /// Restarts per actor within `restart_window` before the supervisor gives up on it.
    pub max_restarts: u32,
    pub restart_window: std::time::Duration,
    /// The first restart's delay (doubled per recent restart, capped at 8 s).
    pub restart_backoff: std::time::Duration,
    /// The environment's spaces the run was built for: a registering actor that reports
    /// others is refused, both named. `None`: not checked.
    pub spec: Option<EnvSpec>,
    /// `sync` collection: actors wait for new weights after each chunk and send their state
    /// before it (see [`Transport::admit_actor_state`]).
    pub sync: bool,
    /// Saved actor states by actor id (a resumed sync run's checkpoint): a registering actor
    /// continues from its own.
    pub restore: BTreeMap<u32, Vec<u8>>,
    /// Listen for remote actors on this `HOST:PORT` (`run.listen`); `None`: local actors only.
    pub listen: Option<String>,
}

/// What one actor incarnation delivered.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IncarnationSummary {
    pub actor_id: u32,
    pub incarnation: u32,
    pub chunks: u64,
    /// Sequence numbers out of order or missing (0 in a healthy run).
    pub seq_errors: u64,
    pub last_seq: Option<u64>,
    /// Chunks whose actor id / incarnation did not match the ring they came through.
    pub foreign: u64,
    /// The actor died with a slot half written (discarded, never consumed).
    pub abandoned_slot: bool,
    /// Bytes of the chunks received (encoded, as sent).
    pub bytes: u64,
    /// A remote actor's address (`None`: a local actor, through shared memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// Times a remote actor reconnected to continue this incarnation after a broken link.
    pub reconnects: u32,
    /// Chunks received a second time (dropped; 0 in a healthy run).
    pub duplicates: u64,
}

/// What a transport counted over a run (`summary.json` of `collect`, `transport` of `train`'s).
#[derive(Clone, Debug, Default, Serialize)]
pub struct CollectSummary {
    pub env: String,
    pub chunks: u64,
    pub frames: u64,
    pub corrupted: u64,
    pub rejected: u64,
    /// Registrations refused: a mismatching env or schema, and (remote actors) connections
    /// without the run token, malformed or oversized frames.
    pub refused_registrations: u64,
    pub restarts: u64,
    /// The address remote actors connect to (`tcp://HOST:PORT`), when listening.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    pub policy_version: u64,
    pub reclaimed_segments: Vec<String>,
    pub incarnations: Vec<IncarnationSummary>,
    pub seconds: f64,
    pub stopped_by_request: bool,
}

/// A running transport session between the learner and its actors. A run loop calls
/// [`register`](Self::register) and [`receive`](Self::receive) in turn, publishes weights after
/// each update, and ends with [`finish`](Self::finish).
pub trait Transport {
    /// Answers the actors that asked to join since the last call: one whose environment and
    /// chunk schema match the run's gets a channel for its chunks, any other a refusal naming
    /// the mismatch.
    fn register(&mut self);

    /// The chunks received since the last call: verified (checksum, schema, sender), sequence
    /// numbers checked per actor incarnation, in arrival order per actor. Notices actors that
    /// exited; errs once every actor has stopped for good.
    fn receive(&mut self) -> anyhow::Result<Vec<Chunk>>;

    /// Broadcasts weight version `version` (actors adopt it at their next chunk boundary).
    fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()>;

    fn stats(&self) -> &CollectSummary;

    /// Sync runs: an update took the chunk of `actor_id`/`incarnation` collected with weights
    /// `version`. The state that actor saved right after collecting it becomes the one an
    /// actor registering with that id continues from, and is returned (for the checkpoint).
    /// `None` when the actor sent no such state (its environments cannot be saved): a
    /// restarting actor then starts fresh.
    fn admit_actor_state(
        &mut self,
        actor_id: u32,
        incarnation: u32,
        version: u64,
    ) -> Option<Vec<u8>>;

    /// A signal or a control-plane request asked the run to stop.
    fn stop_requested(&self) -> bool;

    /// Ends the run: the actors stop, what they still sent is received (and returned), the
    /// transport's resources are removed; returns the final counts.
    fn finish(self, stopped_by_request: bool) -> anyhow::Result<(CollectSummary, Vec<Chunk>)>
    where
        Self: Sized;
}
