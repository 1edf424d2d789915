//! The learner's end of a ring: [`RingReader`] creates the segment with every slot free,
//! receives the chunks in order, verifies each while copying it out (see "Verification" in the
//! [module docs](super)), and keeps the counters ([`RingStats`]).

use std::sync::atomic::Ordering;

use super::copy_crc::{self, copy_from_shm};
use super::protocol::{
    stamp, Layout, Ring, RingConfig, SlotOffsets, CLOSED_AT, FREE, FULL_WAITS_AT, LEN_AT, READY,
    RING_HEADER_LEN, SLOTS_AT, SLOTS_OFFSET_AT, SLOT_BYTES_AT, SLOT_HEADER_LEN, STAMP_AT,
    STRIDE_AT, WRITING,
};
use super::RingError;
use crate::chunk::{Chunk, PREFIX_LEN};
use crate::shm::segment::{Segment, SegmentKind, ShmError, HEADER_LEN};

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
        let (slots, slot_bytes) = (self.ring.layout.slots, self.ring.layout.slot_bytes);
        f.debug_struct("RingReader")
            .field("name", &self.name())
            .field("config", &RingConfig { slots, slot_bytes })
            .field("position", &self.position)
            .field("stats", &self.stats)
            .finish()
    }
}
