//! `recur-bench`: recur's benchmarks, one JSON object per result line on stdout.

#![forbid(unsafe_code)]

use bench::actor::ActorBench;
use bench::encoder::EncoderBench;
use bench::learner::LearnerBench;
use bench::ranks::RanksBench;
use bench::rnn::RnnBench;
use bench::set_threads;
use bench::tcp::run_tcp_producer;
use bench::train::TrainBench;
use bench::transport::{parse_size, run_producer, TransportBench};
use clap::{Parser, Subcommand};

/// mimalloc keeps freed memory mapped: with glibc's allocator every large tensor came back from
/// the OS page-faulted and zeroed on each call (see the workspace `Cargo.toml`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Rnn(RnnBench),
    /// The convolutional encoder (forward for the actor's E frames, forward+backward for the
    /// learner's B x T) beside torch's CPU convolution at the same thread count: `vs_torch`.
    Encoder(EncoderBench),
    /// Env-steps/s of one actor on one thread, per env, number of envs and policy cell.
    Actor(ActorBench),
    /// Learner-only training throughput (DQN, BC and PPO updates on replayed data): trained
    /// steps/s per algo, slice length and batch.
    Learner(LearnerBench),
    /// The whole training loop end to end (learner and actor processes): frames/s per config,
    /// seed and PPO update path (burn vs fused), medians and their ratio.
    Train(TrainBench),
    /// Learner ranks (`mpirun -n N recur-learner replay`, PPO): trained frames/s against one
    /// process, and the gradient all-reduce's time per update beside the update's.
    Ranks(RanksBench),
    /// Shared-memory transport: ring bandwidth from producer processes vs memcpy, and weight
    /// publish -> visible latency.
    Transport(TransportBench),
    /// (internal) One producer process of `transport`: pushes chunks into a ring, or over
    /// loopback TCP to the remote-actor listener.
    #[command(hide = true)]
    TransportProducer(ProducerArgs),
}

#[derive(clap::Args)]
struct ProducerArgs {
    /// Ring segment to open.
    #[arg(long, required_unless_present = "tcp")]
    ring: Option<String>,
    /// The remote-actor listener to join instead (with --token and --actor-id).
    #[arg(long, requires = "token")]
    tcp: Option<String>,
    #[arg(long)]
    token: Option<String>,
    /// With --tcp: join through TLS 1.3, pinning the certificate with this SHA-256 (hex).
    #[arg(long, requires = "tcp")]
    tls_fingerprint: Option<String>,
    #[arg(long, default_value_t = 0)]
    actor_id: u32,
    /// Nominal chunk size.
    #[arg(long, value_parser = parse_size)]
    chunk_bytes: usize,
    /// Chunks to push.
    #[arg(long)]
    count: u64,
}

fn main() -> anyhow::Result<()> {
    let out = &mut std::io::stdout().lock();
    // The benchmarks of burn's CPU backend: checked, then the threads capped, then run.
    macro_rules! threaded {
        ($bench:expr) => {{
            let b = $bench.checked()?;
            set_threads(b.threads);
            b.run(out)?;
        }};
    }
    match Cli::parse().command {
        Command::Transport(b) => b.checked()?.run(out)?,
        Command::TransportProducer(a) => match (&a.tcp, &a.token, &a.ring) {
            (Some(addr), Some(token), _) => run_tcp_producer(
                addr,
                token,
                a.tls_fingerprint.as_deref(),
                a.actor_id,
                a.chunk_bytes,
                a.count,
            )?,
            (_, _, Some(ring)) => run_producer(ring, a.chunk_bytes, a.count)?,
            _ => anyhow::bail!("transport-producer needs --ring, or --tcp with --token"),
        },
        Command::Train(b) => {
            b.checked()?.run(out)?;
        }
        Command::Ranks(b) => {
            b.checked()?.run(out)?;
        }
        Command::Learner(b) => threaded!(b),
        Command::Actor(b) => threaded!(b),
        Command::Rnn(b) => threaded!(b),
        Command::Encoder(b) => threaded!(b),
    }
    Ok(())
}
