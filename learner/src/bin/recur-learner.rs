//! `recur-learner`: the learner process.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use common::actor_args::ActorArgs;
use common::tls::TlsMode;
use learner::actors::supervisor::{actor_program, default_actor_count};
use learner::actors::transport::TransportConfig;
use learner::collect::{run_collect, CollectConfig};
use learner::config::{
    blame_flags, check_resume_overrides, Algo, Override, ReplayConfig, TrainConfig,
};
use learner::replay::{replay, ReplayOptions};
use learner::run::{dir as run_dir, signals};
use learner::train::{train, TrainOptions};
use recur_rnn::CellKind;

/// mimalloc keeps freed memory mapped: with glibc's allocator every large tensor came back from
/// the OS page-faulted and zeroed on each call (see the workspace `Cargo.toml`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "recur-learner", version, about = "recur's learner process")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a recurrent policy with actor processes (the main job): run.algo = "ppo"
    /// (recurrent PPO) or "dqn" (R2D2-style DQN; "bc" is replay's). Writes the run directory
    /// (config.toml, metrics.csv, tb/, learning_curve.png, checkpoint/, summary.json) and
    /// prints the summary as one JSON line. Config keys: docs/config.md; environments:
    /// `recur-actor --list-envs`.
    Train(TrainArgs),
    /// Learner-only training from a recorded dataset (no actors, no shared memory): DQN,
    /// behaviour cloning or PPO; greedy evaluation episodes run in-process.
    Replay(ReplayArgs),
    /// Start actor processes and receive their chunks through shared memory, verifying each
    /// (counts, checksums, sequence numbers), without training; writes RUN_DIR/summary.json.
    Collect(CollectArgs),
    /// Greedy evaluation of a checkpoint: N episodes (one per environment, in parallel) on
    /// environments of their own seeds; prints one JSON line.
    Eval(EvalArgs),
    /// Export a checkpoint's policy for PyTorch (policy.safetensors + policy.json, loaded by
    /// scripts/recur_policy.py) and ONNX (policy.onnx: one sequential step); prints one JSON
    /// line.
    Export(learner::export::ExportArgs),
}

#[derive(clap::Args)]
struct EvalArgs {
    /// A run directory (holding checkpoint/) or a checkpoint directory.
    #[arg(long, value_name = "RUN_DIR")]
    checkpoint: PathBuf,
    /// Episodes (environments).
    #[arg(long, default_value_t = 100)]
    episodes: usize,
    /// Seed base of the evaluation environments.
    #[arg(long, default_value_t = learner::eval::EVAL_SEED)]
    seed: u64,
    /// Environment [default: run.env of RUN_DIR/config.toml].
    #[arg(long)]
    env: Option<String>,
    /// Override a config value: SECTION.KEY=VALUE, VALUE read as TOML (a bare word that is not
    /// TOML as a string), applied to the file before it is checked; repeatable, in order.
    /// Over RUN_DIR/config.toml, checked as a training config; evaluation uses its
    /// run.env, run.env_imports and run.env_kwargs (--env wins over run.env).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    set: Vec<Override>,
}

/// TLS on the remote-actor port (by default on unless --listen is a loopback address).
#[derive(clap::Args)]
struct TlsFlags {
    /// TLS 1.3 on the --listen port even on a loopback address [default: run.tls, "auto":
    /// on unless the address is a loopback one]. The certificate is RUN_DIR/tls-cert.der; its
    /// fingerprint goes into RUN_DIR/token, which actors pin.
    #[arg(long, conflicts_with = "insecure_plaintext")]
    tls: bool,
    /// Plaintext on the --listen port, also on a non-loopback address: the run token and every
    /// chunk cross the network in clear (loopback and benchmarks only; logged as a warning).
    #[arg(long)]
    insecure_plaintext: bool,
}

impl TlsFlags {
    /// The mode the flags choose, if any.
    fn mode(&self) -> Option<TlsMode> {
        match (self.tls, self.insecure_plaintext) {
            (true, _) => Some(TlsMode::On),
            (_, true) => Some(TlsMode::InsecurePlaintext),
            _ => None,
        }
    }
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Training config (TOML; every key in docs/config.md) [default:
    /// configs/masked_cartpole.toml of the repository this binary was built from].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config value: SECTION.KEY=VALUE, VALUE read as TOML (a bare word that is not
    /// TOML as a string), applied to the file before it is checked; repeatable, in order.
    /// The flags below win over a --set of the same key.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    set: Vec<Override>,
    /// Actor processes the learner starts [default: run.actors, else the machine's cores];
    /// 0 with --listen: remote actors only.
    #[arg(long)]
    actors: Option<u32>,
    /// Accept remote actors on this TCP HOST:PORT [default: run.listen]; they present the
    /// token written to RUN_DIR/token (`recur-actor --connect tcp://HOST:PORT --token-file`).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    #[command(flatten)]
    tls: TlsFlags,
    /// Seed [default: run.seed].
    #[arg(long)]
    seed: Option<u64>,
    /// Frames to train on [default: run.frames].
    #[arg(long)]
    frames: Option<u64>,
    /// End the run after this many seconds (with a final checkpoint).
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Run directory [default: runs/<env>-<unix time>-s<seed>-<4 hex digits>, in the current
    /// directory].
    #[arg(long, conflicts_with = "resume")]
    run_dir: Option<PathBuf>,
    /// Continue the run in RUN_DIR from its checkpoint, with its own config.toml: --config is
    /// refused, a --set may change what a resume can (not run.env*, run.algo, policy.*; each
    /// logged); --frames, --actors, --seed, --listen and --max-seconds apply.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "config")]
    resume: Option<PathBuf>,
    /// No progress bar (log lines only).
    #[arg(long)]
    quiet: bool,
    /// The recur-actor executable [default: next to this binary].
    #[arg(long)]
    actor_bin: Option<PathBuf>,
    /// Also record every received chunk into this new dataset directory.
    #[arg(long, value_name = "DIR")]
    save_replay: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Dataset directory (recorded by `recur-actor --record` or `--save-replay`).
    #[arg(long)]
    dataset: PathBuf,
    /// dqn, bc or ppo [default: replay.algo of the config].
    #[arg(long)]
    algo: Option<Algo>,
    /// Replay config (TOML) [default: configs/replay/<algo>.toml].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config value: SECTION.KEY=VALUE, VALUE read as TOML (a bare word that is not
    /// TOML as a string), applied to the file before it is checked; repeatable, in order.
    /// The flags below win over a --set of the same key.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    set: Vec<Override>,
    /// Gradient steps (dqn, bc) or PPO updates [default: replay.updates].
    #[arg(long)]
    updates: Option<u64>,
    /// Seed [default: replay.seed].
    #[arg(long)]
    seed: Option<u64>,
    /// Run directory [default: runs/replay-<algo>-<unix time>-s<seed>-<4 hex digits>].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// End the run after this many seconds (with a final evaluation and checkpoint).
    #[arg(long)]
    max_seconds: Option<f64>,
    /// No progress bar (log lines only).
    #[arg(long)]
    quiet: bool,
    /// Developer and test option: train in one process on the minibatches N learner ranks
    /// (`mpirun -n N`) would take together, each rank's shard sampled as that rank would
    /// (the reference tests/ranks.rs holds a group of ranks to).
    #[arg(long, value_name = "N")]
    as_ranks: Option<usize>,
}

#[derive(clap::Args)]
struct CollectArgs {
    #[arg(long, default_value = "MaskedCartPole-v1")]
    env: String,
    /// Actor processes [default: the machine's cores]; 0 with --listen: remote actors only.
    #[arg(long)]
    actors: Option<u32>,
    /// Accept remote actors on this TCP HOST:PORT (token in RUN_DIR/token).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    #[command(flatten)]
    tls: TlsFlags,
    /// Environments per actor.
    #[arg(long, default_value_t = 16)]
    envs: usize,
    /// Steps per chunk.
    #[arg(long, default_value_t = 32)]
    steps: usize,
    /// Total frames to receive (whole chunks).
    #[arg(long, default_value_t = 1_000_000)]
    frames: u64,
    #[arg(long, default_value = "lstm")]
    cell: CellKind,
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run directory (created; mode 0700) [default: runs/collect-<unix time>-s<seed>-<4 hex
    /// digits>].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Ring slots per actor.
    #[arg(long, default_value_t = 8)]
    slots: usize,
    /// Publish a new weight version every this many chunks (0 = only at start).
    #[arg(long, default_value_t = 64)]
    publish_every: u64,
    /// Restarts per actor within 60 s before giving up on it.
    #[arg(long, default_value_t = 5)]
    max_restarts: u32,
    /// Also write every received chunk to this new dataset directory.
    #[arg(long)]
    save_replay: Option<PathBuf>,
    /// The recur-actor executable [default: next to this binary].
    #[arg(long)]
    actor_bin: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    // A user error prints its message and causes, no backtrace, even with RUST_BACKTRACE=1 in
    // the shell; RECUR_BACKTRACE=1 asks for them (panics keep RUST_BACKTRACE's).
    let trace = std::env::var_os("RECUR_BACKTRACE").is_some_and(|v| v == "1");
    std::env::set_var("RUST_LIB_BACKTRACE", if trace { "1" } else { "0" });
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let command = Cli::parse().command;
    // Launched as one of several learner ranks (mpirun, srun): join the group, or refuse.
    let world = learner::ranks::World::init()?;
    let rank = world.rank();
    if rank.size > 1 && !matches!(command, Command::Train(_) | Command::Replay(_)) {
        anyhow::bail!(
            "launched as {rank}: only `recur-learner train` and `replay` run on several \
             learner ranks; start this command as one process"
        );
    }
    match command {
        Command::Train(a) => {
            // A resumed run reads its own config (--set may change what a resume can); a new
            // one the given file.
            let (config_path, run_dir) = match &a.resume {
                Some(dir) => {
                    run_dir::check_resumable(dir)?;
                    let path = dir.join("config.toml");
                    check_resume_overrides(&a.set, &path.display().to_string())?;
                    (path, Some(dir.clone()))
                }
                None => (
                    a.config
                        .clone()
                        .map_or_else(|| repo_file(DEFAULT_CONFIG), Ok)?,
                    a.run_dir.clone(),
                ),
            };
            let mut config = TrainConfig::load_with(&config_path, &a.set)?;
            config.run.actors = a.actors.or(config.run.actors);
            config.run.listen = a.listen.or(config.run.listen);
            config.run.tls = a.tls.mode().unwrap_or(config.run.tls);
            config.run.seed = a.seed.unwrap_or(config.run.seed);
            config.run.frames = a.frames.unwrap_or(config.run.frames);
            blame_flags(
                config.validate(&config_path.display().to_string()),
                &[
                    ("--actors", "run.actors"),
                    ("--listen", "run.listen"),
                    ("--seed", "run.seed"),
                    ("--frames", "run.frames"),
                ],
            )?;
            let run_dir =
                run_dir.unwrap_or_else(|| run_dir::default_path(&config.run.env, config.run.seed));
            let program = actor_program(
                a.actor_bin
                    .or_else(|| config.collector.actor_bin.as_ref().map(PathBuf::from)),
            )?;
            let opts = TrainOptions {
                config,
                run_dir: run_dir.clone(),
                resume: a.resume.is_some(),
                actor_program: program,
                progress: !a.quiet,
                max_seconds: a.max_seconds,
                save_replay: a.save_replay,
            };
            let resume = format!("continue it with --resume {}", run_dir.display());
            signals::set_exit_hint(resume.clone());
            let summary = train(&opts).context("training run")?;
            // Leave the group (MPI finalized) before any exit; rank 0 alone reports. (A rank
            // whose run failed has returned above: its group is left unfinalized.)
            world.finish();
            if !rank.is_root() {
                exit_if_signalled(&format!("{rank} stopped with rank 0"));
                return Ok(());
            }
            println!("{}", serde_json::to_string(&summary)?);
            let ended = format!("{}; results in {}", summary.headline(), run_dir.display());
            exit_if_signalled(&format!("{ended}; {resume}"));
            tracing::info!("{ended}");
        }
        Command::Replay(a) => {
            let config_path = match a.config.clone() {
                Some(path) => path,
                None => repo_file(&format!(
                    "configs/replay/{}.toml",
                    a.algo.unwrap_or(Algo::Dqn).name()
                ))?,
            };
            let mut config = ReplayConfig::load_with(&config_path, &a.set)?;
            config.replay.algo = a.algo.unwrap_or(config.replay.algo);
            config.replay.updates = a.updates.unwrap_or(config.replay.updates);
            config.replay.seed = a.seed.unwrap_or(config.replay.seed);
            blame_flags(
                config.validate(&config_path.display().to_string()),
                &[
                    ("--algo", "replay.algo"),
                    ("--updates", "replay.updates"),
                    ("--seed", "replay.seed"),
                ],
            )?;
            let run_dir = a.run_dir.unwrap_or_else(|| {
                let name = format!("replay-{}", config.replay.algo.name());
                run_dir::default_path(&name, config.replay.seed)
            });
            let summary = replay(&ReplayOptions {
                dataset: a.dataset,
                config,
                run_dir: run_dir.clone(),
                progress: !a.quiet,
                max_seconds: a.max_seconds,
                as_ranks: a.as_ranks,
            })
            .context("replay run")?;
            // Leave the group (MPI finalized) before any exit; rank 0 alone reports. (A rank
            // whose run failed has returned above: its group is left unfinalized.)
            world.finish();
            if !rank.is_root() {
                exit_if_signalled(&format!("{rank} stopped with rank 0"));
                return Ok(());
            }
            println!("{}", serde_json::to_string(&summary)?);
            let ended = format!(
                "{} {} updates on {} dataset frames in {:.1} s ({:.1} updates/s, {:.0} trained frames/s); greedy return {:.1} (best {:.1}); results in {}",
                summary.algo,
                summary.updates,
                summary.dataset_frames,
                summary.seconds,
                summary.updates_per_s,
                summary.trained_frames_per_s,
                summary.final_eval_return,
                summary.best_eval_return,
                run_dir.display()
            );
            exit_if_signalled(&ended);
            tracing::info!("{ended}");
        }
        Command::Collect(a) => {
            let run_dir = a
                .run_dir
                .unwrap_or_else(|| run_dir::default_path("collect", a.seed));
            let config = CollectConfig {
                transport: TransportConfig {
                    first_actor: 0,
                    actor_args: ActorArgs {
                        env: a.env,
                        envs: a.envs,
                        steps: a.steps,
                        // On the default environment's spaces until `run_collect` fits it.
                        policy: ActorArgs::default()
                            .policy
                            .with_cell(a.cell)
                            .with_hidden_size(a.hidden),
                        seed: a.seed,
                        ..ActorArgs::default()
                    },
                    actors: a.actors.unwrap_or_else(default_actor_count),
                    run_dir: run_dir.clone(),
                    actor_program: actor_program(a.actor_bin)?,
                    slots: a.slots,
                    max_restarts: a.max_restarts,
                    restart_window: std::time::Duration::from_secs(60),
                    restart_backoff: std::time::Duration::from_millis(200),
                    stall_timeout: Some(std::time::Duration::from_secs(30)),
                    spec: None,
                    sync: false,
                    tls: a.tls.mode().unwrap_or_default(),
                    listen: a.listen,
                },
                frames: a.frames,
                publish_every: a.publish_every,
                save_replay: a.save_replay,
            };
            config.validate()?;
            let summary = run_collect(&config).context("collect run")?;
            println!("{}", serde_json::to_string(&summary)?);
            let ended = format!(
                "{} frames in {} chunks from {} actor incarnations in {:.1} s; {} corrupted, {} rejected; summary in {}",
                summary.frames,
                summary.chunks,
                summary.incarnations.len(),
                summary.seconds,
                summary.corrupted,
                summary.rejected,
                run_dir.join("summary.json").display()
            );
            exit_if_signalled(&ended);
            tracing::info!("{ended}");
        }
        Command::Eval(a) => {
            let line = learner::eval::evaluate_checkpoint(
                &a.checkpoint,
                a.env.as_deref(),
                a.episodes,
                a.seed,
                &a.set,
            )?;
            println!("{}", serde_json::to_string(&line)?);
        }
        Command::Export(a) => {
            let exported = learner::export::export(&a.checkpoint, &a.out)?;
            if let Some(why) = &exported.fell_back {
                tracing::warn!("{why}");
            }
            println!("{}", serde_json::to_string(&exported)?);
        }
    }
    Ok(())
}

/// The training config `--config` defaults to.
const DEFAULT_CONFIG: &str = "configs/masked_cartpole.toml";

/// `rel` in the repository this binary was built from (the default configs are found there
/// from any directory); an error names where it looked.
fn repo_file(rel: &str) -> anyhow::Result<PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    let path = root.map_or_else(|| PathBuf::from(rel), |r| r.join(rel));
    anyhow::ensure!(
        path.is_file(),
        "no --config given, and the default {rel} is not at {} (in the repository this binary \
         was built from): pass --config FILE",
        path.display()
    );
    Ok(path)
}

/// A run a signal ended exits 130, as a shell's Ctrl-C does (so `train && next` stops there),
/// its last line saying so.
fn exit_if_signalled(line: &str) {
    if signals::raised() {
        tracing::warn!("interrupted by a signal: {line}");
        std::process::exit(130);
    }
}
