//! The run's actors: the supervisor of the learner's own actor processes and the transports
//! every actor reaches the learner through ([`ShmTransport`] always, [`TcpTransport`] with
//! `listen`), fanned in: registrations answered, chunks received into one [`Ledger`], weights
//! published to all, and at the end every actor stopped and drained. The run owns this; the
//! transports own only their medium.
//!
//! - [`args`]: what the actors run ([`args::actor_args`]) and the spaces of their environment,
//!   asked of the actor binary ([`args::describe_env`]);
//! - [`supervisor`]: the learner's own actor processes, restarted when one dies;
//! - [`control_server`]: the control plane on the run's Unix socket;
//! - [`transport`]: the media, shared memory and TCP, behind one interface, and the
//!   [`Ledger`] that verifies and counts every chunk.

pub mod args;
pub mod control_server;
pub mod supervisor;
pub mod transport;

use std::time::{Duration, Instant};

use anyhow::Context;
use common::chunk::{Chunk, ChunkMeta, ChunkSchema};
use common::shm::reclaim_stale;

use crate::actors::supervisor::{ActorEvent, Supervisor, SupervisorConfig};
use crate::actors::transport::tcp::RemoteOptions;
use crate::actors::transport::{
    CollectSummary, Expected, Ledger, Received, SavedStates, ShmTransport, Stalled, TcpTransport,
    Transport, TransportConfig,
};
use crate::run::dir::RunNames;

/// Locks `m`, poisoned or not (a thread that panicked leaves counters and maps usable).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long the end of a run waits for its actors to stop before it kills its own children and
/// leaves attached and remote actors (which it does not own) to notice on their own.
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

/// The supervisor and the transports of a run.
pub struct Actors {
    supervisor: Supervisor,
    transports: Vec<Box<dyn Transport>>,
    ledger: Ledger,
    summary: CollectSummary,
    /// Chunks taken while answering registrations (returned by the next `receive`).
    early: Vec<Received>,
    /// The last exit of an actor process (named when every actor is gone).
    last_exit: Option<String>,
    /// A local actor silent this long is killed and restarted (`None`: never).
    stall_timeout: Option<Duration>,
    start: Instant,
}

impl Actors {
    /// Reclaims stale segments, publishes `initial_blob` as version 1 on every transport,
    /// then starts the actors, in the run directory `names` names (the caller holds its lock).
    pub fn start(
        names: &RunNames,
        config: &TransportConfig,
        schema: ChunkSchema,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        let start = Instant::now();
        // Segments of runs whose owner died are removed before this run creates its own: another
        // run's leftovers, not this run's concern (debug level; counted in the summary).
        let reclaimed_segments = reclaim_stale();
        for name in &reclaimed_segments {
            tracing::debug!(
                "removed shared-memory segment {name}, left by another run that crashed"
            );
        }
        let mut summary = CollectSummary {
            env: config.actor_args.env.clone(),
            reclaimed_segments,
            policy_version: 1,
            ..Default::default()
        };
        let slot_bytes = Chunk::zeros(&schema, ChunkMeta::new(0, 0, 0, 0))
            .encode(&schema)?
            .len();
        let expected = Expected {
            env: config.actor_args.env.clone(),
            spec: config.spec.clone(),
            schema: schema.clone(),
        };
        let shm = ShmTransport::start(names, config, expected.clone(), slot_bytes, initial_blob)?;
        let mut transports: Vec<Box<dyn Transport>> = vec![Box::new(shm)];
        if let Some(listen) = &config.listen {
            let group = crate::ranks::world();
            let use_tls = config
                .tls
                .resolve(listen)
                .map_err(|e| anyhow::anyhow!("`run.listen`: {e}"))?;
            let (tls, fingerprint) = if use_tls {
                let identity = names.tls_identity()?;
                let fingerprint = common::tls::Fingerprint::of(&identity.cert_der);
                let tls = common::tls::server_config(identity.cert_der, identity.key_der)
                    .context("the run's TLS configuration")?;
                (Some(tls), Some(fingerprint))
            } else {
                (None, None)
            };
            let opts = RemoteOptions {
                listen: listen.clone(),
                token: names.token(fingerprint)?,
                args: config.actor_args.clone(),
                chunk_bytes: slot_bytes,
                weight_bytes: initial_blob.len(),
                window: config.slots,
                // Every rank's local actors (rank k's are ids k * actors..): none of them remote.
                local_actors: config.first_actor + config.actors * (group.size - group.rank) as u32,
                group,
                tls,
            };
            let opts_local = opts.local_actors;
            let tcp = TcpTransport::start(expected, opts, initial_blob)?;
            let token_path = names.path().join("token");
            match fingerprint {
                Some(f) => tracing::info!(
                    "remote actors: listening on {} (TLS 1.3, certificate sha256 {f}; token and \
                     fingerprint in {})",
                    tcp.address(),
                    token_path.display()
                ),
                None if config.tls == common::tls::TlsMode::InsecurePlaintext => tracing::warn!(
                    "remote actors: listening on {} IN PLAINTEXT (--insecure-plaintext): the \
                     run token and every chunk and weight cross the network in clear, and \
                     anyone who sees them can join the run; for loopback and benchmarks only \
                     (token in {})",
                    tcp.address(),
                    token_path.display()
                ),
                None => tracing::info!(
                    "remote actors: listening on {} (plaintext on loopback; --tls to encrypt; \
                     token in {})",
                    tcp.address(),
                    token_path.display()
                ),
            }
            if group.size > 1 {
                tracing::info!(
                    "remote actors: learner rank {k} of {n} at {} takes the remote actor ids \
                     equal to {k} modulo {n} (from {} on)",
                    tcp.address(),
                    opts_local,
                    k = group.rank,
                    n = group.size,
                );
            }
            summary.listen = Some(tcp.address());
            transports.push(Box::new(tcp));
        }
        let (supervisor, events) = Supervisor::start(SupervisorConfig {
            program: config.actor_program.clone(),
            connect: names.control_socket(),
            actor_args: config.actor_args.clone(),
            actors: config.actors,
            first_actor: config.first_actor,
            max_restarts: config.max_restarts,
            restart_window: config.restart_window,
            backoff: config.restart_backoff,
        })
        .with_context(|| format!("starting actors with {}", config.actor_program.display()))?;
        let mut actors = Actors {
            supervisor,
            transports,
            ledger: Ledger::new(schema),
            summary,
            early: Vec::new(),
            last_exit: None,
            stall_timeout: config.stall_timeout,
            start,
        };
        actors.changed(&events);
        Ok(actors)
    }

    /// Answers the actors that asked to join since the last call, on every transport; in a
    /// sync run an actor continues from the state `saved` holds for its id.
    pub fn register(&mut self, saved: &SavedStates) {
        for t in &mut self.transports {
            t.register(saved, &mut self.ledger, &mut self.early);
        }
    }

    /// The chunks received since the last call (verified, sequence numbers checked per actor
    /// incarnation, in arrival order per actor), each with the state its actor saved after it
    /// (sync runs). Reaps and restarts actors; errs once every actor has stopped for good
    /// ([`ActorsGone`]).
    pub fn receive(&mut self) -> anyhow::Result<Vec<Received>> {
        let mut chunks = std::mem::take(&mut self.early);
        for t in &mut self.transports {
            t.receive(&mut self.ledger, &mut chunks);
        }
        self.supervise()?;
        self.count();
        // Remote actors may join at any time: a listening run never runs out of actors.
        let open = self.transports.iter().any(|t| t.open_ended() || t.busy());
        if self.supervisor.all_done() && !open {
            return Err(ActorsGone {
                frames: self.ledger.frames,
                last_exit: self
                    .last_exit
                    .clone()
                    .unwrap_or_else(|| "none recorded".into()),
            }
            .into());
        }
        Ok(chunks)
    }

    /// Broadcasts weight version `version` on every transport.
    pub fn publish(&mut self, version: u64, blob: &[u8]) -> anyhow::Result<()> {
        for t in &mut self.transports {
            t.publish(version, blob)?;
        }
        self.summary.policy_version = version;
        Ok(())
    }

    /// An actor or an operator asked the run to stop (the control plane).
    pub fn stop_requested(&self) -> bool {
        self.transports.iter().any(|t| t.stop_requested())
    }

    /// The counts so far (`incarnations` are filled in by [`finish`](Self::finish)).
    pub fn stats(&self) -> &CollectSummary {
        &self.summary
    }

    /// Ends the run: every actor (spawned, attached or remote) is told to stop at its next
    /// heartbeat, and drained as it exits. After [`FINISH_GRACE`] the learner kills the actors
    /// it spawned and stops waiting for the others (not its children: never killed); then
    /// the transports close. Returns the final counts and the chunks that arrived meanwhile.
    pub fn finish(
        mut self,
        stopped_by_request: bool,
    ) -> anyhow::Result<(CollectSummary, Vec<Received>)> {
        for t in &mut self.transports {
            t.shut_down();
        }
        self.supervisor.stop_restarting();
        let deadline = Instant::now() + FINISH_GRACE;
        let mut tail = std::mem::take(&mut self.early);
        loop {
            for t in &mut self.transports {
                t.refuse_registrations();
                t.receive(&mut self.ledger, &mut tail);
            }
            self.supervise()?;
            let busy = self.transports.iter().any(|t| t.busy());
            if self.supervisor.running().is_empty() && !busy {
                break;
            }
            if Instant::now() >= deadline {
                let own: Vec<u32> = self.supervisor.running().iter().map(|r| r.2).collect();
                let others: Vec<String> = self
                    .transports
                    .iter()
                    .flat_map(|t| t.waiting_for())
                    .filter(|w| !own.iter().any(|pid| w.ends_with(&format!("(pid {pid})"))))
                    .collect();
                tracing::warn!(
                    "actors did not stop within {FINISH_GRACE:?} of the end of the run: killing \
                     the learner's own {own:?}, no longer waiting for attached and remote \
                     {others:?}"
                );
                let events = self.supervisor.shutdown(Duration::from_secs(1));
                self.changed(&events);
                for t in &mut self.transports {
                    t.abandon(&mut self.ledger, &mut tail);
                }
                continue;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The last pass: everything drained, half-written slots reported, channels dropped.
        for t in &mut self.transports {
            t.close(&mut self.ledger, &mut tail);
        }
        self.count();
        let mut summary = std::mem::take(&mut self.summary);
        summary.incarnations = std::mem::take(&mut self.ledger.incarnations)
            .into_values()
            .collect();
        summary.seconds = self.start.elapsed().as_secs_f64();
        summary.stopped_by_request = stopped_by_request;
        Ok((summary, tail))
    }

    /// Kills stalled actors of its own (silent past the stall timeout), reaps and restarts
    /// actors, tells the transports who exited.
    fn supervise(&mut self) -> anyhow::Result<()> {
        if let Some(bound) = self.stall_timeout {
            for t in &mut self.transports {
                for s in t.stalled(bound) {
                    let Stalled {
                        actor_id: a,
                        incarnation: i,
                        pid,
                        silent,
                    } = s;
                    if self.supervisor.kill(a, i, pid) {
                        self.summary.stalled += 1;
                        tracing::warn!(
                            "actor {a}/{i} (pid {pid}) stalled: no heartbeat for {:.1} s (bound \
                             {bound:?}); killed (SIGKILL), it restarts as a new incarnation",
                            silent.as_secs_f64()
                        );
                    } else {
                        tracing::warn!(
                            "attached actor {a}/{i} (pid {pid}) stalled: no heartbeat for {:.1} \
                             s (bound {bound:?}); not the learner's child, left alone",
                            silent.as_secs_f64()
                        );
                    }
                }
            }
        }
        let events = self.supervisor.poll()?;
        self.changed(&events);
        Ok(())
    }

    fn changed(&mut self, events: &[ActorEvent]) {
        for t in &mut self.transports {
            t.actors_changed(events);
        }
        for e in events {
            match e {
                ActorEvent::Started {
                    actor_id,
                    incarnation,
                    pid,
                } => {
                    if *incarnation > 0 {
                        self.summary.restarts += 1;
                    }
                    tracing::info!("actor {actor_id}/{incarnation} started (pid {pid})");
                }
                ActorEvent::Exited {
                    actor_id,
                    incarnation,
                    status,
                } => {
                    tracing::info!("actor {actor_id}/{incarnation} exited: {status}");
                    self.last_exit = Some(format!("actor {actor_id}/{incarnation}: {status}"));
                }
                ActorEvent::GaveUp { actor_id, restarts } => {
                    tracing::error!("actor {actor_id} died {restarts} times; not restarting it")
                }
            }
        }
    }

    /// The ledger's and the transports' counts into the summary.
    fn count(&mut self) {
        let l = &self.ledger;
        let s = &mut self.summary;
        (s.chunks, s.frames, s.corrupted, s.rejected) =
            (l.chunks, l.frames, l.corrupted, l.rejected);
        s.refused_registrations = self.transports.iter().map(|t| t.refused()).sum();
    }
}
