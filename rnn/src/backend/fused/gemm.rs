//! The GEMMs of the fused kernels ([`simd`](super::simd)'s packed-operand kernels, AVX-512 or
//! AVX2/FMA as the CPU has them) and the worker threads that run them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::mat::Mat;
use super::simd::{self, Level};

/// `c <- a b + beta c` with `c` row-major `[a.rows, b.cols]` with row stride `c_rs`.
pub(crate) fn gemm(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32], c_rs: usize) {
    simd::gemm(Level::current(), a, b, beta, c, c_rs);
}

thread_local! {
    /// Set while [`single_threaded`] runs on this thread.
    static SINGLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Worker threads for the fused backend: `RAYON_NUM_THREADS` (the setting burn's CPU backend
/// and `recur-bench --threads` use) or else every core; 1 inside [`single_threaded`]. Read
/// once, at first use, as rayon reads it: `available_parallelism` reads the cgroup's CPU quota
/// from /sys on every call, which a small policy's update paid several times per minibatch.
pub fn threads() -> usize {
    if SINGLE.get() {
        return 1;
    }
    configured_threads()
}

/// [`threads`] outside [`single_threaded`].
fn configured_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// Runs `f` with the fused kernels on the calling thread alone: for work that is already one
/// of several [`parallel`] jobs.
pub fn single_threaded<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SINGLE.set(self.0);
        }
    }
    let _restore = Restore(SINGLE.replace(true));
    f()
}

/// Runs every job, the first on the calling thread and the rest on rayon's pool (burn's CPU
/// backend's pool, sized by `RAYON_NUM_THREADS` like [`threads`]); results in job order.
/// The pool's workers stay alive between calls, so a call pays a wake-up, not a thread spawn.
pub fn parallel<T: Send, F: FnOnce() -> T + Send>(jobs: Vec<F>) -> Vec<T> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Vec::new();
    };
    let mut rest: Vec<Option<T>> = (0..jobs.len()).map(|_| None).collect();
    let mut head = None;
    let spawned = jobs.len();
    CALLS.fetch_add(1, Ordering::Release);
    pool().in_place_scope(|s| {
        for (job, slot) in jobs.zip(rest.iter_mut()) {
            s.spawn(move |_| *slot = Some(job()));
        }
        head = Some(first());
    });
    keep_warm(spawned);
    std::iter::once(head)
        .chain(rest)
        .map(|r| r.expect("every job ran (a panic would have propagated)"))
        .collect()
}

/// The fused kernels' workers: one fewer than [`threads`], since [`parallel`]'s caller runs
/// the first job itself (rayon's global pool, burn's, has a worker per thread besides).
fn pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(configured_threads().saturating_sub(1).max(1))
            .thread_name(|i| format!("recur-fused-{i}"))
            .build()
            .expect("the fused kernels' worker threads start")
    })
}

/// [`parallel`] calls so far: a warm worker stops spinning when it moves.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// How long a worker that ran a [`parallel`] job stays awake for the next call before it goes
/// back to rayon's pool (whose idle workers sleep after tens of microseconds). Waking a
/// sleeping worker is a futex wake, and in a VM a halted vCPU's wake-up: on 2 cores of a
/// Zen 4 VM, the PPO critic's pass over 32 rows x 16 steps took 405 us on two threads against
/// 482 us on one, the first parallel call after ~120 us of one-threaded work.
pub const KEEP_WARM: Duration = Duration::from_micros(500);

/// Has `workers` pool workers spin (at most [`KEEP_WARM`], until the next [`parallel`] call)
/// after a call that used them, so that the next call finds them awake. Work that never runs
/// in parallel (a small policy's update, MaskedCartPole's 8-row minibatches) never spins.
/// Same run, `recur-bench learner --update fused --slice-len 16 --batch 32` (2-core Zen 4 VM),
/// three rounds: median 1.59 / 1.46 / 1.25 ms without, 1.45 / 1.34 / 1.18 ms with.
fn keep_warm(workers: usize) {
    let call = CALLS.load(Ordering::Acquire);
    for _ in 0..workers {
        pool().spawn(move || {
            let until = Instant::now() + KEEP_WARM;
            while CALLS.load(Ordering::Acquire) == call && Instant::now() < until {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
        });
    }
}

/// `count` items split into at most `parts` contiguous blocks of near-equal size:
/// `(first, len)` each, none empty.
pub fn blocks(count: usize, parts: usize) -> Vec<(usize, usize)> {
    let parts = parts.clamp(1, count.max(1));
    let (base, extra) = (count / parts, count % parts);
    let mut first = 0;
    (0..parts)
        .map(|p| {
            let len = base + usize::from(p < extra);
            let block = (first, len);
            first += len;
            block
        })
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// Splits `buf` into consecutive pieces of `lens[i] * unit` elements.
pub(crate) fn split_mut(
    mut buf: &mut [f32],
    lens: impl IntoIterator<Item = usize>,
    unit: usize,
) -> Vec<&mut [f32]> {
    let mut out = Vec::new();
    for len in lens {
        let (head, tail) = buf.split_at_mut(len * unit);
        out.push(head);
        buf = tail;
    }
    out
}

/// The practical peak of this GEMM on this machine: `c = a b` for square `n x n` f32
/// matrices, rows split over `threads` threads as the fused kernels split batch rows. Returns
/// the median of `iters` timed calls (after one warm-up) and the GFLOP/s it implies.
pub fn square_gemm_peak(n: usize, threads: usize, iters: usize) -> (Duration, f64) {
    let a: Vec<f32> = (0..n * n).map(|i| ((i % 17) as f32 - 8.0) * 0.01).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i % 13) as f32 - 6.0) * 0.01).collect();
    let mut c = vec![0.0f32; n * n];
    let parts = blocks(n, threads);
    let median = median_time(iters, || {
        over_blocks(&mut c, &parts, n, |first, len, out| {
            gemm(
                Mat::rows(&a[first * n..(first + len) * n], len, n),
                Mat::rows(&b, n, n),
                0.0,
                out,
                n,
            )
        })
    });
    let flops = 2.0 * (n as f64).powi(3);
    (median, flops / median.as_secs_f64() / 1e9)
}

/// The recurrent step's GEMM rate: `steps` products `[rows, k] x [k, n]` with one `b` packed
/// once (as the fused kernels pack `W_hh^T` once per layer call), rows split over `threads`
/// threads. Returns the median GFLOP/s of `iters` timed runs (after one warm-up).
pub fn step_gemm_rate(
    rows: usize,
    k: usize,
    n: usize,
    steps: usize,
    threads: usize,
    iters: usize,
) -> f64 {
    let a: Vec<f32> = (0..rows * k)
        .map(|i| ((i % 17) as f32 - 8.0) * 0.01)
        .collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i % 13) as f32 - 6.0) * 0.01).collect();
    let mut c = vec![0.0f32; rows * n];
    let parts = blocks(rows, threads);
    let median = median_time(iters, || {
        let packed = simd::Packed::new(Mat::rows(&b, k, n), Level::current());
        over_blocks(&mut c, &parts, n, |first, len, out| {
            for _ in 0..steps {
                simd::gemm_packed(
                    Mat::rows(&a[first * k..(first + len) * k], len, k),
                    &packed,
                    1.0,
                    out,
                    n,
                );
            }
        })
    });
    let flops = 2.0 * (rows * k * n * steps) as f64;
    flops / median.as_secs_f64() / 1e9
}

/// Runs `job(first, len, out)` for every block `(first, len)` of `parts`, one thread each,
/// `out` the block's rows of the row-major `c` (`n` wide).
fn over_blocks(
    c: &mut [f32],
    parts: &[(usize, usize)],
    n: usize,
    job: impl Fn(usize, usize, &mut [f32]) + Sync,
) {
    let outs = split_mut(c, parts.iter().map(|&(_, len)| len), n);
    let job = &job;
    let jobs: Vec<_> = parts
        .iter()
        .zip(outs)
        .map(|(&(first, len), out)| move || job(first, len, out))
        .collect();
    parallel(jobs);
}

/// The median (the upper one of an even count) of `iters` (at least one) timed calls of
/// `run`, after one warm-up call.
fn median_time(iters: usize, mut run: impl FnMut()) -> Duration {
    run();
    let mut samples: Vec<Duration> = (0..iters.max(1))
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_with_transposes_and_strides() {
        // a [2, 3], b^T stored as [2, 3] (so b is [3, 2]).
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1.0, 0.0, -1.0, 2.0, 1.0, 0.0];
        let mut c = [10.0; 4];
        gemm(
            Mat::rows(&a, 2, 3),
            Mat::rows(&bt, 2, 3).t(),
            1.0,
            &mut c,
            2,
        );
        // a b = [[1*1+2*0+3*-1, 1*2+2*1+3*0], [4-6, 8+5]] = [[-2, 4], [-2, 13]]
        assert_eq!(c, [8.0, 14.0, 8.0, 23.0]);
        // A column block of a wider matrix, into a strided output.
        let wide = [1.0, 2.0, 9.0, 3.0, 4.0, 9.0];
        let mut out = [0.0; 6];
        gemm(
            Mat::strided(&wide, 2, 2, 3),
            Mat::rows(&[1.0, 0.0, 0.0, 1.0], 2, 2),
            0.0,
            &mut out,
            3,
        );
        assert_eq!(out, [1.0, 2.0, 0.0, 3.0, 4.0, 0.0]);
    }

    #[test]
    fn blocks_cover_every_item_once() {
        assert_eq!(blocks(5, 2), [(0, 3), (3, 2)]);
        assert_eq!(blocks(1, 4), [(0, 1)]);
        assert_eq!(blocks(0, 2), Vec::<(usize, usize)>::new());
        let got = parallel((0..3).map(|i| move || i * 10).collect());
        assert_eq!(got, [0, 10, 20]);
    }
}
