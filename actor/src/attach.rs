//! An actor attached to a learner: register over the control socket, then stream chunks into
//! the actor's shared-memory ring and adopt new weights at chunk boundaries, until the learner
//! says the run is over, disappears, or stops answering heartbeats (stopped or hung): the
//! actor then exits within a few seconds (no orphans, no actor blocked on a dead run).

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use common::chunk::{Chunk, STATE_TRAILER};
use common::control::{call, Request, Response};
use common::envs::EnvSpec;
use common::rollout::Actor;
use common::shm::{RingError, RingWriter, WeightSubscriber};
use common::weights::from_blob;

/// How often the actor reports to the learner (and learns whether to stop).
const HEARTBEAT: Duration = Duration::from_millis(250);
/// How long the learner has to answer a control request before the actor gives up on it.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a sync actor looks for the weights of the next update.
const SYNC_POLL: Duration = Duration::from_micros(200);
/// How long an actor waits for its first weights.
const FIRST_WEIGHTS: Duration = Duration::from_secs(10);

/// Why an attached actor stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The learner ended the run; the chunks pushed.
    Shutdown { chunks: u64 },
    /// The learner is gone (socket closed, or its process no longer exists).
    LearnerGone { chunks: u64 },
}

/// Runs `actor` attached to the learner serving `socket` until the run ends; registers with
/// the spaces of `spec` (the learner checks them against the run's).
pub fn run_attached(socket: &Path, mut actor: Actor, spec: &EnvSpec) -> anyhow::Result<Stop> {
    let config = actor.config().clone();
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to the learner at {}", socket.display()))?;
    stream.set_read_timeout(Some(HEARTBEAT_TIMEOUT))?;
    stream.set_write_timeout(Some(HEARTBEAT_TIMEOUT))?;
    let register = Request::Register {
        actor_id: config.actor_id,
        incarnation: config.incarnation,
        pid: std::process::id(),
        env: config.env.clone(),
        observation_space: spec.observation_space.clone(),
        action_space: spec.action_space.clone(),
        schema: actor.schema().clone(),
        state_bytes: actor.save_state().map_or(0, |s| s.len() as u64),
    };
    let (ring, weights, sync, restore) = match call(&mut stream, &register)? {
        Response::Registered {
            ring,
            weights,
            sync,
            restore,
        } => (ring, weights, sync, restore),
        Response::Refused { reason } => bail!(
            "the learner refused actor {}/{}: {reason}",
            config.actor_id,
            config.incarnation
        ),
        other => bail!("unexpected answer to register: {other:?}"),
    };
    // A saved state (sync runs): continue the episodes where the actor that saved it stood.
    let mut restored = false;
    if let Some(state) = restore {
        let version = actor
            .restore(&state)
            .context("continuing from the learner's saved actor state")?;
        tracing::info!("continuing from the state saved after the chunk of weights {version}");
        restored = true;
    }
    let mut ring = RingWriter::open(&ring)?;
    let mut subscriber = WeightSubscriber::open(&weights)?;
    let mut blob = Vec::new();
    let mut snapshot_warned = false;
    // Start from the learner's weights, not our own initialisation.
    let deadline = Instant::now() + FIRST_WEIGHTS;
    while subscriber.latest_version() == 0 {
        if Instant::now() > deadline || !subscriber.owner_alive() {
            bail!("no weights published by the learner within {FIRST_WEIGHTS:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (mut chunks_sent, mut last_beat) = (0u64, Instant::now());
    loop {
        // Sync runs: every chunk is collected with newer weights than the last one (the
        // learner updates in between), so what an actor collects does not depend on timing.
        if sync {
            while subscriber.latest_version() <= actor.policy_version() {
                if !subscriber.owner_alive() {
                    return Ok(Stop::LearnerGone {
                        chunks: chunks_sent,
                    });
                }
                if last_beat.elapsed() >= HEARTBEAT {
                    last_beat = Instant::now();
                    let beat = beat_of(&actor, &ring, chunks_sent);
                    if let Some(stop) = heartbeat(&mut stream, &beat, chunks_sent) {
                        return Ok(stop);
                    }
                }
                std::thread::sleep(SYNC_POLL);
            }
        }
        // Adopt the newest weights at the chunk boundary (a restored actor holds none yet).
        if restored || subscriber.latest_version() > actor.policy_version() {
            let have = if restored { 0 } else { actor.policy_version() };
            if let Some(version) = subscriber.fetch_newer(have, &mut blob)? {
                let (policy, _) = from_blob(actor.policy().clone(), &blob)?;
                actor.set_policy(policy, version);
                restored = false;
            }
        }
        let chunk = actor.collect()?;
        let mut bytes = chunk.encode(actor.schema())?;
        // Sync runs: the state after this chunk rides with it, so it is there when an update
        // takes the chunk (and in the checkpoint after it).
        if sync {
            match actor.save_state() {
                Some(state) if bytes.len() + STATE_TRAILER + state.len() <= ring.capacity() => {
                    Chunk::append_state(&mut bytes, &state);
                }
                other if !snapshot_warned => {
                    snapshot_warned = true;
                    tracing::warn!(
                        "{}: the actor's state is not saved ({}), so a resumed run starts new \
                         episodes here",
                        config.env,
                        match other {
                            Some(s) => format!(
                                "{} bytes, more than the ring slot leaves after the chunk",
                                s.len()
                            ),
                            None => "the environments cannot save theirs".into(),
                        }
                    );
                }
                _ => {}
            }
        }
        // While the ring is full the push asks `alive` about every 100 ms: the learner must
        // still own the weight segment and, once per heartbeat period, answer a heartbeat
        // within the socket's read timeout. A stopped (SIGSTOP) or hung learner answers no
        // heartbeat: the actor exits within seconds instead of blocking on a full ring.
        let mut stop = None;
        let beat = beat_of(&actor, &ring, chunks_sent);
        let mut alive = || {
            if !subscriber.owner_alive() {
                stop = Some(Stop::LearnerGone {
                    chunks: chunks_sent,
                });
                return false;
            }
            if last_beat.elapsed() < HEARTBEAT {
                return true;
            }
            last_beat = Instant::now();
            match heartbeat(&mut stream, &beat, chunks_sent) {
                None => true,
                Some(s) => {
                    stop = Some(s);
                    false
                }
            }
        };
        match ring.push(&bytes, Duration::from_secs(60), &mut alive) {
            Ok(_) => chunks_sent += 1,
            Err(RingError::PeerGone) => {
                return Ok(stop.unwrap_or(Stop::LearnerGone {
                    chunks: chunks_sent,
                }))
            }
            Err(e) => return Err(e.into()),
        }
        if last_beat.elapsed() >= HEARTBEAT {
            last_beat = Instant::now();
            let beat = beat_of(&actor, &ring, chunks_sent);
            if let Some(stop) = heartbeat(&mut stream, &beat, chunks_sent) {
                return Ok(stop);
            }
        }
    }
}

/// The heartbeat of `actor` after `chunks_sent` chunks through `ring`.
fn beat_of(actor: &Actor, ring: &RingWriter, chunks_sent: u64) -> Request {
    Request::Heartbeat {
        actor_id: actor.config().actor_id,
        incarnation: actor.config().incarnation,
        chunks_sent,
        full_waits: ring.full_waits(),
        policy_version: actor.policy_version(),
    }
}

/// One heartbeat: `None` to go on, else why the actor stops (the learner ended the run, or did
/// not answer within the socket's read timeout).
fn heartbeat(stream: &mut UnixStream, beat: &Request, chunks: u64) -> Option<Stop> {
    match call(stream, beat) {
        Ok(Response::Ack { shutdown: true }) => Some(Stop::Shutdown { chunks }),
        Ok(_) => None,
        Err(_) => Some(Stop::LearnerGone { chunks }),
    }
}
