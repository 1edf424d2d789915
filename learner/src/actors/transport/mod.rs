//! How chunks reach the learner and weights reach the actors, one medium per type behind the
//! [`Transport`] interface: [`ShmTransport`] serves actors on this machine through shared
//! memory (the control socket, one ring per actor incarnation, one weight segment) and
//! [`TcpTransport`] remote actors over authenticated TCP. The run's [`crate::actors::Actors`]
//! fans them in (both kinds mix in one run) beside the supervisor of the local actor
//! processes; every chunk is verified and counted the same way, in one [`Ledger`], and handed
//! on with the state its actor saved after it (sync runs, [`Received`]). Also: what the actors
//! are started with ([`TransportConfig`]) and what a run counts ([`CollectSummary`]).

mod ledger;
mod shm;
pub mod tcp;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::actor_args::ActorArgs;
use common::chunk::{Chunk, ChunkSchema};
use common::control::schema_mismatch;
use common::envs::{EnvSpec, Space};
use serde::Serialize;

use crate::actors::supervisor::ActorEvent;
pub use ledger::{Channel, Ledger};
pub use shm::ShmTransport;
pub use tcp::TcpTransport;

/// A chunk as it arrived, with the state its actor saved right after collecting it when the
/// actor sent one.
#[derive(Debug)]
pub struct Received {
    pub chunk: Chunk,
    /// Sync runs, shared memory: the actor's state, sent as a trailer after the chunk in the
    /// same ring slot, so it is this chunk's own (the same actor id and incarnation, which the
    /// ledger checked against the ring, and the chunk's policy version). `None`: the actor sent
    /// none (its environments cannot be saved, the state outgrew the slot, or not a sync run).
    pub saved: Option<Vec<u8>>,
}

/// Sync runs: per actor id, the state that actor saved right after its chunk an update last
/// took (the checkpoint's, from the run's intake): an actor registering with that id continues
/// from it.
pub type SavedStates = BTreeMap<u32, Vec<u8>>;

/// The actors a transport starts and the channels it gives them.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// What every actor runs (environment, policy architecture, seed, exploration): the
    /// learner's own actors get it on their command line, remote ones in their `Welcome`.
    /// Registering actors must report its `env`.
    pub actor_args: ActorArgs,
    pub actors: u32,
    /// The first local actor's id (the others follow): 0, or this learner rank's first
    /// ([`crate::ranks`]: actor ids are distinct across ranks).
    pub first_actor: u32,
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
    /// A local actor silent this long (no heartbeat, no chunk) is stalled: the supervisor
    /// SIGKILLs it and restarts it. `None`: never.
    pub stall_timeout: Option<std::time::Duration>,
    /// The environment's spaces the run was built for: a registering actor that reports
    /// others is refused, both named. `None`: not checked.
    pub spec: Option<EnvSpec>,
    /// `sync` collection: actors wait for new weights after each chunk and send their state
    /// after it, in the same ring slot ([`Received::saved`]).
    pub sync: bool,
    /// Listen for remote actors on this `HOST:PORT` (`run.listen`); `None`: local actors only.
    pub listen: Option<String>,
    /// TLS on the remote-actor port (`run.tls`, `--tls`, `--insecure-plaintext`).
    pub tls: common::tls::TlsMode,
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
    /// Local actors killed because they stopped sending heartbeats (SIGSTOP, hung).
    pub stalled: u64,
    /// The address remote actors connect to (`tcp://HOST:PORT`), when listening.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    pub policy_version: u64,
    pub reclaimed_segments: Vec<String>,
    pub incarnations: Vec<IncarnationSummary>,
    pub seconds: f64,
    pub stopped_by_request: bool,
}

/// One medium between the learner and its actors. A run's fan-in calls
/// [`register`](Self::register) and [`receive`](Self::receive) in turn, publishes weights after
/// each update, and at the end [`shut_down`](Self::shut_down)s, drains until no actor holds a
/// channel ([`busy`](Self::busy)), and [`close`](Self::close)s.
pub trait Transport {
    /// Answers the actors that asked to join since the last call: one whose environment and
    /// chunk schema match the run's ([`Expected`]) gets a channel for its chunks, and in a sync
    /// run the state `saved` holds for its actor id to continue from; any other a refusal
    /// naming the mismatch. Chunks a replaced channel still held go to `out`.
    fn register(&mut self, saved: &SavedStates, ledger: &mut Ledger, out: &mut Vec<Received>);

    /// The chunks received since the last call, verified and counted by `ledger`, in arrival
    /// order per actor, each with the state that came with it.
    fn receive(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>);

    /// Broadcasts weight version `version` (actors adopt it at their next chunk boundary).
    fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()>;

    /// Actor processes the supervisor saw start, exit or given up on.
    fn actors_changed(&mut self, _events: &[ActorEvent]) {}

    /// The live actors of this transport silent (no heartbeat, no chunk) for longer than
    /// `bound`, each reported once per incarnation. A transport whose actors are watched
    /// elsewhere (remote ones: the connection's own silence limit) reports none.
    fn stalled(&mut self, _bound: std::time::Duration) -> Vec<Stalled> {
        Vec::new()
    }

    /// Actors may join on their own at any time (a listener): the run never runs out of them.
    fn open_ended(&self) -> bool {
        false
    }

    /// Some actor still holds a channel of this transport (or its chunks are not all taken).
    fn busy(&self) -> bool;

    /// The actors holding a channel, named for a log line.
    fn waiting_for(&self) -> Vec<String>;

    /// An actor or an operator asked the run to stop through this transport.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Registrations refused so far.
    fn refused(&self) -> u64;

    /// The run is ending: every actor is told to stop at its next heartbeat, and registrations
    /// from now on are refused.
    fn shut_down(&mut self);

    /// Refuses the registrations that arrived while the run ends.
    fn refuse_registrations(&mut self);

    /// The grace is over: what is left is drained into `out` and no actor is waited for.
    fn abandon(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>);

    /// The last pass: everything drained into `out`, the channels dropped.
    fn close(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>);
}

/// An actor that went silent: no heartbeat and no chunk for `silent`.
#[derive(Clone, Debug, PartialEq)]
pub struct Stalled {
    pub actor_id: u32,
    pub incarnation: u32,
    pub pid: u32,
    pub silent: std::time::Duration,
}

/// What a registering actor must match: the run's environment, its spaces and chunk schema.
#[derive(Clone, Debug)]
pub struct Expected {
    pub env: String,
    /// The environment's spaces the run was built for; `None`: not checked.
    pub spec: Option<EnvSpec>,
    pub schema: ChunkSchema,
}

impl Expected {
    /// Why an actor of `env` with these spaces and chunk schema cannot join the run (`None`:
    /// it can).
    pub fn mismatch(
        &self,
        env: &str,
        observation_space: &Space,
        action_space: &Space,
        schema: &ChunkSchema,
    ) -> Option<String> {
        if env != self.env {
            return Some(format!("env {env:?} (the run has {:?})", self.env));
        }
        if let Some(spec) = self.spec.as_ref().filter(|s| {
            &s.observation_space != observation_space || &s.action_space != action_space
        }) {
            return Some(format!(
                "env {env:?}: the actor reports observation space {}, action space {}; the run \
                 was built for observation space {}, action space {}",
                observation_space.describe(),
                action_space.describe(),
                spec.observation_space.describe(),
                spec.action_space.describe()
            ));
        }
        schema_mismatch(&self.schema, schema)
    }
}
