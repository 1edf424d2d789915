//! The 64-byte header every segment opens with: its layout, the constants callers and
//! fault-injection tests name, the kind codes ([`SegmentKind`]), and the owner read from a
//! header's bytes (for [`reclaim_stale`](super::reclaim_stale), which reads the file without
//! mapping it).
//!
//! # Layout (64 bytes at offset 0, native endianness, every field an atomic)
//!
//! ```text
//! offset  size  field
//! 0       8     magic  b"RECURSHM" (stored last, with Release: a reader that sees it sees
//!               the whole header and the body's initial layout)
//! 8       4     layout version (SEGMENT_VERSION)
//! 12      4     kind (0 raw, 1 ring, 2 weights)
//! 16      4     owner pid: the creating process
//! 20      4     reserved
//! 24      8     owner start time (clock ticks after boot, /proc/<pid>/stat field 22; 0 if
//!               unknown): tells the owner from a later process that reuses its pid
//! 32      8     total size of the mapping in bytes
//! 40      8     body offset (= 64)
//! ```
//!
//! Magic and the owner fields keep these offsets in every layout version, so that
//! [`reclaim_stale`](super::reclaim_stale) can judge segments left by other builds.

use crate::shm::process::ProcessId;

/// `b"RECURSHM"` read as a little-endian `u64`.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"RECURSHM");
/// Layout version of the header (and of the ring and weight bodies).
pub const SEGMENT_VERSION: u32 = 1;
/// Bytes of the header; the body starts here.
pub const HEADER_LEN: usize = 64;
/// Offset of the owner pid (`u32`) in the header (fault-injection tests write it).
pub const OWNER_PID_OFFSET: usize = 16;
/// Offset of the owner start time (`u64`) in the header.
pub const OWNER_START_OFFSET: usize = 24;

pub(super) const MAGIC_OFFSET: usize = 0;
pub(super) const VERSION_OFFSET: usize = 8;
pub(super) const KIND_OFFSET: usize = 12;
pub(super) const TOTAL_SIZE_OFFSET: usize = 32;
pub(super) const BODY_OFFSET_OFFSET: usize = 40;

/// What a segment's body holds; the discriminant is the header's kind code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// Created by [`Segment::create`](super::Segment::create): bytes with no further structure.
    Raw = 0,
    /// A trajectory ring (`RingReader`).
    Ring = 1,
    /// A weight double buffer (`WeightPublisher`).
    Weights = 2,
}

impl SegmentKind {
    pub(super) fn code(self) -> u32 {
        self as u32
    }

    pub(super) fn from_code(code: u32) -> Option<Self> {
        [SegmentKind::Raw, SegmentKind::Ring, SegmentKind::Weights]
            .into_iter()
            .find(|kind| kind.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            SegmentKind::Raw => "raw",
            SegmentKind::Ring => "ring",
            SegmentKind::Weights => "weights",
        }
    }
}

/// The owner recorded in a header read as bytes, if the magic is recur's.
pub(super) fn parse_owner(header: &[u8; HEADER_LEN]) -> Option<ProcessId> {
    let u64_at = |o: usize| u64::from_ne_bytes(header[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_ne_bytes(header[o..o + 4].try_into().expect("4 bytes"));
    (u64_at(MAGIC_OFFSET) == SEGMENT_MAGIC).then(|| ProcessId {
        pid: u32_at(OWNER_PID_OFFSET),
        start: u64_at(OWNER_START_OFFSET),
    })
}
