//! The shared-memory transport (one machine): the control socket in the run directory, the
//! weight segment, and one trajectory ring per registered actor incarnation. Every chunk is
//! received exactly once: verified by the run's [`Ledger`], with sequence numbers contiguous
//! per actor incarnation; a dead actor's ring is drained before it is dropped. Actors the
//! supervisor spawned are known dead from its events; an attached `recur-actor --connect` (not
//! the learner's child) from its pid.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::chunk::{Chunk, STATE_TRAILER};
use common::control::Response;
use common::shm::{RingConfig, RingReader, WeightPublisher};

use super::{
    Channel, Expected, Ledger, Received, SavedStates, Stalled, Transport, TransportConfig,
};
use crate::actors::control_server::{ControlServer, Registration};
use crate::actors::lock;
use crate::actors::supervisor::ActorEvent;
use crate::run::dir::RunNames;

struct RingSlot {
    actor_id: u32,
    incarnation: u32,
    /// The registered process (an attached actor is watched by pid).
    pid: u32,
    reader: RingReader,
    /// The actor process has exited: drain what it published, then drop the ring.
    dead: bool,
    /// Its last sign of life: registration, a heartbeat, a chunk.
    last_seen: Instant,
    /// Reported as stalled (once per incarnation).
    stalled: bool,
}

/// The shared-memory [`Transport`]: control socket, weight segment, one ring per registered
/// actor incarnation.
pub struct ShmTransport {
    expected: Expected,
    names: RunNames,
    ring: RingConfig,
    sync: bool,
    weights: WeightPublisher,
    server: ControlServer,
    rings: Vec<RingSlot>,
    buf: Vec<u8>,
    refused: u64,
}

impl ShmTransport {
    /// Publishes `initial_blob` as version 1 and starts the control socket, in the run
    /// directory `names` names (the caller holds its lock); ring slots hold `slot_bytes`.
    pub fn start(
        names: &RunNames,
        config: &TransportConfig,
        expected: Expected,
        slot_bytes: usize,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        let mut weights = WeightPublisher::create(&names.weights_segment(), initial_blob.len())?;
        weights.publish(1, initial_blob)?;
        let server = ControlServer::start(&names.control_socket())?;
        Ok(ShmTransport {
            expected,
            names: names.clone(),
            ring: RingConfig {
                slots: config.slots,
                slot_bytes,
            },
            sync: config.sync,
            weights,
            server,
            rings: Vec::new(),
            buf: Vec::with_capacity(slot_bytes),
            refused: 0,
        })
    }

    /// Answers one registration: a ring for an actor of this run's env and schema (once per
    /// incarnation), with its saved state if `saved` holds one, a refusal naming the mismatch
    /// otherwise.
    fn answer(&mut self, registration: Registration, saved: &SavedStates) {
        let (reg, reply) = (registration.request, registration.reply);
        let (a, i) = (reg.actor_id, reg.incarnation);
        let mismatch = self
            .expected
            .mismatch(
                &reg.env,
                &reg.observation_space,
                &reg.action_space,
                &reg.schema,
            )
            .or_else(|| {
                self.rings
                    .iter()
                    .any(|r| (r.actor_id, r.incarnation) == (a, i))
                    .then(|| format!("actor {a} incarnation {i} is already registered"))
            });
        let ring = self.names.ring_segment(a, i);
        // Sync runs: room after each chunk for the actor's saved state (twice its size now, and
        // 64 KiB, for states that grow).
        let state_room = match self.sync && reg.state_bytes > 0 {
            true => STATE_TRAILER + 2 * reg.state_bytes as usize + (64 << 10),
            false => 0,
        };
        let config = RingConfig {
            slot_bytes: self.ring.slot_bytes + state_room,
            ..self.ring
        };
        let reader = match mismatch {
            Some(reason) => Err(reason),
            None => RingReader::create(&ring, config)
                .map_err(|e| format!("cannot create ring {ring}: {e}")),
        };
        let answer = match reader {
            Ok(reader) => {
                tracing::info!("actor {a}/{i} (pid {}) registered; ring {ring}", reg.pid);
                self.rings.push(RingSlot {
                    actor_id: a,
                    incarnation: i,
                    pid: reg.pid,
                    reader,
                    dead: false,
                    last_seen: Instant::now(),
                    stalled: false,
                });
                let restore = saved.get(&a).cloned();
                if restore.is_some() {
                    tracing::info!("actor {a}/{i} continues from its saved state");
                }
                Response::Registered {
                    ring,
                    weights: self.weights.name().to_string(),
                    sync: self.sync,
                    restore,
                }
            }
            Err(reason) => {
                tracing::error!("refused actor {a}/{i} (pid {}): {reason}", reg.pid);
                self.refused += 1;
                Response::Refused { reason }
            }
        };
        let _ = reply.send(answer);
    }

    /// Receives every published chunk of every ring into `out`, each with the state that rode
    /// after it.
    fn drain(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        for ring in self.rings.iter_mut() {
            loop {
                match ring.reader.try_recv(&mut self.buf) {
                    Ok(Some(len)) => {
                        let (a, i) = (ring.actor_id, ring.incarnation);
                        let (bytes, state) = match Chunk::split_state(&self.buf[..len]) {
                            Ok(split) => split,
                            Err(e) => {
                                ledger.rejected += 1;
                                tracing::error!("actor {a}/{i}: chunk rejected: {e}");
                                continue;
                            }
                        };
                        ring.last_seen = Instant::now();
                        let Some(chunk) = ledger.accept(Channel::Ring, a, i, bytes) else {
                            continue;
                        };
                        let saved = state.map(<[u8]>::to_vec);
                        out.push(Received { chunk, saved });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        ledger.corrupted += 1;
                        tracing::error!("actor {}/{}: {e}", ring.actor_id, ring.incarnation);
                    }
                }
            }
        }
    }

    /// Drops the rings of exited actors (drained by the caller first), noting half-written
    /// slots.
    fn drop_dead(&mut self, ledger: &mut Ledger) {
        self.rings.retain(|ring| {
            if ring.dead && ring.reader.abandoned_slot() {
                tracing::warn!(
                    "actor {}/{} died mid-write: its half-written slot is discarded",
                    ring.actor_id,
                    ring.incarnation
                );
                ledger
                    .incarnation(ring.actor_id, ring.incarnation)
                    .abandoned_slot = true;
            }
            !ring.dead
        });
    }
}

impl Transport for ShmTransport {
    fn register(&mut self, saved: &SavedStates, _: &mut Ledger, _: &mut Vec<Received>) {
        for reg in self.server.registrations.try_iter().collect::<Vec<_>>() {
            self.answer(reg, saved);
        }
    }

    fn receive(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        self.drain(ledger, out);
        // Rings of dead actors were drained by the pass above; drop them.
        self.drop_dead(ledger);
        let mut stats = lock(&self.server.shared.stats);
        stats.chunks = ledger.chunks;
        stats.frames = ledger.frames;
        stats.corrupted = ledger.corrupted;
        stats.policy_version = self.weights.version();
    }

    fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()> {
        Ok(self.weights.publish(version, blob)?)
    }

    fn actors_changed(&mut self, events: &[ActorEvent]) {
        for ring in &mut self.rings {
            ring.dead |= events.iter().any(|e| {
                matches!(*e, ActorEvent::Exited { actor_id, incarnation, .. }
                    if (actor_id, incarnation) == (ring.actor_id, ring.incarnation))
            });
            // An attached actor is not our child: its exit shows as its pid gone (a child of
            // ours stays a zombie until the supervisor reaps it and reports it above).
            if !ring.dead && !pid_alive(ring.pid) {
                tracing::info!(
                    "attached actor {}/{} (pid {}) exited",
                    ring.actor_id,
                    ring.incarnation,
                    ring.pid
                );
                ring.dead = true;
            }
        }
    }

    /// Heartbeats arrive on the control thread (each actor beats every 250 ms while it waits
    /// and after every chunk); chunks through the rings.
    fn stalled(&mut self, bound: Duration) -> Vec<Stalled> {
        let beats = lock(&self.server.shared.heartbeats);
        let mut out = Vec::new();
        for ring in &mut self.rings {
            if let Some(&at) = beats.get(&(ring.actor_id, ring.incarnation)) {
                ring.last_seen = ring.last_seen.max(at);
            }
            let silent = ring.last_seen.elapsed();
            if !ring.dead && !ring.stalled && silent > bound {
                ring.stalled = true;
                out.push(Stalled {
                    actor_id: ring.actor_id,
                    incarnation: ring.incarnation,
                    pid: ring.pid,
                    silent,
                });
            }
        }
        out
    }

    fn busy(&self) -> bool {
        self.rings.iter().any(|r| !r.dead)
    }

    fn waiting_for(&self) -> Vec<String> {
        self.rings
            .iter()
            .filter(|r| !r.dead)
            .map(|r| format!("{}/{} (pid {})", r.actor_id, r.incarnation, r.pid))
            .collect()
    }

    fn stop_requested(&self) -> bool {
        self.server.shared.stop_requested.load(Ordering::SeqCst)
    }

    fn refused(&self) -> u64 {
        self.refused
    }

    fn shut_down(&mut self) {
        self.server.shared.shutdown.store(true, Ordering::SeqCst);
    }

    fn refuse_registrations(&mut self) {
        for reg in self.server.registrations.try_iter() {
            let _ = reg.reply.send(Response::Refused {
                reason: "the run is ending".into(),
            });
        }
    }

    fn abandon(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        self.drain(ledger, out);
        for ring in &mut self.rings {
            ring.dead = true;
        }
    }

    fn close(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        self.abandon(ledger, out);
        self.drop_dead(ledger);
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
