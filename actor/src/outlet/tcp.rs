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
//! learner does not hold: nothing is lost or sent twice. A learner that closes the connection,
//! refuses a reconnect, or stays unreachable for the window is gone: the actor exits.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use common::actor_args::ActorArgs;
use common::chunk::ChunkSchema;
use common::envs::EnvSpec;
use common::remote::{
    read_frame_async, write_data_async, write_message_async, ActorMsg, LearnerMsg, Limits,
    WireError, KIND_CHUNK, KIND_MESSAGE, KIND_WEIGHTS, MESSAGE_MAX, TOKEN_BYTES,
};
use common::rollout::Actor;
use common::tls::Fingerprint;
use common::weights::blob_version;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::runtime::Runtime;

use super::{End, Outlet, Progress, HEARTBEAT};

/// No frame from the learner for this long: the link is considered cut (the learner
/// acknowledges four times a second).
pub const SILENCE: Duration = Duration::from_secs(3);
/// How long a cut link is retried before the learner counts as gone.
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(15);
/// How long the first connection is retried while the learner is not listening yet (a
/// cluster launcher starts learner and actors together).
const FIRST_CONNECT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the TLS handshake and the learner's welcome may take.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the learner: a bare socket, or a TLS session with the pinned certificate.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type Stream = Box<dyn Io>;

/// The learner an actor joins: its address, the run token, and how the token is protected.
#[derive(Clone)]
pub struct Learner {
    /// `HOST:PORT`.
    pub addr: String,
    pub token: [u8; TOKEN_BYTES],
    /// TLS pinning this certificate fingerprint; `None`: plaintext (the token crosses in
    /// clear).
    pub tls: Option<Fingerprint>,
}

impl Learner {
    /// Opens a connection (TCP, then the TLS handshake when pinned). A certificate that is
    /// not the pinned one is a final refusal; anything else a link failure (retried).
    async fn connect(&self) -> Result<Stream, HandshakeError> {
        let link = |e: std::io::Error| HandshakeError::Link(e.into());
        let addrs: Vec<_> = tokio::net::lookup_host(&self.addr)
            .await
            .map_err(link)?
            .collect();
        let mut last =
            std::io::Error::new(ErrorKind::NotFound, format!("{}: no address", self.addr));
        let mut socket = None;
        for a in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    socket = Some(s);
                    break;
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = std::io::Error::new(
                        ErrorKind::TimedOut,
                        format!("connecting to {a}: no answer within {CONNECT_TIMEOUT:?}"),
                    )
                }
            }
        }
        let Some(socket) = socket else {
            return Err(if last.kind() == ErrorKind::ConnectionRefused {
                HandshakeError::NotListening(format!("tcp://{}: {last}", self.addr))
            } else {
                link(last)
            });
        };
        socket.set_nodelay(true).map_err(link)?;
        let Some(pinned) = self.tls else {
            return Ok(Box::new(socket));
        };
        let connector = tokio_rustls::TlsConnector::from(common::tls::client_config(pinned));
        let handshake = connector.connect(common::tls::server_name(), socket);
        match tokio::time::timeout(HELLO_TIMEOUT, handshake).await {
            Ok(Ok(tls)) => Ok(Box::new(tls)),
            Ok(Err(e)) => Err(match common::tls::certificate_rejected(&e) {
                Some(why) => HandshakeError::Untrusted(why),
                None => HandshakeError::Link(anyhow::Error::from(e).context("TLS handshake")),
            }),
            Err(_) => Err(HandshakeError::Link(anyhow::anyhow!(
                "no TLS handshake within {HELLO_TIMEOUT:?}"
            ))),
        }
    }
}

/// What the learner told the actor when it accepted the token.
#[derive(Clone, Debug)]
pub struct Welcome {
    pub incarnation: u32,
    /// What the actor runs (checked by [`Session::open`]).
    pub args: ActorArgs,
    pub chunk_bytes: usize,
    pub weight_bytes: usize,
    pub window: usize,
}

/// A connection that presented the token and was welcomed (not registered yet), with the
/// runtime it lives on (which the connection thread takes over).
pub struct Session {
    learner: Learner,
    actor_id: u32,
    runtime: Runtime,
    stream: Stream,
    pub welcome: Welcome,
}

/// The address of `--connect tcp://HOST:PORT`, or `None` for a Unix socket path.
pub fn tcp_address(connect: &str) -> Option<&str> {
    connect.strip_prefix("tcp://")
}

impl Session {
    /// Connects to `learner` (retrying while nothing listens there yet, for up to a minute),
    /// presents its token for actor `actor_id` and reads the welcome.
    pub fn open(learner: Learner, actor_id: u32) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the connection's tokio runtime")?;
        let addr = learner.addr.clone();
        let start = Instant::now();
        let (stream, welcome) = runtime
            .block_on(async {
                loop {
                    let attempt = async {
                        let mut stream = learner.connect().await?;
                        let welcome = hello(&mut stream, &learner.token, actor_id, None).await?;
                        Ok((stream, welcome))
                    };
                    match attempt.await {
                        Ok(ok) => return Ok(ok),
                        Err(e @ (HandshakeError::Refused(_) | HandshakeError::Untrusted(_))) => {
                            return Err(e.into())
                        }
                        Err(e) if start.elapsed() < FIRST_CONNECT => {
                            tracing::debug!("connecting to {addr}: {:#}", anyhow::Error::from(e));
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => {
                            return Err(anyhow::Error::from(e).context(format!(
                                "connecting to the learner for {FIRST_CONNECT:?}"
                            )))
                        }
                    }
                }
            })
            .with_context(|| format!("joining the learner at tcp://{addr}"))?;
        welcome
            .args
            .validate()
            .with_context(|| format!("the actor arguments of the learner at tcp://{addr}"))?;
        Ok(Session {
            learner,
            actor_id,
            runtime,
            stream,
            welcome,
        })
    }
}

/// Why a handshake failed: the learner answered no or is not the pinned one (final), nothing
/// listens at the address (final once registered, retried before), or the link failed
/// (retried).
enum HandshakeError {
    Refused(String),
    /// The TLS certificate is not the pinned one.
    Untrusted(String),
    NotListening(String),
    Link(anyhow::Error),
}

impl From<HandshakeError> for anyhow::Error {
    fn from(e: HandshakeError) -> Self {
        match e {
            HandshakeError::Refused(reason) => anyhow::anyhow!("the learner refused: {reason}"),
            HandshakeError::Untrusted(why) => anyhow::anyhow!("not the pinned learner: {why}"),
            HandshakeError::NotListening(why) => anyhow::anyhow!("nothing listens: {why}"),
            HandshakeError::Link(e) => e,
        }
    }
}

/// Presents the token (inside TLS when pinned: `stream` is already the session) and reads
/// the welcome.
async fn hello(
    stream: &mut Stream,
    token: &[u8; TOKEN_BYTES],
    actor_id: u32,
    resume: Option<u32>,
) -> Result<Welcome, HandshakeError> {
    let link = |e: WireError| HandshakeError::Link(e.into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let hello = ActorMsg::Hello {
        token: *token,
        actor_id,
        resume,
        pid: std::process::id(),
        host,
    };
    let limits = Limits {
        message: MESSAGE_MAX,
        chunk: 0,
        weights: 0,
    };
    let exchange = async {
        write_message_async(stream, &hello).await?;
        read_frame_async(stream, &limits).await
    };
    let frame = match tokio::time::timeout(HELLO_TIMEOUT, exchange).await {
        Err(_) => {
            return Err(HandshakeError::Link(anyhow::anyhow!(
                "no welcome within {HELLO_TIMEOUT:?}"
            )))
        }
        Ok(frame) => frame.map_err(link)?,
    };
    match frame.message::<LearnerMsg>().map_err(link)? {
        LearnerMsg::Welcome {
            incarnation,
            args,
            chunk_bytes,
            weight_bytes,
            window,
        } => Ok(Welcome {
            incarnation,
            args,
            chunk_bytes: chunk_bytes as usize,
            weight_bytes: weight_bytes as usize,
            window: (window as usize).max(1),
        }),
        LearnerMsg::Refused { reason } => Err(HandshakeError::Refused(reason)),
        other => Err(HandshakeError::Link(anyhow::anyhow!(
            "expected a welcome, got {other:?}"
        ))),
    }
}

/// What the actor registers with (kept for reconnects).
#[derive(Clone)]
struct Registration {
    env: String,
    spec: EnvSpec,
    schema: ChunkSchema,
}

async fn register(stream: &mut Stream, reg: &Registration) -> Result<u64, HandshakeError> {
    let link = |e: WireError| HandshakeError::Link(e.into());
    let message = ActorMsg::Register {
        env: reg.env.clone(),
        observation_space: reg.spec.observation_space.clone(),
        action_space: reg.spec.action_space.clone(),
        schema: reg.schema.clone(),
    };
    let limits = Limits {
        message: MESSAGE_MAX,
        chunk: 0,
        weights: 0,
    };
    let exchange = async {
        write_message_async(stream, &message).await?;
        read_frame_async(stream, &limits).await
    };
    // The learner's main thread answers between two updates.
    let answer = Duration::from_secs(60);
    let frame = match tokio::time::timeout(answer, exchange).await {
        Err(_) => {
            return Err(HandshakeError::Link(anyhow::anyhow!(
                "no answer to the registration within {answer:?}"
            )))
        }
        Ok(frame) => frame.map_err(link)?,
    };
    match frame.message::<LearnerMsg>().map_err(link)? {
        LearnerMsg::Registered { next_seq } => Ok(next_seq),
        LearnerMsg::Refused { reason } => Err(HandshakeError::Refused(reason)),
        other => Err(HandshakeError::Link(anyhow::anyhow!(
            "expected an answer to the registration, got {other:?}"
        ))),
    }
}

/// State shared by the actor loop (main thread) and the connection (a tokio thread).
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

struct Outbox {
    /// Chunks sent or to send, not yet acknowledged: (sequence number, encoded chunk).
    queue: VecDeque<(u64, Arc<Vec<u8>>)>,
    window: usize,
    stop: Option<Result<End, String>>,
}

impl Shared {
    fn stop(&self, why: Result<End, String>) {
        let mut out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        out.stop.get_or_insert(why);
        self.space.notify_all();
    }

    fn stopped(&self) -> Option<Result<End, String>> {
        let out = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        out.stop.clone()
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
        let reg = Registration {
            env: actor.config().env.clone(),
            spec: spec.clone(),
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
                queue: VecDeque::new(),
                window: welcome.window,
                stop: None,
            }),
            space: Condvar::new(),
            wake: tokio::sync::Notify::new(),
            weights: Mutex::new(None),
            latest: AtomicU64::new(0),
            chunks_sent: AtomicU64::new(0),
            policy_version: AtomicU64::new(0),
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
        match self.shared.stopped() {
            None => Ok(None),
            Some(Ok(end)) => Ok(Some(end)),
            Some(Err(e)) => Err(anyhow::Error::msg(e)),
        }
    }
}

impl Outlet for TcpOutlet {
    fn latest_version(&mut self) -> u64 {
        self.shared.latest.load(Ordering::Relaxed)
    }

    fn fetch_newer(&mut self, have: u64, blob: &mut Vec<u8>) -> anyhow::Result<Option<u64>> {
        let mut newest = self
            .shared
            .weights
            .lock()
            .unwrap_or_else(|e| e.into_inner());
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
        let shared = &self.shared;
        shared
            .policy_version
            .store(progress.policy_version, Ordering::Relaxed);
        self.ended()
    }

    /// Into the outbox; while it holds a whole window of unacknowledged chunks the actor
    /// waits (a slow link slows the actor).
    fn push(&mut self, chunk: Vec<u8>, _progress: Progress) -> anyhow::Result<Option<End>> {
        let bytes = Arc::new(chunk);
        {
            let shared = &self.shared;
            let mut out = shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
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
    reg: Registration,
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
        let mut stream = Some(first);
        let mut next_seq = 0;
        loop {
            let Some(s) = stream.take() else {
                unreachable!("a connection is open here")
            };
            match self.stream(s, next_seq).await {
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
                    match self.reconnect().await {
                        Ok((s, next)) => {
                            say(format!(
                                "{}: reconnected; continuing at chunk {next}",
                                self.who
                            ));
                            stream = Some(s);
                            next_seq = next;
                        }
                        Err(stop) => return stop,
                    }
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
        let mut out = self.shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let before = out.queue.len();
        while out.queue.front().is_some_and(|(s, _)| *s <= received) {
            out.queue.pop_front();
        }
        if out.queue.len() < before {
            self.shared.space.notify_all();
        }
    }

    async fn read(&self, rd: &mut ReadHalf<Stream>) -> Ended {
        let limits = Limits {
            message: MESSAGE_MAX,
            chunk: 0,
            weights: self.weight_bytes,
        };
        // A weights frame may take a while on a slow link: allow 1 s per MB on top.
        let silence = SILENCE + Duration::from_secs_f64(self.weight_bytes as f64 / 1e6);
        loop {
            let frame = match tokio::time::timeout(silence, read_frame_async(rd, &limits)).await {
                Err(_) => return Ended::Cut(format!("nothing heard for {silence:?}")),
                Ok(Err(WireError::Io(e)))
                    if matches!(
                        e.kind(),
                        ErrorKind::UnexpectedEof
                            | ErrorKind::ConnectionReset
                            | ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Ended::Gone(format!("connection closed: {e}"))
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
                    let mut newest = self
                        .shared
                        .weights
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
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
            let pending: Vec<(u64, Arc<Vec<u8>>)> = {
                let out = self.shared.outbox.lock().unwrap_or_else(|e| e.into_inner());
                out.queue
                    .iter()
                    .filter(|(s, _)| *s >= next)
                    .cloned()
                    .collect()
            };
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
