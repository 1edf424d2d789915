//! An actor attached to a learner: the actor side of the learner's `Transport`. An
//! [`Outlet`] is the channel to the learner (the newest weights in, chunks out, heartbeats,
//! saved states); [`run`] is the one attach loop over it. Two outlets, one per medium:
//!
//! - [`shm::ShmOutlet`]: a learner on this machine (control socket, shared-memory ring, weight
//!   segment); sync runs and saved actor states.
//! - [`tcp::TcpOutlet`]: a learner elsewhere (one authenticated TCP connection, an outbox of
//!   unacknowledged chunks, reconnects).
//!
//! Either way the actor stops when the learner ends the run, disappears, or stops answering
//! (stopped or hung): within a few seconds, never blocked on a dead run.

pub mod shm;
pub mod tcp;

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use common::chunk::Chunk;
use common::rollout::Actor;
use common::weights::from_blob;

/// How often an attached actor reports to the learner (and learns whether to stop).
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// How long an actor waits for its first weights.
pub const FIRST_WEIGHTS: Duration = Duration::from_secs(10);
/// How often a sync actor looks for the weights of the next update.
const SYNC_POLL: Duration = Duration::from_micros(200);

/// Why the learner's side ended an attached actor's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The learner ended the run.
    Shutdown,
    /// The learner is gone: its process no longer exists, it closed the connection, or it did
    /// not answer in time.
    LearnerGone,
}

/// How an attached actor's run ended, and the chunks it handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    pub end: End,
    pub chunks: u64,
}

impl Stop {
    /// The end as the actor's exit line says it.
    pub fn why(&self) -> &'static str {
        match self.end {
            End::Shutdown => "the run ended",
            End::LearnerGone => "the learner is gone",
        }
    }
}

/// What an actor reports in its heartbeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Chunks handed to the outlet so far.
    pub chunks_sent: u64,
    /// The weight version the actor collects with.
    pub policy_version: u64,
}

/// The actor's channel to its learner. Every method that talks to the learner answers
/// `Ok(Some(end))` when the run is over for this actor, `Ok(None)` to go on, and errs on what
/// is not a way for a run to end (a malformed answer, a chunk larger than a slot).
pub trait Outlet {
    /// Sync collection: every chunk is collected with newer weights than the last one, and
    /// the actor's state after it is handed over before the chunk. Default: no.
    fn sync(&self) -> bool {
        false
    }

    /// The state the learner saved for this actor id (taken once): the actor continues from
    /// it. Default: none.
    fn take_restore(&mut self) -> Option<Vec<u8>> {
        None
    }

    /// Sync runs: how many bytes of actor state can ride after an encoded chunk of
    /// `chunk_bytes` ([`Chunk::append_state`]). Default: none.
    fn state_room(&self, chunk_bytes: usize) -> usize {
        let _ = chunk_bytes;
        0
    }

    /// The newest weight version the learner published to this actor (0: none yet). Never
    /// blocks.
    fn latest_version(&mut self) -> u64;

    /// If weights newer than version `have` arrived, copies the newest into `blob` and returns
    /// its version (the actor adopts it). Never blocks.
    fn fetch_newer(&mut self, have: u64, blob: &mut Vec<u8>) -> anyhow::Result<Option<u64>>;

    /// Reports `progress` if a heartbeat is due, and says whether the run is over for this
    /// actor. Called while the actor waits and after every chunk; blocks at most for a
    /// heartbeat's answer.
    fn beat(&mut self, progress: Progress) -> anyhow::Result<Option<End>>;

    /// Hands over one encoded chunk. While the channel is full it waits (a slow learner slows
    /// the actor), still beating with `progress`.
    fn push(&mut self, chunk: Vec<u8>, progress: Progress) -> anyhow::Result<Option<End>>;
}

/// The attach loop: `actor` collects chunks into `outlet` until the run is over for it.
///
/// First it continues from the learner's saved state if there is one, and waits up to
/// [`FIRST_WEIGHTS`] for the learner's weights (it never collects with its own
/// initialisation). Then, per chunk: in a sync run, wait for weights newer than the last
/// chunk's; adopt the newest weights (at the chunk boundary, so a chunk is collected with one
/// version, stamped into it); collect; in a sync run, hand over the state after the chunk;
/// push the chunk; beat.
pub fn run(actor: &mut Actor, outlet: &mut impl Outlet) -> anyhow::Result<Stop> {
    let mut chunks = 0u64;
    let progress = |actor: &Actor, chunks_sent| Progress {
        chunks_sent,
        policy_version: actor.policy_version(),
    };
    let stop = |end, chunks| Ok(Stop { end, chunks });
    // A saved state (sync runs): continue the episodes where the actor that saved it stood.
    // It holds no weights yet: the first adoption takes the newest, whatever its version.
    let mut restored = false;
    if let Some(state) = outlet.take_restore() {
        let version = actor
            .restore(&state)
            .context("continuing from the learner's saved actor state")?;
        tracing::info!("continuing from the state saved after the chunk of weights {version}");
        restored = true;
    }
    let deadline = Instant::now() + FIRST_WEIGHTS;
    while outlet.latest_version() == 0 {
        if let Some(end) = outlet.beat(progress(actor, chunks))? {
            return stop(end, chunks);
        }
        if Instant::now() > deadline {
            bail!("no weights published by the learner within {FIRST_WEIGHTS:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (mut blob, mut unsaved_told) = (Vec::new(), false);
    loop {
        // Sync runs: what an actor collects does not depend on timing.
        if outlet.sync() {
            while outlet.latest_version() <= actor.policy_version() {
                if let Some(end) = outlet.beat(progress(actor, chunks))? {
                    return stop(end, chunks);
                }
                std::thread::sleep(SYNC_POLL);
            }
        }
        if restored || outlet.latest_version() > actor.policy_version() {
            let have = if restored { 0 } else { actor.policy_version() };
            if let Some(version) = outlet.fetch_newer(have, &mut blob)? {
                let (policy, _) = from_blob(actor.policy().clone(), &blob)?;
                actor.set_policy(policy, version);
                restored = false;
            }
        }
        let chunk = actor.collect()?;
        let mut bytes = chunk.encode(actor.schema())?;
        // Sync runs: the state after this chunk rides with it, so it is there when an update
        // takes the chunk (and in the checkpoint after it).
        if outlet.sync() {
            let room = outlet.state_room(bytes.len());
            match actor.save_state() {
                Some(state) if state.len() <= room => Chunk::append_state(&mut bytes, &state),
                unsaved if !unsaved_told => {
                    unsaved_told = true;
                    tracing::warn!(
                        "{}: the actor's state is not saved ({}), so a resumed run starts new \
                         episodes here",
                        actor.config().env,
                        match unsaved {
                            Some(s) => format!(
                                "{} bytes, over the {room} the learner's ring leaves after a \
                                 chunk",
                                s.len()
                            ),
                            None => "the environments cannot save theirs".into(),
                        }
                    );
                }
                _ => {}
            }
        }
        if let Some(end) = outlet.push(bytes, progress(actor, chunks))? {
            return stop(end, chunks);
        }
        chunks += 1;
        if let Some(end) = outlet.beat(progress(actor, chunks))? {
            return stop(end, chunks);
        }
    }
}
