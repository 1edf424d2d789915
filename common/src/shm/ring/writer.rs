//! The actor's end of a ring: [`RingWriter`] opens the learner's segment, claims it as its only
//! writer (see "One writer per ring" in the [module docs](super)), and pushes encoded chunks in
//! order, waiting while the ring is full.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::protocol::{
    stamp, Layout, Ring, FREE, FULL_WAITS_AT, READY, WRITER_PID_AT, WRITER_START_AT, WRITE_POS_AT,
    WRITING,
};
use super::RingError;
use crate::shm::process::ProcessId;
use crate::shm::segment::{Segment, SegmentKind, ShmError};

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

/// How often a waiting writer calls `alive()` and checks the learner.
const ALIVE_EVERY: Duration = Duration::from_millis(100);
/// A writer waiting for a free slot spins this long, then yields until `YIELD_FOR`, then
/// sleeps 100 us doubling to 1 ms.
const SPIN_FOR: Duration = Duration::from_micros(20);
const YIELD_FOR: Duration = Duration::from_micros(300);

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
    use crate::shm::ring::{RingConfig, RingReader};
    use crate::shm::segment::{unique_run_id, SEGMENT_PREFIX};

    fn name(tag: &str) -> String {
        format!("{SEGMENT_PREFIX}unit-{}-{tag}", unique_run_id())
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
