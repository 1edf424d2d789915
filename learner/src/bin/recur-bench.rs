//! `recur-bench`: recur's benchmarks, one JSON object per result line on stdout.

use clap::{Parser, Subcommand};
use common::recurrent::{CellKind, Recompute, RecurrentBackend};
use learner::bench::actor::ActorBench;
use learner::bench::learner::LearnerBench;
use learner::bench::rnn::{Pass, RnnBench};
use learner::bench::transport::{parse_size, run_producer, TransportBench};
use learner::config::Algo;

#[derive(Parser)]
#[command(
    name = "recur-bench",
    version,
    about = "recur's benchmarks (JSON lines on stdout)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Recurrent-mode LSTM/GRU throughput per backend on TorchRL's anchor workload.
    Rnn(RnnArgs),
    /// Env-steps/s of one actor on one thread, per env, number of envs and policy cell.
    Actor(ActorArgs),
    /// Learner-only training throughput (DQN, BC and PPO updates on replayed data): trained
    /// steps/s per algo, slice length and batch.
    Learner(LearnerArgs),
    /// Shared-memory transport: ring bandwidth from producer processes vs memcpy, and weight
    /// publish -> visible latency.
    Transport(TransportArgs),
    /// (internal) One producer process of `transport`: pushes chunks into a ring.
    #[command(hide = true)]
    TransportProducer(ProducerArgs),
}

#[derive(clap::Args)]
struct LearnerArgs {
    /// Algorithms: dqn, bc, ppo.
    #[arg(long, value_delimiter = ',', default_value = "dqn,ppo,bc")]
    algo: Vec<Algo>,
    /// Recurrent-mode backends of the policy (pad, scan, auto, ...); rows name the resolved one.
    #[arg(long, value_delimiter = ',', default_value = "scan,auto")]
    backends: Vec<RecurrentBackend>,
    #[arg(long, default_value = "MaskedCartPole-v1")]
    env: String,
    #[arg(long, default_value = "lstm")]
    cell: CellKind,
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Steps per slice.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    slice_len: Vec<usize>,
    /// Slices per gradient step.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    batch: Vec<usize>,
    /// Burn-in steps of DQN and BC slices.
    #[arg(long, default_value_t = 0)]
    burn_in: usize,
    /// Timed gradient steps per row (the median is reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// CPU threads of the tensor backend.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A short run: slice_len 16, batch 8, 3 iterations, 1 warm-up.
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args)]
struct TransportArgs {
    /// Nominal encoded chunk sizes (bytes; K/M/G suffixes).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64K,256K,1M,4M,8M")]
    chunk_sizes: Vec<usize>,
    /// Numbers of producer processes (one ring each).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    producers: Vec<usize>,
    /// Timed windows per bandwidth row (the median is reported), after one warm-up window.
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Bytes received per timed window (at least 8 chunks per producer).
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    window_bytes: usize,
    /// Bytes of slots per ring (slots = ring bytes / chunk size, clamped to 2..=64).
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    ring_bytes: usize,
    /// Weight blob sizes for the latency rows.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "1M,16M")]
    weight_sizes: Vec<usize>,
    /// Timed weight updates per size.
    #[arg(long, default_value_t = 200)]
    weight_samples: usize,
    /// A short run: 1M chunks, 1 producer, 3 windows of 64M; 1M weights, 50 samples.
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args)]
struct ProducerArgs {
    /// Ring segment to open.
    #[arg(long)]
    ring: String,
    /// Nominal chunk size.
    #[arg(long, value_parser = parse_size)]
    chunk_bytes: usize,
    /// Chunks to push.
    #[arg(long)]
    count: u64,
}

#[derive(clap::Args)]
struct ActorArgs {
    /// Environments.
    #[arg(
        long = "env",
        value_delimiter = ',',
        default_value = "CartPole-v1,MaskedCartPole-v1"
    )]
    envs: Vec<String>,
    /// Numbers of environments stepped together (E).
    #[arg(
        long = "num-envs",
        value_delimiter = ',',
        default_value = "1,16,64,256"
    )]
    num_envs: Vec<usize>,
    /// Policy cells; "none" = random actions without a policy (the env-only ceiling).
    #[arg(long, value_delimiter = ',', default_value = "lstm,gru,none")]
    cells: Vec<String>,
    /// Hidden size of the policy's recurrent core.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Steps per chunk.
    #[arg(long, default_value_t = 32)]
    steps: usize,
    /// Timed iterations per row (the median is reported).
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Minimum seconds per timed iteration.
    #[arg(long, default_value_t = 0.5)]
    min_seconds: f64,
    /// CPU threads [default: 1, one actor thread].
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A short run: E in {1, 256}, 2 iterations of at least 0.2 s.
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(clap::Args)]
struct RnnArgs {
    /// Cells to measure.
    #[arg(long, value_delimiter = ',', default_value = "gru,lstm")]
    cells: Vec<CellKind>,
    /// Recurrent-mode backends to measure.
    #[arg(long, value_delimiter = ',', default_value = "pad,scan,fused")]
    backends: Vec<RecurrentBackend>,
    /// Activation memory of the fused backward: none (save gates) and/or full (recompute
    /// them); pad/scan rows always run with none, fwd rows only with none.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    recompute: Vec<Recompute>,
    /// Passes: fwd (no autodiff) and/or fwdbwd (forward + backward of sum(features)).
    #[arg(long, value_delimiter = ',', default_value = "fwd,fwdbwd")]
    passes: Vec<Pass>,
    /// Sequence lengths T.
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    steps: Vec<usize>,
    /// Probabilities of is_init at each step after the first.
    #[arg(long, value_delimiter = ',', default_value = "0,0.03,0.1")]
    reset_probs: Vec<f64>,
    /// Timed iterations per row (the median is reported).
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Untimed warm-up iterations per row.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// CPU threads for burn's CPU backend [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// A short run: T = 64, p in {0, 0.1}, 2 iterations, 1 warm-up; still a row for every
    /// cell x backend x pass.
    #[arg(long)]
    quick: bool,
    /// Batch size B.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Input features.
    #[arg(long, default_value_t = 64)]
    input: usize,
    /// Hidden size H.
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    /// Stacked layers.
    #[arg(long, default_value_t = 1)]
    layers: usize,
    /// Seed of the inputs and resets.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Transport(a) => {
            let bench = TransportBench {
                chunk_sizes: a.chunk_sizes,
                producers: a.producers,
                iters: a.iters,
                window_bytes: a.window_bytes,
                ring_bytes: a.ring_bytes,
                weight_sizes: a.weight_sizes,
                weight_samples: a.weight_samples,
            };
            bench.validate()?;
            let bench = if a.quick { bench.quick() } else { bench };
            bench.run(&mut std::io::stdout().lock())?;
        }
        Command::TransportProducer(a) => run_producer(&a.ring, a.chunk_bytes, a.count)?,
        Command::Learner(a) => {
            let bench = LearnerBench {
                algos: a.algo,
                backends: a.backends,
                env: a.env,
                cell: a.cell,
                hidden: a.hidden,
                slice_lens: a.slice_len,
                batches: a.batch,
                burn_in: a.burn_in,
                iters: a.iters,
                warmup: a.warmup,
                threads: a.threads,
                seed: a.seed,
            };
            bench.validate()?;
            learner::bench::set_threads(bench.threads);
            let bench = if a.quick { bench.quick() } else { bench };
            bench.run(&mut std::io::stdout().lock())?;
        }
        Command::Actor(a) => {
            let cells = a
                .cells
                .iter()
                .map(|c| match c.as_str() {
                    "none" => Ok(None),
                    other => other.parse::<CellKind>().map(Some),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let bench = ActorBench {
                envs: a.envs,
                num_envs: a.num_envs,
                cells,
                hidden: a.hidden,
                steps: a.steps,
                min_time: std::time::Duration::from_secs_f64(a.min_seconds),
                iters: a.iters,
                threads: a.threads,
                seed: a.seed,
            };
            bench.validate()?;
            learner::bench::set_threads(bench.threads);
            let bench = if a.quick { bench.quick() } else { bench };
            bench.run(&mut std::io::stdout().lock())?;
        }
        Command::Rnn(a) => {
            let bench = RnnBench {
                cells: a.cells,
                backends: a.backends,
                recomputes: a.recompute,
                passes: a.passes,
                steps: a.steps,
                reset_probs: a.reset_probs,
                batch: a.batch,
                input: a.input,
                hidden: a.hidden,
                layers: a.layers,
                iters: a.iters,
                warmup: a.warmup,
                threads: a
                    .threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                seed: a.seed,
            };
            bench.validate()?;
            learner::bench::set_threads(bench.threads);
            let bench = if a.quick { bench.quick() } else { bench };
            bench.run(&mut std::io::stdout().lock())?;
        }
    }
    Ok(())
}
