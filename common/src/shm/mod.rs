//! Shared-memory transport on one host: the actor -> learner trajectory [`ring`]s and the
//! learner -> actors [`weights`] double buffer, both in named POSIX shared-memory
//! [`segment`]s (`/dev/shm/recur-*`, mode 0600) that the learner creates and owns.
//!
//! ```
//! use std::time::Duration;
//! use common::chunk::{Chunk, ChunkMeta, ChunkSchema, ActionKind};
//! use recur_rnn::CellKind;
//! use common::shm::{unique_run_id, RingConfig, RingReader, RingWriter, SEGMENT_PREFIX};
//!
//! let schema = ChunkSchema {
//!     envs: 2, steps: 4, obs_dim: 3, action: ActionKind::Discrete,
//!     cell: CellKind::Gru, num_layers: 1, hidden_size: 8, images: vec![],
//! };
//! let encoded = Chunk::zeros(&schema, ChunkMeta::new(0, 0, 0, 1)).encode(&schema)?;
//!
//! // Learner: create the actor's ring (removed again when `reader` is dropped).
//! let name = format!("{SEGMENT_PREFIX}{}-ring-0", unique_run_id());
//! let mut reader = RingReader::create(&name, RingConfig { slots: 4, slot_bytes: encoded.len() })?;
//!
//! // Actor (normally another process): open it by name and push.
//! let mut writer = RingWriter::open(&name)?;
//! writer.push(&encoded, Duration::from_secs(1), &mut || true)?;
//!
//! // Learner: receive (non-blocking), verified against the chunk's checksum.
//! let mut buf = Vec::new();
//! let len = reader.try_recv(&mut buf)?.expect("published");
//! let chunk = Chunk::decode_verified(&buf[..len], &schema)?;
//! assert_eq!(chunk.meta.policy_version, 1);
//! assert_eq!(reader.try_recv(&mut buf)?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Failure model: a writer killed at any instant loses at most the chunk it was writing
//! ([`RingReader::abandoned_slot`] tells); a corrupted slot is reported as
//! [`RingError::Corrupt`] and skipped; a writer whose learner died gets
//! [`RingError::PeerGone`] instead of waiting forever; segments of a crashed run are removed
//! by the next run's [`reclaim_stale`]. Besides the SIMD kernels of the fused recurrent backend,
//! recur's `unsafe` code lives in this module only, each block with its `// SAFETY:` comment.

pub mod bridge;
mod process;
pub mod ring;
pub mod segment;
pub mod weights;

pub use ring::{PushOutcome, RingConfig, RingError, RingReader, RingStats, RingWriter};
pub use segment::{reclaim_stale, unique_run_id, Segment, ShmError, SEGMENT_PREFIX};
pub use weights::{WeightPublisher, WeightSubscriber};
