//! The shared-memory transport (one machine): the control socket in the run directory, the
//! weight segment, the supervised actor processes, and one trajectory ring per registered actor
//! incarnation. Every chunk is received exactly once: verified, with sequence numbers
//! contiguous per actor incarnation; a dead actor's ring is drained before it is dropped.
//! With `listen`, remote actors join over TCP ([`super::tcp`]) beside the local ones: one link
//! per connection, verified and counted like a ring (and duplicates after a reconnect dropped).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::chunk::{Chunk, ChunkMeta, ChunkSchema};
use common::control::{schema_mismatch, Response};
use common::shm::{reclaim_stale, RingConfig, RingReader, WeightPublisher};

use super::tcp::{RemoteLink, RemoteOptions, RemoteRegistration, RemoteServer};
use super::{CollectSummary, IncarnationSummary, Transport, TransportConfig};
use crate::control_server::{ControlServer, Registration};
use crate::run_dir::RunDir;
use crate::signals::StopFlag;
use crate::supervisor::{ActorEvent, Supervisor, SupervisorConfig};

struct RingSlot {
    actor_id: u32,
    incarnation: u32,
    /// The registered process, and whether the supervisor spawned it (an attached
    /// `recur-actor --connect` is not the learner's child: it is watched by pid).
    pid: u32,
    supervised: bool,
    reader: RingReader,
    /// The actor process has exited: drain what it published, then drop the ring.
    dead: bool,
}

/// A registered remote actor's connection (its incarnation's chunks arrive through it).
struct Link {
    actor_id: u32,
    incarnation: u32,
    peer: String,
    link: RemoteLink,
    /// No chunk has arrived through this connection yet (the first one is logged).
    fresh: bool,
}

type Incarnations = BTreeMap<(u32, u32), IncarnationSummary>;

/// The shared-memory [`Transport`]: control socket, weight segment, supervised actors, one ring
/// per registered actor incarnation.
pub struct ShmTransport {
    config: TransportConfig,
    schema: ChunkSchema,
    run_dir: RunDir,
    slot_bytes: usize,
    weights: WeightPublisher,
    server: ControlServer,
    supervisor: Supervisor,
    rings: Vec<RingSlot>,
    incarnations: Incarnations,
    buf: Vec<u8>,
    summary: CollectSummary,
    start: Instant,
    signals: StopFlag,
    /// The last exit of an actor process (named when every actor is gone).
    last_exit: Option<String>,
    /// Sync runs: per actor id, the state a registering actor continues from.
    actor_states: BTreeMap<u32, Vec<u8>>,
    /// The TCP listener for remote actors, and their registered connections.
    remote: Option<RemoteServer>,
    links: Vec<Link>,
    /// Registrations refused by this thread (the listener counts its own).
    refused_here: u64,
    /// Chunks taken from a replaced connection while answering a reconnect (returned by the
    /// next `receive`).
    early: Vec<Chunk>,
}

/// How long the end of a run waits for its actors to stop before it kills its own children and
/// leaves attached actors (which it does not own) to notice on their own.
const FINISH_GRACE: Duration = Duration::from_secs(10);

/// Every actor of the run stopped for good (the supervisor gave up on them): the run cannot
/// collect any more. A run loop ends the run (final checkpoint, summary) and reports it.
#[derive(Debug, thiserror::Error)]
#[error(
    "every actor stopped for good ({frames} frames had arrived); the last actor exit: {last_exit}"
)]
pub struct ActorsGone {
    pub frames: u64,
    pub last_exit: String,
}

impl ShmTransport {
    /// Creates the run directory, reclaims stale segments, publishes `initial_blob` as
    /// version 1, starts the control socket and the actors.
    pub fn start(
        config: &TransportConfig,
        schema: ChunkSchema,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        let run_dir = RunDir::create(&config.run_dir, false)?;
        Self::start_in(run_dir, config, schema, initial_blob)
    }

    /// [`start`](Self::start) in a run directory the caller already holds (locked).
    pub fn start_in(
        run_dir: RunDir,
        config: &TransportConfig,
        schema: ChunkSchema,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        let start = Instant::now();
        let signals = crate::signals::install()?;
        // Segments of runs whose owner died are removed before this run creates its own.
        let reclaimed_segments = reclaim_stale();
        for name in &reclaimed_segments {
            tracing::warn!("removed shared-memory segment {name} left by a crashed run");
        }
        let mut summary = CollectSummary {
            env: config.actor_args.env.clone(),
            reclaimed_segments,
            ..Default::default()
        };
        let mut weights = WeightPublisher::create(&run_dir.weights_segment(), initial_blob.len())?;
        weights.publish(1, initial_blob)?;
        summary.policy_version = 1;
        let slot_bytes = Chunk::zeros(&schema, ChunkMeta::new(0, 0, 0, 0))
            .encode(&schema)?
            .len();
        let server = ControlServer::start(&run_dir.control_socket())?;
        let remote = match &config.listen {
            Some(listen) => {
                let token = run_dir.token()?;
                let remote = RemoteServer::start(RemoteOptions {
                    listen: listen.clone(),
                    token,
                    args: config.actor_args.clone(),
                    chunk_bytes: slot_bytes,
                    weight_bytes: initial_blob.len(),
                    window: config.slots,
                    local_actors: config.actors,
                })?;
                remote.publish(initial_blob);
                let addr = format!("tcp://{}", remote.local_addr());
                tracing::info!(
                    "remote actors: listening on {addr} (token in {})",
                    run_dir.path().join("token").display()
                );
                summary.listen = Some(addr);
                Some(remote)
            }
            None => None,
        };
        let (supervisor, events) = Supervisor::start(SupervisorConfig {
            program: config.actor_program.clone(),
            connect: server.path().to_path_buf(),
            actor_args: config.actor_args.clone(),
            actors: config.actors,
            max_restarts: config.max_restarts,
            restart_window: config.restart_window,
            backoff: config.restart_backoff,
        })
        .with_context(|| format!("starting actors with {}", config.actor_program.display()))?;
        log_events(&events, &mut summary);
        Ok(ShmTransport {
            config: config.clone(),
            schema,
            run_dir,
            slot_bytes,
            weights,
            server,
            supervisor,
            rings: Vec::new(),
            incarnations: BTreeMap::new(),
            buf: Vec::with_capacity(slot_bytes),
            summary,
            start,
            signals,
            last_exit: None,
            actor_states: config.restore.clone(),
            remote,
            links: Vec::new(),
            refused_here: 0,
            early: Vec::new(),
        })
    }

    /// Answers one registration: a ring for an actor of this run's env and schema (once per
    /// incarnation), a refusal naming the mismatch otherwise.
    fn answer(&mut self, reg: Registration) {
        let mismatch = self.mismatch(
            &reg.env,
            &reg.observation_space,
            &reg.action_space,
            &reg.schema,
        );
        let refused_here = &mut self.refused_here;
        let mut refuse = |reason: String| {
            tracing::error!(
                "refused actor {}/{} (pid {}): {reason}",
                reg.actor_id,
                reg.incarnation,
                reg.pid
            );
            *refused_here += 1;
            Response::Refused { reason }
        };
        let answer = if let Some(reason) = mismatch {
            refuse(reason)
        } else if self
            .rings
            .iter()
            .any(|r| r.actor_id == reg.actor_id && r.incarnation == reg.incarnation)
        {
            refuse(format!(
                "actor {} incarnation {} is already registered",
                reg.actor_id, reg.incarnation
            ))
        } else {
            let name = self.run_dir.ring_segment(reg.actor_id, reg.incarnation);
            match RingReader::create(
                &name,
                RingConfig {
                    slots: self.config.slots,
                    slot_bytes: self.slot_bytes,
                },
            ) {
                Ok(reader) => {
                    tracing::info!(
                        "actor {}/{} (pid {}) registered; ring {name}",
                        reg.actor_id,
                        reg.incarnation,
                        reg.pid
                    );
                    let supervised = self.supervisor.running().iter().any(|&(a, i, pid)| {
                        (a, i, pid) == (reg.actor_id, reg.incarnation, reg.pid)
                    });
                    self.rings.push(RingSlot {
                        actor_id: reg.actor_id,
                        incarnation: reg.incarnation,
                        pid: reg.pid,
                        supervised,
                        reader,
                        dead: false,
                    });
                    let restore = self.actor_states.get(&reg.actor_id).cloned();
                    if restore.is_some() {
                        tracing::info!(
                            "actor {}/{} continues from its saved state",
                            reg.actor_id,
                            reg.incarnation
                        );
                    }
                    Response::Registered {
                        ring: name,
                        weights: self.weights.name().to_string(),
                        sync: self.config.sync,
                        restore,
                    }
                }
                Err(e) => refuse(format!("cannot create ring {name}: {e}")),
            }
        };
        let _ = reg.reply.send(answer);
    }

    /// Why an actor of `env` with these spaces and chunk schema cannot join the run (`None`:
    /// it can).
    fn mismatch(
        &self,
        env: &str,
        observation_space: &common::envs::Space,
        action_space: &common::envs::Space,
        schema: &ChunkSchema,
    ) -> Option<String> {
        if env != self.config.actor_args.env {
            return Some(format!(
                "env {env:?} (the run has {:?})",
                self.config.actor_args.env
            ));
        }
        if let Some(spec) = self.config.spec.as_ref().filter(|s| {
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

    /// Answers a remote actor's registration: checked like a local one's; a reconnect of a
    /// live incarnation replaces its old connection, whose queued chunks are taken first, and
    /// continues after the last chunk received.
    fn answer_remote(&mut self, reg: RemoteRegistration, out: &mut Vec<Chunk>) {
        let who = format!(
            "remote actor {}/{} (pid {} on {:?}, {})",
            reg.actor_id, reg.incarnation, reg.pid, reg.host, reg.peer
        );
        if let Some(reason) = self.mismatch(
            &reg.env,
            &reg.observation_space,
            &reg.action_space,
            &reg.schema,
        ) {
            tracing::error!("refused {who}: {reason}");
            self.refused_here += 1;
            let _ = reg.reply.send(Err(reason));
            return;
        }
        let key = (reg.actor_id, reg.incarnation);
        // The old connection of a reconnecting actor: everything it queued is taken before the
        // next sequence number is chosen, then it is closed (its late frames go nowhere).
        if let Some(i) = self
            .links
            .iter()
            .position(|l| (l.actor_id, l.incarnation) == key)
        {
            let mut old = self.links.swap_remove(i);
            while let Ok(bytes) = old.link.chunks.try_recv() {
                if let Some(chunk) = self.accept_remote(key.0, key.1, &bytes) {
                    out.push(chunk);
                }
            }
        }
        let inc = incarnation(&mut self.incarnations, key.0, key.1);
        inc.remote = Some(reg.peer.to_string());
        if reg.resume {
            inc.reconnects += 1;
        }
        let next_seq = inc.last_seq.map_or(0, |s| s + 1);
        tracing::info!(
            "{who} {} at chunk {next_seq}",
            if reg.resume {
                "reconnected; continuing"
            } else {
                "registered; starting"
            }
        );
        if reg.reply.send(Ok(next_seq)).is_ok() {
            self.links.push(Link {
                actor_id: key.0,
                incarnation: key.1,
                peer: reg.peer.to_string(),
                link: reg.link,
                fresh: true,
            });
        }
    }

    /// Verifies one chunk of a remote actor: checksum and schema, the sender's stamp, its
    /// sequence number (a chunk already received is a duplicate: counted and dropped).
    fn accept_remote(&mut self, actor_id: u32, incarnation_id: u32, bytes: &[u8]) -> Option<Chunk> {
        let inc = incarnation(&mut self.incarnations, actor_id, incarnation_id);
        let chunk = match Chunk::decode_verified(bytes, &self.schema) {
            Ok(chunk) => chunk,
            Err(e) => {
                self.summary.rejected += 1;
                tracing::error!("remote actor {actor_id}/{incarnation_id}: chunk rejected: {e}");
                return None;
            }
        };
        if (chunk.meta.actor_id, chunk.meta.incarnation) != (actor_id, incarnation_id) {
            inc.foreign += 1;
            self.summary.rejected += 1;
            tracing::error!(
                "the link of remote actor {actor_id}/{incarnation_id} delivered a chunk stamped \
                 {}/{}: dropped",
                chunk.meta.actor_id,
                chunk.meta.incarnation
            );
            return None;
        }
        if inc.last_seq.is_some_and(|last| chunk.meta.seq <= last) {
            inc.duplicates += 1;
            tracing::error!(
                "remote actor {actor_id}/{incarnation_id}: chunk seq {} received again: dropped",
                chunk.meta.seq
            );
            return None;
        }
        let expected = inc.last_seq.map_or(0, |s| s + 1);
        if chunk.meta.seq != expected {
            inc.seq_errors += 1;
            tracing::error!(
                "remote actor {actor_id}/{incarnation_id}: chunk seq {} where {expected} was \
                 expected",
                chunk.meta.seq
            );
        }
        inc.last_seq = Some(chunk.meta.seq);
        inc.chunks += 1;
        inc.bytes += bytes.len() as u64;
        self.summary.chunks += 1;
        self.summary.frames += self.schema.frames() as u64;
        Some(chunk)
    }

    /// Receives every queued chunk of every remote link into `out`; drops the links whose
    /// connection ended (after taking what they queued).
    fn drain_links(&mut self, out: &mut Vec<Chunk>) {
        use tokio::sync::mpsc::error::TryRecvError;
        let mut links = std::mem::take(&mut self.links);
        links.retain_mut(|l| loop {
            match l.link.chunks.try_recv() {
                Ok(bytes) => {
                    if let Some(chunk) = self.accept_remote(l.actor_id, l.incarnation, &bytes) {
                        if std::mem::take(&mut l.fresh) {
                            tracing::info!(
                                "remote actor {}/{}: chunk {} received through {}",
                                l.actor_id,
                                l.incarnation,
                                chunk.meta.seq,
                                l.peer
                            );
                        }
                        out.push(chunk);
                    }
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => {
                    tracing::info!(
                        "remote actor {}/{} ({}) disconnected",
                        l.actor_id,
                        l.incarnation,
                        l.peer
                    );
                    break false;
                }
            }
        });
        // A reconnect answered meanwhile may have added a link.
        links.append(&mut self.links);
        self.links = links;
        if let Some(remote) = &self.remote {
            self.summary.refused_registrations = self.refused_here + remote.refused();
        } else {
            self.summary.refused_registrations = self.refused_here;
        }
    }

    /// Receives every published chunk of every ring into `out`.
    fn drain_rings(&mut self, out: &mut Vec<Chunk>) {
        for ring in self.rings.iter_mut() {
            loop {
                match ring.reader.try_recv(&mut self.buf) {
                    Ok(Some(len)) => {
                        let inc =
                            incarnation(&mut self.incarnations, ring.actor_id, ring.incarnation);
                        let chunk = match Chunk::decode_verified(&self.buf[..len], &self.schema) {
                            Ok(chunk) => chunk,
                            Err(e) => {
                                self.summary.rejected += 1;
                                tracing::error!(
                                    "actor {}/{}: chunk rejected: {e}",
                                    ring.actor_id,
                                    ring.incarnation
                                );
                                continue;
                            }
                        };
                        if chunk.meta.actor_id != ring.actor_id
                            || chunk.meta.incarnation != ring.incarnation
                        {
                            inc.foreign += 1;
                            self.summary.rejected += 1;
                            tracing::error!(
                                "ring of actor {}/{} delivered a chunk stamped {}/{}: dropped",
                                ring.actor_id,
                                ring.incarnation,
                                chunk.meta.actor_id,
                                chunk.meta.incarnation
                            );
                            continue;
                        }
                        let expected = inc.last_seq.map_or(0, |s| s + 1);
                        if chunk.meta.seq != expected {
                            inc.seq_errors += 1;
                            tracing::error!(
                                "actor {}/{}: chunk seq {} where {expected} was expected",
                                ring.actor_id,
                                ring.incarnation,
                                chunk.meta.seq
                            );
                        }
                        inc.last_seq = Some(chunk.meta.seq);
                        inc.chunks += 1;
                        inc.bytes += len as u64;
                        self.summary.chunks += 1;
                        self.summary.frames += self.schema.frames() as u64;
                        out.push(chunk);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.summary.corrupted += 1;
                        tracing::error!("actor {}/{}: {e}", ring.actor_id, ring.incarnation);
                    }
                }
            }
        }
    }

    /// Reaps and restarts actors; marks the rings of those that exited.
    fn supervise(&mut self) -> anyhow::Result<()> {
        let events = self.supervisor.poll()?;
        self.actors_changed(&events);
        Ok(())
    }

    fn actors_changed(&mut self, events: &[ActorEvent]) {
        for ring in &mut self.rings {
            ring.dead |= events.iter().any(|e| {
                matches!(*e, ActorEvent::Exited { actor_id, incarnation, .. }
                    if (actor_id, incarnation) == (ring.actor_id, ring.incarnation))
            });
            // An attached actor is not our child: its exit shows as its pid gone.
            if !ring.supervised && !ring.dead && !pid_alive(ring.pid) {
                tracing::info!(
                    "attached actor {}/{} (pid {}) exited",
                    ring.actor_id,
                    ring.incarnation,
                    ring.pid
                );
                ring.dead = true;
            }
        }
        for e in events {
            if let ActorEvent::Exited {
                actor_id,
                incarnation,
                status,
            } = e
            {
                self.last_exit = Some(format!("actor {actor_id}/{incarnation}: {status}"));
            }
        }
        log_events(events, &mut self.summary);
    }

    /// Refuses registrations that arrive while the run ends.
    fn refuse_late_registrations(&mut self) {
        for reg in self.server.registrations.try_iter() {
            let _ = reg.reply.send(Response::Refused {
                reason: "the run is ending".into(),
            });
        }
        if let Some(remote) = &self.remote {
            for reg in remote.registrations.try_iter() {
                let _ = reg.reply.send(Err("the run is ending".into()));
            }
        }
    }
}

impl Transport for ShmTransport {
    fn register(&mut self) {
        for reg in self.server.registrations.try_iter().collect::<Vec<_>>() {
            self.answer(reg);
        }
        let remote: Vec<RemoteRegistration> = match &self.remote {
            Some(r) => r.registrations.try_iter().collect(),
            None => Vec::new(),
        };
        let mut chunks = Vec::new();
        for reg in remote {
            self.answer_remote(reg, &mut chunks);
        }
        self.early.extend(chunks);
    }

    fn receive(&mut self) -> anyhow::Result<Vec<Chunk>> {
        let mut chunks = std::mem::take(&mut self.early);
        self.drain_rings(&mut chunks);
        self.drain_links(&mut chunks);
        // Rings of dead actors were drained by the pass above; drop them.
        let incarnations = &mut self.incarnations;
        self.rings.retain(|ring| {
            if ring.dead {
                report_abandoned(incarnations, ring);
            }
            !ring.dead
        });
        self.supervise()?;
        {
            let mut stats = self
                .server
                .shared
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            stats.chunks = self.summary.chunks;
            stats.frames = self.summary.frames;
            stats.corrupted = self.summary.corrupted;
            stats.policy_version = self.summary.policy_version;
        }
        // Remote actors may join at any time: a listening run never runs out of actors.
        if self.supervisor.all_done() && self.rings.is_empty() && self.remote.is_none() {
            return Err(ActorsGone {
                frames: self.summary.frames,
                last_exit: self
                    .last_exit
                    .clone()
                    .unwrap_or_else(|| "none recorded".into()),
            }
            .into());
        }
        Ok(chunks)
    }

    fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()> {
        self.weights.publish(version, blob)?;
        if let Some(remote) = &self.remote {
            remote.publish(blob);
        }
        self.summary.policy_version = version;
        Ok(())
    }

    fn admit_actor_state(
        &mut self,
        actor_id: u32,
        incarnation: u32,
        version: u64,
    ) -> Option<Vec<u8>> {
        let mut snapshots = self
            .server
            .shared
            .snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match snapshots.remove(&actor_id) {
            Some((i, v, state)) if (i, v) == (incarnation, version) => {
                self.actor_states.insert(actor_id, state.clone());
                Some(state)
            }
            other => {
                // A snapshot of another chunk stays for its own chunk.
                if let Some(other) = other {
                    snapshots.insert(actor_id, other);
                }
                self.actor_states.remove(&actor_id);
                None
            }
        }
    }

    fn stats(&self) -> &CollectSummary {
        &self.summary
    }

    fn stop_requested(&self) -> bool {
        self.signals.raised() || self.server.shared.stop_requested.load(Ordering::SeqCst)
    }

    /// Every registered actor (spawned or attached) is told to stop at its next heartbeat; their
    /// rings are drained as they exit. After [`FINISH_GRACE`] the learner kills the actors it
    /// spawned and stops waiting for attached ones (not its children: never killed); then the
    /// segments and the socket are removed.
    fn finish(mut self, stopped_by_request: bool) -> anyhow::Result<(CollectSummary, Vec<Chunk>)> {
        self.summary.stopped_by_request = stopped_by_request;
        self.server.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(remote) = &self.remote {
            remote.shut_down();
        }
        self.supervisor.stop_restarting();
        let deadline = Instant::now() + FINISH_GRACE;
        let mut tail = std::mem::take(&mut self.early);
        loop {
            self.refuse_late_registrations();
            self.drain_rings(&mut tail);
            self.drain_links(&mut tail);
            self.supervise()?;
            if self.supervisor.running().is_empty()
                && self.rings.iter().all(|r| r.dead)
                && self.links.is_empty()
            {
                // The last pass: drain every ring, report half-written slots, drop the rings.
                self.drain_rings(&mut tail);
                for ring in self.rings.drain(..) {
                    report_abandoned(&mut self.incarnations, &ring);
                }
                break;
            }
            if Instant::now() >= deadline {
                let own: Vec<u32> = self.supervisor.running().iter().map(|r| r.2).collect();
                let attached: Vec<u32> = self
                    .rings
                    .iter()
                    .filter(|r| !r.supervised && !r.dead)
                    .map(|r| r.pid)
                    .collect();
                let remote: Vec<String> = self
                    .links
                    .iter()
                    .map(|l| format!("{}/{} ({})", l.actor_id, l.incarnation, l.peer))
                    .collect();
                tracing::warn!(
                    "actors did not stop within {FINISH_GRACE:?} of the end of the run: killing \
                     the learner's own {own:?}, no longer waiting for attached {attached:?} \
                     and remote {remote:?}"
                );
                self.drain_links(&mut tail);
                self.links.clear();
                let events = self.supervisor.shutdown(Duration::from_secs(1));
                self.actors_changed(&events);
                self.drain_rings(&mut tail);
                for ring in &mut self.rings {
                    ring.dead = true;
                }
                continue;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut summary = std::mem::take(&mut self.summary);
        summary.incarnations = std::mem::take(&mut self.incarnations)
            .into_values()
            .collect();
        summary.seconds = self.start.elapsed().as_secs_f64();
        Ok((summary, tail))
    }
}

fn log_events(events: &[ActorEvent], summary: &mut CollectSummary) {
    for e in events {
        match e {
            ActorEvent::Started {
                actor_id,
                incarnation,
                pid,
            } => {
                if *incarnation > 0 {
                    summary.restarts += 1;
                }
                tracing::info!("actor {actor_id}/{incarnation} started (pid {pid})");
            }
            ActorEvent::Exited {
                actor_id,
                incarnation,
                status,
            } => tracing::info!("actor {actor_id}/{incarnation} exited: {status}"),
            ActorEvent::GaveUp { actor_id, restarts } => {
                tracing::error!("actor {actor_id} died {restarts} times; not restarting it")
            }
        }
    }
}

/// Logs and records a ring whose writer died with a slot half written (never consumed).
fn report_abandoned(incarnations: &mut Incarnations, ring: &RingSlot) {
    if ring.reader.abandoned_slot() {
        tracing::warn!(
            "actor {}/{} died mid-write: its half-written slot is discarded",
            ring.actor_id,
            ring.incarnation
        );
        incarnation(incarnations, ring.actor_id, ring.incarnation).abandoned_slot = true;
    }
}

/// Whether process `pid` exists (a zombie counts: the supervisor reaps its own children).
fn pid_alive(pid: u32) -> bool {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    pid != 0
        && !matches!(
            kill(Pid::from_raw(pid as i32), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

fn incarnation(all: &mut Incarnations, actor_id: u32, incarnation: u32) -> &mut IncarnationSummary {
    all.entry((actor_id, incarnation))
        .or_insert_with(|| IncarnationSummary {
            actor_id,
            incarnation,
            ..Default::default()
        })
}
