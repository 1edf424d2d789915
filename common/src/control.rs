//! The control plane between learner and actors: request/response messages in
//! length-prefixed bincode frames, transport-neutral (the learner serves a Unix socket; a TCP
//! listener can speak the same frames).
//!
//! ```text
//! frame = length (u32 LE, bytes after this field) | protocol version (u32 LE) | bincode body
//! ```
//!
//! Every frame carries [`PROTOCOL_VERSION`]; a frame of another version is refused with both
//! versions named, before its body is decoded. Frames are at most [`MAX_FRAME`] bytes.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::chunk::ChunkSchema;
use crate::envs::Space;

pub const PROTOCOL_VERSION: u32 = 5;
pub const MAX_FRAME: usize = 1 << 20;

/// What an actor asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Join the run: the learner checks the schema and answers with the actor's ring and the
    /// weight segment, or refuses naming the mismatch.
    Register(Register),
    /// Sent about once a second; the answer says whether to shut down.
    Heartbeat {
        actor_id: u32,
        incarnation: u32,
        chunks_sent: u64,
        full_waits: u64,
        policy_version: u64,
    },
    /// The learner's counters.
    Stats,
    /// Ask the learner to end the run.
    Shutdown,
}

/// An actor's registration: who it is and what its chunks will hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Register {
    pub actor_id: u32,
    pub incarnation: u32,
    pub pid: u32,
    pub env: String,
    /// The spaces of the actor's environment, as its registry builds it.
    pub observation_space: Space,
    pub action_space: Space,
    pub schema: ChunkSchema,
    /// The size of the actor's saved state now (`rollout::Actor::save_state`; 0: its
    /// environments cannot save theirs): a sync run's ring slots leave room for it after
    /// each chunk.
    pub state_bytes: u64,
}

/// What the learner answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Registered {
        /// Shared-memory segment of this actor's trajectory ring.
        ring: String,
        /// Shared-memory segment of the weight broadcast.
        weights: String,
        /// `sync` collection: after each chunk, wait for newer weights before the next one,
        /// and append the state saved right after collecting it to the chunk
        /// (`chunk::Chunk::append_state`): an actor that (re)starts resumes from the state
        /// after its last chunk an update used.
        sync: bool,
        /// A saved actor state to continue from (`rollout::Actor::restore`).
        restore: Option<Vec<u8>>,
    },
    Refused {
        reason: String,
    },
    Ack {
        /// The run is ending: finish the current chunk and exit.
        shutdown: bool,
    },
    Stats(LearnerStats),
}

/// Counters of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LearnerStats {
    pub chunks: u64,
    pub frames: u64,
    pub corrupted: u64,
    pub policy_version: u64,
    pub actors_registered: u64,
}

/// A frame that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("control frame: {0}")]
    Io(#[from] std::io::Error),
    #[error("control frame: protocol version {got}, this build speaks {PROTOCOL_VERSION}")]
    Version { got: u32 },
    #[error("control frame: length {len} outside 4..={MAX_FRAME}")]
    Length { len: usize },
    #[error("control frame: body does not decode: {0}")]
    Body(String),
}

/// bincode with a decode limit of one frame: a length inside a body that claims more than the
/// frame holds is an error, not an allocation (found by the `control_frame` fuzz target).
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

pub fn encode_frame<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let body = bincode::serde::encode_to_vec(message, config())
        .map_err(|e| FrameError::Body(e.to_string()))?;
    let len = body.len() + 4;
    if len > MAX_FRAME {
        return Err(FrameError::Length { len });
    }
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Checks a frame's length field; returns the bytes that follow it.
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(prefix) as usize;
    if !(4..=MAX_FRAME).contains(&len) {
        return Err(FrameError::Length { len });
    }
    Ok(len)
}

/// Decodes the bytes after a frame's length field (version and body).
pub fn decode_frame<T: DeserializeOwned>(rest: &[u8]) -> Result<T, FrameError> {
    let (version, body) = rest.split_first_chunk().expect("length checked >= 4");
    let got = u32::from_le_bytes(*version);
    if got != PROTOCOL_VERSION {
        return Err(FrameError::Version { got });
    }
    let (message, used) = bincode::serde::decode_from_slice(body, config())
        .map_err(|e| FrameError::Body(e.to_string()))?;
    let trailing = body.len() - used;
    if trailing > 0 {
        return Err(FrameError::Body(format!("{trailing} trailing bytes")));
    }
    Ok(message)
}

pub fn write_frame<T: Serialize>(w: &mut impl Write, message: &T) -> Result<(), FrameError> {
    w.write_all(&encode_frame(message)?)?;
    w.flush()?;
    Ok(())
}

pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut prefix = [0u8; 4];
    r.read_exact(&mut prefix)?;
    let mut rest = vec![0u8; frame_len(prefix)?];
    r.read_exact(&mut rest)?;
    decode_frame(&rest)
}

/// One request, one response, on a blocking stream.
pub fn call(stream: &mut (impl Read + Write), request: &Request) -> Result<Response, FrameError> {
    write_frame(stream, request)?;
    read_frame(stream)
}

/// What differs between the run's schema and an actor's, named field by field; `None` when
/// they are equal.
pub fn schema_mismatch(expected: &ChunkSchema, got: &ChunkSchema) -> Option<String> {
    let mut diffs = Vec::new();
    macro_rules! fields {
        ($($f:ident),*) => {$(
            if expected.$f != got.$f {
                diffs.push(format!(
                    "{} = {:?} (the run has {:?})",
                    stringify!($f),
                    got.$f,
                    expected.$f
                ));
            }
        )*};
    }
    fields!(
        envs,
        steps,
        obs_dim,
        images,
        action,
        cell,
        num_layers,
        hidden_size
    );
    (!diffs.is_empty()).then(|| format!("schema mismatch: {}", diffs.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ActionKind;
    use recur_rnn::CellKind;

    fn schema() -> ChunkSchema {
        ChunkSchema {
            envs: 4,
            steps: 8,
            obs_dim: 2,
            action: ActionKind::Discrete,
            cell: CellKind::Lstm,
            num_layers: 1,
            hidden_size: 64,
            images: Vec::new(),
        }
    }

    #[test]
    fn frames_round_trip_over_a_stream() {
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let req = Request::Register(Register {
            actor_id: 3,
            incarnation: 1,
            pid: 42,
            env: "CartPole-v1".into(),
            observation_space: Space::Discrete { n: 2 },
            action_space: Space::Discrete { n: 2 },
            schema: schema(),
            state_bytes: 0,
        });
        write_frame(&mut a, &req).unwrap();
        assert_eq!(read_frame::<Request>(&mut b).unwrap(), req);
        write_frame(&mut b, &Response::Ack { shutdown: true }).unwrap();
        assert_eq!(
            read_frame::<Response>(&mut a).unwrap(),
            Response::Ack { shutdown: true }
        );
    }

    #[test]
    fn bad_frames_are_refused_with_the_reason() {
        let mut frame = encode_frame(&Request::Stats).unwrap();
        frame[4..8].copy_from_slice(&9u32.to_le_bytes());
        let err = read_frame::<Request>(&mut &frame[..])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("protocol version 9")
                && err.contains(&format!("speaks {PROTOCOL_VERSION}")),
            "{err}"
        );
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame::<Request>(&mut &huge[..]),
            Err(FrameError::Length { .. })
        ));
        let mut garbage = 8u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        garbage.extend_from_slice(&[0xff; 4]);
        assert!(matches!(
            read_frame::<Request>(&mut &garbage[..]),
            Err(FrameError::Body(_))
        ));
    }

    #[test]
    fn schema_mismatch_names_every_differing_field() {
        assert_eq!(schema_mismatch(&schema(), &schema()), None);
        let other = ChunkSchema {
            hidden_size: 32,
            cell: CellKind::Gru,
            ..schema()
        };
        let msg = schema_mismatch(&schema(), &other).unwrap();
        assert!(
            msg.contains("hidden_size = 32 (the run has 64)")
                && msg.contains("cell = Gru (the run has Lstm)"),
            "{msg}"
        );
    }
}
