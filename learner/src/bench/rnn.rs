//! `recur-bench rnn`: recurrent-mode throughput of the LSTM/GRU backends on TorchRL's anchor
//! workload (input 64, hidden 256, 1 layer, batch 128, `T` in {64, 128}, `is_init[:, 0]` true
//! and later steps Bernoulli(p), p in {0, 0.03, 0.1}).
//!
//! Every row is one JSON object:
//! `{"bench":"rnn","cell":..,"backend":..,"pass":"fwd"|"fwdbwd","batch":..,"steps":..,
//!   "reset_prob":..,"median_ms":..,"frames_per_s":..}` plus `min_ms`, `max_ms`, `iters`,
//! `threads`, `input`, `hidden`, `layers`. `fwd` runs without autodiff; `fwdbwd` runs forward
//! and backward of `loss = sum(features)`. frames/s = `batch * steps / median`.

use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};
use common::backend::{cpu_device, CpuAutodiff};
use common::recurrent::{
    set_recurrent_mode, CellKind, RecurrentBackend, RecurrentConfig, RecurrentCore, RecurrentMode,
    RecurrentState,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::summarize;

/// What a benchmark row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward only, no autodiff.
    Fwd,
    /// Forward and backward of `sum(features)`.
    FwdBwd,
}

impl FromStr for Pass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fwd" => Ok(Pass::Fwd),
            "fwdbwd" => Ok(Pass::FwdBwd),
            other => Err(format!("pass {other:?}: expected \"fwd\" or \"fwdbwd\"")),
        }
    }
}

/// The workload grid and measurement settings.
#[derive(Clone, Debug)]
pub struct RnnBench {
    pub cells: Vec<CellKind>,
    pub backends: Vec<RecurrentBackend>,
    pub passes: Vec<Pass>,
    pub steps: Vec<usize>,
    pub reset_probs: Vec<f64>,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    /// Timed iterations per row (the median is reported).
    pub iters: usize,
    /// Untimed iterations before them.
    pub warmup: usize,
    pub threads: usize,
    pub seed: u64,
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
}

/// One workload's data: inputs `[B, T, in]`, `is_init` `[B, T]` (column 0 true, later steps
/// Bernoulli(p)), zero stored states (every segment starts from a fresh reset).
struct Workload {
    x: Vec<f32>,
    is_init: Vec<bool>,
}

impl RnnBench {
    /// Runs every cell x backend x pass x steps x reset_prob row, writing each as soon as it
    /// is measured; returns the rows.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<RnnRow>> {
        let device = cpu_device();
        let mut rows = Vec::new();
        for &cell in &self.cells {
            for &backend in &self.backends {
                let config = RecurrentConfig::new(self.input, self.hidden)
                    .with_num_layers(self.layers)
                    .with_backend(backend);
                let module = RecurrentCore::<CpuAutodiff>::new(&config, cell, &device)?;
                let inference = module.valid();
                for &steps in &self.steps {
                    for &p in &self.reset_probs {
                        let work = self.workload(steps, p);
                        for &pass in &self.passes {
                            let samples = match pass {
                                Pass::Fwd => {
                                    self.time(|| forward(&inference, &work, self, steps, false))
                                }
                                Pass::FwdBwd => {
                                    self.time(|| forward(&module, &work, self, steps, true))
                                }
                            };
                            let (median_ms, min_ms, max_ms) = summarize(&samples);
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
                            };
                            writeln!(out, "{}", serde_json::to_string(&row)?)?;
                            out.flush()?;
                            rows.push(row);
                        }
                    }
                }
            }
        }
        Ok(rows)
    }

    fn workload(&self, steps: usize, p: f64) -> Workload {
        let mut rng = StdRng::seed_from_u64(self.seed ^ steps as u64 ^ p.to_bits());
        let n = self.batch * steps;
        Workload {
            x: (0..n * self.input)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect(),
            is_init: (0..n)
                .map(|i| i % steps == 0 || rng.random_bool(p))
                .collect(),
        }
    }

    fn time(&self, mut f: impl FnMut()) -> Vec<Duration> {
        for _ in 0..self.warmup {
            f();
        }
        (0..self.iters.max(1))
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect()
    }
}

/// One recurrent-mode call (and, with `backward`, the backward pass of `sum(features)`).
fn forward<B: MaybeBackward>(
    module: &RecurrentCore<B>,
    work: &Workload,
    bench: &RnnBench,
    steps: usize,
    backward: bool,
) {
    let device = Default::default();
    let (b, l, h) = (bench.batch, bench.layers, bench.hidden);
    let x = Tensor::<B, 3>::from_data(
        TensorData::new(work.x.clone(), [b, steps, bench.input]),
        &device,
    );
    let is_init =
        Tensor::<B, 2, Bool>::from_data(TensorData::new(work.is_init.clone(), [b, steps]), &device);
    let zeros = || Tensor::<B, 4>::zeros([b, steps, l, h], &device);
    let state = RecurrentState {
        rs_h: zeros(),
        rs_c: module.cell().has_cell_state().then(zeros),
    };
    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let out = module
        .forward_batch(x, is_init, state)
        .expect("benchmark shapes are consistent");
    B::finish(out.features.sum(), backward);
}

/// Completes a call: reads the loss back, or runs the backward pass where there is autodiff.
pub trait MaybeBackward: Backend {
    fn finish(loss: Tensor<Self, 1>, backward: bool);
}

impl MaybeBackward for common::backend::Cpu {
    fn finish(loss: Tensor<Self, 1>, _backward: bool) {
        std::hint::black_box(loss.into_data());
    }
}

impl MaybeBackward for CpuAutodiff {
    fn finish(loss: Tensor<Self, 1>, backward: bool) {
        if backward {
            std::hint::black_box(loss.backward());
        } else {
            std::hint::black_box(loss.into_data());
        }
    }
}
