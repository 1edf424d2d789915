//! The ring's layout in its segment, which both ends follow: the slot states and the stamps
//! that carry them, the words of the ring header and of each slot header, the [`Layout`] a
//! [`RingConfig`] gives (checked against the segment when a writer opens the ring), and
//! [`Ring`], the access to those words and slots that the reader and the writer share. The
//! protocol itself is described in the [module docs](super).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::shm::process::ProcessId;
use crate::shm::segment::{Segment, ShmError, HEADER_LEN};

/// Slots per ring and bytes per slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Chunks the ring holds before the writer waits (at least 1).
    pub slots: usize,
    /// Capacity of one slot: the largest encoded chunk it takes (at least 1).
    pub slot_bytes: usize,
}

// Slot states, the low two bits of a stamp.
pub(super) const FREE: u64 = 0;
pub(super) const WRITING: u64 = 1;
pub(super) const READY: u64 = 2;

pub(super) fn stamp(position: u64, state: u64) -> u64 {
    // Wrapping: positions stay far below 2^62, and both sides compute stamps the same way.
    position.wrapping_mul(4) | state
}

const ALIGN: usize = 64;
/// Ring header in the segment body: line 0 the layout (written once by the creator), line 1
/// the writer's words.
pub(super) const RING_HEADER_LEN: usize = 128;
pub(super) const SLOTS_AT: usize = 0;
pub(super) const SLOT_BYTES_AT: usize = 8;
pub(super) const STRIDE_AT: usize = 16;
pub(super) const SLOTS_OFFSET_AT: usize = 24;
/// Set (non-zero) by the reader when it is dropped: the writer stops waiting for it.
pub(super) const CLOSED_AT: usize = 32;
pub(super) const WRITER_PID_AT: usize = 64;
pub(super) const WRITER_START_AT: usize = 72;
pub(super) const WRITE_POS_AT: usize = 80;
pub(super) const FULL_WAITS_AT: usize = 88;
/// Per slot: stamp at 0, length at 8, data at 64.
pub(super) const SLOT_HEADER_LEN: usize = 64;
pub(super) const STAMP_AT: usize = 0;
pub(super) const LEN_AT: usize = 8;

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
pub(super) struct Layout {
    pub(super) slots: usize,
    pub(super) slot_bytes: usize,
    pub(super) stride: usize,
    pub(super) body_len: usize,
}

impl Layout {
    pub(super) fn new(config: RingConfig) -> Result<Self, ShmError> {
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
    pub(super) fn slot(&self, i: usize) -> usize {
        RING_HEADER_LEN + i * self.stride
    }

    /// Reads and checks the layout an opener finds in `segment` (written by another process:
    /// every value is validated against the mapping before use).
    pub(super) fn read(segment: &Segment) -> Result<Self, ShmError> {
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
pub(super) struct Ring {
    pub(super) segment: Segment,
    pub(super) layout: Layout,
}

impl Ring {
    pub(super) fn stamp(&self, slot: usize) -> &AtomicU64 {
        self.segment.body_u64(self.layout.slot(slot) + STAMP_AT)
    }

    pub(super) fn len_word(&self, slot: usize) -> &AtomicU64 {
        self.segment.body_u64(self.layout.slot(slot) + LEN_AT)
    }

    /// The first data byte of `slot`; valid for `slot_bytes` bytes.
    pub(super) fn data(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.layout.slots);
        // SAFETY: slot < slots and the layout was checked to fit the body, so the data region
        // [slot(i) + 64, slot(i) + 64 + slot_bytes) lies inside the mapping.
        unsafe {
            self.segment
                .body_ptr()
                .add(self.layout.slot(slot) + SLOT_HEADER_LEN)
        }
    }

    pub(super) fn slot_of(&self, position: u64) -> usize {
        (position % self.layout.slots as u64) as usize
    }

    pub(super) fn word(&self, at: usize) -> &AtomicU64 {
        self.segment.body_u64(at)
    }

    /// Whether the reader has dropped the ring.
    pub(super) fn closed(&self) -> bool {
        // Relaxed: a flag polled while waiting; no data is read on the strength of it.
        self.word(CLOSED_AT).load(Ordering::Relaxed) != 0
    }

    pub(super) fn writer(&self) -> ProcessId {
        // Relaxed: informational (who holds the claim); the claim itself is the CAS in
        // `RingWriter::open`.
        ProcessId {
            pid: self.segment.body_u32(WRITER_PID_AT).load(Ordering::Relaxed),
            start: self.word(WRITER_START_AT).load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
