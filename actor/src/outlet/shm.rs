//! The outlet to a learner on this machine: register over its control socket, then chunks
//! into the actor's shared-memory ring, weights from the run's weight segment, heartbeats and
//! saved states (sync runs) over the socket. A learner that stops answering (SIGSTOP, hung)
//! within [`HEARTBEAT_TIMEOUT`] is gone, also while the actor waits on a full ring.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use common::chunk::STATE_TRAILER;
use common::control::{call, Register, Request, Response};
use common::envs::EnvSpec;
use common::rollout::Actor;
use common::shm::{RingError, RingWriter, WeightSubscriber};

use super::{End, Outlet, Progress, HEARTBEAT};

/// How long the learner has to answer a control request before the actor gives up on it.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a push waits on a full ring while the learner still answers.
const PUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// A registered local actor's channel: control socket, ring, weight segment.
pub struct ShmOutlet {
    stream: UnixStream,
    ring: RingWriter,
    weights: WeightSubscriber,
    actor_id: u32,
    incarnation: u32,
    sync: bool,
    restore: Option<Vec<u8>>,
    last_beat: Instant,
}

impl ShmOutlet {
    /// Registers `actor` with the learner serving `socket`, reporting the spaces of `spec`
    /// (the learner checks them against the run's), and opens the ring and the weights the
    /// learner answers with.
    pub fn attach(socket: &Path, actor: &Actor, spec: &EnvSpec) -> anyhow::Result<Self> {
        let config = actor.config();
        let mut stream = UnixStream::connect(socket)
            .with_context(|| format!("connecting to the learner at {}", socket.display()))?;
        stream.set_read_timeout(Some(HEARTBEAT_TIMEOUT))?;
        stream.set_write_timeout(Some(HEARTBEAT_TIMEOUT))?;
        let register = Request::Register(Register {
            actor_id: config.actor_id,
            incarnation: config.incarnation,
            pid: std::process::id(),
            env: config.env.clone(),
            observation_space: spec.observation_space.clone(),
            action_space: spec.action_space.clone(),
            schema: actor.schema().clone(),
            state_bytes: actor.save_state().map_or(0, |s| s.len() as u64),
        });
        match call(&mut stream, &register)? {
            Response::Registered {
                ring,
                weights,
                sync,
                restore,
            } => Ok(ShmOutlet {
                stream,
                ring: RingWriter::open(&ring)?,
                weights: WeightSubscriber::open(&weights)?,
                actor_id: config.actor_id,
                incarnation: config.incarnation,
                sync,
                restore,
                last_beat: Instant::now(),
            }),
            Response::Refused { reason } => bail!(
                "the learner refused actor {}/{}: {reason}",
                config.actor_id,
                config.incarnation
            ),
            other => bail!("unexpected answer to register: {other:?}"),
        }
    }

    fn heartbeat_request(&self, progress: Progress) -> Request {
        Request::Heartbeat {
            actor_id: self.actor_id,
            incarnation: self.incarnation,
            chunks_sent: progress.chunks_sent,
            full_waits: self.ring.full_waits(),
            policy_version: progress.policy_version,
        }
    }
}

impl Outlet for ShmOutlet {
    fn sync(&self) -> bool {
        self.sync
    }

    fn take_restore(&mut self) -> Option<Vec<u8>> {
        self.restore.take()
    }

    /// What the ring's slot holds after the chunk and the trailer's header (the learner
    /// sized the slots from the state this actor reported when it registered).
    fn state_room(&self, chunk_bytes: usize) -> usize {
        self.ring
            .capacity()
            .saturating_sub(chunk_bytes + STATE_TRAILER)
    }

    fn latest_version(&mut self) -> u64 {
        self.weights.latest_version()
    }

    fn fetch_newer(&mut self, have: u64, blob: &mut Vec<u8>) -> anyhow::Result<Option<u64>> {
        Ok(self.weights.fetch_newer(have, blob)?)
    }

    fn beat(&mut self, progress: Progress) -> anyhow::Result<Option<End>> {
        let beat = self.heartbeat_request(progress);
        let end = check_learner(&mut self.stream, &self.weights, &mut self.last_beat, &beat);
        Ok(end)
    }

    /// While the ring is full the push asks `alive` about every 100 ms: the learner must still
    /// own the weight segment and answer heartbeats. A stopped or hung learner answers none:
    /// the actor exits within seconds instead of blocking on a full ring.
    fn push(&mut self, chunk: Vec<u8>, progress: Progress) -> anyhow::Result<Option<End>> {
        let beat = self.heartbeat_request(progress);
        let ShmOutlet {
            stream,
            ring,
            weights,
            last_beat,
            ..
        } = self;
        let mut end = None;
        let mut alive = || {
            end = check_learner(stream, weights, last_beat, &beat);
            end.is_none()
        };
        match ring.push(&chunk, PUSH_TIMEOUT, &mut alive) {
            Ok(_) => Ok(None),
            Err(RingError::PeerGone) => Ok(Some(end.unwrap_or(End::LearnerGone))),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether the run is over for this actor (`None`: go on): the learner must still own the
/// weight segment and, once per [`HEARTBEAT`] (`last_beat`), answer the heartbeat `request`
/// within [`HEARTBEAT_TIMEOUT`] and not say that the run ended.
fn check_learner(
    stream: &mut UnixStream,
    weights: &WeightSubscriber,
    last_beat: &mut Instant,
    request: &Request,
) -> Option<End> {
    if !weights.owner_alive() {
        return Some(End::LearnerGone);
    }
    if last_beat.elapsed() < HEARTBEAT {
        return None;
    }
    *last_beat = Instant::now();
    match call(stream, request) {
        Ok(Response::Ack { shutdown: true }) => Some(End::Shutdown),
        Ok(_) => None,
        Err(_) => Some(End::LearnerGone),
    }
}
