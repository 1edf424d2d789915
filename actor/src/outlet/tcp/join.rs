//! Joining a learner over TCP: the connection (TLS 1.3 pinning the token file's certificate
//! fingerprint, or plaintext), the hello with the run token and the learner's welcome, the
//! registration. Used for the first connection ([`Session::open`]) and for every reconnect.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::actor_args::ActorArgs;
use common::remote::{
    read_frame_async, write_message_async, ActorMsg, LearnerMsg, Limits, WireError, TOKEN_BYTES,
};
use common::tls::Fingerprint;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;

/// How long the first connection is retried while the learner is not listening yet (a
/// cluster launcher starts learner and actors together).
const FIRST_CONNECT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the TLS handshake and the learner's welcome may take.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the learner: a bare socket, or a TLS session with the pinned certificate.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
pub(super) type Stream = Box<dyn Io>;

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
    pub(super) async fn connect(&self) -> Result<Stream, HandshakeError> {
        let link = |e: std::io::Error| HandshakeError::Link(e.into());
        let mut last =
            std::io::Error::new(ErrorKind::NotFound, format!("{}: no address", self.addr));
        let mut socket = None;
        for a in tokio::net::lookup_host(&self.addr).await.map_err(link)? {
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
    pub(super) learner: Learner,
    pub(super) actor_id: u32,
    pub(super) runtime: Runtime,
    pub(super) stream: Stream,
    pub welcome: Welcome,
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
pub(super) enum HandshakeError {
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
pub(super) async fn hello(
    stream: &mut Stream,
    token: &[u8; TOKEN_BYTES],
    actor_id: u32,
    resume: Option<u32>,
) -> Result<Welcome, HandshakeError> {
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
    match ask(stream, &hello, HELLO_TIMEOUT, "welcome").await? {
        LearnerMsg::Welcome {
            incarnation,
            args,
            chunk_bytes,
            weight_bytes,
            window,
        } => Ok(Welcome {
            incarnation,
            args: *args,
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

/// Sends the actor's registration (an [`ActorMsg::Register`], kept for reconnects) and reads
/// the sequence number to continue at.
pub(super) async fn register(
    stream: &mut Stream,
    message: &ActorMsg,
) -> Result<u64, HandshakeError> {
    // The learner's main thread answers between two updates.
    let within = Duration::from_secs(60);
    match ask(stream, message, within, "answer to the registration").await? {
        LearnerMsg::Registered { next_seq } => Ok(next_seq),
        LearnerMsg::Refused { reason } => Err(HandshakeError::Refused(reason)),
        other => Err(HandshakeError::Link(anyhow::anyhow!(
            "expected an answer to the registration, got {other:?}"
        ))),
    }
}

/// Sends `message` and reads the learner's answer, within `within` (`what`: the answer the
/// error names when none comes).
async fn ask(
    stream: &mut Stream,
    message: &ActorMsg,
    within: Duration,
    what: &str,
) -> Result<LearnerMsg, HandshakeError> {
    let link = |e: WireError| HandshakeError::Link(e.into());
    let exchange = async {
        write_message_async(stream, message).await?;
        read_frame_async(stream, &Limits::messages(0)).await
    };
    let frame = tokio::time::timeout(within, exchange)
        .await
        .map_err(|_| HandshakeError::Link(anyhow::anyhow!("no {what} within {within:?}")))?
        .map_err(link)?;
    frame.message::<LearnerMsg>().map_err(link)
}
