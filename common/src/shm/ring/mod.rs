//! The trajectory ring: one single-producer single-consumer ring of fixed-size slots per actor,
//! in a shared-memory segment. The learner creates it ([`RingReader::create`]) and owns it; the
//! actor opens it ([`RingWriter::open`]) and pushes encoded chunks ([`Chunk::encode`] output).
//!
//! # Slot protocol
//!
//! Each slot has a 64-byte header (a state word and a length word) followed by `slot_bytes`
//! of data. The state word is a stamp `position * 4 + state`, `state` one of FREE, WRITING,
//! READY, where `position` counts the ring's chunks from 0 (slot = `position % slots`). Slot
//! `i` starts as FREE for position `i`.
//!
//! - The writer, at position `p`, waits until the slot's stamp is `FREE(p)` (Acquire), stores
//!   `WRITING(p)`, the length and the bytes, then `READY(p)` with Release.
//! - The reader, at position `p`, consumes the slot only when its stamp is `READY(p)`
//!   (Acquire), copies the bytes out, and stores `FREE(p + slots)` (Release), handing the slot
//!   to the writer's next lap.
//!
//! Because the stamp carries the position, a slot is never consumed twice or out of order,
//! and a stamp from another lap (or garbage) is simply "not ready". A writer killed at any
//! instant leaves its current slot FREE (nothing written yet) or WRITING (half written):
//! neither is ever consumed, while every READY slot before it still is: the learner drains a
//! dead actor's ring with [`RingReader::try_recv`] until `Ok(None)`, then asks
//! [`RingReader::abandoned_slot`] whether a half-written chunk was lost.
//!
//! # Verification
//!
//! The reader checks the length word against the slot capacity, the chunk prefix and header
//! ([`Chunk::peek_meta`]: magic, version, header bounds), that header + payload fit the slot's
//! length (what follows is an actor-state trailer with its own CRC, [`Chunk::split_state`]),
//! and the payload CRC-32, computed block by block while copying (so the checksum
//! reads bytes that are still in cache). A slot failing any check is freed, counted and
//! reported as [`RingError::Corrupt`]; the next slot is read normally.
//!
//! # One writer per ring
//!
//! [`RingWriter::open`] claims the ring (its pid is recorded in the ring header). A second
//! writer is refused while the claim is held; dropping the writer releases it (and a later
//! writer continues at the same position). A writer that dies keeps its claim: the supervisor
//! restarts the actor with a new incarnation and the learner creates a new ring for it.
//!
//! # Where each part lives
//!
//! - `protocol.rs`: the layout in the segment (ring header, slot headers, stamps), computed
//!   from a [`RingConfig`] and checked when a writer opens the ring, and the access to its words
//!   both ends share.
//! - `reader.rs`: [`RingReader`], the learner's end (create, receive and verify, the counters).
//! - `writer.rs`: [`RingWriter`], the actor's end (claim, push, wait for a free slot).
//! - `copy_crc.rs`: the reader's copy out of a slot fused with the CRC-32 of the payload (SIMD
//!   kernels with a portable fallback).
//!
//! [`Chunk::encode`]: crate::chunk::Chunk::encode
//! [`Chunk::peek_meta`]: crate::chunk::Chunk::peek_meta
//! [`Chunk::split_state`]: crate::chunk::Chunk::split_state

use std::time::Duration;

mod copy_crc;
mod protocol;
mod reader;
mod writer;

pub use protocol::{RingConfig, SlotOffsets};
pub use reader::{RingReader, RingStats};
pub use writer::{PushOutcome, RingWriter};

/// What went wrong pushing to or receiving from a ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The chunk does not fit a slot.
    #[error("ring {ring:?}: a chunk of {len} bytes exceeds the slot capacity of {capacity} bytes")]
    TooLarge {
        ring: String,
        len: usize,
        capacity: usize,
    },
    /// The ring stayed full for the whole timeout.
    #[error("ring {ring:?}: still full after {waited:?} (the learner does not drain it)")]
    Timeout { ring: String, waited: Duration },
    /// The reader is gone: the learner (the ring's owner) exited or dropped the ring, or the
    /// caller's `alive()` said so. The chunk was not pushed.
    #[error(
        "ring peer gone: the learner that owns the ring exited or dropped it (or alive() \
         returned false)"
    )]
    PeerGone,
    /// A published slot failed verification; it was freed and the reader moved on.
    #[error("ring {ring:?}: slot {slot}{} is corrupt: {reason}", seq.map_or(String::new(), |s| format!(" (chunk seq {s})")))]
    Corrupt {
        ring: String,
        slot: usize,
        /// The chunk's sequence number, when its header was readable.
        seq: Option<u64>,
        reason: String,
    },
}
