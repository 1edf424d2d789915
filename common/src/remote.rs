//! The wire protocol of remote actors: one authenticated TCP connection per actor carries its
//! control messages, its chunks (the same encoding and CRC as the shared-memory ring) and the
//! learner's weights (the same blobs as the weight segment).
//!
//! ```text
//! frame = length (u32 LE, bytes after this field) | kind (u8) | body
//!   kind 1 message: protocol version (u32 LE) | bincode of ActorMsg / LearnerMsg
//!   kind 2 chunk:   an encoded chunk (common::chunk: magic, header, columns, CRC-32)
//!   kind 3 weights: a weight blob (common::weights: magic, layout hash, version, values)
//! ```
//!
//! The connection is TLS 1.3 ([`crate::tls`]) unless the learner runs in plaintext (loopback,
//! or `--insecure-plaintext`); the frames are the same either way.
//!
//! A connection opens with [`ActorMsg::Hello`] carrying the run token (32 bytes, compared in
//! constant time by [`token_matches`]); the learner reads nothing else before it, and reads
//! the hello with a limit of [`HELLO_MAX`] bytes. Every reader checks a frame's length against
//! the limit of what it expects **before** allocating: an oversized or malformed frame ends
//! the connection, never the process.
//!
//! The session: `Hello` -> [`LearnerMsg::Welcome`] (the incarnation, the actor's arguments:
//! one [`ActorArgs`] with the environment, the policy, the seed and the exploration) -> `Register` (spaces and schema, checked like a local actor's)
//! -> [`LearnerMsg::Registered`] (the sequence number to continue from) -> chunks and
//! heartbeats one way, weights and acknowledgements the other.

use std::io::{Read, Write};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::actor_args::ActorArgs;
use crate::chunk::ChunkSchema;
use crate::envs::Space;
use crate::tls::{hex_bytes, Fingerprint};

/// Bumped whenever a message changes shape (2: `Welcome` carries an [`ActorArgs`]; 3: its
/// policy is the learner's fitted policy config, whole).
pub const REMOTE_PROTOCOL_VERSION: u32 = 4;
/// The largest frame the learner reads before a connection has presented the token.
pub const HELLO_MAX: usize = 4096;
/// The largest message frame either side reads (chunks and weights have their own limits,
/// from the run's schema and weight layout).
pub const MESSAGE_MAX: usize = 1 << 20;
/// Token length in bytes (256 bits).
pub const TOKEN_BYTES: usize = 32;

pub const KIND_MESSAGE: u8 = 1;
pub const KIND_CHUNK: u8 = 2;
pub const KIND_WEIGHTS: u8 = 3;

/// What a remote actor sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ActorMsg {
    /// The first frame of every connection.
    Hello {
        token: [u8; TOKEN_BYTES],
        actor_id: u32,
        /// `Some(incarnation)`: the same process reconnecting after a broken link, to continue
        /// that incarnation's sequence; `None`: a new process (a new incarnation).
        resume: Option<u32>,
        pid: u32,
        host: String,
    },
    /// Join the run (after `Welcome`): checked like a local actor's registration.
    Register {
        env: String,
        observation_space: Space,
        action_space: Space,
        schema: ChunkSchema,
    },
    /// Sent every quarter second: the learner drops a connection silent for longer than its
    /// timeout.
    Heartbeat {
        chunks_sent: u64,
        policy_version: u64,
    },
}

/// What the learner sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LearnerMsg {
    /// The token matched: the actor's incarnation and the arguments it runs with (the same the
    /// learner gives its own actors), and the frame limits of the run.
    Welcome {
        incarnation: u32,
        /// Boxed: the largest message by far (bincode writes it as the value itself).
        args: Box<ActorArgs>,
        /// Exact size of an encoded chunk of this run.
        chunk_bytes: u64,
        /// Exact size of a weight blob of this run.
        weight_bytes: u64,
        /// Chunks an actor may have sent and not yet seen acknowledged.
        window: u32,
    },
    /// Registration accepted: send chunks from sequence number `next_seq` on (0 for a new
    /// incarnation; after a reconnect, the first one the learner does not hold).
    Registered { next_seq: u64 },
    /// The connection is refused (wrong token, mismatching schema, ...); it is closed next.
    Refused { reason: String },
    /// Sent a few times a second and after chunks arrive: the highest sequence number the
    /// learner holds for this incarnation, and whether the run is ending.
    Ack {
        received: Option<u64>,
        shutdown: bool,
    },
}

/// A frame that cannot be read or is not what the reader expects.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes where at most {max} are accepted (kind {kind})")]
    TooLarge { len: usize, max: usize, kind: u8 },
    #[error("frame of kind {kind} where {expected} was expected")]
    Kind { kind: u8, expected: &'static str },
    #[error("empty frame")]
    Empty,
    #[error("message of protocol version {got}, this build speaks {REMOTE_PROTOCOL_VERSION}")]
    Version { got: u32 },
    #[error("message does not decode: {0}")]
    Body(String),
}

pub fn message_frame<T: Serialize>(message: &T) -> Result<Vec<u8>, WireError> {
    let body = bincode::serde::encode_to_vec(message, bincode::config::standard())
        .map_err(|e| WireError::Body(e.to_string()))?;
    let mut out = Vec::with_capacity(9 + body.len());
    out.extend_from_slice(&((body.len() + 5) as u32).to_le_bytes());
    out.push(KIND_MESSAGE);
    out.extend_from_slice(&REMOTE_PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The 5-byte head of a chunk or weights frame whose body (`len` bytes) follows.
pub fn data_head(kind: u8, len: usize) -> [u8; 5] {
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&((len + 1) as u32).to_le_bytes());
    head[4] = kind;
    head
}

/// The limits a reader applies: the largest body it accepts per frame kind (0: not accepted).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub message: usize,
    pub chunk: usize,
    pub weights: usize,
}

impl Limits {
    /// Before the token: a small message only.
    pub const HELLO: Limits = Limits {
        message: HELLO_MAX,
        chunk: 0,
        weights: 0,
    };

    /// After the handshake, towards an actor: messages, and weights blobs up to `weights` bytes
    /// (0: none); never chunks.
    pub const fn messages(weights: usize) -> Limits {
        Limits {
            message: MESSAGE_MAX,
            chunk: 0,
            weights,
        }
    }

    /// Checks a frame's 5-byte head (length field, kind); returns the frame with a zeroed body
    /// of the length the head announces, to be read into.
    fn frame(&self, head: [u8; 5]) -> Result<Frame, WireError> {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let kind = head[4];
        if len == 0 {
            return Err(WireError::Empty);
        }
        let max = match kind {
            KIND_MESSAGE => self.message,
            KIND_CHUNK => self.chunk,
            KIND_WEIGHTS => self.weights,
            _ => 0,
        };
        if max == 0 {
            return Err(WireError::Kind {
                kind,
                expected: "a frame kind this side accepts",
            });
        }
        if len - 1 > max {
            return Err(WireError::TooLarge {
                len: len - 1,
                max,
                kind,
            });
        }
        Ok(Frame {
            kind,
            body: vec![0u8; len - 1],
        })
    }
}

/// One frame: its kind and body.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub body: Vec<u8>,
}

impl Frame {
    /// The body as a message of type `T` (an error if the frame is another kind).
    pub fn message<T: DeserializeOwned>(&self) -> Result<T, WireError> {
        if self.kind != KIND_MESSAGE {
            return Err(WireError::Kind {
                kind: self.kind,
                expected: "a message",
            });
        }
        let Some((version, body)) = self.body.split_first_chunk() else {
            return Err(WireError::Body(format!("{} bytes", self.body.len())));
        };
        let got = u32::from_le_bytes(*version);
        if got != REMOTE_PROTOCOL_VERSION {
            return Err(WireError::Version { got });
        }
        // The limit of a message frame: a length inside the body that claims more is an error,
        // not an allocation (found by the `remote_frame` fuzz target).
        let config = bincode::config::standard().with_limit::<MESSAGE_MAX>();
        let (message, used) = bincode::serde::decode_from_slice(body, config)
            .map_err(|e| WireError::Body(e.to_string()))?;
        let trailing = body.len() - used;
        if trailing > 0 {
            return Err(WireError::Body(format!("{trailing} trailing bytes")));
        }
        Ok(message)
    }
}

/// Reads one frame from a blocking stream, checking its length against `limits` before
/// allocating its body.
pub fn read_frame(r: &mut impl Read, limits: &Limits) -> Result<Frame, WireError> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let mut frame = limits.frame(head)?;
    r.read_exact(&mut frame.body)?;
    Ok(frame)
}

pub fn write_message<T: Serialize>(w: &mut impl Write, message: &T) -> Result<(), WireError> {
    w.write_all(&message_frame(message)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame from an async stream (tokio), checking its length against `limits`
/// before allocating its body.
pub async fn read_frame_async<R>(r: &mut R, limits: &Limits) -> Result<Frame, WireError>
where
    R: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 5];
    r.read_exact(&mut head).await?;
    let mut frame = limits.frame(head)?;
    r.read_exact(&mut frame.body).await?;
    Ok(frame)
}

pub async fn write_message_async<W, T>(w: &mut W, message: &T) -> Result<(), WireError>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    use tokio::io::AsyncWriteExt;
    w.write_all(&message_frame(message)?).await?;
    // A TLS stream holds records until flushed (a no-op on a bare socket).
    w.flush().await?;
    Ok(())
}

/// Writes a chunk or weights frame (`bytes` as its body) to an async stream.
pub async fn write_data_async<W>(w: &mut W, kind: u8, bytes: &[u8]) -> Result<(), WireError>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    w.write_all(&data_head(kind, bytes.len())).await?;
    w.write_all(bytes).await?;
    w.flush().await?;
    Ok(())
}

/// A fresh 256-bit run token from the operating system's random source.
pub fn new_token() -> Result<[u8; TOKEN_BYTES], getrandom::Error> {
    let mut token = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut token)?;
    Ok(token)
}

/// The token as a token file holds it: 64 lowercase hex digits and a newline.
pub fn token_hex(token: &[u8; TOKEN_BYTES]) -> String {
    let mut s: String = token.iter().map(|b| format!("{b:02x}")).collect();
    s.push('\n');
    s
}

/// A token file's content: 64 hex digits (surrounding whitespace ignored).
pub fn parse_token(text: &str) -> Result<[u8; TOKEN_BYTES], String> {
    let t = text.trim();
    hex_bytes(t).ok_or_else(|| {
        format!(
            "expected {} hex digits, found {} characters",
            2 * TOKEN_BYTES,
            t.len()
        )
    })
}

/// What a token file holds: the run token and, when the learner serves TLS, the fingerprint
/// of its certificate (which actors pin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenFile {
    pub token: [u8; TOKEN_BYTES],
    pub fingerprint: Option<Fingerprint>,
}

/// The prefix of a token file's fingerprint line.
const FINGERPRINT_PREFIX: &str = "tls-sha256 ";

impl TokenFile {
    /// The file's text: the token's 64 hex digits on the first line, then
    /// `tls-sha256 <64 hex digits>` when there is a fingerprint.
    pub fn text(&self) -> String {
        let mut s = token_hex(&self.token);
        if let Some(f) = &self.fingerprint {
            s.push_str(&format!("{FINGERPRINT_PREFIX}{f}\n"));
        }
        s
    }

    /// Parses [`TokenFile::text`]; a file of the token alone (written before TLS) has no
    /// fingerprint.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let token = parse_token(lines.next().unwrap_or(""))?;
        let fingerprint = match lines.next() {
            None => None,
            Some(line) => {
                let hex = line.strip_prefix(FINGERPRINT_PREFIX).ok_or_else(|| {
                    format!(
                        "second line: expected {FINGERPRINT_PREFIX:?} and 64 hex digits, \
                         found {:?}",
                        line.chars().take(80).collect::<String>()
                    )
                })?;
                Some(Fingerprint::parse(hex).map_err(|e| format!("fingerprint: {e}"))?)
            }
        };
        if let Some(extra) = lines.next() {
            return Err(format!(
                "unexpected third line {:?}",
                extra.chars().take(80).collect::<String>()
            ));
        }
        Ok(TokenFile { token, fingerprint })
    }
}

/// Reads a token file (as written by the learner into `RUN_DIR/token`); the error names it.
pub fn read_token_file(path: &Path) -> anyhow::Result<TokenFile> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| TokenFile::parse(&text))
        .map_err(|e| anyhow::anyhow!("token file {}: {e}", path.display()))
}

/// Whether `presented` equals `token`, in time independent of where they differ.
pub fn token_matches(token: &[u8; TOKEN_BYTES], presented: &[u8; TOKEN_BYTES]) -> bool {
    use subtle::ConstantTimeEq;
    token.ct_eq(presented).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_limits_are_checked_before_allocating() {
        let hello = ActorMsg::Hello {
            token: [7; TOKEN_BYTES],
            actor_id: 3,
            resume: Some(1),
            pid: 42,
            host: "node-2".into(),
        };
        let frame = message_frame(&hello).unwrap();
        let got = read_frame(&mut &frame[..], &Limits::HELLO).unwrap();
        assert_eq!(got.message::<ActorMsg>().unwrap(), hello);

        // A length field of 4 GiB is refused from the 5-byte head alone.
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.push(KIND_MESSAGE);
        let err = read_frame(&mut &huge[..], &Limits::HELLO).unwrap_err();
        assert!(
            matches!(err, WireError::TooLarge { max: HELLO_MAX, .. }),
            "{err}"
        );
        // A chunk before the hello: a kind the reader does not accept.
        let head = data_head(KIND_CHUNK, 10);
        let err = read_frame(&mut &head[..], &Limits::HELLO).unwrap_err();
        assert!(matches!(err, WireError::Kind { kind: 2, .. }), "{err}");
        // Random bytes inside a well-sized message frame do not decode.
        let mut garbage = data_head(KIND_MESSAGE, 12).to_vec();
        garbage.extend_from_slice(&REMOTE_PROTOCOL_VERSION.to_le_bytes());
        garbage.extend_from_slice(&[0xff; 8]);
        let frame = read_frame(&mut &garbage[..], &Limits::HELLO).unwrap();
        assert!(matches!(
            frame.message::<ActorMsg>(),
            Err(WireError::Body(_))
        ));
        // Another protocol version is named.
        let mut other = message_frame(&hello).unwrap();
        other[5..9].copy_from_slice(&9u32.to_le_bytes());
        let frame = read_frame(&mut &other[..], &Limits::HELLO).unwrap();
        let err = frame.message::<ActorMsg>().unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
    }

    #[test]
    fn tokens_are_random_hex_and_compared_whole() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(parse_token(&token_hex(&a)).unwrap(), a);
        assert!(token_matches(&a, &a));
        let mut c = a;
        c[31] ^= 1;
        assert!(!token_matches(&a, &c));
        assert!(parse_token("abc").unwrap_err().contains("64 hex digits"));
        assert!(parse_token(&"g".repeat(64)).is_err());
    }

    #[test]
    fn token_files_carry_the_fingerprint_and_old_ones_still_read() {
        let token = new_token().unwrap();
        let old = TokenFile::parse(&token_hex(&token)).unwrap();
        assert_eq!(old.token, token);
        assert_eq!(old.fingerprint, None);
        let with = TokenFile {
            token,
            fingerprint: Some(Fingerprint::of(b"cert")),
        };
        assert_eq!(TokenFile::parse(&with.text()).unwrap(), with);
        assert_eq!(with.text().lines().count(), 2);
        let err = TokenFile::parse(&format!("{}sha1 00\n", token_hex(&token))).unwrap_err();
        assert!(
            err.contains("second line") && err.contains("sha1 00"),
            "{err}"
        );
        let err = TokenFile::parse(&format!("{}x\ny\n", with.text())).unwrap_err();
        assert!(err.contains("third line"), "{err}");
    }
}
