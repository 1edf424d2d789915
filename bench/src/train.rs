//! `recur-bench train`: the whole training loop end to end, as a user runs it (a `recur-learner
//! train` process per config, seed and PPO update path); the rows, their fields and the options
//! are documented in docs/recur-bench.md.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use learner::config::UpdatePath;
use serde::Serialize;

use super::{at_least_one, emit};

/// Seed base of `best_greedy_return`'s episodes: apart from the evaluations during training
/// (`run.seed + 1_000_000` onwards, a few dozen episodes) that picked the weights.
pub const BEST_SEED: u64 = 2_000_000;

#[derive(Clone, Debug, clap::Args)]
pub struct TrainBench {
    /// Training configs (TOML), each run as it is but for the frames, seed and update path.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "configs/masked_cartpole.toml,configs/popgym/RepeatPreviousEasy.toml,configs/popgym/PositionOnlyCartPoleEasy.toml"
    )]
    pub config: Vec<PathBuf>,
    /// PPO's update paths, one run each per config and seed.
    #[arg(long, value_delimiter = ',', default_value = "burn,fused")]
    pub update: Vec<UpdatePath>,
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub seed: Vec<u64>,
    /// Frames per run (`run.frames`).
    #[arg(long, default_value_t = 50_000)]
    pub frames: u64,
    /// Greedy episodes of the final checkpoint and of the best weights (`best/`) per run
    /// (`recur-learner eval`); 0: none.
    #[arg(long, default_value_t = 0)]
    pub eval_episodes: usize,
    /// Where the runs go (a fresh temporary directory when left out; removed after).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TrainRow {
    pub bench: &'static str,
    pub config: String,
    pub env: String,
    pub update: &'static str,
    pub seed: u64,
    pub frames: u64,
    pub seconds: f64,
    pub frames_per_s: f64,
    pub final_eval_return: Option<f64>,
    pub greedy_return: Option<f64>,
    pub best_greedy_return: Option<f64>,
    pub profile: serde_json::Value,
}

#[derive(Clone, Debug, Serialize)]
pub struct TrainSummaryRow {
    pub bench: &'static str,
    pub summary: bool,
    pub config: String,
    pub update: &'static str,
    pub runs: usize,
    pub median_frames_per_s: f64,
    /// This path's median over burn's, same run (`None` without a burn row).
    pub vs_burn: Option<f64>,
}

impl TrainBench {
    pub fn checked(self) -> anyhow::Result<Self> {
        at_least_one("--frames", self.frames as usize)?;
        anyhow::ensure!(!self.seed.is_empty(), "--seed: at least one seed");
        anyhow::ensure!(!self.update.is_empty(), "--update: at least one path");
        for c in &self.config {
            anyhow::ensure!(c.is_file(), "--config {}: no such file", c.display());
        }
        Ok(self)
    }

    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<TrainRow>> {
        let learner = sibling("recur-learner")?;
        let (dir, _keep) = work_dir(self.out.as_deref(), "recur-bench-train-")?;
        let mut rows = Vec::new();
        for config in &self.config {
            let mut medians: Vec<(UpdatePath, usize, f64)> = Vec::new();
            for &update in &self.update {
                let mut rates = Vec::new();
                for &seed in &self.seed {
                    let row = self.one(&learner, &dir, config, update, seed)?;
                    emit(out, &row)?;
                    rates.push(row.frames_per_s);
                    rows.push(row);
                }
                rates.sort_by(|a, b| a.total_cmp(b));
                medians.push((update, rates.len(), rates[rates.len() / 2]));
            }
            let burn = medians
                .iter()
                .find(|m| m.0 == UpdatePath::Burn)
                .map(|m| m.2);
            for (update, runs, median) in medians {
                let row = TrainSummaryRow {
                    bench: "train",
                    summary: true,
                    config: config.display().to_string(),
                    update: update.name(),
                    runs,
                    median_frames_per_s: median,
                    vs_burn: burn.map(|b| median / b),
                };
                emit(out, &row)?;
            }
        }
        Ok(rows)
    }

    fn one(
        &self,
        learner: &Path,
        dir: &Path,
        config: &Path,
        update: UpdatePath,
        seed: u64,
    ) -> anyhow::Result<TrainRow> {
        let stem = config.file_stem().unwrap_or_default().to_string_lossy();
        let run = dir.join(format!("{stem}-{}-{seed}", update.name()));
        if run.exists() {
            std::fs::remove_dir_all(&run)?;
        }
        let log = run.with_extension("log");
        let status = Command::new(learner)
            .args(["train", "--config"])
            .arg(config)
            .args(["--seed", &seed.to_string()])
            .args(["--frames", &self.frames.to_string()])
            .arg("--run-dir")
            .arg(&run)
            .args(["--quiet", "--set"])
            .arg(format!("ppo.update=\"{}\"", update.name()))
            .args(["--set", "run.stop_at_target=false"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "recur-learner train --config {} --seed {seed} (update {}) failed: {status}; its \
             log: {}",
            config.display(),
            update.name(),
            log.display()
        );
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("summary.json"))?)?;
        let num = |k: &str| summary[k].as_f64();
        let frames = num("frames").unwrap_or(0.0) as u64;
        let seconds = num("seconds").unwrap_or(f64::NAN);
        // Greedy episodes of checkpoint `dir` on environments seeded from `seed`.
        let greedy = |dir: &Path, seed: u64| -> anyhow::Result<Option<f64>> {
            if self.eval_episodes == 0 || !dir.exists() {
                return Ok(None);
            }
            let out = Command::new(learner)
                .args(["eval", "--checkpoint"])
                .arg(dir)
                .args(["--episodes", &self.eval_episodes.to_string()])
                .args(["--seed", &seed.to_string()])
                .stderr(std::process::Stdio::null())
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "recur-learner eval {} failed",
                dir.display()
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let last = text.lines().last().unwrap_or("{}");
            Ok(serde_json::from_str::<serde_json::Value>(last)?["mean_return"].as_f64())
        };
        let greedy_return = greedy(&run, learner::eval::EVAL_SEED)?;
        let best_greedy_return = greedy(&run.join("best"), BEST_SEED)?;
        Ok(TrainRow {
            bench: "train",
            config: config.display().to_string(),
            env: summary["env"].as_str().unwrap_or("").to_string(),
            update: update.name(),
            seed,
            frames,
            seconds,
            frames_per_s: frames as f64 / seconds,
            final_eval_return: num("final_eval_return"),
            greedy_return,
            best_greedy_return,
            profile: summary["profile"].clone(),
        })
    }
}

/// Where a bench's runs write: `out` (created), or a fresh temporary directory with `prefix`,
/// removed when the returned guard drops (after the runs).
pub(crate) fn work_dir(
    out: Option<&Path>,
    prefix: &str,
) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    Ok(match out {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            (d.to_path_buf(), None)
        }
        None => {
            let t = tempfile::Builder::new().prefix(prefix).tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    })
}

/// The binary `name` next to this one.
pub(crate) fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    anyhow::ensure!(
        path.is_file(),
        "{} not found next to recur-bench (cargo build --release builds both)",
        path.display()
    );
    Ok(path)
}
