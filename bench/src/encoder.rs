//! `recur-bench encoder`: the convolutional encoder's calls beside torch's CPU convolution
//! (`torch.nn.Conv2d`/`MaxPool2d`/`Linear`, oneDNN) at the same thread count, in the same
//! run: forward for the actor's `E` frames and forward+backward for the learner's `B x T`
//! frames, for each preset. One row per (preset, pass, frames) with `vs_torch` = torch's
//! median / recur's (above 1: recur is faster).
//!
//! Noise on a shared machine: the rows run in `--rounds` rounds, each timing every row on
//! recur's side, then every row on torch's (one Python process per round); a row's figure is
//! the median of all its samples over the rounds. torch runs each row in two memory formats
//! (NCHW contiguous and channels_last) and the faster one counts (`torch_format`).

use std::io::Write;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recur_rnn::encoder::{Encoder, EncoderConfig, EncoderGrads, ImageShape, Tape};
use recur_rnn::fused;
use serde::Serialize;

use super::{at_least_one, emit};

/// The workload and measurement settings (the `recur-bench encoder` flags).
#[derive(Clone, Debug, clap::Args)]
pub struct EncoderBench {
    /// Presets: nature (84x84x1 frames, 512 features), minigrid (7x7x3 codes, 128 features).
    #[arg(long, value_delimiter = ',', default_value = "nature,minigrid")]
    pub presets: Vec<String>,
    /// Frames of the forward rows (the actor's E environments).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub actor_frames: Vec<usize>,
    /// Minibatches of the forward+backward rows, as BxT (all B*T frames in one call).
    #[arg(long, value_delimiter = ',', default_value = "8x32,16x64")]
    pub learner_batches: Vec<String>,
    /// Rounds (recur's rows, then torch's, each round).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Timed calls per row and round.
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Untimed calls per row and round, before the timed ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// CPU threads of both sides [default: all cores].
    #[arg(long, default_value_t = all_cores(), hide_default_value = true)]
    pub threads: usize,
    /// Skip torch (rows without `torch_ms` and `vs_torch`).
    #[arg(long)]
    pub no_torch: bool,
    /// Seed of the frames and upstream gradients.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A row's pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Inference: `Encoder::forward`.
    Fwd,
    /// `forward_train` then `backward` (parameter gradients).
    FwdBwd,
}

/// One result line.
#[derive(Clone, Debug, Serialize)]
pub struct EncoderRow {
    pub bench: &'static str,
    pub preset: String,
    pub pass: Pass,
    /// Frames per call.
    pub frames: usize,
    /// `E` for a forward row, `BxT` for a forward+backward row.
    pub shape: String,
    pub height: usize,
    pub width: usize,
    pub channels: usize,
    pub features: usize,
    /// Median of every timed call over the rounds, ms.
    pub recur_ms: f64,
    pub recur_min_ms: f64,
    pub torch_ms: Option<f64>,
    pub torch_min_ms: Option<f64>,
    /// The memory format of torch's faster run: `contiguous` or `channels_last`.
    pub torch_format: Option<String>,
    /// `torch_ms / recur_ms`: above 1, recur is faster.
    pub vs_torch: Option<f64>,
    /// recur's frames per second.
    pub frames_per_s: f64,
    /// Forward FLOPs of the call (convolutions and the linear layer) / 1e9; a forward+backward
    /// row's GEMMs are about three times that.
    pub fwd_gflop: f64,
    pub threads: usize,
    /// The CPU's model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// The fused kernels' instruction set (`avx512`, `avx2` or `scalar`).
    pub simd: &'static str,
    pub rounds: usize,
    pub iters: usize,
}

/// One row's workload.
struct Case {
    preset: String,
    config: EncoderConfig,
    input: ImageShape,
    /// Inputs are `0..=max_code` (255 for pixels, 10 for MiniGrid's codes).
    max_code: u8,
    pass: Pass,
    frames: usize,
    shape: String,
}

impl EncoderBench {
    /// Checks the flags (an error names the flag and value).
    pub fn checked(self) -> anyhow::Result<Self> {
        at_least_one("--threads", self.threads)?;
        at_least_one("--rounds", self.rounds)?;
        at_least_one("--iters", self.iters)?;
        for p in &self.presets {
            EncoderConfig::preset(p).map_err(|e| anyhow::anyhow!("--presets: {e}"))?;
        }
        for b in &self.learner_batches {
            parse_batch(b)?;
        }
        anyhow::ensure!(
            self.actor_frames.iter().all(|&e| e >= 1),
            "--actor-frames: every E must be at least 1, got {:?}",
            self.actor_frames
        );
        Ok(self)
    }

    fn cases(&self) -> anyhow::Result<Vec<Case>> {
        let mut cases = Vec::new();
        for preset in &self.presets {
            let config = EncoderConfig::preset(preset)?;
            let (input, max_code) = match preset.as_str() {
                "nature" => (ImageShape::new(84, 84, 1), 255),
                _ => (ImageShape::new(7, 7, 3), 10),
            };
            let mut add = |pass, frames, shape: String| {
                cases.push(Case {
                    preset: preset.clone(),
                    config: config.clone(),
                    input,
                    max_code,
                    pass,
                    frames,
                    shape,
                })
            };
            for &e in &self.actor_frames {
                add(Pass::Fwd, e, e.to_string());
            }
            for b in &self.learner_batches {
                let (batch, steps) = parse_batch(b)?;
                add(Pass::FwdBwd, batch * steps, format!("{batch}x{steps}"));
            }
        }
        Ok(cases)
    }

    /// Runs every round, then writes a row per case; returns the rows.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<EncoderRow>> {
        let cases = self.cases()?;
        let mut recur: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        let mut torch: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; cases.len()];
        let mut encoders = cases
            .iter()
            .map(|c| Encoder::new(&c.config, c.input, self.seed))
            .collect::<Result<Vec<_>, _>>()?;
        for round in 0..self.rounds {
            for (i, (case, enc)) in cases.iter().zip(&mut encoders).enumerate() {
                recur[i].extend(self.time_recur(case, enc));
            }
            if !self.no_torch {
                eprintln!("recur-bench encoder: round {round}: torch");
                for (i, samples) in self.time_torch(&cases)?.into_iter().enumerate() {
                    let [a, b] = samples;
                    torch[i][0].extend(a);
                    torch[i][1].extend(b);
                }
            }
        }
        let cpu = cpu_name();
        let mut rows = Vec::new();
        for ((case, samples), torch) in cases.iter().zip(&recur).zip(&torch) {
            let (recur_ms, recur_min_ms) = median_min(samples);
            let best = (!self.no_torch).then(|| {
                let [c, l] = torch;
                let (c, l) = (median_min(c), median_min(l));
                if c.0 <= l.0 {
                    (c, "contiguous")
                } else {
                    (l, "channels_last")
                }
            });
            let plan = case.config.plan(case.input)?;
            let row = EncoderRow {
                bench: "encoder",
                preset: case.preset.clone(),
                pass: case.pass,
                frames: case.frames,
                shape: case.shape.clone(),
                height: case.input.height,
                width: case.input.width,
                channels: case.input.channels,
                features: case.config.features,
                recur_ms,
                recur_min_ms,
                torch_ms: best.map(|((m, _), _)| m),
                torch_min_ms: best.map(|((_, m), _)| m),
                torch_format: best.map(|(_, f)| f.to_string()),
                vs_torch: best.map(|((m, _), _)| m / recur_ms),
                frames_per_s: case.frames as f64 / (recur_ms / 1e3),
                fwd_gflop: (case.frames * plan.flops_per_frame()) as f64 / 1e9,
                threads: self.threads,
                cpu: cpu.clone(),
                simd: fused::SimdLevel::current().name(),
                rounds: self.rounds,
                iters: self.iters,
            };
            emit(out, &row)?;
            rows.push(row);
        }
        Ok(rows)
    }

    /// One round of a case on recur's side: `warmup` untimed calls, then `iters` timed ones
    /// (ms). A forward+backward call rewrites a parameter first, as a learner's step does, so
    /// it packs the weights again.
    fn time_recur(&self, case: &Case, enc: &mut Encoder) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ case.frames as u64);
        let obs: Vec<u8> = (0..case.frames * case.input.len())
            .map(|_| rng.random_range(0..=case.max_code))
            .collect();
        let grad: Vec<f32> = (0..case.frames * case.config.features)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let bias: Vec<f32> = enc.params().last().expect("a linear bias").2.to_vec();
        let mut tape = Tape::default();
        let mut grads = EncoderGrads::zeros(enc);
        let mut call = || match case.pass {
            Pass::Fwd => {
                std::hint::black_box(enc.forward(&obs, case.frames).expect("bench shapes"));
            }
            Pass::FwdBwd => {
                enc.set_param("linear.bias", &bias).expect("the bias fits");
                enc.forward_train(&obs, case.frames, &mut tape)
                    .expect("bench shapes");
                grads.zero();
                enc.backward(&tape, &grad, &mut grads)
                    .expect("a fresh tape");
                std::hint::black_box(&grads);
            }
        };
        for _ in 0..self.warmup {
            call();
        }
        (0..self.iters)
            .map(|_| {
                let start = Instant::now();
                call();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    }

    /// One round of every case on torch's side: per case, the samples (ms) of its contiguous
    /// and channels_last runs.
    fn time_torch(&self, cases: &[Case]) -> anyhow::Result<Vec<[Vec<f64>; 2]>> {
        let rows: Vec<_> = cases
            .iter()
            .enumerate()
            .map(|(id, c)| {
                serde_json::json!({
                    "id": id, "layers": c.config.layers, "scale": c.config.scale,
                    "features": c.config.features, "height": c.input.height,
                    "width": c.input.width, "channels": c.input.channels,
                    "frames": c.frames, "pass": c.pass, "max_code": c.max_code,
                })
            })
            .collect();
        let config = serde_json::json!({
            "threads": self.threads, "warmup": self.warmup, "iters": self.iters,
            "seed": self.seed, "rows": rows,
        });
        let python = std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into());
        let output = std::process::Command::new(&python)
            .arg("-c")
            .arg(include_str!("encoder_torch.py"))
            .arg(config.to_string())
            .output()
            .map_err(|e| anyhow::anyhow!("{python} (RECUR_PYTHON) cannot start: {e}"))?;
        anyhow::ensure!(
            output.status.success(),
            "torch's side ({python} with torch; --no-torch skips it) failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut samples = vec![[Vec::new(), Vec::new()]; cases.len()];
        for line in output
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
        {
            let v: serde_json::Value = serde_json::from_slice(line)?;
            let id = v["id"].as_u64().unwrap_or(u64::MAX) as usize;
            let slot = usize::from(v["format"] == "channels_last");
            let times = v["samples_ms"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()));
            match (samples.get_mut(id), times) {
                (Some(s), Some(times)) => s[slot].extend(times),
                _ => anyhow::bail!("torch's side printed an unexpected line: {v}"),
            }
        }
        Ok(samples)
    }
}

/// `BxT` as `(B, T)`.
fn parse_batch(s: &str) -> anyhow::Result<(usize, usize)> {
    let parsed = s
        .split_once('x')
        .and_then(|(b, t)| Some((b.parse().ok()?, t.parse().ok()?)));
    match parsed {
        Some((b, t)) if b >= 1 && t >= 1 => Ok((b, t)),
        _ => anyhow::bail!("--learner-batches: {s:?} is not BxT with B, T >= 1 (e.g. 8x32)"),
    }
}

/// Median and minimum of `samples` (ms); NaN when empty.
fn median_min(samples: &[f64]) -> (f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => (f64::NAN, f64::NAN),
        n if n % 2 == 1 => (s[n / 2], s[0]),
        n => ((s[n / 2 - 1] + s[n / 2]) / 2.0, s[0]),
    }
}

/// The CPU's model name from `/proc/cpuinfo` (`unknown` elsewhere).
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_parse_and_errors_name_the_flag() {
        assert_eq!(parse_batch("16x64").unwrap(), (16, 64));
        let err = parse_batch("16*64").unwrap_err().to_string();
        assert!(err.contains("--learner-batches") && err.contains("16*64"));
        assert!(parse_batch("0x4").is_err());
        assert_eq!(median_min(&[3.0, 1.0, 2.0, 10.0]), (2.5, 1.0));
    }
}
