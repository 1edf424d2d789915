//! Weights from the learner to the actors: a versioned double buffer in one shared-memory
//! segment, each buffer guarded by a seqlock.
//!
//! The learner ([`WeightPublisher`]) writes a new blob into the buffer that is *not* the one
//! last published, then publishes `(version, buffer)` in one atomic word. Actors
//! ([`WeightSubscriber`]) poll [`latest_version`](WeightSubscriber::latest_version) (one load)
//! and copy the published buffer when it is newer than what they run. A subscriber that is
//! still copying while the publisher starts overwriting that buffer (two publishes during one
//! copy) sees the buffer's sequence number change and copies again: a fetched blob never mixes
//! two versions.
//!
//! # Layout (segment body)
//!
//! ```text
//! 0     max_bytes (u64)       written once by the creator
//! 8     published (u64)       version << 1 | buffer index; 0 = nothing published
//! 16    buffer stride (u64)   round_up(64 + max_bytes, 64)
//! 24    buffers offset (u64)  64
//! 64 + b * stride             buffer b: seq (u64, odd while being written), version (u64),
//!                             length (u64); the blob at +64
//! ```

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::segment::{Segment, SegmentKind, ShmError};

const ALIGN: usize = 64;
const MAX_BYTES_AT: usize = 0;
const PUBLISHED_AT: usize = 8;
const STRIDE_AT: usize = 16;
const BUFFERS_AT_AT: usize = 24;
const BUFFERS_AT: usize = 64;
const BUF_HEADER_LEN: usize = 64;
const SEQ_AT: usize = 0;
const VERSION_AT: usize = 8;
const LEN_AT: usize = 16;
/// Versions are stored shifted left by one.
const MAX_VERSION: u64 = (1 << 63) - 1;
/// Attempts of one fetch before it reports [`ShmError::Contended`].
const FETCH_RETRIES: u32 = 10_000;

#[derive(Clone, Copy, Debug)]
struct Layout {
    max_bytes: usize,
    stride: usize,
    body_len: usize,
}

impl Layout {
    fn new(max_bytes: usize) -> Result<Self, ShmError> {
        let too_large = || ShmError::Config {
            field: "weights max_bytes",
            value: max_bytes as u64,
            reason: "too large",
        };
        let stride = max_bytes
            .checked_add(BUF_HEADER_LEN + ALIGN - 1)
            .map(|n| n / ALIGN * ALIGN)
            .ok_or_else(too_large)?;
        let body_len = stride
            .checked_mul(2)
            .and_then(|n| n.checked_add(BUFFERS_AT))
            .filter(|&n| n <= isize::MAX as usize / 2)
            .ok_or_else(too_large)?;
        Ok(Layout {
            max_bytes,
            stride,
            body_len,
        })
    }

    fn buffer(&self, b: usize) -> usize {
        BUFFERS_AT + b * self.stride
    }
}

struct Buffers {
    segment: Segment,
    layout: Layout,
}

impl Buffers {
    fn published(&self) -> &AtomicU64 {
        self.segment.body_u64(PUBLISHED_AT)
    }

    fn word(&self, b: usize, at: usize) -> &AtomicU64 {
        self.segment.body_u64(self.layout.buffer(b) + at)
    }

    /// Buffer `b`'s blob start; valid for `max_bytes` bytes.
    fn data(&self, b: usize) -> *mut u8 {
        debug_assert!(b < 2);
        // SAFETY: b < 2 and the layout fits the body (checked at create/open), so the blob
        // region of buffer b lies inside the mapping.
        unsafe {
            self.segment
                .body_ptr()
                .add(self.layout.buffer(b) + BUF_HEADER_LEN)
        }
    }
}

/// The learner's end: creates and owns the weight segment, publishes new versions.
pub struct WeightPublisher {
    buffers: Buffers,
    last: u64,
    current: usize,
}

impl WeightPublisher {
    /// Creates weight segment `name` for blobs of at most `max_bytes` (see
    /// [`Segment::create`]); nothing is published yet (version 0). Removed on drop.
    pub fn create(name: &str, max_bytes: usize) -> Result<Self, ShmError> {
        let layout = Layout::new(max_bytes)?;
        let segment = Segment::create_with(name, SegmentKind::Weights, layout.body_len, |seg| {
            // Relaxed: published to openers by the segment magic's Release store.
            let put = |at, v: usize| seg.body_u64(at).store(v as u64, Ordering::Relaxed);
            put(MAX_BYTES_AT, layout.max_bytes);
            put(STRIDE_AT, layout.stride);
            put(BUFFERS_AT_AT, BUFFERS_AT);
        })?;
        Ok(WeightPublisher {
            buffers: Buffers { segment, layout },
            last: 0,
            current: 1,
        })
    }

    pub fn name(&self) -> &str {
        self.buffers.segment.name()
    }

    /// The last version published (0 = none).
    pub fn version(&self) -> u64 {
        self.last
    }

    /// Writes `bytes` into the buffer not currently published (its seq odd while writing,
    /// even after), then publishes `(version, buffer)` with Release. Errors, naming the
    /// segment: `bytes` longer than `max_bytes` ([`ShmError::TooLarge`]); `version` not above
    /// the last published one, or 2^63 and above ([`ShmError::VersionOrder`]). Never blocks.
    pub fn publish(&mut self, version: u64, bytes: &[u8]) -> Result<(), ShmError> {
        let max = self.buffers.layout.max_bytes;
        if bytes.len() > max {
            return Err(ShmError::TooLarge {
                name: self.name().to_string(),
                len: bytes.len(),
                max,
            });
        }
        if version <= self.last || version > MAX_VERSION {
            return Err(ShmError::VersionOrder {
                name: self.name().to_string(),
                version,
                last: self.last,
            });
        }
        let b = 1 - self.current;
        let word = |at| self.buffers.word(b, at);
        let seq = word(SEQ_AT);
        // Relaxed: we are the only writer of seq. Even between publishes.
        let s = seq.load(Ordering::Relaxed) & !1;
        // Relaxed store of the odd seq + Release fence: any subscriber that observes one of
        // the writes below (and then fences with Acquire) also observes the odd seq, so its
        // re-check fails (the classic seqlock writer).
        seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        // Relaxed: inside the seqlock window; validated by the subscriber's seq re-check.
        word(VERSION_AT).store(version, Ordering::Relaxed);
        word(LEN_AT).store(bytes.len() as u64, Ordering::Relaxed);
        // SAFETY: bytes.len() <= max_bytes (checked above), the size of buffer b's blob region;
        // `bytes` is our memory and cannot overlap the mapping. Subscribers read this region
        // only with raw copies validated by the seqlock, never through references.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buffers.data(b), bytes.len());
        }
        // Release: the blob, version and length happen before the even seq.
        seq.store(s.wrapping_add(2), Ordering::Release);
        // Release: a subscriber that loads this word (Acquire) sees buffer b complete.
        self.buffers
            .published()
            .store(version << 1 | b as u64, Ordering::Release);
        self.last = version;
        self.current = b;
        Ok(())
    }
}

impl std::fmt::Debug for WeightPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightPublisher")
            .field("name", &self.name())
            .field("max_bytes", &self.buffers.layout.max_bytes)
            .field("version", &self.last)
            .finish()
    }
}

/// An actor's end: opens the learner's weight segment and copies newer versions out.
pub struct WeightSubscriber {
    buffers: Buffers,
}

impl WeightSubscriber {
    /// Opens weight segment `name`, checking its header and layout.
    pub fn open(name: &str) -> Result<Self, ShmError> {
        let segment = Segment::open_kind(name, Some(SegmentKind::Weights))?;
        segment.check_header_len("weights", BUFFERS_AT)?;
        let layout_err = |field, value, reason| segment.layout_error(field, value, reason);
        let max = segment.layout_word(MAX_BYTES_AT);
        let layout = usize::try_from(max)
            .map_err(|_| layout_err("max_bytes", max, "does not fit usize".into()))
            .and_then(|m| {
                Layout::new(m).map_err(|e| layout_err("max_bytes", max, e.to_string()))
            })?;
        let why = format!(" for max_bytes {max}");
        segment.check_layout_word("buffer stride", STRIDE_AT, layout.stride, &why)?;
        segment.check_layout_word("buffers offset", BUFFERS_AT_AT, BUFFERS_AT, "")?;
        if layout.body_len > segment.body_len() {
            return Err(layout_err(
                "max_bytes",
                max,
                format!(
                    "two buffers need {} body bytes, the segment has {}",
                    layout.body_len,
                    segment.body_len()
                ),
            ));
        }
        Ok(WeightSubscriber {
            buffers: Buffers { segment, layout },
        })
    }

    pub fn name(&self) -> &str {
        self.buffers.segment.name()
    }

    pub fn max_bytes(&self) -> usize {
        self.buffers.layout.max_bytes
    }

    /// The newest published version (0 = nothing published yet): one Acquire load.
    pub fn latest_version(&self) -> u64 {
        // Acquire: pairs with the publisher's Release; cheap enough to poll every chunk.
        self.buffers.published().load(Ordering::Acquire) >> 1
    }

    /// If a version newer than `have` is published, copies it into `out` (cleared, its
    /// allocation reused) and returns `Ok(Some(version))`; `Ok(None)` otherwise. Copies again
    /// while a concurrent publish could have torn the copy, so the bytes are exactly one
    /// version's. Errors: a stored length above `max_bytes` ([`ShmError::Layout`]), or no
    /// consistent copy after many tries ([`ShmError::Contended`]). Never blocks on the
    /// publisher.
    pub fn fetch_newer(&mut self, have: u64, out: &mut Vec<u8>) -> Result<Option<u64>, ShmError> {
        let max = self.buffers.layout.max_bytes;
        for attempt in 0..FETCH_RETRIES {
            if attempt > 0 {
                if attempt < 16 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            // Acquire: pairs with the publisher's Release of `published`: the buffer it names
            // was complete (even seq) at that point.
            let published = self.buffers.published().load(Ordering::Acquire);
            let version = published >> 1;
            if version <= have {
                return Ok(None);
            }
            let b = (published & 1) as usize;
            let seq = self.buffers.word(b, SEQ_AT);
            // Acquire: pairs with the publisher's Release of the even seq, so the blob reads
            // below see at least that write.
            let s1 = seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                // Being rewritten: the publisher has moved on; reload `published`.
                continue;
            }
            // Relaxed: validated by the seq re-check below.
            let stored_version = self.buffers.word(b, VERSION_AT).load(Ordering::Relaxed);
            let len = self.buffers.word(b, LEN_AT).load(Ordering::Relaxed);
            if len > max as u64 {
                // Acquire fence then Relaxed re-read: as below. A stable seq means the length
                // really is out of range: corrupt, not torn.
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == s1 {
                    return Err(ShmError::Layout {
                        name: self.name().to_string(),
                        field: "weights length",
                        value: len,
                        reason: format!("exceeds max_bytes {max}"),
                    });
                }
                continue;
            }
            let len = len as usize;
            out.clear();
            out.reserve(len);
            // SAFETY: len <= max_bytes, the size of buffer b's blob region; the destination is
            // `out`'s spare capacity (reserved above), which cannot overlap the mapping. The
            // source may be written concurrently by the publisher: it is read with a raw copy
            // (no reference to it is formed), the bytes are plain u8, and a torn copy is
            // detected by the seq re-check and discarded.
            unsafe {
                std::ptr::copy_nonoverlapping(self.buffers.data(b), out.as_mut_ptr(), len);
                out.set_len(len);
            }
            // Acquire fence: the blob reads above happen before the seq re-read below, so if
            // any of them saw a write of a later publish, the re-read sees its odd (or newer)
            // seq (pairs with the publisher's Release fence).
            fence(Ordering::Acquire);
            // Relaxed: ordered by the fence.
            if seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            // A buffer's version only grows; one older than the published word would be
            // inconsistent (retry, and give up as Contended if it persists).
            if stored_version < version {
                continue;
            }
            return Ok(Some(stored_version));
        }
        out.clear();
        Err(ShmError::Contended {
            name: self.name().to_string(),
            retries: FETCH_RETRIES,
        })
    }

    /// Whether the learner (the process that created the segment) still runs.
    pub fn owner_alive(&self) -> bool {
        self.buffers.segment.owner_alive()
    }

    /// Where buffer `b`'s length word (`u64`) lies in the segment file (fault injection).
    #[doc(hidden)]
    pub fn length_offset(&self, b: usize) -> usize {
        super::segment::HEADER_LEN + self.buffers.layout.buffer(b.min(1)) + LEN_AT
    }
}

impl std::fmt::Debug for WeightSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightSubscriber")
            .field("name", &self.name())
            .field("max_bytes", &self.max_bytes())
            .field("latest_version", &self.latest_version())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::segment::{unique_run_id, SEGMENT_PREFIX};

    #[test]
    fn versions_alternate_buffers_and_must_increase() {
        let name = format!("{SEGMENT_PREFIX}unit-{}-w", unique_run_id());
        let mut p = WeightPublisher::create(&name, 16).unwrap();
        let mut s = WeightSubscriber::open(&name).unwrap();
        let mut out = Vec::new();
        assert_eq!(s.latest_version(), 0);
        assert_eq!(s.fetch_newer(0, &mut out).unwrap(), None);
        p.publish(3, b"abc").unwrap();
        assert_eq!(s.fetch_newer(0, &mut out).unwrap(), Some(3));
        assert_eq!(out, b"abc");
        assert_eq!(s.fetch_newer(3, &mut out).unwrap(), None);
        p.publish(4, b"").unwrap();
        assert_eq!(s.fetch_newer(3, &mut out).unwrap(), Some(4));
        assert!(out.is_empty());
        let err = p.publish(4, b"x").unwrap_err();
        assert!(err
            .to_string()
            .contains("version 4 must be greater than the last published 4"));
        let err = p.publish(5, &[0; 17]).unwrap_err();
        assert!(
            err.to_string()
                .contains("17 bytes exceeds the segment's max_bytes 16"),
            "{err}"
        );
        assert!(p.publish(1 << 63, b"").is_err());
    }
}
