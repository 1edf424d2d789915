//! The shared-memory transport (one machine): the control socket in the run directory, the
//! weight segment, the supervised actor processes, and one trajectory ring per registered actor
//! incarnation. Every chunk is received exactly once: verified, with sequence numbers
//! contiguous per actor incarnation; a dead actor's ring is drained before it is dropped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::chunk::{Chunk, ChunkMeta, ChunkSchema};
use common::control::{schema_mismatch, Response};
use common::shm::{reclaim_stale, RingConfig, RingReader, WeightPublisher};

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
            env: config.env.clone(),
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
        let (supervisor, events) = Supervisor::start(SupervisorConfig {
            program: config.actor_program.clone(),
            args: actor_args(config, server.path()),
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
        })
    }

    /// Answers one registration: a ring for an actor of this run's env and schema (once per
    /// incarnation), a refusal naming the mismatch otherwise.
    fn answer(&mut self, reg: Registration) {
        let summary = &mut self.summary;
        let mut refuse = |reason: String| {
            tracing::error!(
                "refused actor {}/{} (pid {}): {reason}",
                reg.actor_id,
                reg.incarnation,
                reg.pid
            );
            summary.refused_registrations += 1;
            Response::Refused { reason }
        };
        let answer = if reg.env != self.config.env {
            refuse(format!(
                "env {:?} (the run has {:?})",
                reg.env, self.config.env
            ))
        } else if let Some(spec) = self.config.spec.as_ref().filter(|s| {
            s.observation_space != reg.observation_space || s.action_space != reg.action_space
        }) {
            refuse(format!(
                "env {:?}: the actor reports observation space {}, action space {}; the run was \
                 built for observation space {}, action space {}",
                reg.env,
                reg.observation_space.describe(),
                reg.action_space.describe(),
                spec.observation_space.describe(),
                spec.action_space.describe()
            ))
        } else if let Some(reason) = schema_mismatch(&self.schema, &reg.schema) {
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
    }
}

impl Transport for ShmTransport {
    fn register(&mut self) {
        for reg in self.server.registrations.try_iter().collect::<Vec<_>>() {
            self.answer(reg);
        }
    }

    fn receive(&mut self) -> anyhow::Result<Vec<Chunk>> {
        let mut chunks = Vec::new();
        self.drain_rings(&mut chunks);
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
        if self.supervisor.all_done() && self.rings.is_empty() {
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
        self.supervisor.stop_restarting();
        let deadline = Instant::now() + FINISH_GRACE;
        let mut tail = Vec::new();
        loop {
            self.refuse_late_registrations();
            self.drain_rings(&mut tail);
            self.supervise()?;
            if self.supervisor.running().is_empty() && self.rings.iter().all(|r| r.dead) {
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
                tracing::warn!(
                    "actors did not stop within {FINISH_GRACE:?} of the end of the run: killing \
                     the learner's own {own:?}, no longer waiting for attached {attached:?}"
                );
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

fn actor_args(config: &TransportConfig, socket: &Path) -> Vec<String> {
    let mut args = vec!["--connect".to_string(), socket.display().to_string()];
    args.extend(config.actor_args.iter().cloned());
    for (flag, value) in [
        ("--env", config.env.clone()),
        ("--envs", config.envs.to_string()),
        ("--steps", config.steps.to_string()),
        ("--cell", config.cell.name().to_string()),
        ("--hidden", config.hidden.to_string()),
        ("--layers", config.layers.to_string()),
        (
            "--encoder",
            config
                .encoder
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("--seed", config.seed.to_string()),
    ] {
        args.push(flag.into());
        args.push(value);
    }
    args
}
