//! `recur-bench learner`: learner-only training throughput, the replay loop without actors;
//! the rows, their fields and the options are documented in docs/recur-bench.md.

use std::io::Write;
use std::time::{Duration, Instant};

use common::backend::{cpu_device, CpuAutodiff};
use common::chunk::Chunk;
use common::policy::{chunk_schema, init_policy};
use common::rollout::{Actor, ActorConfig};
use learner::algo::LearnerSpec;
use learner::config::{fit_policy, Algo, AlgoConfig, PolicySection, UpdatePath};
use recur_rnn::{CellKind, RecurrentBackend};
use serde::Serialize;

use super::{at_least_one, each_at_least_one, emit, summarize};

/// The grid and the measurement settings (the `recur-bench learner` flags).
#[derive(Clone, Debug, clap::Args)]
pub struct LearnerBench {
    /// Algorithms: dqn, bc, ppo.
    #[arg(long, value_delimiter = ',', default_value = "dqn,ppo,bc")]
    pub algo: Vec<Algo>,
    /// Recurrent-mode backends of the policy (pad, scan, auto, ...); rows name the resolved one.
    #[arg(long, value_delimiter = ',', default_value = "scan,auto")]
    pub backends: Vec<RecurrentBackend>,
    #[arg(long, default_value = "MaskedCartPole-v1")]
    pub env: String,
    #[arg(long, default_value = "lstm")]
    pub cell: CellKind,
    #[arg(long, default_value_t = 64)]
    pub hidden: usize,
    /// Steps per slice.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    pub slice_len: Vec<usize>,
    /// Slices per gradient step.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    pub batch: Vec<usize>,
    /// Burn-in steps of DQN and BC slices.
    #[arg(long, default_value_t = 0)]
    pub burn_in: usize,
    /// PPO's update paths (`ppo.update`): `burn` (burn's autodiff) and `fused` (the fused
    /// update), one row each; DQN and BC rows run burn's.
    #[arg(long, value_delimiter = ',', default_value = "burn,fused")]
    pub update: Vec<UpdatePath>,
    /// PPO's `ppo.pack_slices` settings, one row each (`false,true` for both).
    #[arg(
        long = "pack-slices",
        value_name = "BOOL",
        value_delimiter = ',',
        default_value = "false"
    )]
    pub pack_slices: Vec<bool>,
    /// Timed gradient steps per row (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// CPU threads of the tensor backend.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A short run: slice_len 16, batch 8, 3 iterations, 1 warm-up.
    #[arg(long)]
    pub quick: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct LearnerRow {
    pub bench: &'static str,
    pub algo: &'static str,
    pub backend: &'static str,
    /// The update path that ran (`burn` or `fused`).
    pub update: &'static str,
    pub env: String,
    pub cell: &'static str,
    pub hidden: usize,
    pub slice_len: usize,
    pub batch: usize,
    pub burn_in: usize,
    pub steps_per_s: f64,
    pub updates_per_s: f64,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub iters: usize,
    pub threads: usize,
    /// PPO's `pack_slices` (false for DQN and BC).
    pub pack_slices: bool,
}

impl LearnerBench {
    /// Checks the flags (an error names the flag), then applies `--quick`.
    pub fn checked(self) -> anyhow::Result<Self> {
        at_least_one("--threads", self.threads)?;
        at_least_one("--iters", self.iters)?;
        each_at_least_one("--slice-len", "value", &self.slice_len)?;
        each_at_least_one("--batch", "value", &self.batch)?;
        anyhow::ensure!(
            self.slice_len.iter().all(|&t| self.burn_in < t),
            "--burn-in {} must be less than every --slice-len {:?}",
            self.burn_in,
            self.slice_len
        );
        if !self.quick {
            return Ok(self);
        }
        Ok(LearnerBench {
            slice_len: vec![16],
            batch: vec![8],
            iters: 3,
            warmup: 1,
            ..self
        })
    }

    /// Runs every algo x slice_len x batch row, printing each line as it completes.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<LearnerRow>> {
        let mut rows = Vec::new();
        for &slice_len in &self.slice_len {
            for &batch in &self.batch {
                let data = self.data(slice_len, batch)?;
                for &backend in &self.backends {
                    for &algo in &self.algo {
                        let (updates, packs) = match algo {
                            Algo::Ppo => (self.update.clone(), self.pack_slices.clone()),
                            _ => (vec![UpdatePath::Burn], vec![false]),
                        };
                        for (pack, update) in packs
                            .iter()
                            .flat_map(|&p| updates.iter().map(move |&u| (p, u)))
                        {
                            let shape = (slice_len, batch, pack);
                            if let Some(row) = self.row(algo, backend, update, shape, &data)? {
                                emit(out, &row)?;
                                rows.push(row);
                            }
                        }
                    }
                }
            }
        }
        Ok(rows)
    }

    /// The `[policy]` section as a config file would hold it (the keys left out take their
    /// defaults: one layer, a 64-unit encoder, no observation normalizer).
    fn policy(&self, backend: RecurrentBackend) -> anyhow::Result<PolicySection> {
        let (cell, hidden, backend) = (self.cell.name(), self.hidden, backend.name());
        let section = format!("cell = \"{cell}\"\nhidden_size = {hidden}\nbackend = \"{backend}\"");
        Ok(toml::from_str(&section)?)
    }

    /// Chunks of `batch` envs x `slice_len` steps: enough for every timed PPO update and a
    /// replay storage for DQN and BC.
    fn data(&self, slice_len: usize, batch: usize) -> anyhow::Result<Vec<Chunk>> {
        let pc = fit_policy(&self.env, &self.policy(RecurrentBackend::Auto)?)?;
        let config = ActorConfig::new(&self.env, batch, slice_len, self.seed);
        let mut actor = Actor::new(config, init_policy(&pc, self.seed)?)?;
        (0..(self.warmup + self.iters).max(8))
            .map(|_| Ok(actor.collect()?))
            .collect()
    }

    fn row(
        &self,
        algo: Algo,
        backend: RecurrentBackend,
        update: UpdatePath,
        (slice_len, batch, pack_slices): (usize, usize, bool),
        data: &[Chunk],
    ) -> anyhow::Result<Option<LearnerRow>> {
        if update == UpdatePath::Fused && backend.resolve() != RecurrentBackend::Fused {
            // The fused update runs on the fused kernels only: no row for other backends.
            return Ok(None);
        }
        let pc = fit_policy(&self.env, &self.policy(backend)?)?;
        let schema = chunk_schema(&pc, batch, slice_len);
        let frames = batch * slice_len;
        // Each section as a config file would hold it (keys left out take their defaults).
        let slices = format!("slice_len = {slice_len}\nnum_slices = {batch}\nlr = 1e-3\n");
        let (burn_in, buffer) = (self.burn_in, frames * data.len());
        let config = match algo {
            Algo::Ppo => AlgoConfig::Ppo(toml::from_str(&format!(
                "{slices}frames_per_update = {frames}\nepochs = 1\ngamma = 0.99\n\
                 gae_lambda = 0.95\nclip_eps = 0.2\nvalue_coef = 0.5\nentropy_coef = 0.01\n\
                 max_grad_norm = 0.5\nupdate = \"{}\"\npack_slices = {pack_slices}",
                update.name()
            ))?),
            Algo::Dqn => AlgoConfig::Dqn(toml::from_str(&format!(
                "{slices}burn_in = {burn_in}\ngamma = 0.99\nn_step = 3\n\
                 target_update_every = 100\nbuffer_size = {buffer}\nmax_grad_norm = 10.0"
            ))?),
            Algo::Bc => AlgoConfig::Bc(toml::from_str(&format!(
                "{slices}burn_in = {burn_in}\nmax_grad_norm = 1.0"
            ))?),
        };
        let spec = LearnerSpec {
            algo: &config,
            policy: &pc,
            schema: &schema,
            capacity: frames * data.len(),
            seed: self.seed,
        };
        let mut learner = learner::algo::build::<CpuAutodiff>(&spec, &cpu_device())?;
        if algo != Algo::Ppo {
            for chunk in data {
                learner.add_chunk(chunk);
            }
        }
        let mut samples: Vec<Duration> = Vec::with_capacity(self.iters);
        for i in 0..self.warmup + self.iters {
            let t0 = Instant::now();
            if algo == Algo::Ppo {
                learner.add_chunk(&data[i % data.len()]);
            }
            learner.update()?;
            if i >= self.warmup {
                samples.push(t0.elapsed());
            }
        }
        let (median_ms, min_ms, max_ms) = summarize(&samples);
        Ok(Some(LearnerRow {
            bench: "learner",
            algo: algo.name(),
            backend: backend.resolve().name(),
            update: update.name(),
            env: self.env.clone(),
            cell: self.cell.name(),
            hidden: self.hidden,
            slice_len,
            batch,
            burn_in: if algo == Algo::Ppo { 0 } else { self.burn_in },
            steps_per_s: frames as f64 / (median_ms / 1e3),
            updates_per_s: 1e3 / median_ms,
            median_ms,
            min_ms,
            max_ms,
            iters: self.iters,
            threads: self.threads,
            pack_slices,
        }))
    }
}
