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
//! [`Chunk::encode`]: crate::chunk::Chunk::encode
//! [`Chunk::peek_meta`]: crate::chunk::Chunk::peek_meta
//! [`Chunk::split_state`]: crate::chunk::Chunk::split_state

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::process::ProcessId;
use super::segment::{Segment, SegmentKind, ShmError, HEADER_LEN};
use crate::chunk::{Chunk, PREFIX_LEN};

/// Slots per ring and bytes per slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Chunks the ring holds before the writer waits (at least 1).
    pub slots: usize,
    /// Capacity of one slot: the largest encoded chunk it takes (at least 1).
    pub slot_bytes: usize,
}

impl RingConfig {
    /// Bytes of the segment body this configuration needs.
    pub fn body_len(&self) -> Result<usize, ShmError> {
        Layout::new(*self).map(|l| l.body_len)
    }
}

/// What a successful push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// The chunk is published; `waited` is how long the ring was full before a slot freed up
    /// (zero when a slot was free).
    Pushed { waited: Duration },
}

impl PushOutcome {
    pub fn waited(&self) -> Duration {
        match *self {
            PushOutcome::Pushed { waited } => waited,
        }
    }
}

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

/// The reader's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Chunks received intact.
    pub received: u64,
    /// Slots that failed verification (each reported once as [`RingError::Corrupt`]).
    pub corrupted: u64,
    /// Bytes of the chunks received intact.
    pub bytes: u64,
    /// Pushes that found the ring full and had to wait (the writer's count, read from the
    /// ring header).
    pub writer_full_waits: u64,
}

// Slot states, the low two bits of a stamp.
const FREE: u64 = 0;
const WRITING: u64 = 1;
const READY: u64 = 2;

fn stamp(position: u64, state: u64) -> u64 {
    // Wrapping: positions stay far below 2^62, and both sides compute stamps the same way.
    position.wrapping_mul(4) | state
}

const ALIGN: usize = 64;
/// Ring header in the segment body: line 0 the layout (written once by the creator), line 1
/// the writer's words.
const RING_HEADER_LEN: usize = 128;
const SLOTS_AT: usize = 0;
const SLOT_BYTES_AT: usize = 8;
const STRIDE_AT: usize = 16;
const SLOTS_OFFSET_AT: usize = 24;
/// Set (non-zero) by the reader when it is dropped: the writer stops waiting for it.
const CLOSED_AT: usize = 32;
const WRITER_PID_AT: usize = 64;
const WRITER_START_AT: usize = 72;
const WRITE_POS_AT: usize = 80;
const FULL_WAITS_AT: usize = 88;
/// Per slot: stamp at 0, length at 8, data at 64.
const SLOT_HEADER_LEN: usize = 64;
const STAMP_AT: usize = 0;
const LEN_AT: usize = 8;

/// The reader copies and checksums in blocks this large, so the checksum reads the block
/// from L1/L2 right after the copy wrote it.
const COPY_BLOCK: usize = 32 * 1024;
/// How often a waiting writer calls `alive()` and checks the learner.
const ALIVE_EVERY: Duration = Duration::from_millis(100);
/// A writer waiting for a free slot spins this long, then yields until `YIELD_FOR`, then
/// sleeps 100 us doubling to 1 ms.
const SPIN_FOR: Duration = Duration::from_micros(20);
const YIELD_FOR: Duration = Duration::from_micros(300);

/// Byte offsets (from the start of the segment, i.e. of the `/dev/shm` file) of one slot's
/// words, for diagnostics and fault-injection tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotOffsets {
    /// The state word (`u64`, native endianness).
    pub state: usize,
    /// The length word (`u64`, native endianness).
    pub len: usize,
    /// The first data byte.
    pub data: usize,
}

/// Offsets derived from a [`RingConfig`], all relative to the segment body.
#[derive(Clone, Copy, Debug)]
struct Layout {
    slots: usize,
    slot_bytes: usize,
    stride: usize,
    body_len: usize,
}

impl Layout {
    fn new(config: RingConfig) -> Result<Self, ShmError> {
        let bad = |field, value: usize, reason| ShmError::Config {
            field,
            value: value as u64,
            reason,
        };
        if config.slots == 0 {
            return Err(bad("RingConfig.slots", 0, "a ring needs at least one slot"));
        }
        if config.slot_bytes == 0 {
            return Err(bad(
                "RingConfig.slot_bytes",
                0,
                "a slot must hold at least one byte",
            ));
        }
        let stride = config
            .slot_bytes
            .checked_add(SLOT_HEADER_LEN + ALIGN - 1)
            .map(|n| n / ALIGN * ALIGN)
            .ok_or(bad("RingConfig.slot_bytes", config.slot_bytes, "too large"))?;
        let body_len = stride
            .checked_mul(config.slots)
            .and_then(|n| n.checked_add(RING_HEADER_LEN))
            .filter(|&n| n <= isize::MAX as usize - HEADER_LEN)
            .ok_or(bad(
                "RingConfig.slots",
                config.slots,
                "slots * slot_bytes overflows",
            ))?;
        Ok(Layout {
            slots: config.slots,
            slot_bytes: config.slot_bytes,
            stride,
            body_len,
        })
    }

    /// Body offset of slot `i`'s header.
    fn slot(&self, i: usize) -> usize {
        RING_HEADER_LEN + i * self.stride
    }

    /// Reads and checks the layout an opener finds in `segment` (written by another process:
    /// every value is validated against the mapping before use).
    fn read(segment: &Segment) -> Result<Self, ShmError> {
        segment.check_header_len("ring", RING_HEADER_LEN)?;
        let word = |at| segment.layout_word(at);
        let layout_err = |field, value, reason| segment.layout_error(field, value, reason);
        let (slots, slot_bytes) = (word(SLOTS_AT), word(SLOT_BYTES_AT));
        let as_usize = |field, v: u64| {
            usize::try_from(v).map_err(|_| layout_err(field, v, "does not fit usize".into()))
        };
        let layout = Layout::new(RingConfig {
            slots: as_usize("slots", slots)?,
            slot_bytes: as_usize("slot_bytes", slot_bytes)?,
        })
        .map_err(|e| layout_err("slots/slot_bytes", slots, e.to_string()))?;
        let why = format!(" for slot_bytes {slot_bytes}");
        segment.check_layout_word("slot stride", STRIDE_AT, layout.stride, &why)?;
        segment.check_layout_word("slots offset", SLOTS_OFFSET_AT, RING_HEADER_LEN, "")?;
        if layout.body_len > segment.body_len() {
            return Err(layout_err(
                "slots",
                slots,
                format!(
                    "{slots} slots of {slot_bytes} bytes need {} body bytes, the segment has {}",
                    layout.body_len,
                    segment.body_len()
                ),
            ));
        }
        Ok(layout)
    }
}

/// Shared access to one ring's words and slots (the segment plus its validated layout).
struct Ring {
    segment: Segment,
    layout: Layout,
}

impl Ring {
    fn stamp(&self, slot: usize) -> &AtomicU64 {
        self.segment.body_u64(self.layout.slot(slot) + STAMP_AT)
    }

    fn len_word(&self, slot: usize) -> &AtomicU64 {
        self.segment.body_u64(self.layout.slot(slot) + LEN_AT)
    }

    /// The first data byte of `slot`; valid for `slot_bytes` bytes.
    fn data(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.layout.slots);
        // SAFETY: slot < slots and the layout was checked to fit the body, so the data region
        // [slot(i) + 64, slot(i) + 64 + slot_bytes) lies inside the mapping.
        unsafe {
            self.segment
                .body_ptr()
                .add(self.layout.slot(slot) + SLOT_HEADER_LEN)
        }
    }

    fn slot_of(&self, position: u64) -> usize {
        (position % self.layout.slots as u64) as usize
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        self.segment.body_u64(at)
    }

    /// Whether the reader has dropped the ring.
    fn closed(&self) -> bool {
        // Relaxed: a flag polled while waiting; no data is read on the strength of it.
        self.word(CLOSED_AT).load(Ordering::Relaxed) != 0
    }

    fn writer(&self) -> ProcessId {
        // Relaxed: informational (who holds the claim); the claim itself is the CAS in
        // `RingWriter::open`.
        ProcessId {
            pid: self.segment.body_u32(WRITER_PID_AT).load(Ordering::Relaxed),
            start: self.word(WRITER_START_AT).load(Ordering::Relaxed),
        }
    }
}

/// The learner's end of a ring: creates and owns the segment, receives chunks in order.
pub struct RingReader {
    ring: Ring,
    position: u64,
    stats: RingStats,
    /// The copy + checksum implementation this CPU supports.
    kernel: copy_crc::Kernel,
}

impl RingReader {
    /// Creates ring segment `name` (it must not exist; see [`Segment::create`]) with every slot
    /// free. The segment is removed when the reader is dropped.
    pub fn create(name: &str, config: RingConfig) -> Result<Self, ShmError> {
        let layout = Layout::new(config)?;
        let segment = Segment::create_with(name, SegmentKind::Ring, layout.body_len, |seg| {
            // Relaxed: published to openers by the segment magic's Release store.
            let put = |at, v: usize| seg.body_u64(at).store(v as u64, Ordering::Relaxed);
            put(SLOTS_AT, layout.slots);
            put(SLOT_BYTES_AT, layout.slot_bytes);
            put(STRIDE_AT, layout.stride);
            put(SLOTS_OFFSET_AT, RING_HEADER_LEN);
            for i in 0..layout.slots {
                seg.body_u64(layout.slot(i) + STAMP_AT)
                    .store(stamp(i as u64, FREE), Ordering::Relaxed);
            }
        })?;
        Ok(RingReader {
            ring: Ring { segment, layout },
            position: 0,
            stats: RingStats::default(),
            kernel: copy_crc::Kernel::detect(),
        })
    }

    pub fn name(&self) -> &str {
        self.ring.segment.name()
    }

    pub fn config(&self) -> RingConfig {
        RingConfig {
            slots: self.ring.layout.slots,
            slot_bytes: self.ring.layout.slot_bytes,
        }
    }

    /// Receives the next chunk, without blocking.
    ///
    /// - `Ok(Some(len))`: the next chunk in order was published and verified; its bytes are
    ///   `out[..len]` (`out` is cleared and refilled, its allocation reused).
    /// - `Ok(None)`: the next slot is not published (yet).
    /// - `Err(RingError::Corrupt { .. })`: the next slot was published but failed a check
    ///   (length word, magic, version, header, length, checksum); it was freed and counted,
    ///   `out` holds no chunk, and the following call reads the next slot.
    pub fn try_recv(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, RingError> {
        let position = self.position;
        let slot = self.ring.slot_of(position);
        // Acquire: synchronises with the writer's Release store of READY, making the length
        // word and the slot's bytes visible.
        if self.ring.stamp(slot).load(Ordering::Acquire) != stamp(position, READY) {
            return Ok(None);
        }
        // Relaxed: ordered by the Acquire load above.
        let len_word = self.ring.len_word(slot).load(Ordering::Relaxed);
        let result = self.copy_verified(slot, len_word, out);
        // Release: our reads of the slot happen before the writer's next lap overwrites it
        // (its Acquire load of FREE synchronises with this store).
        self.ring.stamp(slot).store(
            stamp(position + self.ring.layout.slots as u64, FREE),
            Ordering::Release,
        );
        self.position += 1;
        match result {
            Ok(len) => {
                self.stats.received += 1;
                self.stats.bytes += len as u64;
                Ok(Some(len))
            }
            Err((seq, reason)) => {
                out.clear();
                self.stats.corrupted += 1;
                Err(RingError::Corrupt {
                    ring: self.name().to_string(),
                    slot,
                    seq,
                    reason,
                })
            }
        }
    }

    /// Copies the READY slot into `out` and verifies it; on failure, the chunk's seq (if the
    /// header was readable) and why.
    fn copy_verified(
        &self,
        slot: usize,
        len_word: u64,
        out: &mut Vec<u8>,
    ) -> Result<usize, (Option<u64>, String)> {
        let capacity = self.ring.layout.slot_bytes;
        if len_word > capacity as u64 {
            return Err((
                None,
                format!("length word {len_word} exceeds the slot capacity {capacity}"),
            ));
        }
        let len = len_word as usize;
        if len < PREFIX_LEN {
            return Err((
                None,
                format!("length word {len} is shorter than a chunk prefix ({PREFIX_LEN} bytes)"),
            ));
        }
        let src = self.ring.data(slot);
        out.clear();
        out.reserve(len);
        // The prefix, then the header as far as the slot holds it.
        // SAFETY: `src` is the slot's data start, readable for slot_bytes >= len >= PREFIX_LEN
        // bytes (a mapping of this process), disjoint from `out`'s heap buffer.
        unsafe { copy_from_shm(out, src, 0, PREFIX_LEN) };
        let header_len = u32::from_le_bytes(out[12..16].try_into().expect("4 bytes")) as usize;
        let header_end = PREFIX_LEN.saturating_add(header_len).min(len);
        // SAFETY: as above, header_end <= len.
        unsafe { copy_from_shm(out, src, PREFIX_LEN, header_end) };
        let (meta, payload_at) = Chunk::peek_meta(out).map_err(|e| (None, e.to_string()))?;
        let seq = Some(meta.seq);
        let end = (payload_at as u64)
            .checked_add(meta.payload_len)
            .filter(|&end| end <= len as u64);
        let Some(end) = end.map(|e| e as usize) else {
            return Err((
                seq,
                format!(
                    "header ({payload_at} bytes) + payload_len {} > slot length {len}",
                    meta.payload_len
                ),
            ));
        };
        // Copy and checksum the payload in one pass.
        // SAFETY: as above, for `end <= len` bytes.
        let got = unsafe { copy_crc::append(self.kernel, out, src, payload_at, end) };
        if got != meta.payload_crc32 {
            return Err((
                seq,
                format!(
                    "payload crc32 {got:#010x} differs from the header's {:#010x}",
                    meta.payload_crc32
                ),
            ));
        }
        // An actor-state trailer (sync runs) follows; it carries its own CRC, checked by
        // `Chunk::split_state`.
        // SAFETY: as above, end <= len.
        unsafe { copy_from_shm(out, src, end, len) };
        Ok(len)
    }

    /// The reader's counters (and the writer's full-ring waits).
    pub fn stats(&self) -> RingStats {
        RingStats {
            // Relaxed: a statistic.
            writer_full_waits: self.ring.word(FULL_WAITS_AT).load(Ordering::Relaxed),
            ..self.stats
        }
    }

    /// Whether the next slot in order is half written (WRITING). Ask after the writer is known
    /// to be dead and the ring drained: `true` means it died mid-write and that chunk is lost
    /// (a live writer's in-progress push also reads as `true`).
    pub fn abandoned_slot(&self) -> bool {
        let slot = self.ring.slot_of(self.position);
        // Relaxed: a state probe; nothing is read on the strength of it.
        self.ring.stamp(slot).load(Ordering::Relaxed) == stamp(self.position, WRITING)
    }

    /// The slot [`try_recv`](Self::try_recv) reads next.
    pub fn next_slot(&self) -> usize {
        self.ring.slot_of(self.position)
    }

    /// The pid of the attached writer, if one has claimed the ring and not detached.
    pub fn writer_pid(&self) -> Option<u32> {
        Some(self.ring.writer().pid).filter(|&p| p != 0)
    }

    /// Whether the writer that claimed the ring still runs.
    pub fn writer_alive(&self) -> bool {
        let w = self.ring.writer();
        w.pid != 0 && w.alive()
    }

    /// Where slot `slot`'s words lie in the segment file (diagnostics, fault injection).
    /// Panics if `slot` is not below the ring's slot count.
    pub fn slot_offsets(&self, slot: usize) -> SlotOffsets {
        assert!(
            slot < self.ring.layout.slots,
            "slot {slot} of {}",
            self.ring.layout.slots
        );
        let base = HEADER_LEN + self.ring.layout.slot(slot);
        SlotOffsets {
            state: base + STAMP_AT,
            len: base + LEN_AT,
            data: base + SLOT_HEADER_LEN,
        }
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // Relaxed: see `Ring::closed`. Then the segment is unlinked; a writer still mapping it
        // sees the flag and gets PeerGone instead of waiting for its timeout.
        self.ring.word(CLOSED_AT).store(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for RingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReader")
            .field("name", &self.name())
            .field("config", &self.config())
            .field("position", &self.position)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Appends bytes `[from, to)` of a slot to `out`, which holds exactly `from` bytes and has
/// capacity for `to` (both checked).
///
/// # Safety
/// `src` is valid for reads of `to` bytes and does not overlap `out`'s buffer.
unsafe fn copy_from_shm(out: &mut Vec<u8>, src: *const u8, from: usize, to: usize) {
    assert!(out.len() == from && from <= to && to <= out.capacity());
    // SAFETY: `src` is readable for `to` bytes (the caller's contract); the destination is
    // `out`'s spare capacity (checked above), disjoint from `src`. The bytes are plain u8
    // (any value valid); no Rust reference to the shared bytes is formed. A slot being read is
    // READY, so by protocol no writer touches it; a misbehaving process that does can only
    // tear the copy, which the checksum then rejects.
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(from), out.as_mut_ptr().add(from), to - from);
        out.set_len(to);
    }
}

/// Copy out of a slot fused with the CRC-32 (IEEE) of the bytes copied.
///
/// With AVX-512 + VPCLMULQDQ (or AVX2 + VPCLMULQDQ) one pass loads each 64-byte (32-byte)
/// block once, stores it to the destination and folds it into 16 (8) independent CRC
/// streams, so the checksum costs almost nothing over the copy. The streams are folded
/// together with the constants of crc32fast's kernels (the "fast CRC computation using
/// PCLMULQDQ" folding: for a distance of D bits the pair `x^(D+32)`, `x^(D-32)` mod P,
/// bit-reflected), and the remaining 128-bit value, which behaves as a 16-byte message
/// processed from a zero register, is finished by crc32fast. Other CPUs (and the tail) copy
/// 32 KiB blocks and checksum each right after copying it, while it is still in cache.
mod copy_crc {
    use super::{copy_from_shm, COPY_BLOCK};

    /// Which implementation the CPU supports.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Kernel {
        #[cfg(target_arch = "x86_64")]
        Avx512,
        #[cfg(target_arch = "x86_64")]
        Avx2,
        Blocks,
    }

    impl Kernel {
        pub(super) fn detect() -> Self {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("pclmulqdq")
                    && std::arch::is_x86_feature_detected!("sse4.1")
                    && std::arch::is_x86_feature_detected!("vpclmulqdq")
                {
                    if std::arch::is_x86_feature_detected!("avx512f") {
                        return Kernel::Avx512;
                    }
                    if std::arch::is_x86_feature_detected!("avx2") {
                        return Kernel::Avx2;
                    }
                }
            }
            Kernel::Blocks
        }

        /// Every kernel this CPU can run (tests compare them all).
        #[cfg(test)]
        pub(super) fn available() -> Vec<Self> {
            let mut all = vec![Kernel::Blocks];
            #[cfg(target_arch = "x86_64")]
            {
                let best = Kernel::detect();
                if best == Kernel::Avx512 {
                    all.push(Kernel::Avx512);
                }
                if best != Kernel::Blocks && std::arch::is_x86_feature_detected!("avx2") {
                    all.push(Kernel::Avx2);
                }
            }
            all
        }
    }

    /// Below this many bytes the fused kernels' setup is not worth it.
    const MIN_FUSED: usize = 4096;

    /// Appends slot bytes `[from, to)` to `out`, which holds exactly `from` bytes and has
    /// capacity for `to` (both checked); returns the CRC-32 of the appended bytes.
    ///
    /// # Safety
    /// `src` is valid for reads of `to` bytes and does not overlap `out`'s buffer.
    pub(super) unsafe fn append(
        kernel: Kernel,
        out: &mut Vec<u8>,
        src: *const u8,
        from: usize,
        to: usize,
    ) -> u32 {
        assert!(out.len() == from && from <= to && to <= out.capacity());
        #[allow(unused_mut)]
        let mut crc = 0u32;
        #[allow(unused_mut)]
        let mut at = from;
        #[cfg(target_arch = "x86_64")]
        {
            let stride = match kernel {
                Kernel::Avx512 => 256,
                Kernel::Avx2 => 128,
                Kernel::Blocks => 0,
            };
            if stride > 0 && to - from >= MIN_FUSED {
                let n = (to - from) / stride * stride;
                // SAFETY: the kernels need their CPU features, which `Kernel::detect` (or
                // `available`) confirmed before this variant could exist. Both ranges hold `n`
                // bytes: the source lies within the first `to` bytes of `src` (readable per
                // this function's contract), the destination is `out`'s spare capacity
                // (checked above), disjoint from it. The kernels read the source with raw
                // vector loads (no reference to shared bytes is formed).
                unsafe {
                    let dst = out.as_mut_ptr().add(at);
                    crc = match kernel {
                        Kernel::Avx512 => x86::copy_crc_avx512(dst, src.add(at), n, crc),
                        _ => x86::copy_crc_avx2(dst, src.add(at), n, crc),
                    };
                    out.set_len(at + n);
                }
                at += n;
            }
        }
        let _ = kernel;
        let mut hasher = crc32fast::Hasher::new_with_initial(crc);
        while at < to {
            let end = to.min(at + COPY_BLOCK);
            // SAFETY: end <= to: readable per this function's contract.
            unsafe { copy_from_shm(out, src, at, end) };
            hasher.update(&out[at..end]);
            at = end;
        }
        hasher.finalize()
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        // Fold constants (crc32fast's): by 2048 bits (16 streams of 128), by 1024 bits
        // (8 streams), and by 128 bits (K3, K4) to collapse the streams.
        const K_2048_LOW: i64 = 0x1_1542_778a;
        const K_2048_HIGH: i64 = 0x1_322d_1430;
        const K_1024_LOW: i64 = 0x1_e88e_f372;
        const K_1024_HIGH: i64 = 0x1_4a7f_e880;
        const K3: i64 = 0x1_7519_97d0;
        const K4: i64 = 0x0_ccaa_009e;

        #[target_feature(enable = "pclmulqdq,sse4.1")]
        fn fold128(a: __m128i, b: __m128i, k: __m128i) -> __m128i {
            let t1 = _mm_clmulepi64_si128(a, k, 0x00);
            let t2 = _mm_clmulepi64_si128(a, k, 0x11);
            _mm_xor_si128(_mm_xor_si128(b, t1), t2)
        }

        /// The CRC value of the 16-byte message `x` processed from a zero register.
        fn finish(x: __m128i) -> u32 {
            let mut bytes = [0u8; 16];
            // SAFETY: `bytes` is 16 writable bytes; the unaligned store needs no alignment.
            unsafe { _mm_storeu_si128(bytes.as_mut_ptr() as *mut __m128i, x) };
            // A register of 0 is the running value !0.
            let mut h = crc32fast::Hasher::new_with_initial(!0);
            h.update(&bytes);
            h.finalize()
        }

        /// Copies `len` bytes (a positive multiple of 256) from `src` to `dst` and returns the
        /// CRC-32 continuing from `crc`.
        ///
        /// # Safety
        /// The CPU supports AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `src` is readable and
        /// `dst` writable for `len` bytes, and the ranges do not overlap.
        #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
        pub(super) unsafe fn copy_crc_avx512(
            dst: *mut u8,
            src: *const u8,
            len: usize,
            crc: u32,
        ) -> u32 {
            debug_assert!(len >= 256 && len.is_multiple_of(256));
            // SAFETY (loads and stores below): every offset is below `len`, and the caller
            // guarantees `len` readable/writable bytes; the unaligned forms need no alignment.
            let ld = |o: usize| unsafe { _mm512_loadu_si512(src.add(o) as *const _) };
            let st = |o: usize, v| unsafe { _mm512_storeu_si512(dst.add(o) as *mut _, v) };
            // Four streams of 64 bytes per 256-byte block, folded in parallel.
            let mut v = [0, 64, 128, 192].map(|o| {
                let a = ld(o);
                st(o, a);
                a
            });
            // The running CRC enters as the complemented register xor-ed into the first bytes.
            v[0] = _mm512_xor_si512(v[0], _mm512_castsi128_si512(_mm_cvtsi32_si128(!crc as i32)));
            let k = _mm512_set_epi64(
                K_2048_HIGH,
                K_2048_LOW,
                K_2048_HIGH,
                K_2048_LOW,
                K_2048_HIGH,
                K_2048_LOW,
                K_2048_HIGH,
                K_2048_LOW,
            );
            let fold = |a: __m512i, b: __m512i| {
                let t1 = _mm512_clmulepi64_epi128(a, k, 0x00);
                let t2 = _mm512_clmulepi64_epi128(a, k, 0x11);
                _mm512_ternarylogic_epi64(b, t1, t2, 0x96) // b ^ t1 ^ t2
            };
            for at in (256..len).step_by(256) {
                for (i, vi) in v.iter_mut().enumerate() {
                    let a = ld(at + 64 * i);
                    st(at + 64 * i, a);
                    *vi = fold(*vi, a);
                }
            }
            // Collapse the 16 streams in increasing byte offset, each folded by 128 bits.
            let k3k4 = _mm_set_epi64x(K4, K3);
            let mut x = _mm512_castsi512_si128(v[0]);
            x = fold128(x, _mm512_extracti32x4_epi32::<1>(v[0]), k3k4);
            x = fold128(x, _mm512_extracti32x4_epi32::<2>(v[0]), k3k4);
            x = fold128(x, _mm512_extracti32x4_epi32::<3>(v[0]), k3k4);
            for v in [v[1], v[2], v[3]] {
                x = fold128(x, _mm512_castsi512_si128(v), k3k4);
                x = fold128(x, _mm512_extracti32x4_epi32::<1>(v), k3k4);
                x = fold128(x, _mm512_extracti32x4_epi32::<2>(v), k3k4);
                x = fold128(x, _mm512_extracti32x4_epi32::<3>(v), k3k4);
            }
            finish(x)
        }

        /// [`copy_crc_avx512`] with 256-bit registers: `len` a positive multiple of 128.
        ///
        /// # Safety
        /// The CPU supports AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `src` is readable and
        /// `dst` writable for `len` bytes, and the ranges do not overlap.
        #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1")]
        pub(super) unsafe fn copy_crc_avx2(
            dst: *mut u8,
            src: *const u8,
            len: usize,
            crc: u32,
        ) -> u32 {
            debug_assert!(len >= 128 && len.is_multiple_of(128));
            // SAFETY (loads and stores below): as in `copy_crc_avx512`.
            let ld = |o: usize| unsafe { _mm256_loadu_si256(src.add(o) as *const __m256i) };
            let st = |o: usize, v| unsafe { _mm256_storeu_si256(dst.add(o) as *mut __m256i, v) };
            let mut v = [0, 32, 64, 96].map(|o| {
                let a = ld(o);
                st(o, a);
                a
            });
            v[0] = _mm256_xor_si256(v[0], _mm256_castsi128_si256(_mm_cvtsi32_si128(!crc as i32)));
            let k = _mm256_set_epi64x(K_1024_HIGH, K_1024_LOW, K_1024_HIGH, K_1024_LOW);
            let fold = |a: __m256i, b: __m256i| {
                let t1 = _mm256_clmulepi64_epi128(a, k, 0x00);
                let t2 = _mm256_clmulepi64_epi128(a, k, 0x11);
                _mm256_xor_si256(_mm256_xor_si256(b, t1), t2)
            };
            for at in (128..len).step_by(128) {
                for (i, vi) in v.iter_mut().enumerate() {
                    let a = ld(at + 32 * i);
                    st(at + 32 * i, a);
                    *vi = fold(*vi, a);
                }
            }
            let k3k4 = _mm_set_epi64x(K4, K3);
            let mut x = _mm256_castsi256_si128(v[0]);
            x = fold128(x, _mm256_extracti128_si256::<1>(v[0]), k3k4);
            for v in [v[1], v[2], v[3]] {
                x = fold128(x, _mm256_castsi256_si128(v), k3k4);
                x = fold128(x, _mm256_extracti128_si256::<1>(v), k3k4);
            }
            finish(x)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Every kernel copies exactly and computes crc32fast's checksum, for lengths around
        /// every crossover and unaligned starts.
        #[test]
        fn kernels_match_crc32fast() {
            let data: Vec<u8> = (0..140_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let lens = [
                0usize, 1, 15, 16, 255, 256, 4095, 4096, 4097, 4224, 5000, 32768, 32769, 65536,
                100_003,
            ];
            for kernel in Kernel::available() {
                for &len in &lens {
                    for pre in [0usize, 1, 68, 4096] {
                        // A "slot" whose first `pre` bytes are already in `out`.
                        let slot = &data[3..3 + pre + len];
                        let mut out = Vec::with_capacity(pre + len);
                        out.extend_from_slice(&slot[..pre]);
                        // SAFETY: `slot` holds pre + len readable bytes, apart from `out`.
                        let got =
                            unsafe { append(kernel, &mut out, slot.as_ptr(), pre, pre + len) };
                        let what = format!("{kernel:?} len {len} after {pre}");
                        assert_eq!(got, crc32fast::hash(&slot[pre..]), "{what}");
                        assert_eq!(out, slot, "{what}");
                    }
                }
            }
        }
    }
}

/// The actor's end of a ring: opens the learner's segment and pushes encoded chunks in order.
pub struct RingWriter {
    ring: Ring,
    me: ProcessId,
    position: u64,
    full_waits: u64,
    /// Set by [`crash_mid_write`](Self::crash_mid_write): drop keeps the claim, as a killed
    /// process would.
    crashed: bool,
}

impl RingWriter {
    /// Opens ring `name` (created by the learner) and claims it as its only writer. Fails if
    /// the segment is missing, is not a ring, has an invalid layout, or has a writer already
    /// ([`ShmError::WriterAttached`]).
    pub fn open(name: &str) -> Result<Self, ShmError> {
        let segment = Segment::open_kind(name, Some(SegmentKind::Ring))?;
        let layout = Layout::read(&segment)?;
        let ring = Ring { segment, layout };
        let me = ProcessId::current();
        // AcqRel on success: Acquire pairs with a previous writer's Release of the claim
        // (its final write position becomes visible), Release orders our claim before our
        // pushes. Acquire on failure to read the holder.
        if let Err(holder) = ring.segment.body_u32(WRITER_PID_AT).compare_exchange(
            0,
            me.pid,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            let start = ring.word(WRITER_START_AT).load(Ordering::Relaxed);
            return Err(ShmError::WriterAttached {
                name: name.to_string(),
                pid: holder,
                alive: ProcessId { pid: holder, start }.alive(),
            });
        }
        // Relaxed: informational (see `Ring::writer`).
        ring.word(WRITER_START_AT)
            .store(me.start, Ordering::Relaxed);
        // Relaxed: ordered after the claim's Acquire (a previous writer stored it before its
        // Release of the claim).
        let position = ring.word(WRITE_POS_AT).load(Ordering::Relaxed);
        Ok(RingWriter {
            ring,
            me,
            position,
            full_waits: 0,
            crashed: false,
        })
    }

    pub fn name(&self) -> &str {
        self.ring.segment.name()
    }

    /// Bytes one slot holds: the largest chunk [`push`](Self::push) accepts.
    pub fn capacity(&self) -> usize {
        self.ring.layout.slot_bytes
    }

    /// Copies `encoded` (one encoded chunk) into the next slot and publishes it.
    ///
    /// While the ring is full it waits: it spins for 20 us, yields until 300 us, then sleeps
    /// 100 us doubling to 1 ms. About every 100 ms of waiting it calls `alive()` and checks that the
    /// learner (the segment owner) still runs and still has the ring, giving up with
    /// [`RingError::PeerGone`] if not (also, without waiting, when the ring was dropped); after `timeout` it gives up with [`RingError::Timeout`]. A chunk is
    /// never dropped to make room: on error nothing was published. A chunk larger than a slot
    /// is refused with [`RingError::TooLarge`]. Each push that had to wait counts once in
    /// [`full_waits`](Self::full_waits).
    pub fn push(
        &mut self,
        encoded: &[u8],
        timeout: Duration,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<PushOutcome, RingError> {
        let len = encoded.len();
        if len > self.ring.layout.slot_bytes {
            return Err(RingError::TooLarge {
                ring: self.name().to_string(),
                len,
                capacity: self.ring.layout.slot_bytes,
            });
        }
        if self.ring.closed() {
            return Err(RingError::PeerGone);
        }
        let slot = self.ring.slot_of(self.position);
        let free = stamp(self.position, FREE);
        // Acquire: synchronises with the reader's Release store of FREE, so its reads of the
        // slot's previous lap are done before we overwrite it.
        let waited = if self.ring.stamp(slot).load(Ordering::Acquire) == free {
            Duration::ZERO
        } else {
            self.wait_free(slot, free, timeout, alive)?
        };
        // Relaxed: WRITING only marks the slot as half written for a reader that finds it
        // after we died; nothing is read on the strength of it.
        self.ring
            .stamp(slot)
            .store(stamp(self.position, WRITING), Ordering::Relaxed);
        // Relaxed: published by the Release store of READY below.
        self.ring
            .len_word(slot)
            .store(len as u64, Ordering::Relaxed);
        // SAFETY: len <= slot_bytes (checked above), so the destination range is inside the
        // slot's data region; `encoded` is our own memory and cannot overlap the mapping. The
        // slot is ours until READY: the reader stored FREE for this position and will not read
        // it before READY.
        unsafe {
            std::ptr::copy_nonoverlapping(encoded.as_ptr(), self.ring.data(slot), len);
        }
        // Release: the length word and the bytes above become visible to the reader's Acquire
        // load of READY.
        self.ring
            .stamp(slot)
            .store(stamp(self.position, READY), Ordering::Release);
        self.position += 1;
        // Relaxed: read only by a later writer after our claim's Release (see Drop).
        self.ring
            .word(WRITE_POS_AT)
            .store(self.position, Ordering::Relaxed);
        Ok(PushOutcome::Pushed { waited })
    }

    fn wait_free(
        &mut self,
        slot: usize,
        free: u64,
        timeout: Duration,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Duration, RingError> {
        self.full_waits += 1;
        // Relaxed: a statistic for the reader's stats().
        self.ring
            .word(FULL_WAITS_AT)
            .fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let mut next_check = ALIVE_EVERY;
        let mut sleep = Duration::from_micros(100);
        let mut waited = Duration::ZERO;
        loop {
            // A slot of a draining ring frees within microseconds (a 1 MiB chunk is copied out
            // in ~25 us): spin, then yield, and only then sleep, so that a ring that is full
            // because the reader is momentarily slower does not cost a whole sleep per slot.
            if waited < SPIN_FOR {
                std::hint::spin_loop();
            } else if waited < YIELD_FOR {
                std::thread::yield_now();
            } else {
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(Duration::from_millis(1));
            }
            // Acquire: as in `push`.
            if self.ring.stamp(slot).load(Ordering::Acquire) == free {
                return Ok(start.elapsed());
            }
            waited = start.elapsed();
            if waited >= next_check {
                next_check += ALIVE_EVERY;
                if !alive() || !self.owner_alive() || self.ring.closed() {
                    return Err(RingError::PeerGone);
                }
            }
            if waited >= timeout {
                return Err(RingError::Timeout {
                    ring: self.name().to_string(),
                    waited,
                });
            }
        }
    }

    /// Whether the learner (the process that created the ring) still runs and has not dropped
    /// the ring.
    pub fn owner_alive(&self) -> bool {
        !self.ring.closed() && self.ring.segment.owner_alive()
    }

    /// Pushes that found the ring full and waited.
    pub fn full_waits(&self) -> u64 {
        self.full_waits
    }

    /// Test support: behaves like a writer SIGKILLed in the middle of copying `encoded`:
    /// marks the next slot WRITING, copies the first `written` bytes, and drops the handle
    /// without publishing or releasing the claim.
    #[doc(hidden)]
    pub fn crash_mid_write(mut self, encoded: &[u8], written: usize) {
        let n = written.min(encoded.len()).min(self.ring.layout.slot_bytes);
        let slot = self.ring.slot_of(self.position);
        // Relaxed: see `push`.
        self.ring
            .stamp(slot)
            .store(stamp(self.position, WRITING), Ordering::Relaxed);
        // SAFETY: n <= slot_bytes; see `push`.
        unsafe {
            std::ptr::copy_nonoverlapping(encoded.as_ptr(), self.ring.data(slot), n);
        }
        self.crashed = true;
    }
}

impl Drop for RingWriter {
    fn drop(&mut self) {
        if self.crashed {
            return;
        }
        // Relaxed store of the position, then Release of the claim: a later writer's Acquire
        // claim sees where to continue.
        self.ring
            .word(WRITE_POS_AT)
            .store(self.position, Ordering::Relaxed);
        let _ = self.ring.segment.body_u32(WRITER_PID_AT).compare_exchange(
            self.me.pid,
            0,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }
}

impl std::fmt::Debug for RingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingWriter")
            .field("name", &self.name())
            .field("capacity", &self.capacity())
            .field("position", &self.position)
            .field("full_waits", &self.full_waits)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::segment::{unique_run_id, SEGMENT_PREFIX};

    fn name(tag: &str) -> String {
        format!("{SEGMENT_PREFIX}unit-{}-{tag}", unique_run_id())
    }

    #[test]
    fn layout_rounds_slots_to_cache_lines_and_refuses_nonsense() {
        let l = Layout::new(RingConfig {
            slots: 3,
            slot_bytes: 100,
        })
        .unwrap();
        assert_eq!(l.stride, 192);
        assert_eq!(l.body_len, RING_HEADER_LEN + 3 * 192);
        for (slots, slot_bytes) in [(0, 10), (2, 0), (usize::MAX, 64), (2, usize::MAX)] {
            let err = Layout::new(RingConfig { slots, slot_bytes }).unwrap_err();
            assert!(err.to_string().contains("RingConfig"), "{err}");
        }
    }

    #[test]
    fn stamps_separate_laps_and_states() {
        assert_ne!(stamp(0, READY), stamp(1, FREE));
        assert_ne!(stamp(5, FREE), stamp(1, FREE));
        assert_eq!(stamp(3, WRITING) & 3, WRITING);
    }

    #[test]
    fn a_second_writer_is_refused_until_the_first_detaches() {
        let n = name("claim");
        let mut reader = RingReader::create(
            &n,
            RingConfig {
                slots: 2,
                slot_bytes: 64,
            },
        )
        .unwrap();
        let mut w = RingWriter::open(&n).unwrap();
        assert_eq!(reader.writer_pid(), Some(std::process::id()));
        assert!(reader.writer_alive());
        let err = RingWriter::open(&n).unwrap_err();
        assert!(
            matches!(err, ShmError::WriterAttached { alive: true, .. }),
            "{err}"
        );
        // Garbage bytes are published as they are and rejected by the reader.
        w.push(&[7u8; 20], Duration::from_secs(1), &mut || true)
            .unwrap();
        drop(w);
        assert_eq!(reader.writer_pid(), None);
        let mut w = RingWriter::open(&n).unwrap();
        assert_eq!(w.position, 1, "a re-attached writer continues");
        w.push(&[8u8; 20], Duration::from_secs(1), &mut || true)
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..2 {
            assert!(matches!(
                reader.try_recv(&mut out),
                Err(RingError::Corrupt { .. })
            ));
        }
        assert_eq!(reader.try_recv(&mut out), Ok(None));
        assert_eq!(reader.stats().corrupted, 2);
    }
}
