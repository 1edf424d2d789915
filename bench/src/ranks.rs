//! `recur-bench ranks`: learner ranks on one machine, measured through real
//! `recur-learner replay` processes (PPO updates on a recorded MaskedCartPole-v1 dataset, no
//! actors): one process, then `mpirun -n N` groups, each rank on `--threads` threads. Per run
//! a row with the update's time and the gradient all-reduce's time per update (rank 0's
//! `summary.json` profile, `ranks.all_reduce`), and per group size a summary row with its
//! trained frames/s over the one process's, same invocation. The learner must be built with
//! its `mpi` feature for N > 1. The rows' fields are documented in docs/recur-bench.md.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::train::{sibling, work_dir};
use super::{at_least_one, each_at_least_one, emit};

#[derive(Clone, Debug, clap::Args)]
pub struct RanksBench {
    /// LSTM hidden sizes of the policies (encoder [64], one layer); 64 is the default
    /// config's (configs/masked_cartpole.toml).
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    pub hidden: Vec<usize>,
    /// Group sizes, each beside one process (without mpirun, run first in every round).
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    pub ranks: Vec<usize>,
    /// Rounds of one process and every group size, alternating.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Compute threads of each rank (`RAYON_NUM_THREADS`).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// PPO updates per run.
    #[arg(long, default_value_t = 30)]
    pub updates: u64,
    /// The whole group's frames per update (`ppo.frames_per_update`; chunks of 8 x 32).
    #[arg(long, default_value_t = 2048)]
    pub frames_per_update: usize,
    /// The whole group's slices per minibatch (`ppo.num_slices`; slices of 16 steps, two
    /// epochs).
    #[arg(long, default_value_t = 32)]
    pub num_slices: usize,
    /// Frames recorded per policy (the dataset the runs replay).
    #[arg(long, default_value_t = 16_384)]
    pub dataset_frames: u64,
    /// The launcher and its options (comma-separated), before `-n N`. Open MPI's defaults
    /// pin each rank to a core and spin while a rank waits in a collective, which on a machine
    /// with other work beside the ranks takes the CPU from the rank it waits for: the ranks
    /// float and yield here.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "mpirun,--allow-run-as-root,--oversubscribe,--bind-to,none,--mca,mpi_yield_when_idle,1"
    )]
    pub mpirun: Vec<String>,
    /// Where the datasets and runs go (a fresh temporary directory when left out; removed
    /// after).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A policy of the benchmark: its recorded dataset and replay config.
struct Policy {
    hidden: usize,
    data: PathBuf,
    config: PathBuf,
}

/// One run: a policy on a group of `ranks`.
#[derive(Clone, Debug, Serialize)]
pub struct RanksRow {
    pub bench: &'static str,
    /// `lstm-<hidden>`.
    pub policy: String,
    pub hidden: usize,
    pub ranks: usize,
    pub threads_per_rank: usize,
    /// Which of `--rounds` (0-based).
    pub round: usize,
    pub updates: u64,
    /// Minibatch steps (one all-reduce of the gradient each) per update.
    pub minibatches_per_update: usize,
    /// Trainable parameters, and the gradient all-reduce's bytes (`f32`).
    pub parameters: usize,
    pub gradient_bytes: usize,
    /// The group's trained frames over rank 0's training seconds (evaluation excluded).
    pub trained_frames_per_s: f64,
    /// Rank 0's milliseconds per update, all-reduce included.
    pub update_ms: f64,
    /// Rank 0's milliseconds per update in the gradient all-reduces (waiting for the other
    /// ranks included); 0 for one rank.
    pub all_reduce_ms_per_update: f64,
    /// `all_reduce_ms_per_update / update_ms`.
    pub all_reduce_share: f64,
    /// Microseconds per gradient all-reduce.
    pub all_reduce_us_per_call: f64,
}

/// A group size against one process, same invocation.
#[derive(Clone, Debug, Serialize)]
pub struct RanksSummaryRow {
    pub bench: &'static str,
    pub summary: bool,
    pub policy: String,
    pub ranks: usize,
    pub threads_per_rank: usize,
    pub rounds: usize,
    /// Medians over the rounds.
    pub trained_frames_per_s: f64,
    pub one_rank_frames_per_s: f64,
    /// The median of the rounds' `trained_frames_per_s / one_rank_frames_per_s`.
    pub vs_one_rank: f64,
}

impl RanksBench {
    pub fn checked(self) -> anyhow::Result<Self> {
        each_at_least_one("--hidden", "a hidden size", &self.hidden)?;
        each_at_least_one("--ranks", "a group size", &self.ranks)?;
        at_least_one("--threads", self.threads)?;
        at_least_one("--updates", self.updates as usize)?;
        at_least_one("--rounds", self.rounds)?;
        anyhow::ensure!(
            !self.ranks.contains(&1),
            "--ranks: the group sizes beside one process (which every round runs), each at \
             least 2"
        );
        anyhow::ensure!(!self.mpirun.is_empty(), "--mpirun: the launcher's program");
        let chunk = 8 * 32;
        for &n in self.ranks.iter().chain([1].iter()) {
            anyhow::ensure!(
                self.frames_per_update.is_multiple_of(n * chunk),
                "--frames-per-update {}: each of {n} ranks takes a whole number of 256-frame \
                 chunks; make it a multiple of {}",
                self.frames_per_update,
                n * chunk
            );
            anyhow::ensure!(
                self.num_slices.is_multiple_of(n),
                "--num-slices {} does not divide over {n} ranks",
                self.num_slices
            );
        }
        anyhow::ensure!(
            self.dataset_frames >= (chunk * self.ranks.iter().max().unwrap_or(&1)) as u64,
            "--dataset-frames {}: at least one chunk per rank",
            self.dataset_frames
        );
        Ok(self)
    }

    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<RanksRow>> {
        let (learner, actor) = (sibling("recur-learner")?, sibling("recur-actor")?);
        let (dir, _keep) = work_dir(self.out.as_deref(), "recur-bench-ranks-")?;
        let mut rows = Vec::new();
        for &hidden in &self.hidden {
            let config = dir.join(format!("lstm-{hidden}.toml"));
            std::fs::write(&config, self.config(hidden))?;
            let policy = Policy {
                hidden,
                data: self.record(&actor, &dir, hidden)?,
                config,
            };
            // Rounds of one process then each group, alternating, so that a load beside the
            // benchmark falls on both sides of a ratio; the summary takes medians.
            let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); self.ranks.len()];
            let mut rates: Vec<Vec<f64>> = vec![Vec::new(); self.ranks.len() + 1];
            for round in 0..self.rounds {
                let one = self.one(&learner, &dir, &policy, 1, round)?;
                emit(out, &one)?;
                rates[0].push(one.trained_frames_per_s);
                for (i, &n) in self.ranks.iter().enumerate() {
                    let row = self.one(&learner, &dir, &policy, n, round)?;
                    emit(out, &row)?;
                    rates[i + 1].push(row.trained_frames_per_s);
                    ratios[i].push(row.trained_frames_per_s / one.trained_frames_per_s);
                    rows.push(row);
                }
                rows.push(one);
            }
            for (i, &n) in self.ranks.iter().enumerate() {
                emit(
                    out,
                    &RanksSummaryRow {
                        bench: "ranks",
                        summary: true,
                        policy: format!("lstm-{hidden}"),
                        ranks: n,
                        threads_per_rank: self.threads,
                        rounds: self.rounds,
                        trained_frames_per_s: median(&mut rates[i + 1]),
                        one_rank_frames_per_s: median(&mut rates[0]),
                        vs_one_rank: median(&mut ratios[i]),
                    },
                )?;
            }
        }
        Ok(rows)
    }

    /// Records the dataset of the LSTM-`hidden` policy (its stored states are the policy's).
    fn record(&self, actor: &Path, dir: &Path, hidden: usize) -> anyhow::Result<PathBuf> {
        let data = dir.join(format!("data-lstm-{hidden}"));
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        let status = Command::new(actor)
            .args(["--env", "MaskedCartPole-v1", "--envs", "8", "--steps", "32"])
            .args(["--frames", &self.dataset_frames.to_string()])
            .args(["--cell", "lstm", "--hidden", &hidden.to_string()])
            .args(["--encoder", "64", "--seed", "0", "--record"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "recur-actor --record failed: {status}");
        Ok(data)
    }

    /// The replay config of the LSTM-`hidden` policy.
    fn config(&self, hidden: usize) -> String {
        format!(
            r#"[replay]
algo = "ppo"
updates = {updates}
seed = 0
eval_every = 0
eval_episodes = 1
checkpoint_every = 1000000
tensorboard = false

[policy]
cell = "lstm"
hidden_size = {hidden}
num_layers = 1
encoder = [64]
backend = "auto"

[ppo]
frames_per_update = {fpu}
epochs = 2
slice_len = 16
num_slices = {slices}
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
pack_slices = true
update = "fused"
"#,
            updates = self.updates,
            fpu = self.frames_per_update,
            slices = self.num_slices,
        )
    }

    /// One replay run on `n` ranks (one process for 1).
    fn one(
        &self,
        learner: &Path,
        dir: &Path,
        policy: &Policy,
        n: usize,
        round: usize,
    ) -> anyhow::Result<RanksRow> {
        let Policy {
            hidden,
            data,
            config,
        } = policy;
        let hidden = *hidden;
        let run = dir.join(format!("lstm-{hidden}-ranks-{n}-{round}"));
        if run.exists() {
            std::fs::remove_dir_all(&run)?;
        }
        let mut cmd = if n == 1 {
            Command::new(learner)
        } else {
            let mut c = Command::new(&self.mpirun[0]);
            c.args(&self.mpirun[1..])
                .args(["-n", &n.to_string()])
                .arg(learner);
            c
        };
        let log = run.with_extension("log");
        let status = cmd
            .args(["replay", "--dataset"])
            .arg(data)
            .arg("--config")
            .arg(config)
            .arg("--run-dir")
            .arg(&run)
            .arg("--quiet")
            .env("RAYON_NUM_THREADS", self.threads.to_string())
            .env("MATMUL_NUM_THREADS", self.threads.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "recur-learner replay on {n} ranks (LSTM-{hidden}) failed: {status}; its log: {}",
            log.display()
        );
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("summary.json"))?)?;
        anyhow::ensure!(
            summary["world_size"].as_u64() == Some(n as u64),
            "{}: world_size {} where {n} ranks were started (a learner built without the mpi \
             feature?)",
            run.display(),
            summary["world_size"]
        );
        let num = |k: &str| summary[k].as_f64().unwrap_or(f64::NAN);
        let updates = num("updates");
        let train_s = num("train_seconds");
        let reduce_s = summary["profile"]["ranks.all_reduce"]
            .as_f64()
            .unwrap_or(0.0);
        let parameters = summary["parameters"].as_u64().unwrap_or(0) as usize;
        let minibatches = 2 * self.frames_per_update / (16 * self.num_slices);
        let update_ms = train_s / updates * 1e3;
        let reduce_ms = reduce_s / updates * 1e3;
        Ok(RanksRow {
            bench: "ranks",
            policy: format!("lstm-{hidden}"),
            hidden,
            ranks: n,
            threads_per_rank: self.threads,
            round,
            updates: updates as u64,
            minibatches_per_update: minibatches,
            parameters,
            gradient_bytes: parameters * 4,
            trained_frames_per_s: num("trained_frames_per_s"),
            update_ms,
            all_reduce_ms_per_update: reduce_ms,
            all_reduce_share: reduce_ms / update_ms,
            all_reduce_us_per_call: reduce_ms * 1e3 / minibatches as f64,
        })
    }
}

/// The median of `v` (the upper middle of an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
