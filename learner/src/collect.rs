//! The learner's run loop over the transport: start the control socket and the weight segment,
//! supervise the actor processes, create each registered actor's trajectory ring, and receive
//! every chunk exactly once (verified, sequence numbers contiguous per actor incarnation).
//! `recur-learner collect` runs it on its own; training (PPO) consumes the same stream.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::chunk::{Chunk, ChunkMeta, ChunkSchema};
use common::control::{schema_mismatch, Response};
use common::dataset::DatasetWriter;
use common::policy::{chunk_schema, policy_config_for};
use common::recurrent::CellKind;
use common::rollout::init_policy;
use common::shm::{reclaim_stale, unique_run_id, RingConfig, RingReader, WeightPublisher};
use common::weights::to_blob;
use serde::Serialize;

use crate::control_server::{ControlServer, Registration};
use crate::supervisor::{ActorEvent, Supervisor, SupervisorConfig};

/// What a collection run does.
#[derive(Clone, Debug)]
pub struct CollectConfig {
    pub env: String,
    pub actors: u32,
    pub envs: usize,
    pub steps: usize,
    pub cell: CellKind,
    pub hidden: usize,
    /// Recurrent layers and encoder widths of the actors' policy (must match the learner's).
    pub layers: usize,
    pub encoder: Vec<usize>,
    pub seed: u64,
    /// Stop after this many frames in total (whole chunks).
    pub frames: u64,
    pub run_dir: PathBuf,
    /// The `recur-actor` executable.
    pub actor_program: PathBuf,
    /// Ring slots per actor.
    pub slots: usize,
    /// Publish the weights again (next version) every this many chunks; 0 = once.
    pub publish_every: u64,
    pub max_restarts: u32,
    /// Also write every received chunk to this new dataset directory.
    pub save_replay: Option<PathBuf>,
    /// Extra actor arguments (exploration).
    pub actor_args: Vec<String>,
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
}

/// The outcome of a run, written to `RUN_DIR/summary.json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CollectSummary {
    pub env: String,
    pub chunks: u64,
    pub frames: u64,
    pub corrupted: u64,
    pub rejected: u64,
    pub refused_registrations: u64,
    pub restarts: u64,
    pub policy_version: u64,
    pub reclaimed_segments: Vec<String>,
    pub incarnations: Vec<IncarnationSummary>,
    pub seconds: f64,
    pub stopped_by_request: bool,
}

struct RingSlot {
    actor_id: u32,
    incarnation: u32,
    reader: RingReader,
    /// The actor process has exited: drain what it published, then drop the ring.
    dead: bool,
}

/// A running transport session: control socket, weight segment, supervised actors, one ring
/// per registered actor incarnation. [`Transport::poll`] returns verified chunks;
/// [`Transport::publish`] broadcasts weights; [`Transport::finish`] ends the run cleanly.
pub struct Transport {
    config: CollectConfig,
    schema: ChunkSchema,
    run_id: String,
    slot_bytes: usize,
    weights: WeightPublisher,
    replay: Option<DatasetWriter>,
    server: ControlServer,
    supervisor: Supervisor,
    rings: Vec<RingSlot>,
    incarnations: Incarnations,
    buf: Vec<u8>,
    pub summary: CollectSummary,
    start: Instant,
}

impl Transport {
    /// Reclaims stale segments, publishes `initial_blob` as version 1, starts the control
    /// socket and the actors.
    pub fn start(
        config: &CollectConfig,
        schema: ChunkSchema,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let start = Instant::now();
        std::fs::create_dir_all(&config.run_dir)
            .with_context(|| format!("creating run directory {}", config.run_dir.display()))?;
        std::fs::set_permissions(&config.run_dir, std::fs::Permissions::from_mode(0o700))?;
        let mut summary = CollectSummary {
            env: config.env.clone(),
            ..Default::default()
        };
        summary.reclaimed_segments = reclaim_stale();
        for name in &summary.reclaimed_segments {
            tracing::warn!("removed shared-memory segment {name} left by a crashed run");
        }
        let run_id = unique_run_id();
        let mut weights =
            WeightPublisher::create(&format!("recur-{run_id}-weights"), initial_blob.len())?;
        weights.publish(1, initial_blob)?;
        summary.policy_version = 1;
        let slot_bytes = encoded_chunk_len(&schema)?;
        let replay = match &config.save_replay {
            Some(dir) => Some(DatasetWriter::create(dir, &config.env, &schema)?),
            None => None,
        };
        let server = ControlServer::start(&config.run_dir.join("control.sock"))?;
        let (supervisor, events) = Supervisor::start(SupervisorConfig {
            program: config.actor_program.clone(),
            args: actor_args(config, server.path()),
            actors: config.actors,
            max_restarts: config.max_restarts,
            backoff: Duration::from_millis(200),
        })
        .with_context(|| format!("starting actors with {}", config.actor_program.display()))?;
        log_events(&events, &mut summary);
        Ok(Transport {
            config: config.clone(),
            schema,
            run_id,
            slot_bytes,
            weights,
            replay,
            server,
            supervisor,
            rings: Vec::new(),
            incarnations: BTreeMap::new(),
            buf: Vec::with_capacity(slot_bytes),
            summary,
            start,
        })
    }

    pub fn schema(&self) -> &ChunkSchema {
        &self.schema
    }

    /// A signal or a control-plane request asked the run to stop.
    pub fn stop_requested(&self) -> bool {
        self.server.shared.stop_requested.load(Ordering::SeqCst)
    }

    /// Handles registrations and actor exits, and returns the chunks received since the last
    /// call (verified, in arrival order per ring).
    pub fn poll(&mut self) -> anyhow::Result<Vec<Chunk>> {
        for reg in self.server.registrations.try_iter().collect::<Vec<_>>() {
            register(
                reg,
                &self.schema,
                &self.run_id,
                self.slot_bytes,
                &self.config,
                &mut self.rings,
                &mut self.summary,
                self.weights.name(),
            );
        }
        let mut chunks = Vec::new();
        self.receive(&mut chunks)?;
        // Rings of dead actors were drained by the pass above; drop them.
        let incarnations = &mut self.incarnations;
        self.rings.retain(|ring| {
            if ring.dead {
                report_abandoned(incarnations, ring);
            }
            !ring.dead
        });
        let events = self.supervisor.poll()?;
        mark_dead(&events, &mut self.rings);
        log_events(&events, &mut self.summary);
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
            anyhow::bail!(
                "every actor stopped for good ({} frames had arrived)",
                self.summary.frames
            );
        }
        Ok(chunks)
    }

    /// Receives every published chunk of every ring into `out`; returns whether anything
    /// arrived.
    fn receive(&mut self, out: &mut Vec<Chunk>) -> anyhow::Result<bool> {
        let mut received = false;
        for ring in self.rings.iter_mut() {
            loop {
                match ring.reader.try_recv(&mut self.buf) {
                    Ok(Some(len)) => {
                        received = true;
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
                        if let Some(w) = &mut self.replay {
                            w.append(&chunk)?;
                        }
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
        Ok(received)
    }

    /// The last pass of a run: drain every ring, report half-written slots, drop the rings.
    fn drain_final(&mut self, out: &mut Vec<Chunk>) -> anyhow::Result<()> {
        self.receive(out)?;
        for ring in self.rings.drain(..) {
            report_abandoned(&mut self.incarnations, &ring);
        }
        Ok(())
    }

    /// Broadcasts a new weight version (actors adopt it at their next chunk boundary).
    pub fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()> {
        self.weights.publish(version, blob)?;
        self.summary.policy_version = version;
        Ok(())
    }

    /// Ends the run: actors stop at their next heartbeat, their rings are drained (the chunks
    /// are returned), segments and socket are removed; the summary is written to the run
    /// directory and returned.
    pub fn finish(
        mut self,
        stopped_by_request: bool,
    ) -> anyhow::Result<(CollectSummary, Vec<Chunk>)> {
        self.summary.stopped_by_request = stopped_by_request;
        self.server.shared.shutdown.store(true, Ordering::SeqCst);
        self.supervisor.stop_restarting();
        let ending = Instant::now();
        let mut tail = Vec::new();
        loop {
            self.receive(&mut tail)?;
            let events = self.supervisor.poll()?;
            mark_dead(&events, &mut self.rings);
            log_events(&events, &mut self.summary);
            if self.supervisor.running().is_empty() && self.rings.iter().all(|r| r.dead) {
                self.drain_final(&mut tail)?;
                break;
            }
            if ending.elapsed() > Duration::from_secs(10) {
                tracing::warn!(
                    "actors did not stop within 10 s of the end of the run; killing them"
                );
                let events = self.supervisor.shutdown(Duration::from_secs(1));
                mark_dead(&events, &mut self.rings);
                log_events(&events, &mut self.summary);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut summary = std::mem::take(&mut self.summary);
        summary.incarnations = std::mem::take(&mut self.incarnations)
            .into_values()
            .collect();
        summary.seconds = self.start.elapsed().as_secs_f64();
        let text = serde_json::to_string_pretty(&summary)?;
        std::fs::write(self.config.run_dir.join("summary.json"), text + "\n")?;
        Ok((summary, tail))
    }
}

/// Runs actors until `config.frames` frames arrived (or a stop request); every received
/// chunk goes to `on_chunk`; returns the summary.
pub fn run_collect(
    config: &CollectConfig,
    mut on_chunk: impl FnMut(&Chunk),
) -> anyhow::Result<CollectSummary> {
    let policy_config = policy_config_for(&config.env)?
        .with_cell(config.cell)
        .with_hidden_size(config.hidden)
        .with_num_layers(config.layers)
        .with_encoder(config.encoder.clone());
    let schema = chunk_schema(&policy_config, config.envs, config.steps);
    let policy = init_policy(&policy_config, config.seed)?;
    let mut transport = Transport::start(config, schema, &to_blob(&policy, 1))?;
    let mut next_publish = config.publish_every;
    while transport.summary.frames < config.frames && !transport.stop_requested() {
        let chunks = transport.poll()?;
        chunks.iter().for_each(&mut on_chunk);
        let chunks_so_far = transport.summary.chunks;
        if config.publish_every > 0 && chunks_so_far >= next_publish {
            next_publish = chunks_so_far + config.publish_every;
            let version = transport.summary.policy_version + 1;
            transport.publish(version, &to_blob(&policy, version))?;
        }
        if chunks.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let stopped = transport.stop_requested();
    let (summary, tail) = transport.finish(stopped)?;
    tail.iter().for_each(&mut on_chunk);
    Ok(summary)
}

#[allow(clippy::too_many_arguments)]
fn register(
    reg: Registration,
    schema: &ChunkSchema,
    run_id: &str,
    slot_bytes: usize,
    config: &CollectConfig,
    rings: &mut Vec<RingSlot>,
    summary: &mut CollectSummary,
    weights: &str,
) {
    let refuse = |reason: String, summary: &mut CollectSummary| {
        tracing::error!(
            "refused actor {}/{} (pid {}): {reason}",
            reg.actor_id,
            reg.incarnation,
            reg.pid
        );
        summary.refused_registrations += 1;
        Response::Refused { reason }
    };
    let answer = if reg.env != config.env {
        refuse(
            format!("env {:?} (the run has {:?})", reg.env, config.env),
            summary,
        )
    } else if let Some(reason) = schema_mismatch(schema, &reg.schema) {
        refuse(reason, summary)
    } else if rings
        .iter()
        .any(|r| r.actor_id == reg.actor_id && r.incarnation == reg.incarnation)
    {
        refuse(
            format!(
                "actor {} incarnation {} is already registered",
                reg.actor_id, reg.incarnation
            ),
            summary,
        )
    } else {
        let name = format!("recur-{run_id}-ring-{}-{}", reg.actor_id, reg.incarnation);
        match RingReader::create(
            &name,
            RingConfig {
                slots: config.slots,
                slot_bytes,
            },
        ) {
            Ok(reader) => {
                tracing::info!(
                    "actor {}/{} (pid {}) registered; ring {name}",
                    reg.actor_id,
                    reg.incarnation,
                    reg.pid
                );
                rings.push(RingSlot {
                    actor_id: reg.actor_id,
                    incarnation: reg.incarnation,
                    reader,
                    dead: false,
                });
                Response::Registered {
                    ring: name,
                    weights: weights.to_string(),
                }
            }
            Err(e) => refuse(format!("cannot create ring {name}: {e}"), summary),
        }
    };
    let _ = reg.reply.send(answer);
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

fn mark_dead(events: &[ActorEvent], rings: &mut [RingSlot]) {
    for e in events {
        if let ActorEvent::Exited {
            actor_id,
            incarnation,
            ..
        } = e
        {
            for ring in rings
                .iter_mut()
                .filter(|r| r.actor_id == *actor_id && r.incarnation == *incarnation)
            {
                ring.dead = true;
            }
        }
    }
}

type Incarnations = BTreeMap<(u32, u32), IncarnationSummary>;

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

fn incarnation(all: &mut Incarnations, actor_id: u32, incarnation: u32) -> &mut IncarnationSummary {
    all.entry((actor_id, incarnation))
        .or_insert_with(|| IncarnationSummary {
            actor_id,
            incarnation,
            ..Default::default()
        })
}

/// Bytes of one encoded chunk of `schema` (the ring's slot size).
fn encoded_chunk_len(schema: &ChunkSchema) -> anyhow::Result<usize> {
    let meta = ChunkMeta::new(0, 0, 0, 0);
    Ok(Chunk::zeros(schema, meta).encode(schema)?.len())
}

fn actor_args(config: &CollectConfig, socket: &Path) -> Vec<String> {
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
                .map(|w| w.to_string())
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
