//! Remote actors over authenticated TCP ([`common::remote`] frames): a tokio runtime on its own
//! thread accepts connections on `run.listen`, checks the run token (constant time) before
//! reading anything else, gives each actor its incarnation and arguments, and hands its
//! registration to the learner's main thread, which answers it like a local actor's. After
//! that, per connection, a reader streams the chunk frames into a bounded queue the main
//! thread drains (backpressure: when the queue is full the reader stops reading and TCP's own
//! flow control holds the actor), and a writer pushes the newest weights (a `watch` channel
//! holds only the latest blob: an actor never receives an older version than one it was sent,
//! and never waits behind stale ones) and acknowledgements (the highest sequence number the
//! learner holds, and whether the run is ending).
//!
//! With TLS ([`RemoteOptions::tls`]) every connection is a TLS 1.3 session first and the same
//! frames travel inside it: the token is never read from a connection that has not completed
//! the handshake. The stream is boxed ([`Reader`], [`Writer`]) so that the session code is one
//! for both.
//!
//! Memory per connection is bounded: before the token, one frame of at most
//! [`HELLO_MAX`](common::remote::HELLO_MAX) bytes (and 5 s for the TLS handshake and the
//! hello together); after registration, `window` queued chunks plus the one being read, each
//! frame checked against the run's exact chunk size before its body is allocated. At most
//! [`PENDING_MAX`] connections wait for their token at a time: more are closed at once (and
//! counted with the refusals).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::actor_args::ActorArgs;
use common::chunk::{Chunk, ChunkSchema};
use common::envs::Space;
use common::remote::{
    read_frame_async, token_matches, write_data_async, write_message_async, ActorMsg, LearnerMsg,
    Limits, WireError, KIND_CHUNK, KIND_MESSAGE, KIND_WEIGHTS, TOKEN_BYTES,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::actors::lock;

/// How long a new connection has to present the token (TLS handshake included).
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections accepted and not yet past the token check, at most; more are refused.
pub const PENDING_MAX: usize = 64;
/// How long an actor has from `Welcome` to `Register` (it builds its environments and policy).
const REGISTER_TIMEOUT: Duration = Duration::from_secs(120);
/// A registered connection silent this long (no heartbeat, no chunk) is closed; the actor
/// reconnects to continue its incarnation if it is still alive.
const SILENCE: Duration = Duration::from_secs(10);
/// How often the learner acknowledges when nothing else is sent (the actor's liveness check).
const ACK_EVERY: Duration = Duration::from_millis(250);

/// What the remote listener is started with.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// `HOST:PORT` to listen on (`run.listen`; port 0: any free port).
    pub listen: String,
    pub token: [u8; TOKEN_BYTES],
    /// What a remote actor runs (env, policy, seed, exploration), sent whole in `Welcome`.
    pub args: ActorArgs,
    /// Exact sizes of an encoded chunk and a weight blob of the run (frame limits).
    pub chunk_bytes: usize,
    pub weight_bytes: usize,
    /// Chunks queued per connection (and unacknowledged per actor).
    pub window: usize,
    /// Actor ids below this are the learner's own (local) actors: refused for remote ones
    /// (on several learner ranks, every rank's local actors).
    pub local_actors: u32,
    /// The learner rank this server belongs to: on several, rank `k` takes the remote actor
    /// ids equal to `k` modulo the group's size (so that ids, incarnations and trajectory ids
    /// stay distinct across the group); any other id is refused, naming the rank to dial.
    pub group: crate::ranks::Rank,
    /// TLS 1.3 with this configuration (the run's certificate); `None`: plaintext.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The read half of a connection (a bare socket's or a TLS session's).
type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// A remote actor's registration, waiting for the main thread's answer.
pub struct RemoteRegistration {
    pub actor_id: u32,
    pub incarnation: u32,
    /// The same process reconnecting after a broken link (its incarnation continues).
    pub resume: bool,
    pub pid: u32,
    pub host: String,
    pub peer: SocketAddr,
    pub env: String,
    pub observation_space: Space,
    pub action_space: Space,
    pub schema: ChunkSchema,
    /// The connection's chunk queue, for the main thread to drain once registered.
    pub link: RemoteLink,
    /// `Ok(next_seq)`: registered, continue at `next_seq`; `Err(reason)`: refused.
    pub reply: oneshot::Sender<Result<u64, String>>,
}

/// The main thread's end of one registered connection. Dropping it closes the connection.
pub struct RemoteLink {
    /// Encoded chunks in arrival order (verified by the main thread).
    pub chunks: mpsc::Receiver<Vec<u8>>,
    _close: oneshot::Sender<()>,
}

/// Counters and flags the listener shares with the main thread.
#[derive(Default)]
struct Shared {
    /// Connections refused before registration (a failed TLS handshake, wrong or missing
    /// token, malformed frames, an unknown incarnation to resume, a local actor's id, more
    /// than [`PENDING_MAX`] waiting).
    refused: AtomicU64,
    /// Connections accepted and not yet past the token check.
    pending: AtomicUsize,
    /// The run is ending: acknowledgements say `shutdown`.
    shutdown: AtomicBool,
    /// The next incarnation per remote actor id.
    incarnations: Mutex<HashMap<u32, u32>>,
}

/// The running listener; dropping it closes every connection and stops the runtime.
pub struct RemoteServer {
    pub registrations: crossbeam_channel::Receiver<RemoteRegistration>,
    weights: watch::Sender<Option<Arc<Vec<u8>>>>,
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Serving {
    opts: RemoteOptions,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    registrations: crossbeam_channel::Sender<RemoteRegistration>,
    weights: watch::Receiver<Option<Arc<Vec<u8>>>>,
}

impl RemoteServer {
    /// Binds `opts.listen` (an error names the address) and starts serving.
    pub fn start(opts: RemoteOptions) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(&opts.listen)
            .with_context(|| format!("listening for remote actors on {:?}", opts.listen))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        let (weights, weights_rx) = watch::channel(None);
        let (stop_tx, stop_rx) = oneshot::channel();
        let ctx = Arc::new(Serving {
            tls: opts.tls.clone().map(tokio_rustls::TlsAcceptor::from),
            opts,
            shared: Arc::clone(&shared),
            registrations: tx,
            weights: weights_rx,
        });
        let thread = std::thread::Builder::new()
            .name("remote".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                runtime.block_on(serve(listener, ctx, stop_rx));
            })?;
        Ok(RemoteServer {
            registrations: rx,
            weights,
            shared,
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address bound (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections refused before registration so far.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Makes `blob` the weights every connection sends next (older unsent ones are skipped).
    pub fn publish(&self, blob: &[u8]) {
        self.weights.send_replace(Some(Arc::new(blob.to_vec())));
    }

    /// The run is ending: every acknowledgement from now on tells the actor to stop.
    pub fn shut_down(&self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    ctx: Arc<Serving>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = TcpListener::from_std(listener).expect("a non-blocking listener");
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(slot) = Pending::take(&ctx.shared) else {
                        ctx.shared.refused.fetch_add(1, Ordering::SeqCst);
                        tracing::warn!(
                            "remote connection from {peer} refused: {PENDING_MAX} connections \
                             are already waiting to authenticate (the limit)"
                        );
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, Arc::clone(&ctx), slot));
                }
                Err(e) => tracing::warn!("remote listener: accept failed: {e}"),
            },
        }
    }
}

/// A connection's place among the [`PENDING_MAX`] waiting for their token; given back when
/// dropped.
struct Pending(Arc<Shared>);

impl Pending {
    /// A place, or `None` when all are taken.
    fn take(shared: &Arc<Shared>) -> Option<Pending> {
        shared
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < PENDING_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| Pending(Arc::clone(shared)))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a connection ended before or after registration.
enum End {
    /// Refused before registration (counted): the reason is sent and logged.
    Refused(String),
    /// Ended after registration (the actor left, the link broke, the main thread dropped it).
    Closed(String),
}

/// Counts and logs a connection refused before registration.
fn refuse(ctx: &Serving, peer: SocketAddr, reason: &str) {
    ctx.shared.refused.fetch_add(1, Ordering::SeqCst);
    tracing::warn!("remote connection from {peer} refused: {reason}");
}

async fn connection(stream: TcpStream, peer: SocketAddr, ctx: Arc<Serving>, slot: Pending) {
    // One deadline for the TLS handshake and the hello.
    let deadline = tokio::time::Instant::now() + HELLO_TIMEOUT;
    let (mut rd, mut wr): (Reader, Writer) = match &ctx.tls {
        None => {
            let (rd, wr) = stream.into_split();
            (Box::new(rd), Box::new(wr))
        }
        Some(acceptor) => match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => {
                let (rd, wr) = tokio::io::split(tls);
                (Box::new(rd), Box::new(wr))
            }
            Ok(Err(e)) => return refuse(&ctx, peer, &format!("TLS handshake: {e}")),
            Err(_) => {
                return refuse(
                    &ctx,
                    peer,
                    &format!("no TLS handshake within {HELLO_TIMEOUT:?}"),
                )
            }
        },
    };
    match session(&mut rd, &mut wr, peer, &ctx, slot, deadline).await {
        End::Refused(reason) => {
            refuse(&ctx, peer, &reason);
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                write_message_async(&mut wr, &LearnerMsg::Refused { reason }),
            )
            .await;
        }
        End::Closed(why) => tracing::info!("remote connection from {peer} closed: {why}"),
    }
}

/// Reads one handshake message (`what`: "hello" or "registration") by `deadline`, `within` after
/// the step began; any failure refuses the connection.
async fn handshake_read(
    rd: &mut Reader,
    limits: &Limits,
    deadline: tokio::time::Instant,
    what: &str,
    within: Duration,
) -> Result<ActorMsg, End> {
    match tokio::time::timeout_at(deadline, read_frame_async(rd, limits)).await {
        Err(_) => Err(End::Refused(format!("no {what} within {within:?}"))),
        Ok(frame) => frame
            .and_then(|frame| frame.message::<ActorMsg>())
            .map_err(|e| End::Refused(format!("{what}: {e}"))),
    }
}

/// Why a remote actor id is not this learner rank's to take (`None`: it is): on `n` ranks, rank
/// `k` takes the ids equal to `k` modulo `n`.
pub fn wrong_rank(actor_id: u32, group: crate::ranks::Rank) -> Option<String> {
    let (k, n) = (group.rank as u32, group.size as u32);
    let owner = actor_id % n.max(1);
    (owner != k).then(|| {
        format!(
            "actor id {actor_id} dialed learner rank {k} of {n}, which takes the remote actor ids \
             equal to {k} modulo {n}: dial rank {owner} (its port is this one's {} {}, when \
             run.listen names a port) or give this actor an id equal to {k} modulo {n}",
            if owner > k { "+" } else { "-" },
            owner.abs_diff(k),
        )
    })
}

async fn session(
    rd: &mut Reader,
    wr: &mut Writer,
    peer: SocketAddr,
    ctx: &Serving,
    slot: Pending,
    deadline: tokio::time::Instant,
) -> End {
    let opts = &ctx.opts;
    // The token first: nothing else is read from a connection that does not present it.
    let hello = match handshake_read(rd, &Limits::HELLO, deadline, "hello", HELLO_TIMEOUT).await {
        Ok(hello) => hello,
        Err(end) => return end,
    };
    let ActorMsg::Hello {
        token,
        actor_id,
        resume,
        pid,
        host,
    } = hello
    else {
        return End::Refused("the first message is not a hello".into());
    };
    if !token_matches(&opts.token, &token) {
        return End::Refused(format!(
            "actor {actor_id} (pid {pid} on {host:?}) presented a wrong token"
        ));
    }
    // Authenticated: no longer among the connections waiting for their token.
    drop(slot);
    if actor_id < opts.local_actors {
        return End::Refused(format!(
            "actor id {actor_id} belongs to one of the learner's {} local actors (ids 0..{}): \
             give remote actors ids from {} on",
            opts.local_actors, opts.local_actors, opts.local_actors
        ));
    }
    if actor_id >= 2048 {
        return End::Refused(format!("actor id {actor_id}: at most 2047"));
    }
    if let Some(why) = wrong_rank(actor_id, opts.group) {
        return End::Refused(why);
    }
    let incarnation = {
        let mut next = lock(&ctx.shared.incarnations);
        let next = next.entry(actor_id).or_insert(0);
        match resume {
            Some(i) if i < *next => i,
            Some(i) => {
                return End::Refused(format!(
                    "actor {actor_id} asks to resume incarnation {i}, which this run never gave"
                ))
            }
            None if *next >= 256 => {
                return End::Refused(format!(
                    "actor {actor_id}: 256 incarnations used (trajectory ids hold 8 bits)"
                ))
            }
            None => {
                *next += 1;
                *next - 1
            }
        }
    };
    let welcome = LearnerMsg::Welcome {
        incarnation,
        args: Box::new(opts.args.clone()),
        chunk_bytes: opts.chunk_bytes as u64,
        weight_bytes: opts.weight_bytes as u64,
        window: opts.window as u32,
    };
    if let Err(e) = write_message_async(wr, &welcome).await {
        return End::Closed(format!("sending welcome: {e}"));
    }
    let deadline = tokio::time::Instant::now() + REGISTER_TIMEOUT;
    let limits = Limits::messages(0);
    let register =
        match handshake_read(rd, &limits, deadline, "registration", REGISTER_TIMEOUT).await {
            Ok(m) => m,
            Err(end) => return end,
        };
    let ActorMsg::Register {
        env,
        observation_space,
        action_space,
        schema,
    } = register
    else {
        return End::Refused("expected a registration after the welcome".into());
    };
    let (chunks_tx, chunks_rx) = mpsc::channel(opts.window.max(1));
    let (close_tx, close_rx) = oneshot::channel();
    let (reply, answer) = oneshot::channel();
    let reg = RemoteRegistration {
        actor_id,
        incarnation,
        resume: resume.is_some(),
        pid,
        host: host.clone(),
        peer,
        env,
        observation_space,
        action_space,
        schema,
        link: RemoteLink {
            chunks: chunks_rx,
            _close: close_tx,
        },
        reply,
    };
    if ctx.registrations.send(reg).is_err() {
        return End::Closed("the learner is shutting down".into());
    }
    let next_seq = match answer.await {
        Ok(Ok(next)) => next,
        // A refusal by the main thread is counted there.
        Ok(Err(reason)) => {
            let _ = write_message_async(wr, &LearnerMsg::Refused { reason }).await;
            return End::Closed("registration refused".into());
        }
        Err(_) => return End::Closed("the learner is shutting down".into()),
    };
    if let Err(e) = write_message_async(wr, &LearnerMsg::Registered { next_seq }).await {
        return End::Closed(format!("sending registered: {e}"));
    }
    let (received_tx, received_rx) = watch::channel(next_seq.checked_sub(1));
    let reader = read_chunks(rd, chunks_tx, received_tx, opts.chunk_bytes);
    let writer = write_updates(wr, received_rx, ctx.weights.clone(), &ctx.shared);
    let why = tokio::select! {
        why = reader => why,
        why = writer => why,
        _ = close_rx => "the learner dropped the link".to_string(),
    };
    End::Closed(format!("actor {actor_id}/{incarnation} ({host}): {why}"))
}

/// Reads chunk frames and heartbeats until the connection ends; queues each chunk (waiting
/// while the queue is full) and notes its sequence number for the acknowledgements.
async fn read_chunks(
    rd: &mut Reader,
    chunks: mpsc::Sender<Vec<u8>>,
    received: watch::Sender<Option<u64>>,
    chunk_bytes: usize,
) -> String {
    let limits = Limits {
        message: common::remote::HELLO_MAX,
        chunk: chunk_bytes,
        weights: 0,
    };
    loop {
        let frame = match tokio::time::timeout(SILENCE, read_frame_async(rd, &limits)).await {
            Err(_) => return format!("silent for {SILENCE:?}"),
            Ok(Err(WireError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return "the actor closed the connection".into()
            }
            Ok(Err(e)) => return e.to_string(),
            Ok(Ok(frame)) => frame,
        };
        match frame.kind {
            KIND_CHUNK => {
                let seq = Chunk::peek_meta(&frame.body).ok().map(|(m, _)| m.seq);
                if chunks.send(frame.body).await.is_err() {
                    return "the learner dropped the link".into();
                }
                if let Some(seq) = seq {
                    received.send_replace(Some(seq));
                }
            }
            KIND_MESSAGE => match frame.message::<ActorMsg>() {
                Ok(ActorMsg::Heartbeat { .. }) => {}
                Ok(other) => return format!("unexpected message {other:?}"),
                Err(e) => return e.to_string(),
            },
            kind => return format!("unexpected frame kind {kind}"),
        }
    }
}

/// Sends the newest weights whenever they change, and acknowledgements after chunks arrive
/// and every [`ACK_EVERY`].
async fn write_updates(
    wr: &mut Writer,
    mut received: watch::Receiver<Option<u64>>,
    mut weights: watch::Receiver<Option<Arc<Vec<u8>>>>,
    shared: &Shared,
) -> String {
    let mut tick = tokio::time::interval(ACK_EVERY);
    // The current weights first (a new actor starts from the learner's).
    let mut blob = weights.borrow_and_update().clone();
    loop {
        if let Some(b) = blob.take() {
            if let Err(e) = write_data_async(wr, KIND_WEIGHTS, &b).await {
                return format!("sending weights: {e}");
            }
        }
        let ack = LearnerMsg::Ack {
            received: *received.borrow_and_update(),
            shutdown: shared.shutdown.load(Ordering::SeqCst),
        };
        if let Err(e) = write_message_async(wr, &ack).await {
            return format!("sending an acknowledgement: {e}");
        }
        tokio::select! {
            changed = weights.changed() => {
                if changed.is_err() {
                    return "the learner stopped".into();
                }
                blob = weights.borrow_and_update().clone();
            }
            changed = received.changed() => {
                if changed.is_err() {
                    // The reader ended; the select in `session` reports why.
                    std::future::pending::<()>().await;
                }
            }
            _ = tick.tick() => {}
        }
    }
}
