//! The outlet to a learner on another machine, over authenticated TCP ([`common::remote`]),
//! inside TLS 1.3 when the token file pins the learner's certificate ([`Learner`]): the token
//! is only ever written into a session whose certificate has that fingerprint.
//! A [`Session`] presents the run token and receives the actor's incarnation and its
//! [`ActorArgs`](common::actor_args::ActorArgs) (environment, policy, seed, exploration: the
//! learner's, as a local actor gets them on its command line); the actor is built from them and
//! registers ([`TcpOutlet::register`]), then the attach loop ([`super::run`]) streams chunks
//! and adopts the newest weights at chunk boundaries. A connection thread (tokio; the runtime
//! the session's handshake ran on) sends the chunks and heartbeats and receives weights and
//! acknowledgements.
//!
//! Chunks stay in a bounded outbox until the learner acknowledges them (a `window` of them:
//! when it is full the actor waits, so a slow link slows the actor instead of growing a queue).
//! A link that goes silent for [`SILENCE`] (cut, not closed) is replaced: the actor reconnects
//! for up to [`RECONNECT_WINDOW`], resumes its incarnation, and resends from the first chunk the
//! learner does not hold: nothing is lost or sent twice. A connection the learner closes is
//! reconnected the same way (the learner drops a connection silent for 10 s: a stopped actor,
//! a stalled link). A learner that refuses a reconnect (a dead one's port refuses it at once),
//! or stays unreachable for the window, is gone: the actor exits.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::envs::EnvSpec;
use common::remote::{
    read_frame_async, write_data_async, write_message_async, ActorMsg, LearnerMsg, Limits,
    WireError, KIND_CHUNK, KIND_MESSAGE, KIND_WEIGHTS,
};
use common::rollout::Actor;
use common::weights::blob_version;
use tokio::io::{ReadHalf, WriteHalf};

use super::{End, Outlet, Progress, HEARTBEAT};

mod join;

use join::{hello, register, HandshakeError, Stream};
pub use join::{Learner, Session, Welcome};

/// No frame from the learner for this long: the link is considered cut (the learner
/// acknowledges four times a second).
pub const SILENCE: Duration = Duration::from_secs(3);
/// How long a cut link is retried before the learner counts as gone.
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(15);
/// The address of `--connect tcp://HOST:PORT`, or `None` for a Unix socket path.
pub fn tcp_address(connect: &str) -> Option<&str> {
    connect.strip_prefix("tcp://")
}

/// State shared by the actor loop (main thread) and the connection (a tokio thread).
#[derive(Default)]
struct Shared {
    outbox: Mutex<Outbox>,
    /// Signalled when the outbox shrinks or the actor must stop.
    space: Condvar,
    wake: tokio::sync::Notify,
    /// The newest weight blob not yet adopted.
    weights: Mutex<Option<(u64, Vec<u8>)>>,
    /// The newest weight version received (0: none yet).
    latest: AtomicU64,
    chunks_sent: AtomicU64,
    policy_version: AtomicU64,
}

#[derive(Default)]
struct Outbox {
    /// Chunks sent or to send, not yet acknowledged: (sequence number, encoded chunk).
    queue: VecDeque<(u64, Arc<Vec<u8>>)>,
    window: usize,
    stop: Option<Result<End, String>>,
}

/// Locks `m`, poisoned or not (a panicked thread leaves the outbox and the weights usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn stop(&self, why: Result<End, String>) {
        let mut out = lock(&self.outbox);
        out.stop.get_or_insert(why);
        self.space.notify_all();
    }

    fn stopped(&self) -> Option<Result<End, String>> {
        lock(&self.outbox).stop.clone()
    }
}

/// A registered remote actor's channel: the outbox the connection thread sends from, the
/// newest weights it received. Dropping it ends the connection politely and joins its thread.
pub struct TcpOutlet {
    shared: Arc<Shared>,
    /// Chunks pushed (the next chunk's sequence number).
    seq: u64,
    net: Option<std::thread::JoinHandle<()>>,
}

impl TcpOutlet {
    /// Registers `actor` (built from the session's welcome) with the learner, reporting the
    /// spaces of `spec` and the actor's schema, and starts the connection thread.
    pub fn register(session: Session, actor: &Actor, spec: &EnvSpec) -> anyhow::Result<Self> {
        let Session {
            learner,
            actor_id,
            runtime,
            mut stream,
            welcome,
        } = session;
        let who = format!("actor {actor_id}/{}", welcome.incarnation);
        let reg = ActorMsg::Register {
            env: actor.config().env.clone(),
            observation_space: spec.observation_space.clone(),
            action_space: spec.action_space.clone(),
            schema: actor.schema().clone(),
        };
        let next_seq = runtime.block_on(register(&mut stream, &reg))?;
        anyhow::ensure!(
            next_seq == 0,
            "the learner asks a new incarnation to start at chunk {next_seq}"
        );
        say(format!(
            "{who}: registered with the learner at tcp://{}{}",
            learner.addr,
            if learner.tls.is_some() {
                " (TLS 1.3, pinned certificate)"
            } else {
                " (plaintext)"
            }
        ));
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox {
                window: welcome.window,
                ..Default::default()
            }),
            ..Default::default()
        });
        let link = Link {
            learner,
            actor_id,
            incarnation: welcome.incarnation,
            weight_bytes: welcome.weight_bytes,
            reg,
            who,
            shared: Arc::clone(&shared),
        };
        let net = std::thread::Builder::new()
            .name("link".into())
            .spawn(move || {
                let why = runtime.block_on(link.run(stream));
                link.shared.stop(why);
            })?;
        Ok(TcpOutlet {
            shared,
            seq: 0,
            net: Some(net),
        })
    }

    /// Whether the connection thread ended the run (or failed).
    fn ended(&self) -> anyhow::Result<Option<End>> {
        self.shared
            .stopped()
            .transpose()
            .map_err(anyhow::Error::msg)
    }
}

impl Outlet for TcpOutlet {
    fn latest_version(&mut self) -> u64 {
        self.shared.latest.load(Ordering::Relaxed)
    }

    fn fetch_newer(&mut self, have: u64, blob: &mut Vec<u8>) -> anyhow::Result<Option<u64>> {
        let mut newest = lock(&self.shared.weights);
        match newest.take() {
            Some((version, bytes)) if version > have => {
                *blob = bytes;
                self.shared.policy_version.store(version, Ordering::Relaxed);
                Ok(Some(version))
            }
            _ => Ok(None),
        }
    }

    /// The connection thread sends the heartbeats (every [`HEARTBEAT`]); this hands it the
    /// numbers to report.
    fn beat(&mut self, progress: Progress) -> anyhow::Result<Option<End>> {
        let version = progress.policy_version;
        self.shared.policy_version.store(version, Ordering::Relaxed);
        self.ended()
    }

    /// Into the outbox; while it holds a whole window of unacknowledged chunks the actor
    /// waits (a slow link slows the actor).
    fn push(&mut self, chunk: Vec<u8>, _progress: Progress) -> anyhow::Result<Option<End>> {
        let bytes = Arc::new(chunk);
        {
            let shared = &self.shared;
            let mut out = lock(&shared.outbox);
            while out.queue.len() >= out.window && out.stop.is_none() {
                out = shared
                    .space
                    .wait_timeout(out, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if out.stop.is_some() {
                drop(out);
                return self.ended();
            }
            out.queue.push_back((self.seq, bytes));
        }
        self.seq += 1;
        self.shared.chunks_sent.store(self.seq, Ordering::Relaxed);
        self.shared.wake.notify_one();
        Ok(None)
    }
}

impl Drop for TcpOutlet {
    /// The actor loop is done: the connection closes politely (what is in flight still
    /// arrives), and its thread is joined.
    fn drop(&mut self) {
        self.shared.stop(Ok(End::Shutdown));
        self.shared.wake.notify_one();
        if let Some(net) = self.net.take() {
            let _ = net.join();
        }
    }
}

/// The connection side of a remote actor (runs on its own thread's tokio runtime).
struct Link {
    learner: Learner,
    actor_id: u32,
    incarnation: u32,
    weight_bytes: usize,
    /// The registration, sent again on every reconnect.
    reg: ActorMsg,
    who: String,
    shared: Arc<Shared>,
}

/// How a connection ended.
enum Ended {
    /// The learner ended the run.
    Shutdown,
    /// The learner closed the connection or refused: it is gone.
    Gone(String),
    /// Silence or a broken write: reconnect.
    Cut(String),
    /// The actor loop stopped.
    Local,
}

impl Link {
    async fn run(&self, first: Stream) -> Result<End, String> {
        let (mut stream, mut next_seq) = (first, 0);
        loop {
            match self.stream(stream, next_seq).await {
                Ended::Shutdown | Ended::Local => return Ok(End::Shutdown),
                Ended::Gone(why) => {
                    say(format!("{}: the learner is gone ({why})", self.who));
                    return Ok(End::LearnerGone);
                }
                Ended::Cut(why) => {
                    say(format!(
                        "{}: link to the learner lost ({why}); reconnecting",
                        self.who
                    ));
                    (stream, next_seq) = match self.reconnect().await {
                        Ok(reconnected) => reconnected,
                        Err(stop) => return stop,
                    };
                    say(format!(
                        "{}: reconnected; continuing at chunk {next_seq}",
                        self.who
                    ));
                }
            }
        }
    }

    /// Reconnects within [`RECONNECT_WINDOW`]: hello with this incarnation, register again;
    /// returns the connection and the sequence number to continue at.
    async fn reconnect(&self) -> Result<(Stream, u64), Result<End, String>> {
        let start = Instant::now();
        loop {
            if self.shared.stopped().is_some() {
                return Err(Ok(End::Shutdown));
            }
            let inc = self.incarnation;
            let attempt = async {
                let mut stream = self.learner.connect().await?;
                let welcome =
                    hello(&mut stream, &self.learner.token, self.actor_id, Some(inc)).await?;
                if welcome.incarnation != inc {
                    return Err(HandshakeError::Refused(format!(
                        "asked to resume incarnation {inc}, welcomed as {}",
                        welcome.incarnation
                    )));
                }
                let next = register(&mut stream, &self.reg).await?;
                Ok((stream, next))
            };
            match attempt.await {
                Ok(ok) => return Ok(ok),
                Err(
                    HandshakeError::Refused(reason)
                    | HandshakeError::Untrusted(reason)
                    | HandshakeError::NotListening(reason),
                ) => {
                    say(format!("{}: the learner is gone ({reason})", self.who));
                    return Err(Ok(End::LearnerGone));
                }
                Err(HandshakeError::Link(e)) if start.elapsed() >= RECONNECT_WINDOW => {
                    say(format!(
                        "{}: no learner within {RECONNECT_WINDOW:?} ({e:#}); the learner is gone",
                        self.who
                    ));
                    return Err(Ok(End::LearnerGone));
                }
                Err(HandshakeError::Link(e)) => {
                    tracing::debug!("reconnecting: {e:#}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// One connection's life: chunks from `next_seq` on and heartbeats out, weights and
    /// acknowledgements in.
    async fn stream(&self, stream: Stream, next_seq: u64) -> Ended {
        // Chunks the learner already holds leave the outbox.
        self.acknowledge(next_seq.checked_sub(1));
        let (mut rd, mut wr) = tokio::io::split(stream);
        let end = tokio::select! {
            end = self.read(&mut rd) => end,
            end = self.write(&mut wr, next_seq) => end,
        };
        if matches!(end, Ended::Shutdown | Ended::Local) {
            // A polite close: half-close, then read until the learner closes too. Closing with
            // its frames unread would reset the connection and drop chunks still in flight.
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = wr.shutdown().await;
            let mut sink = vec![0u8; 1 << 16];
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while rd.read(&mut sink).await.is_ok_and(|n| n > 0) {}
            })
            .await;
        }
        end
    }

    fn acknowledge(&self, received: Option<u64>) {
        let Some(received) = received else { return };
        let mut out = lock(&self.shared.outbox);
        let before = out.queue.len();
        while out.queue.front().is_some_and(|(s, _)| *s <= received) {
            out.queue.pop_front();
        }
        if out.queue.len() < before {
            self.shared.space.notify_all();
        }
    }

    async fn read(&self, rd: &mut ReadHalf<Stream>) -> Ended {
        let limits = Limits::messages(self.weight_bytes);
        // A weights frame may take a while on a slow link: allow 1 s per MB on top.
        let silence = SILENCE + Duration::from_secs_f64(self.weight_bytes as f64 / 1e6);
        loop {
            let frame = match tokio::time::timeout(silence, read_frame_async(rd, &limits)).await {
                Err(_) => return Ended::Cut(format!("nothing heard for {silence:?}")),
                // A closed connection is a cut link too: the learner drops one that went silent
                // (this actor stopped, its link stalled) and takes the actor back when it
                // reconnects; a learner that is gone refuses the reconnect at once.
                Ok(Err(WireError::Io(e)))
                    if matches!(
                        e.kind(),
                        ErrorKind::UnexpectedEof
                            | ErrorKind::ConnectionReset
                            | ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Ended::Cut(format!("connection closed: {e}"))
                }
                Ok(Err(e)) => return Ended::Cut(e.to_string()),
                Ok(Ok(frame)) => frame,
            };
            match frame.kind {
                KIND_WEIGHTS => {
                    let version = match blob_version(&frame.body) {
                        Ok(v) => v,
                        Err(e) => return Ended::Gone(format!("weights from the learner: {e}")),
                    };
                    let mut newest = lock(&self.shared.weights);
                    let have = self.shared.policy_version.load(Ordering::Relaxed);
                    if version > have && newest.as_ref().is_none_or(|(v, _)| version > *v) {
                        *newest = Some((version, frame.body));
                    }
                    // Under the lock, after the blob: a loop that sees the version finds it.
                    self.shared.latest.fetch_max(version, Ordering::Relaxed);
                }
                KIND_MESSAGE => match frame.message::<LearnerMsg>() {
                    Ok(LearnerMsg::Ack { received, shutdown }) => {
                        self.acknowledge(received);
                        if shutdown {
                            return Ended::Shutdown;
                        }
                    }
                    Ok(LearnerMsg::Refused { reason }) => return Ended::Gone(reason),
                    Ok(other) => return Ended::Gone(format!("unexpected message {other:?}")),
                    Err(e) => return Ended::Gone(e.to_string()),
                },
                kind => return Ended::Gone(format!("unexpected frame kind {kind}")),
            }
        }
    }

    async fn write(&self, wr: &mut WriteHalf<Stream>, next_seq: u64) -> Ended {
        let mut next = next_seq;
        let mut tick = tokio::time::interval(HEARTBEAT);
        loop {
            if self.shared.stopped().is_some() {
                return Ended::Local;
            }
            let pending: Vec<_> = lock(&self.shared.outbox)
                .queue
                .iter()
                .filter(|(s, _)| *s >= next)
                .cloned()
                .collect();
            for (seq, bytes) in pending {
                if let Err(e) = write_data_async(wr, KIND_CHUNK, &bytes).await {
                    return Ended::Cut(format!("sending chunk {seq}: {e}"));
                }
                next = seq + 1;
            }
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tick.tick() => {
                    let beat = ActorMsg::Heartbeat {
                        chunks_sent: self.shared.chunks_sent.load(Ordering::Relaxed),
                        policy_version: self.shared.policy_version.load(Ordering::Relaxed),
                    };
                    if let Err(e) = write_message_async(wr, &beat).await {
                        return Ended::Cut(format!("sending a heartbeat: {e}"));
                    }
                }
            }
        }
    }
}

/// One line to stderr in a single write (see `cli::say`).
fn say(line: String) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
