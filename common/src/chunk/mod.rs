//! The trajectory chunk: `T` steps of `E` environments, the unit that crosses processes (shared
//! memory, TCP, dataset files) with one encoding.
//!
//! # Fields (columnar, row-major `[E, T, ...]`, little-endian)
//!
//! | key | dtype | per step |
//! | --- | --- | --- |
//! | `observation` | f32 | `[obs_dim]` (the values lane, `common::envs::Space`) |
//! | `pixels` | u8 | `[P]`: the images of the pixels lane, each `[H, W, C]`, back to back (only with images) |
//! | `action` | i64 (discrete) / f32 (box) | `[]` / `[action_dim]` |
//! | `sample_log_prob` | f32 | `[]` |
//! | `state_value` | f32 | `[]` |
//! | `is_init` | u8 | `[]` |
//! | `rs_h` | f32 | `[L, H]` (the state fed to the policy at that step) |
//! | `rs_c` | f32 | `[L, H]` (LSTM only) |
//! | `next.observation` | f32 | `[obs_dim]` |
//! | `next.pixels` | u8 | `[P]` (only with images) |
//! | `next.reward` | f32 | `[]` |
//! | `next.terminated`, `next.truncated`, `next.done` | u8 | `[]` |
//! | `collector.traj_ids` | i64 | `[]` (see [`traj_id`]) |
//!
//! # Encoding
//!
//! ```text
//! offset  size  what
//! 0       8     magic b"RECURCK1"
//! 8       4     layout version (u32 LE) = 1
//! 12      4     header length HL (u32 LE)
//! 16      HL    header: ChunkMeta, bincode with fixed-width little-endian integers
//! 16+HL   P     payload: the columns above in that order, P = meta.payload_len
//! ```
//!
//! A chunk may be followed by the state its actor saved right after collecting it (sync runs;
//! [`Chunk::append_state`]): `state length (u32 LE) | CRC-32 of the state (u32 LE) | state`.
//! Rings carry it; datasets and TCP frames never do.
//!
//! `meta.payload_crc32` is the CRC-32 (IEEE) of the payload. Decoding checks the magic, the
//! version, every length against the buffer, the schema hash and the checksum, and rejects
//! NaN/Inf in float columns naming the field.

use serde::{Deserialize, Serialize};

pub use crate::envs::ImagePart;
use crate::hash::fnv1a;
use recur_rnn::CellKind;

pub const CHUNK_MAGIC: [u8; 8] = *b"RECURCK1";
pub const LAYOUT_VERSION: u32 = 1;
/// Bytes before the header: magic, version, header length.
pub const PREFIX_LEN: usize = 16;
/// The actor-state trailer's header: its length and CRC-32 ([`Chunk::append_state`]).
pub const STATE_TRAILER: usize = 8;

/// How actions are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// One `i64` index per step.
    Discrete,
    /// `dim` floats per step.
    Continuous { dim: usize },
    /// `dim` `i64` indices per step (one per component of a multi-discrete action).
    MultiDiscrete { dim: usize },
}

/// The fixed layout of a run's chunks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkSchema {
    /// Environments per chunk (`E`).
    pub envs: usize,
    /// Steps per chunk (`T`).
    pub steps: usize,
    pub obs_dim: usize,
    pub action: ActionKind,
    pub cell: CellKind,
    pub num_layers: usize,
    pub hidden_size: usize,
    /// The images of an observation's pixels lane (the `pixels` columns), empty without.
    #[serde(default)]
    pub images: Vec<ImagePart>,
}

/// Element type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    F32,
    I64,
    U8,
}

impl ColumnType {
    pub fn size(self) -> usize {
        match self {
            ColumnType::F32 => 4,
            ColumnType::I64 => 8,
            ColumnType::U8 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::F32 => "f32",
            ColumnType::I64 => "i64",
            ColumnType::U8 => "u8",
        }
    }
}

/// One column of the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub key: &'static str,
    pub dtype: ColumnType,
    /// Shape of one step's entry.
    pub per_step: Vec<usize>,
}

impl ChunkSchema {
    pub fn action_dim(&self) -> usize {
        match self.action {
            ActionKind::Discrete => 1,
            ActionKind::Continuous { dim } | ActionKind::MultiDiscrete { dim } => dim,
        }
    }

    /// The columns, in encoding order.
    pub fn fields(&self) -> Vec<FieldSpec> {
        self.columns()
            .map(|(field, dtype, per_step)| FieldSpec {
                key: field.key,
                dtype,
                per_step,
            })
            .collect()
    }

    /// The entries of [`FIELDS`] that this schema's chunks hold, with their element type and
    /// per-step shape, in encoding order.
    fn columns(&self) -> impl Iterator<Item = (&'static Field, ColumnType, Vec<usize>)> + '_ {
        FIELDS.iter().filter_map(move |field| {
            let (dtype, shape) = field.spec(self)?;
            Some((field, dtype, shape))
        })
    }

    /// Bytes of one step's pixels (`P`): the images' sizes summed.
    pub fn pixels(&self) -> usize {
        self.images.iter().map(ImagePart::bytes).sum()
    }

    /// Steps in a chunk, `E * T`.
    pub fn frames(&self) -> usize {
        self.envs * self.steps
    }

    /// Bytes of an encoded payload.
    pub fn payload_len(&self) -> usize {
        self.fields()
            .iter()
            .map(|f| f.per_step.iter().product::<usize>() * f.dtype.size() * self.frames())
            .sum()
    }

    /// A stable 64-bit hash of the layout (FNV-1a over its canonical description), stamped
    /// into every chunk so that a reader never decodes a chunk of another layout.
    pub fn hash(&self) -> u64 {
        let mut text = format!("v{LAYOUT_VERSION};E={};T={};", self.envs, self.steps);
        for f in self.fields() {
            text.push_str(&format!("{}:{}:{:?};", f.key, f.dtype.name(), f.per_step));
        }
        // Only schemas with images say so: the hashes of the others stay as they were.
        for image in &self.images {
            text.push_str(&format!("image:{:?}:{:?};", image.key, image.shape));
        }
        fnv1a(text.bytes())
    }
}

/// Per-chunk metadata (the encoded header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMeta {
    pub actor_id: u32,
    /// Incremented each time the supervisor restarts the actor.
    pub incarnation: u32,
    /// Per actor incarnation, from 0, without gaps.
    pub seq: u64,
    /// The policy version that produced every step of the chunk.
    pub policy_version: u64,
    pub schema_hash: u64,
    pub envs: u32,
    pub steps: u32,
    pub payload_len: u64,
    pub payload_crc32: u32,
}

impl ChunkMeta {
    /// The metadata a producer sets; the layout fields, sizes and checksum are filled in by
    /// [`Chunk::encode`].
    pub fn new(actor_id: u32, incarnation: u32, seq: u64, policy_version: u64) -> Self {
        ChunkMeta {
            actor_id,
            incarnation,
            seq,
            policy_version,
            schema_hash: 0,
            envs: 0,
            steps: 0,
            payload_len: 0,
            payload_crc32: 0,
        }
    }
}

/// Actions of a chunk.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionColumn {
    /// `[E, T]`, or `[E, T, dim]` for [`ActionKind::MultiDiscrete`].
    Discrete(Vec<i64>),
    /// `[E, T, action_dim]`
    Continuous(Vec<f32>),
}

/// One trajectory chunk, columns row-major `[E, T, ...]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    pub meta: ChunkMeta,
    pub observation: Vec<f32>,
    /// `[E, T, P]`, empty in a schema without images.
    pub pixels: Vec<u8>,
    pub action: ActionColumn,
    pub sample_log_prob: Vec<f32>,
    pub state_value: Vec<f32>,
    pub is_init: Vec<u8>,
    pub rs_h: Vec<f32>,
    pub rs_c: Option<Vec<f32>>,
    pub next_observation: Vec<f32>,
    pub next_pixels: Vec<u8>,
    pub next_reward: Vec<f32>,
    pub next_terminated: Vec<u8>,
    pub next_truncated: Vec<u8>,
    pub next_done: Vec<u8>,
    pub traj_ids: Vec<i64>,
}

/// What is wrong with an encoded chunk or a chunk's contents.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChunkError {
    #[error("chunk: bad magic {0:02x?} (expected \"RECURCK1\")")]
    Magic([u8; 8]),
    #[error("chunk: layout version {got}, this build reads {LAYOUT_VERSION}")]
    Version { got: u32 },
    #[error("chunk: {what} needs {need} bytes at offset {offset}, but the buffer holds {len}")]
    Bounds {
        what: &'static str,
        offset: usize,
        need: usize,
        len: usize,
    },
    #[error("chunk: header does not decode: {0}")]
    Header(String),
    #[error("chunk: schema hash {got:#018x} differs from this run's {expected:#018x}")]
    Schema { got: u64, expected: u64 },
    #[error("chunk: header says {field} = {got}, the schema says {expected}")]
    Layout {
        field: &'static str,
        got: u64,
        expected: u64,
    },
    #[error("chunk: payload checksum {got:#010x} differs from the header's {expected:#010x}")]
    Checksum { got: u32, expected: u32 },
    #[error("chunk: `{field}` holds {value} at element {index} (finite values only)")]
    NonFinite {
        field: &'static str,
        index: usize,
        value: f32,
    },
    #[error("chunk: actor-state trailer: {0}")]
    Trailer(String),
    #[error("chunk: `{field}` has {got} elements, the schema needs {expected}")]
    Length {
        field: &'static str,
        got: usize,
        expected: usize,
    },
}

impl Chunk {
    /// A zero-filled chunk of `schema`'s layout.
    pub fn zeros(schema: &ChunkSchema, meta: ChunkMeta) -> Self {
        let n = schema.frames();
        let state = n * schema.num_layers * schema.hidden_size;
        Chunk {
            meta,
            observation: vec![0.0; n * schema.obs_dim],
            pixels: vec![0; n * schema.pixels()],
            action: match schema.action {
                ActionKind::Discrete => ActionColumn::Discrete(vec![0; n]),
                ActionKind::Continuous { dim } => ActionColumn::Continuous(vec![0.0; n * dim]),
                ActionKind::MultiDiscrete { dim } => ActionColumn::Discrete(vec![0; n * dim]),
            },
            sample_log_prob: vec![0.0; n],
            state_value: vec![0.0; n],
            is_init: vec![0; n],
            rs_h: vec![0.0; state],
            rs_c: schema.cell.has_cell_state().then(|| vec![0.0; state]),
            next_observation: vec![0.0; n * schema.obs_dim],
            next_pixels: vec![0; n * schema.pixels()],
            next_reward: vec![0.0; n],
            next_terminated: vec![0; n],
            next_truncated: vec![0; n],
            next_done: vec![0; n],
            traj_ids: vec![0; n],
        }
    }

    /// Checks every column's length against `schema` and that float columns are finite.
    pub fn validate(&self, schema: &ChunkSchema) -> Result<(), ChunkError> {
        let held = |field: &Field| (field.get)(self).is_some();
        if let Some(field) = FIELDS.iter().find(|f| held(f) != f.present(schema)) {
            return Err(ChunkError::Length {
                field: field.key,
                got: FIELDS.iter().filter(|f| held(f)).count(),
                expected: FIELDS.iter().filter(|f| f.present(schema)).count(),
            });
        }
        for (field, dtype, per_step) in schema.columns() {
            let col = (field.get)(self).expect("presence checked above");
            let expected = per_step.iter().product::<usize>() * schema.frames();
            if col.len() != expected || col.dtype() != dtype {
                return Err(ChunkError::Length {
                    field: field.key,
                    got: col.len(),
                    expected,
                });
            }
            if let Column::F32(v) = col {
                if let Some((index, &value)) = v.iter().enumerate().find(|(_, x)| !x.is_finite()) {
                    return Err(ChunkError::NonFinite {
                        field: field.key,
                        index,
                        value,
                    });
                }
            }
        }
        Ok(())
    }

    /// Encodes the chunk, filling in `schema_hash`, sizes and checksum.
    pub fn encode(&self, schema: &ChunkSchema) -> Result<Vec<u8>, ChunkError> {
        self.validate(schema)?;
        let mut payload = Vec::with_capacity(schema.payload_len());
        for (field, ..) in schema.columns() {
            (field.get)(self).expect("validated").write_le(&mut payload);
        }
        let mut meta = self.meta.clone();
        meta.schema_hash = schema.hash();
        meta.envs = schema.envs as u32;
        meta.steps = schema.steps as u32;
        meta.payload_len = payload.len() as u64;
        meta.payload_crc32 = crc32fast::hash(&payload);
        let header = bincode::serde::encode_to_vec(&meta, header_config())
            .map_err(|e| ChunkError::Header(e.to_string()))?;
        let mut out = Vec::with_capacity(PREFIX_LEN + header.len() + payload.len());
        out.extend_from_slice(&CHUNK_MAGIC);
        out.extend_from_slice(&LAYOUT_VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// The total encoded length of the chunk that starts `bytes`, from its prefix and header
    /// alone (without checking the payload).
    pub fn encoded_len(bytes: &[u8]) -> Result<usize, ChunkError> {
        let (meta, header_end) = Self::peek_meta(bytes)?;
        // A header's payload_len is untrusted: past usize it is a bounds error, not an
        // overflow (found by the `chunk` fuzz target).
        usize::try_from(meta.payload_len)
            .ok()
            .and_then(|len| header_end.checked_add(len))
            .ok_or(ChunkError::Bounds {
                what: "payload",
                offset: header_end,
                need: usize::MAX,
                len: bytes.len(),
            })
    }

    /// Appends the state the actor saved right after collecting this chunk (sync runs: the
    /// state an actor restarting with its id continues from) to the encoded chunk `encoded`:
    /// `length u32 LE | CRC-32 u32 LE | state` ([`STATE_TRAILER`] bytes plus the state).
    pub fn append_state(encoded: &mut Vec<u8>, state: &[u8]) {
        let len = u32::try_from(state.len()).expect("an actor state under 4 GiB");
        encoded.extend_from_slice(&len.to_le_bytes());
        encoded.extend_from_slice(&crc32fast::hash(state).to_le_bytes());
        encoded.extend_from_slice(state);
    }

    /// Splits an encoded chunk from its actor-state trailer, if it has one: the chunk's bytes
    /// and the state, after checking the trailer's length against the buffer and its CRC.
    pub fn split_state(bytes: &[u8]) -> Result<(&[u8], Option<&[u8]>), ChunkError> {
        let end = Self::encoded_len(bytes)?;
        let (chunk, rest) = bytes.split_at(end.min(bytes.len()));
        if rest.is_empty() {
            return Ok((chunk, None));
        }
        if rest.len() < STATE_TRAILER {
            return Err(ChunkError::Trailer(format!(
                "{} bytes after the chunk, fewer than its header",
                rest.len()
            )));
        }
        let word = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        let (len, crc) = (word(0) as usize, word(4));
        let state = &rest[STATE_TRAILER..];
        if state.len() != len {
            return Err(ChunkError::Trailer(format!(
                "length {len}, {} bytes follow",
                state.len()
            )));
        }
        let got = crc32fast::hash(state);
        if got != crc {
            return Err(ChunkError::Trailer(format!(
                "CRC-32 {got:#010x} differs from its header's {crc:#010x}"
            )));
        }
        Ok((chunk, Some(state)))
    }

    /// The header of the chunk that starts `bytes` and the offset of its payload, after
    /// checking the magic, the version and the header's bounds (not the payload).
    pub fn peek_meta(bytes: &[u8]) -> Result<(ChunkMeta, usize), ChunkError> {
        let prefix = take(bytes, 0, PREFIX_LEN, "prefix")?;
        let magic: [u8; 8] = prefix[0..8].try_into().expect("8 bytes");
        if magic != CHUNK_MAGIC {
            return Err(ChunkError::Magic(magic));
        }
        let version = u32::from_le_bytes(prefix[8..12].try_into().expect("4 bytes"));
        if version != LAYOUT_VERSION {
            return Err(ChunkError::Version { got: version });
        }
        let header_len = u32::from_le_bytes(prefix[12..16].try_into().expect("4 bytes")) as usize;
        let header = take(bytes, PREFIX_LEN, header_len, "header")?;
        let (meta, used): (ChunkMeta, usize) =
            bincode::serde::decode_from_slice(header, header_config())
                .map_err(|e| ChunkError::Header(e.to_string()))?;
        if used != header_len {
            return Err(ChunkError::Header(format!(
                "header length {header_len} but {used} bytes decode"
            )));
        }
        Ok((meta, PREFIX_LEN + header_len))
    }

    /// Checks the payload checksum of the encoded chunk `bytes` (framing and bounds too).
    pub fn verify_checksum(bytes: &[u8]) -> Result<ChunkMeta, ChunkError> {
        let (meta, header_end) = Self::peek_meta(bytes)?;
        let payload = take(bytes, header_end, meta.payload_len as usize, "payload")?;
        payload_crc(payload, meta.payload_crc32)?;
        Ok(meta)
    }

    /// Decodes and validates a chunk of `schema`'s layout; every length and offset is checked
    /// against the buffer before it is read.
    pub fn decode(bytes: &[u8], schema: &ChunkSchema) -> Result<Chunk, ChunkError> {
        Self::decode_inner(bytes, schema, true)
    }

    /// [`decode`](Self::decode) for bytes whose checksum was already verified (the ring checks
    /// it while copying a slot out); everything else is still validated.
    pub fn decode_verified(bytes: &[u8], schema: &ChunkSchema) -> Result<Chunk, ChunkError> {
        Self::decode_inner(bytes, schema, false)
    }

    fn decode_inner(
        bytes: &[u8],
        schema: &ChunkSchema,
        check_crc: bool,
    ) -> Result<Chunk, ChunkError> {
        let (meta, header_end) = Self::peek_meta(bytes)?;
        if meta.schema_hash != schema.hash() {
            return Err(ChunkError::Schema {
                got: meta.schema_hash,
                expected: schema.hash(),
            });
        }
        let layout = [
            ("envs", meta.envs as u64, schema.envs as u64),
            ("steps", meta.steps as u64, schema.steps as u64),
            ("payload_len", meta.payload_len, schema.payload_len() as u64),
        ];
        for (field, got, expected) in layout {
            if got != expected {
                return Err(ChunkError::Layout {
                    field,
                    got,
                    expected,
                });
            }
        }
        let payload = take(bytes, header_end, meta.payload_len as usize, "payload")?;
        if check_crc {
            payload_crc(payload, meta.payload_crc32)?;
        }
        let mut chunk = Chunk::zeros(schema, meta);
        let mut pos = 0;
        for (field, dtype, per_step) in schema.columns() {
            let need = per_step.iter().product::<usize>() * schema.frames() * dtype.size();
            let bytes = take(payload, pos, need, "column")?;
            pos += need;
            (field.get_mut)(&mut chunk)
                .expect("a zeroed chunk holds its schema's columns")
                .read_le(bytes);
        }
        chunk.validate(schema)?;
        Ok(chunk)
    }
}

mod columns;

use columns::{Column, Field, FIELDS};

fn header_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_fixed_int_encoding()
        .with_little_endian()
}

/// Errs unless `payload`'s CRC-32 is `expected` (the header's).
fn payload_crc(payload: &[u8], expected: u32) -> Result<(), ChunkError> {
    let got = crc32fast::hash(payload);
    (got == expected)
        .then_some(())
        .ok_or(ChunkError::Checksum { got, expected })
}

fn take<'a>(
    bytes: &'a [u8],
    offset: usize,
    need: usize,
    what: &'static str,
) -> Result<&'a [u8], ChunkError> {
    offset
        .checked_add(need)
        .and_then(|end| bytes.get(offset..end))
        .ok_or(ChunkError::Bounds {
            what,
            offset,
            need,
            len: bytes.len(),
        })
}

/// A run-unique trajectory id: actor id (bits 62..52, < 2048), incarnation (51..44, mod 256),
/// env index (43..28, < 65536) and that env's episode counter (27..0, mod 2^28). Trajectories
/// of different actors, restarted actors, envs or episodes never share an id.
pub fn traj_id(actor_id: u32, incarnation: u32, env: usize, episode: u64) -> i64 {
    debug_assert!(actor_id < 2048 && env < 65536);
    (((actor_id as u64 & 0x7ff) << 52)
        | ((incarnation as u64 & 0xff) << 44)
        | ((env as u64 & 0xffff) << 28)
        | (episode & 0x0fff_ffff)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(cell: CellKind, action: ActionKind) -> ChunkSchema {
        ChunkSchema {
            envs: 3,
            steps: 4,
            obs_dim: 2,
            action,
            cell,
            num_layers: 2,
            hidden_size: 5,
            images: Vec::new(),
        }
    }

    fn filled(schema: &ChunkSchema) -> Chunk {
        let mut c = Chunk::zeros(schema, ChunkMeta::new(7, 1, 42, 9));
        for (i, x) in c.observation.iter_mut().enumerate() {
            *x = i as f32 * 0.5;
        }
        for (i, x) in c.rs_h.iter_mut().enumerate() {
            *x = -(i as f32);
        }
        if let Some(rc) = &mut c.rs_c {
            rc.iter_mut().for_each(|x| *x = 3.25);
        }
        c.is_init[0] = 1;
        c.next_done[5] = 1;
        c.traj_ids = (0..12).map(|e| traj_id(7, 1, e / 4, 3)).collect();
        if let ActionColumn::Discrete(a) = &mut c.action {
            a[2] = 1;
        }
        c
    }

    #[test]
    fn round_trip_every_layout() {
        for cell in [CellKind::Lstm, CellKind::Gru] {
            for action in [ActionKind::Discrete, ActionKind::Continuous { dim: 3 }] {
                let s = schema(cell, action);
                let c = filled(&s);
                let bytes = c.encode(&s).unwrap();
                assert_eq!(Chunk::encoded_len(&bytes).unwrap(), bytes.len());
                let back = Chunk::decode(&bytes, &s).unwrap();
                assert_eq!(back.observation, c.observation);
                assert_eq!(back.rs_h, c.rs_h);
                assert_eq!(back.rs_c, c.rs_c);
                assert_eq!(back.action, c.action);
                assert_eq!(back.traj_ids, c.traj_ids);
                assert_eq!(
                    (back.meta.seq, back.meta.actor_id, back.meta.policy_version),
                    (42, 7, 9)
                );
                assert_eq!(back.meta.schema_hash, s.hash());
            }
        }
    }

    /// A schema whose observation is MiniGrid's: a `[7, 7, 3]` image beside 4 values.
    fn image_schema() -> ChunkSchema {
        ChunkSchema {
            obs_dim: 4,
            images: vec![ImagePart {
                key: "image".into(),
                shape: [7, 7, 3],
            }],
            ..schema(CellKind::Gru, ActionKind::Discrete)
        }
    }

    #[test]
    fn an_image_costs_one_byte_a_pixel_and_round_trips() {
        let plain = ChunkSchema {
            obs_dim: 4,
            ..schema(CellKind::Gru, ActionKind::Discrete)
        };
        let s = image_schema();
        assert_eq!(s.pixels(), 147);
        // `pixels` and `next.pixels`: one byte per pixel per step, nothing else added.
        assert_eq!(s.payload_len() - plain.payload_len(), 2 * 147 * s.frames());
        assert_ne!(s.hash(), plain.hash());
        let other = ChunkSchema {
            images: vec![ImagePart {
                key: "image".into(),
                shape: [7, 3, 7],
            }],
            ..image_schema()
        };
        assert_ne!(other.hash(), s.hash(), "an image's shape is in the hash");
        let mut c = filled(&plain);
        assert!(c.pixels.is_empty());
        c = Chunk {
            pixels: (0..s.frames() * 147).map(|i| (i * 7 % 256) as u8).collect(),
            next_pixels: (0..s.frames() * 147).map(|i| (i * 3 % 251) as u8).collect(),
            ..c
        };
        let bytes = c.encode(&s).unwrap();
        assert_eq!(bytes.len(), Chunk::encoded_len(&bytes).unwrap());
        let back = Chunk::decode(&bytes, &s).unwrap();
        assert_eq!(
            back,
            Chunk {
                meta: back.meta.clone(),
                ..c.clone()
            }
        );
        // A chunk without its pixels, or a plain chunk read as one with images, is refused.
        let no_pixels = Chunk {
            pixels: Vec::new(),
            ..c.clone()
        };
        assert!(matches!(
            no_pixels.encode(&s),
            Err(ChunkError::Length {
                field: "pixels",
                ..
            })
        ));
        let plain_bytes = filled(&plain).encode(&plain).unwrap();
        assert!(matches!(
            Chunk::decode(&plain_bytes, &s),
            Err(ChunkError::Schema { .. })
        ));
    }

    #[test]
    fn corruption_is_detected_and_named() {
        let s = schema(CellKind::Lstm, ActionKind::Discrete);
        let bytes = filled(&s).encode(&s).unwrap();
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(Chunk::decode(&bad, &s), Err(ChunkError::Magic(_))));
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(
            Chunk::decode(&bad, &s),
            Err(ChunkError::Checksum { .. })
        ));
        assert!(matches!(
            Chunk::decode(&bytes[..bytes.len() - 1], &s),
            Err(ChunkError::Bounds {
                what: "payload",
                ..
            })
        ));
        assert!(matches!(
            Chunk::decode(&bytes[..10], &s),
            Err(ChunkError::Bounds { what: "prefix", .. })
        ));
        let mut bad = bytes.clone();
        bad[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Chunk::decode(&bad, &s),
            Err(ChunkError::Bounds { what: "header", .. })
        ));
        let other = ChunkSchema {
            hidden_size: 6,
            ..s.clone()
        };
        assert!(matches!(
            Chunk::decode(&bytes, &other),
            Err(ChunkError::Schema { .. })
        ));
    }

    #[test]
    fn non_finite_values_are_rejected_with_the_field() {
        let s = schema(CellKind::Gru, ActionKind::Discrete);
        let mut c = filled(&s);
        c.next_reward[3] = f32::NAN;
        let err = c.encode(&s).unwrap_err();
        assert!(
            matches!(
                err,
                ChunkError::NonFinite {
                    field: "next.reward",
                    index: 3,
                    ..
                }
            ),
            "{err}"
        );
        let mut c = filled(&s);
        c.observation.pop();
        let err = c.encode(&s).unwrap_err();
        assert!(
            err.to_string().contains("`observation` has 23 elements"),
            "{err}"
        );
    }

    #[test]
    fn schema_hash_depends_on_every_field() {
        let s = schema(CellKind::Lstm, ActionKind::Discrete);
        let variants = [
            ChunkSchema {
                envs: 4,
                ..s.clone()
            },
            ChunkSchema {
                steps: 5,
                ..s.clone()
            },
            ChunkSchema {
                obs_dim: 3,
                ..s.clone()
            },
            ChunkSchema {
                action: ActionKind::Continuous { dim: 1 },
                ..s.clone()
            },
            ChunkSchema {
                cell: CellKind::Gru,
                ..s.clone()
            },
            ChunkSchema {
                num_layers: 1,
                ..s.clone()
            },
            ChunkSchema {
                hidden_size: 6,
                ..s.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.hash(), s.hash(), "{v:?}");
        }
        assert_eq!(
            s.hash(),
            schema(CellKind::Lstm, ActionKind::Discrete).hash()
        );
    }

    #[test]
    fn traj_ids_separate_actors_incarnations_envs_and_episodes() {
        let base = traj_id(3, 0, 5, 10);
        assert!(base >= 0);
        for other in [
            traj_id(4, 0, 5, 10),
            traj_id(3, 1, 5, 10),
            traj_id(3, 0, 6, 10),
            traj_id(3, 0, 5, 11),
        ] {
            assert_ne!(base, other);
        }
        assert!(traj_id(2047, 255, 65535, (1 << 28) - 1) >= 0);
    }

    #[test]
    fn an_actor_state_trailer_round_trips_and_a_damaged_one_is_named() {
        let schema = schema(CellKind::Lstm, ActionKind::Discrete);
        let mut bytes = Chunk::zeros(&schema, ChunkMeta::new(1, 2, 3, 4))
            .encode(&schema)
            .unwrap();
        let plain = bytes.clone();
        assert_eq!(Chunk::split_state(&plain).unwrap(), (&plain[..], None));
        Chunk::append_state(&mut bytes, b"saved state");
        let (chunk, state) = Chunk::split_state(&bytes).unwrap();
        assert_eq!((chunk, state), (&plain[..], Some(&b"saved state"[..])));
        assert_eq!(Chunk::decode(chunk, &schema).unwrap().meta.seq, 3);
        for (damage, what) in [(bytes.len() - 1, "CRC-32"), (plain.len(), "length")] {
            let mut bad = bytes.clone();
            bad[damage] ^= 1;
            let err = Chunk::split_state(&bad).unwrap_err().to_string();
            assert!(err.contains("trailer") && err.contains(what), "{err}");
        }
        let err = Chunk::split_state(&bytes[..plain.len() + 3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("fewer than its header"), "{err}");
    }
}
