//! `recur-bench rnn`: recurrent-mode throughput of the LSTM/GRU backends on TorchRL's anchor
//! workload, after one practical-peak `gemm` row; the rows, their fields and the options are
//! documented in docs/recur-bench.md.

use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor, TensorData};
use common::backend::{cpu_device, CpuAutodiff, TrainDevice};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recur_rnn::{
    fused, set_recurrent_mode, CellKind, MatmulPrecision, Recompute, RecurrentBackend,
    RecurrentConfig, RecurrentCore, RecurrentMode, RecurrentState,
};
use serde::Serialize;

use super::{at_least_one, each_at_least_one, emit, summarize};

/// What a benchmark row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward only, no autodiff.
    Fwd,
    /// Forward and backward of `sum(features)`.
    FwdBwd,
}

recur_rnn::config_names!(Pass, String "pass", Fwd => "fwd", FwdBwd => "fwdbwd");

/// The workload grid and measurement settings (the `recur-bench rnn` flags).
#[derive(Clone, Debug, clap::Args)]
pub struct RnnBench {
    /// Cells to measure.
    #[arg(long, value_delimiter = ',', default_value = "gru,lstm")]
    pub cells: Vec<CellKind>,
    /// Recurrent-mode backends to measure.
    #[arg(long, value_delimiter = ',', default_value = "pad,scan,fused")]
    pub backends: Vec<RecurrentBackend>,
    /// Activation memory of the fused backward: none (save gates) and/or full (recompute
    /// them); pad/scan rows always run with none, fwd rows only with none.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    pub recompute: Vec<Recompute>,
    /// Passes: fwd (no autodiff) and/or fwdbwd (forward + backward of sum(features)).
    #[arg(long, value_delimiter = ',', default_value = "fwd,fwdbwd")]
    pub passes: Vec<Pass>,
    /// Sequence lengths T.
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    pub steps: Vec<usize>,
    /// Probabilities of is_init at each step after the first.
    #[arg(long, value_delimiter = ',', default_value = "0,0.03,0.1")]
    pub reset_probs: Vec<f64>,
    /// Timed iterations per row (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Untimed warm-up iterations per row (at least one runs: the first call, reported as
    /// `first_call_ms`).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// CPU threads for burn's CPU backend [default: all cores].
    #[arg(long, default_value_t = all_cores(), hide_default_value = true)]
    pub threads: usize,
    /// A short run: T = 64, p in {0, 0.1}, 2 iterations, 1 warm-up; still a row for every
    /// cell x backend x pass.
    #[arg(long)]
    pub quick: bool,
    /// Batch size B.
    #[arg(long, default_value_t = 128)]
    pub batch: usize,
    /// Input features.
    #[arg(long, default_value_t = 64)]
    pub input: usize,
    /// Hidden size H.
    #[arg(long, default_value_t = 256)]
    pub hidden: usize,
    /// Stacked layers.
    #[arg(long, default_value_t = 1)]
    pub layers: usize,
    /// Seed of the inputs and resets.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where the modules run: cpu, cuda, cuda:N (a `--features cuda` build) or wgpu (a
    /// `--features wgpu` build).
    #[arg(long, default_value = "cpu")]
    pub device: BenchDevice,
    /// The fused CubeCL kernel's recurrent-product precision (ieee, tf32, bf16, auto); cpu
    /// takes ieee or auto only.
    #[arg(long, default_value = "auto")]
    pub matmul_precision: MatmulPrecision,
}

/// The device of `recur-bench rnn --device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchDevice {
    Cpu,
    /// burn's CUDA backend, GPU ordinal.
    Cuda(usize),
    /// burn's wgpu backend (its default adapter).
    Wgpu,
}

impl FromStr for BenchDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match (s, s.parse()) {
            ("wgpu", _) => Ok(BenchDevice::Wgpu),
            (_, Ok(TrainDevice::Cpu)) => Ok(BenchDevice::Cpu),
            (_, Ok(TrainDevice::Cuda(n))) => Ok(BenchDevice::Cuda(n)),
            _ => Err(format!(
                "device {s:?}: expected \"cpu\", \"cuda\", \"cuda:N\" or \"wgpu\""
            )),
        }
    }
}

impl std::fmt::Display for BenchDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchDevice::Cpu => f.write_str("cpu"),
            BenchDevice::Cuda(n) => write!(f, "cuda:{n}"),
            BenchDevice::Wgpu => f.write_str("wgpu"),
        }
    }
}

fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One result line.
#[derive(Clone, Debug, Serialize)]
pub struct RnnRow {
    pub bench: &'static str,
    pub cell: &'static str,
    pub backend: &'static str,
    pub pass: Pass,
    pub batch: usize,
    pub steps: usize,
    pub reset_prob: f64,
    pub median_ms: f64,
    pub frames_per_s: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub iters: usize,
    pub threads: usize,
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    /// `none` or `full`.
    pub recompute: Recompute,
    /// GEMM floating-point operations of one call / 1e9 (see [`RnnBench::gemm_gflop`]).
    pub gflop: f64,
    pub gflop_per_s: f64,
    /// The square GEMM of [`GemmRow`], measured right before and right after this row (mean);
    /// `null` off the CPU.
    pub peak_gflop_per_s: Option<f64>,
    /// `gflop_per_s / peak_gflop_per_s`; `null` off the CPU.
    pub peak_fraction: Option<f64>,
    /// `cpu`, `cuda:N` or `wgpu`.
    pub device: String,
    /// The fused CubeCL kernel's precision (`ieee` on the CPU).
    pub matmul_precision: &'static str,
    /// `fused` `fwdbwd` rows: bytes the forward keeps for the backward (states, and gates
    /// with `recompute = "none"`); `null` where not known.
    pub saved_bytes: Option<usize>,
    /// The row's first call (compilation included where the row is the first of its kernels'
    /// shape on a GPU), in ms.
    pub first_call_ms: f64,
}

/// The practical-peak row: `c = a b` for square `n x n` f32 matrices, rows split over
/// `threads` threads (the fused kernels' GEMM and threading).
#[derive(Clone, Debug, Serialize)]
pub struct GemmRow {
    pub bench: &'static str,
    pub n: usize,
    pub threads: usize,
    pub gflop_per_s: f64,
    pub median_ms: f64,
    /// The fused kernels' instruction set (`avx512`, `avx2` or `scalar`; `RECUR_SIMD` caps it).
    pub simd: &'static str,
}

/// Side of the square GEMM measured for the peak.
pub const PEAK_GEMM_N: usize = 1024;

impl RnnBench {
    /// Checks the flags (an error names the flag), then applies `--quick` (still a row for
    /// every cell x backend x pass).
    pub fn checked(self) -> anyhow::Result<Self> {
        at_least_one("--threads", self.threads)?;
        for p in &self.reset_probs {
            anyhow::ensure!(
                (0.0..=1.0).contains(p),
                "--reset-probs: {p} is not a probability in [0, 1]"
            );
        }
        each_at_least_one("--steps", "T", &self.steps)?;
        anyhow::ensure!(
            !self.recompute.is_empty(),
            "--recompute: give at least one of none, full"
        );
        if !self.quick {
            return Ok(self);
        }
        Ok(RnnBench {
            steps: vec![64.min(*self.steps.iter().min().unwrap_or(&64))],
            reset_probs: vec![0.0, 0.1],
            iters: 2,
            warmup: 1,
            ..self
        })
    }

    /// Runs every cell x backend x pass x steps x reset_prob row, writing each as soon as it
    /// is measured; returns the rows.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<RnnRow>> {
        let (peak_time, peak) = fused::square_gemm_peak(PEAK_GEMM_N, self.threads, 5);
        let gemm = GemmRow {
            bench: "gemm",
            n: PEAK_GEMM_N,
            threads: self.threads,
            gflop_per_s: peak,
            median_ms: peak_time.as_secs_f64() * 1e3,
            simd: fused::SimdLevel::current().name(),
        };
        emit(out, &gemm)?;
        let mut rows = Vec::new();
        for &cell in &self.cells {
            for &backend in &self.backends {
                // recompute matters only where the backward is the fused one (on the CPU).
                let recomputes = if backend.resolve() == RecurrentBackend::Fused {
                    self.recompute.clone()
                } else {
                    vec![Recompute::None]
                };
                for recompute in recomputes {
                    rows.extend(self.run_on_device(out, cell, backend, recompute)?);
                }
            }
        }
        Ok(rows)
    }

    /// [`run_module`](Self::run_module) on the backend of `--device`.
    fn run_on_device(
        &self,
        out: &mut impl Write,
        cell: CellKind,
        backend: RecurrentBackend,
        recompute: Recompute,
    ) -> anyhow::Result<Vec<RnnRow>> {
        let config = RecurrentConfig::new(self.input, self.hidden)
            .with_num_layers(self.layers)
            .with_backend(backend)
            .with_recompute(recompute)
            .with_matmul_precision(self.matmul_precision);
        match self.device {
            BenchDevice::Cpu => self.run_module::<CpuAutodiff>(out, cell, &config, &cpu_device()),
            #[cfg(feature = "cuda")]
            BenchDevice::Cuda(n) => {
                let device = burn::backend::cuda::CudaDevice::new(n);
                self.run_module::<common::backend::CudaAutodiff>(out, cell, &config, &device)
            }
            #[cfg(feature = "wgpu")]
            BenchDevice::Wgpu => {
                let device = Default::default();
                self.run_module::<common::backend::WgpuAutodiff>(out, cell, &config, &device)
            }
            #[allow(unreachable_patterns)]
            other => anyhow::bail!(
                "--device {other}: this recur-bench was built without that backend (build \
                 with `--features cuda` for cuda, `--features wgpu` for wgpu)"
            ),
        }
    }

    /// Every steps x p x pass row of one module.
    fn run_module<B>(
        &self,
        out: &mut impl Write,
        cell: CellKind,
        config: &RecurrentConfig,
        device: &B::Device,
    ) -> anyhow::Result<Vec<RnnRow>>
    where
        B: AutodiffBackend + MaybeBackward,
        B::InnerBackend: MaybeBackward,
    {
        let (backend, recompute) = (config.backend, config.recompute);
        let on_cpu = self.device == BenchDevice::Cpu;
        let mut rows = Vec::new();
        let module = RecurrentCore::<B>::new(config, cell, device)?;
        let inference = module.valid();
        for &steps in &self.steps {
            for &p in &self.reset_probs {
                for &pass in &self.passes {
                    if pass == Pass::Fwd && recompute == Recompute::Full {
                        continue;
                    }
                    let before = on_cpu.then(|| self.peak());
                    let (first_call, samples) = match pass {
                        Pass::Fwd => {
                            let inputs = Inputs::new(self, cell, steps, p, device);
                            self.time(|| forward(&inference, &inputs, false, device))
                        }
                        Pass::FwdBwd => {
                            let inputs = Inputs::new(self, cell, steps, p, device);
                            self.time(|| forward(&module, &inputs, true, device))
                        }
                    };
                    let peak = before.map(|before| (before + self.peak()) / 2.0);
                    let (median_ms, min_ms, max_ms) = summarize(&samples);
                    let gflop = self.gemm_gflop(cell, steps, pass, recompute);
                    let gflop_per_s = gflop / (median_ms / 1e3);
                    let (b, h, l) = (self.batch, self.hidden, self.layers);
                    let fused_bwd =
                        module.backend() == RecurrentBackend::Fused && pass == Pass::FwdBwd;
                    let saved_bytes =
                        fused_bwd.then(|| fused::saved_bytes(cell, b, steps, h, l, recompute));
                    let row = RnnRow {
                        bench: "rnn",
                        cell: cell.name(),
                        backend: backend.name(),
                        pass,
                        batch: self.batch,
                        steps,
                        reset_prob: p,
                        median_ms,
                        frames_per_s: (self.batch * steps) as f64 / (median_ms / 1e3),
                        min_ms,
                        max_ms,
                        iters: self.iters,
                        threads: self.threads,
                        input: self.input,
                        hidden: self.hidden,
                        layers: self.layers,
                        recompute,
                        gflop,
                        gflop_per_s,
                        peak_gflop_per_s: peak,
                        peak_fraction: peak.map(|peak| gflop_per_s / peak),
                        device: self.device.to_string(),
                        matmul_precision: self.matmul_precision.resolve().name(),
                        first_call_ms: first_call.as_secs_f64() * 1e3,
                        saved_bytes,
                    };
                    emit(out, &row)?;
                    rows.push(row);
                }
            }
        }
        Ok(rows)
    }

    /// FLOPs (/1e9) of the GEMMs of one call: forward `2 B T (in G H + H G H)` per layer (`G` = 4
    /// for an LSTM, 3 for a GRU; layers after the first read `H` inputs); the backward's GEMMs
    /// (`dG W_hh` per step, `dW_hh`, `dW_ih`, `dX`) are twice the forward, and `recompute = "full"`
    /// adds the forward's once more.
    pub fn gemm_gflop(
        &self,
        cell: CellKind,
        steps: usize,
        pass: Pass,
        recompute: Recompute,
    ) -> f64 {
        let g = cell.gates() as f64;
        let h = self.hidden as f64;
        let forward: f64 = (0..self.layers)
            .map(|l| {
                let inputs = if l == 0 { self.input } else { self.hidden } as f64;
                // minGRU has no h W_hh^T: its one GEMM is the input projection.
                let recurrent = if cell.has_hidden_weights() {
                    h * g * h
                } else {
                    0.0
                };
                2.0 * (self.batch * steps) as f64 * (inputs * g * h + recurrent)
            })
            .sum();
        let factor = match (pass, recompute) {
            (Pass::Fwd, _) => 1.0,
            (Pass::FwdBwd, Recompute::None) => 3.0,
            (Pass::FwdBwd, Recompute::Full) => 4.0,
        };
        forward * factor / 1e9
    }

    /// The square-GEMM figure now (median of 3 after a warm-up).
    fn peak(&self) -> f64 {
        fused::square_gemm_peak(PEAK_GEMM_N, self.threads, 3).1
    }

    /// The first call's time, then the timed calls' (after the warm-up, of which the first
    /// call is one: at least one call is untimed).
    fn time(&self, mut f: impl FnMut()) -> (Duration, Vec<Duration>) {
        let start = Instant::now();
        f();
        let first = start.elapsed();
        for _ in 1..self.warmup {
            f();
        }
        let samples = (0..self.iters.max(1))
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect();
        (first, samples)
    }
}

/// One row's call inputs on the device: `x` `[B, T, in]`, `is_init` `[B, T]` (column 0 true,
/// later steps Bernoulli(p); drawn from the seed, `T` and `p`, so every pass of a row's `T` and
/// `p` gets the same) and zero stored states `[B, T, L, H]` (every segment starts from a fresh
/// reset), built once before the row's calls (each call takes clones, which share the data). The TorchRL bench builds its inputs and zero states once per row too, so
/// both sides time the module call alone.
struct Inputs<B: Backend> {
    x: Tensor<B, 3>,
    is_init: Tensor<B, 2, Bool>,
    state: RecurrentState<B, 4>,
}

impl<B: Backend> Inputs<B> {
    fn new(bench: &RnnBench, cell: CellKind, steps: usize, p: f64, device: &B::Device) -> Self {
        let (b, l, h) = (bench.batch, bench.layers, bench.hidden);
        let mut rng = StdRng::seed_from_u64(bench.seed ^ steps as u64 ^ p.to_bits());
        let x: Vec<f32> = (0..b * steps * bench.input)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let is_init: Vec<bool> = (0..b * steps)
            .map(|i| i % steps == 0 || rng.random_bool(p))
            .collect();
        let x = Tensor::<B, 3>::from_data(TensorData::new(x, [b, steps, bench.input]), device);
        let is_init = Tensor::<B, 2, Bool>::from_data(TensorData::new(is_init, [b, steps]), device);
        // Zero states from a zeroed buffer: burn's `Tensor::zeros` fills its data one element
        // at a time.
        let zeros = || {
            Tensor::<B, 4>::from_data(
                TensorData::new(vec![0.0f32; b * steps * l * h], [b, steps, l, h]),
                device,
            )
        };
        Self {
            x,
            is_init,
            state: RecurrentState {
                rs_h: zeros(),
                rs_c: cell.has_cell_state().then(zeros),
            },
        }
    }
}

/// One recurrent-mode call (and, with `backward`, the backward pass of `sum(features)`).
fn forward<B: MaybeBackward>(
    module: &RecurrentCore<B>,
    inputs: &Inputs<B>,
    backward: bool,
    device: &B::Device,
) {
    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let out = module
        .forward_batch(
            inputs.x.clone(),
            inputs.is_init.clone(),
            inputs.state.clone(),
        )
        .expect("benchmark shapes are consistent");
    B::finish(out.features.sum(), backward, device);
}

/// Completes a call: reads the loss back, or runs the backward pass where there is autodiff.
/// (On a GPU the call returns once its work is queued: the device is synced.)
pub trait MaybeBackward: Backend {
    fn finish(loss: Tensor<Self, 1>, backward: bool, device: &Self::Device);
}

/// The autodiff backends: the backward pass when asked, then the loss read back (which waits
/// for the forward) and the device synced (which waits for the backward).
macro_rules! autodiff_finish {
    ($($backend:ty),*) => {$(
        impl MaybeBackward for $backend {
            fn finish(loss: Tensor<Self, 1>, backward: bool, device: &Self::Device) {
                if backward {
                    std::hint::black_box(loss.backward());
                } else {
                    std::hint::black_box(loss.into_data());
                }
                <$backend as Backend>::sync(device).expect("the device syncs");
            }
        }
    )*};
}

/// The plain backends: the loss read back waits for the whole forward.
macro_rules! plain_finish {
    ($($backend:ty),*) => {$(
        impl MaybeBackward for $backend {
            fn finish(loss: Tensor<Self, 1>, _backward: bool, _: &Self::Device) {
                std::hint::black_box(loss.into_data());
            }
        }
    )*};
}

autodiff_finish!(CpuAutodiff);
plain_finish!(common::backend::Cpu);
#[cfg(feature = "cuda")]
autodiff_finish!(common::backend::CudaAutodiff);
#[cfg(feature = "cuda")]
plain_finish!(common::backend::Cuda);
#[cfg(feature = "wgpu")]
autodiff_finish!(common::backend::WgpuAutodiff);
#[cfg(feature = "wgpu")]
plain_finish!(common::backend::Wgpu);
