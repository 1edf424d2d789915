//! Same-run comparison of the recurrent step's GEMM (`[B/threads, H] x [H, G*H]`, `T` times
//! with one weight matrix) on three implementations, each thread on its own block of rows:
//! matrixmultiply's `sgemm` (through ndarray), the `gemm` crate 0.19 (`x86-v4` kernels;
//! neither can keep a packed operand across calls) and the fused backend's own kernels with
//! `W_hh^T` packed once per call.
//!
//!   cargo run --release -p recur-rnn --example step_gemm -- [threads] [rows] [k] [n] [steps]

use std::time::Instant;

use ndarray::linalg::general_mat_mul;
use ndarray::ArrayView2;
use recur_rnn::fused::{square_gemm_peak, step_gemm_rate};

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map_or(default, |v| v.parse().expect("a positive integer"))
}

/// One product `c += a b`: `(a, b, c, m, k, n)`, row-major.
type Step = fn(&[f32], &[f32], &mut [f32], usize, usize, usize);

/// GFLOP/s, median of `iters`, of `steps` products per thread with `step` doing one.
fn rate(rows: usize, k: usize, n: usize, steps: usize, threads: usize, step: Step) -> f64 {
    let a: Vec<f32> = (0..rows * k)
        .map(|i| ((i % 17) as f32 - 8.0) * 0.01)
        .collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i % 13) as f32 - 6.0) * 0.01).collect();
    let mut c = vec![0.0f32; rows * n];
    let per = rows / threads;
    let mut samples = Vec::new();
    for it in 0..6 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for (t, out) in c.chunks_mut(per * n).enumerate() {
                let (a, b) = (&a[t * per * k..(t + 1) * per * k], &b);
                s.spawn(move || {
                    for _ in 0..steps {
                        step(a, b, out, per, k, n);
                    }
                });
            }
        });
        if it > 0 {
            samples.push(start.elapsed().as_secs_f64());
        }
    }
    samples.sort_by(f64::total_cmp);
    2.0 * (rows * k * n * steps) as f64 / samples[samples.len() / 2] / 1e9
}

fn matrixmultiply(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    let av = ArrayView2::from_shape((m, k), a).unwrap();
    let bv = ArrayView2::from_shape((k, n), b).unwrap();
    let mut cv = ndarray::ArrayViewMut2::from_shape((m, n), c).unwrap();
    general_mat_mul(1.0, &av, &bv, 1.0, &mut cv);
}

fn gemm_crate(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the three row-major buffers hold [m, k], [k, n] and [m, n] (asserted).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            true,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// User + system CPU seconds of this process so far (`/proc/self/stat`, clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().map(|v| v.parse::<f64>().unwrap_or(0.0)).sum()
    });
    ticks / 100.0
}

/// GFLOP per CPU-second of `f` run `reps` times (flops each): what a loaded machine does not
/// distort as much as wall time.
fn per_cpu_second(flops: f64, reps: usize, mut f: impl FnMut()) -> f64 {
    let start = cpu_seconds();
    for _ in 0..reps {
        f();
    }
    flops * reps as f64 / (cpu_seconds() - start) / 1e9
}

fn main() {
    let threads = arg(1, 2);
    let (rows, k, n, steps) = (arg(2, 128), arg(3, 256), arg(4, 1024), arg(5, 64));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "shape [{rows}/{threads}, {k}] x [{k}, {n}], {steps} steps, {threads} threads; load {}",
        load.trim()
    );
    for round in 0..3 {
        let mm = rate(rows, k, n, steps, threads, matrixmultiply);
        let gc = rate(rows, k, n, steps, threads, gemm_crate);
        let own = step_gemm_rate(rows, k, n, steps, threads, 5);
        let (_, peak) = square_gemm_peak(1024, threads, 3);
        println!("round {round}: matrixmultiply {mm:.1}  gemm-0.19 {gc:.1}  packed-once {own:.1}  GFLOP/s  (own 1024^3 {peak:.1})");
    }
    // Per CPU-second, one thread (each of the 2 threads above is one core).
    let flops = 2.0 * (rows / threads * k * n * steps) as f64;
    for round in 0..3 {
        let mm = per_cpu_second(flops, 10, || {
            rate(rows / threads, k, n, steps, 1, matrixmultiply);
        });
        let gc = per_cpu_second(flops, 10, || {
            rate(rows / threads, k, n, steps, 1, gemm_crate);
        });
        let own = per_cpu_second(flops, 10, || {
            step_gemm_rate(rows / threads, k, n, steps, 1, 5);
        });
        println!("round {round} (1 thread, GFLOP per CPU-second): matrixmultiply {:.1}  gemm-0.19 {:.1}  packed-once {:.1}", mm * 6.0, gc * 6.0, own * 6.0);
    }
}
