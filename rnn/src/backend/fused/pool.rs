//! Scratch buffers kept across calls of the fused kernels.
//!
//! One call at the anchor workload (LSTM, B = 128, T = 128, H = 256, two threads) needs about
//! 70 MiB of scratch: the time-major inputs and each block's `[T][rows][G*H]` pre-activations.
//! Blocks of that size come straight from the OS (glibc serves them with `mmap` from 32 MiB
//! up) and go back when freed, so every call paid a page fault and a kernel-zeroed page per
//! 4 KiB written: a fifth of a forward call measured under `perf`. Buffers handed back here
//! are reused by the next call instead, whose writes then hit mapped memory.
//!
//! A taken buffer holds whatever its last user left: callers overwrite every element they read
//! (each use says why). At most [`MAX_KEPT_BYTES`] are kept; the smallest buffers go first.

use std::sync::Mutex;

/// Upper bound on the bytes kept between calls.
pub(crate) const MAX_KEPT_BYTES: usize = 512 << 20;

static POOL: Mutex<Pool> = Mutex::new(Pool(Vec::new()));

/// A buffer of `len` elements with unspecified (initialized) contents: the smallest kept one
/// that fits, else a new zeroed one.
pub(crate) fn take(len: usize) -> Vec<f32> {
    let kept = lock().take(len);
    kept.map_or_else(|| vec![0.0; len], |buf| sized(buf, len))
}

/// Hands `buf` back for a later [`take`].
pub(crate) fn give(buf: Vec<f32>) {
    lock().give(buf, MAX_KEPT_BYTES);
}

fn lock() -> std::sync::MutexGuard<'static, Pool> {
    // A panic while holding the lock cannot leave the list inconsistent (push/remove only).
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `buf` with length `len` (its capacity fits): shrinking keeps the old values, growing
/// within the capacity writes zeros.
fn sized(mut buf: Vec<f32>, len: usize) -> Vec<f32> {
    buf.resize(len, 0.0);
    buf
}

/// The kept buffers.
struct Pool(Vec<Vec<f32>>);

impl Pool {
    /// The smallest kept buffer with room for `len` elements.
    fn take(&mut self, len: usize) -> Option<Vec<f32>> {
        let fit = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        Some(self.0.swap_remove(fit))
    }

    /// Keeps `buf`, then drops the smallest buffers until at most `max_bytes` are kept.
    fn give(&mut self, buf: Vec<f32>, max_bytes: usize) {
        if buf.capacity() == 0 || buf.capacity() * 4 > max_bytes {
            return;
        }
        self.0.push(buf);
        while self.bytes() > max_bytes {
            let smallest = self
                .0
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)
                .expect("over the bound means not empty");
            self.0.swap_remove(smallest);
        }
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|b| b.capacity() * 4).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_fit_is_reused_and_the_bound_holds() {
        let mut pool = Pool(Vec::new());
        assert!(pool.take(10).is_none());
        let mut big = vec![0.0; 100];
        big[0] = 7.0;
        let at = big.as_ptr();
        pool.give(big, 1000);
        pool.give(vec![0.0; 50], 1000);
        // 40 fits both; the smaller one is taken. 80 fits only the big one, old values kept.
        assert_eq!(pool.take(40).map(|b| b.capacity()), Some(50));
        let got = sized(pool.take(80).expect("the big one fits"), 80);
        assert_eq!((got.as_ptr(), got.len(), got[0]), (at, 80, 7.0));
        assert!(pool.take(1).is_none());
        // Over the bound: the smallest go first; one alone over the bound is not kept.
        pool.give(vec![0.0; 100], 1000);
        pool.give(vec![0.0; 60], 1000);
        pool.give(vec![0.0; 150], 1000);
        let mut caps: Vec<usize> = pool.0.iter().map(Vec::capacity).collect();
        caps.sort();
        assert_eq!(caps, [100, 150]);
        assert!(pool.bytes() <= 1000);
        pool.give(vec![0.0; 251], 1000);
        assert_eq!(pool.0.len(), 2);
        // Growing within capacity writes zeros.
        let grown = sized(Vec::with_capacity(8), 8);
        assert_eq!(grown, [0.0; 8]);
    }
}
