//! The `recur-actor` command line and what it runs: an actor standalone (optionally recording
//! a dataset), attached to a learner ([`crate::attach`]), or the spec check of an environment.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use common::checkpoint::load_checkpoint_policy;
use common::dataset::{DatasetWriter, EnvSource};
use common::envs::{is_gymnasium, EnvSpec, GymnasiumOptions, Registry};
use common::policy::init_policy;
use common::policy::{policy_config_for_spec, CriticCore};
use common::recurrent::CellKind;
use common::rollout::{Actor, ActorConfig, EpsilonSchedule, Exploration};
use indicatif::{ProgressBar, ProgressStyle};

use crate::attach::{run_attached, Stop};
use crate::check::check_env_specs;
use crate::remote::{run_remote, tcp_address, Session};

/// `recur-actor`'s flags.
#[derive(Parser)]
#[command(
    name = "recur-actor",
    version,
    about = "recur's actor: environments + sequential-mode recurrent policy -> trajectory chunks"
)]
pub struct Cli {
    /// Check an environment's specs with a short rollout and exit.
    #[arg(long, value_name = "ENV", conflicts_with_all = ["env", "record"])]
    check_env: Option<String>,
    /// Print an environment's spaces and time limit as one JSON line and exit (the learner
    /// asks a custom actor binary this before a run).
    #[arg(long, value_name = "ENV", conflicts_with_all = ["env", "record", "check_env"])]
    describe_env: Option<String>,
    /// Environment id: a registered one (built in: CartPole-v1, MaskedCartPole-v1,
    /// Pendulum-v1, RepeatPrevious-v0) or gymnasium:<id> (the gymnasium bridge).
    #[arg(long, default_value = "MaskedCartPole-v1")]
    env: String,
    /// Python module imported before gymnasium.make (gymnasium ids; repeatable).
    #[arg(long = "env-import", value_name = "MODULE")]
    env_imports: Vec<String>,
    /// Keyword arguments of gymnasium.make, a JSON object (gymnasium ids).
    #[arg(long, value_name = "JSON")]
    env_kwargs: Option<String>,
    /// Environments stepped together.
    #[arg(long, default_value_t = 64)]
    envs: usize,
    /// Steps per chunk.
    #[arg(long, default_value_t = 32)]
    steps: usize,
    /// Stop after this many environment steps (rounded up to whole chunks).
    #[arg(long, default_value_t = 100_000)]
    frames: u64,
    /// Record the chunks into this (new) dataset directory.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Recurrent cell of the policy.
    #[arg(long, default_value = "lstm")]
    cell: CellKind,
    /// Hidden size of the policy's recurrent core.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Stacked recurrent layers.
    #[arg(long, default_value_t = 1)]
    layers: usize,
    /// Widths of the encoder MLP's hidden layers, comma-separated ("" for none).
    #[arg(long, default_value = "64", value_parser = parse_widths)]
    encoder: Widths,
    /// Whether the policy's value head has a recurrent core of its own (`separate`) or
    /// reads the actor's (`shared`); set by the learner to match its policy.
    #[arg(long, default_value = "shared", value_parser = parse_critic_core)]
    critic_core: CriticCore,
    /// Seeds the environments, the sampling and the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 0)]
    actor_id: u32,
    /// Restart count of this actor (set by the learner's supervisor).
    #[arg(long, default_value_t = 0)]
    incarnation: u32,
    /// Run the policy of this checkpoint (a checkpoint directory or a run directory holding
    /// `checkpoint/`); its architecture replaces --cell, --hidden, --layers and --encoder.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// How actions are chosen: `sample` from the policy's distribution, or `greedy` (argmax
    /// of the head: a Q-network's action, or a policy's mode).
    #[arg(long, default_value = "sample", value_parser = ["sample", "greedy"])]
    exploration: String,
    /// Probability of a uniformly random action instead: EPS, or START:END:DECAY_VERSIONS
    /// (linear in the policy version, for epsilon-greedy actors attached to a DQN learner).
    #[arg(long, default_value = "0")]
    epsilon: EpsilonSchedule,
    /// Attach to a learner (instead of running standalone): the control socket of a learner
    /// on this machine, or `tcp://HOST:PORT` for a learner elsewhere (with --token-file and
    /// --actor-id; the learner then gives the environment, the policy and the seeds, and
    /// those flags here are ignored).
    #[arg(long, value_name = "SOCKET|tcp://HOST:PORT", conflicts_with_all = ["record", "check_env"])]
    connect: Option<String>,
    /// The run token of the learner (`RUN_DIR/token`, copied to this machine): required with
    /// --connect tcp://.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

fn parse_critic_core(s: &str) -> Result<CriticCore, String> {
    match s {
        "shared" => Ok(CriticCore::Shared),
        "separate" => Ok(CriticCore::Separate),
        other => Err(format!(
            "critic core {other:?}: expected \"shared\" or \"separate\""
        )),
    }
}

/// Encoder widths from the command line.
#[derive(Clone, Debug)]
pub struct Widths(Vec<usize>);

fn parse_widths(s: &str) -> Result<Widths, String> {
    s.split(',')
        .filter(|w| !w.trim().is_empty())
        .map(|w| {
            w.trim()
                .parse::<usize>()
                .map_err(|e| format!("encoder width {w:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Widths)
}

/// Runs what `cli` asks for with the built-in environments.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    run_with(cli, Registry::builtin())
}

/// Runs what `cli` asks for with the environments of `registry` (and gymnasium ids).
pub fn run_with(cli: Cli, registry: Registry) -> anyhow::Result<()> {
    if let Some(addr) = cli.connect.as_deref().and_then(tcp_address) {
        let token_file = cli.token_file.as_ref().with_context(|| {
            format!("--connect tcp://{addr} needs --token-file (the learner's RUN_DIR/token)")
        })?;
        let token = common::remote::read_token_file(token_file)?;
        let session = Session::open(addr, token, cli.actor_id)?;
        let welcome = &session.welcome;
        // The learner's arguments for its actors, and this actor's identity.
        let args = std::iter::once("recur-actor".to_string())
            .chain(welcome.args.iter().cloned())
            .chain([
                "--actor-id".into(),
                cli.actor_id.to_string(),
                "--incarnation".into(),
                welcome.incarnation.to_string(),
            ]);
        let remote = Cli::try_parse_from(args).context("the learner's actor arguments")?;
        anyhow::ensure!(
            remote.connect.is_none()
                && remote.record.is_none()
                && remote.checkpoint.is_none()
                && remote.check_env.is_none()
                && remote.describe_env.is_none(),
            "the learner's actor arguments {:?} ask for more than an environment and a policy",
            welcome.args
        );
        return run_inner(remote, registry, Some(session));
    }
    anyhow::ensure!(
        cli.token_file.is_none(),
        "--token-file is for --connect tcp://HOST:PORT"
    );
    run_inner(cli, registry, None)
}

/// [`run_with`] after a remote actor joined its learner (`session`).
fn run_inner(cli: Cli, registry: Registry, session: Option<Session>) -> anyhow::Result<()> {
    // One actor is one thread: several actor processes share the machine, so the GEMM and
    // tensor thread pools stay at one thread unless the environment asks otherwise.
    for var in ["MATMUL_NUM_THREADS", "RAYON_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, "1");
        }
    }
    if cli.envs == 0 {
        bail!("--envs must be at least 1, got 0");
    }
    let kwargs = match &cli.env_kwargs {
        Some(text) => Some(
            serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .filter(|v| v.is_object())
                .with_context(|| format!("--env-kwargs {text:?}: expected a JSON object"))?,
        ),
        None => None,
    };
    let registry = registry.with_gymnasium(GymnasiumOptions {
        imports: cli.env_imports.clone(),
        kwargs: kwargs.clone(),
        ..GymnasiumOptions::default()
    });
    if let Some(env) = &cli.describe_env {
        let spec = registry.spec(env)?;
        println!("{}", serde_json::to_string(&finite_bounds(spec))?);
        return Ok(());
    }
    let env = cli.check_env.clone().unwrap_or_else(|| cli.env.clone());
    if !registry.contains(&env) {
        bail!(
            "--env {env:?}: unknown environment; this actor knows {:?} and gymnasium:<id>",
            registry.ids()
        );
    }
    // Seed contract of the gymnasium bridge: env i of actor a first reset with
    // seed + a * envs + i (a restarted incarnation shifts by incarnation << 32).
    let env_seed = if is_gymnasium(&env) {
        cli.seed
            .wrapping_add(cli.actor_id as u64 * cli.envs as u64)
            .wrapping_add((cli.incarnation as u64) << 32)
    } else {
        cli.seed ^ ((cli.actor_id as u64) << 32) ^ ((cli.incarnation as u64) << 48)
    };
    let envs = registry.make_vec(&env, cli.envs, env_seed)?;
    // The spaces as `--describe-env` reports them (infinite bounds clamped), so that the
    // learner compares like with like at registration.
    let spec = finite_bounds(EnvSpec {
        id: env.clone(),
        observation_space: envs.observation_space(),
        action_space: envs.action_space(),
        max_episode_steps: None,
    });
    let policy_config = policy_config_for_spec(&spec)
        .with_cell(cli.cell)
        .with_hidden_size(cli.hidden)
        .with_num_layers(cli.layers)
        .with_encoder(cli.encoder.0.clone())
        .with_critic_core(cli.critic_core);
    let (policy, version) = match &cli.checkpoint {
        Some(dir) => load_checkpoint_policy(dir)?,
        None => (
            init_policy(&policy_config, cli.seed).context("building the policy")?,
            0,
        ),
    };
    let exploration = match cli.exploration.as_str() {
        "greedy" => Exploration::Greedy(cli.epsilon),
        _ => Exploration::Sample(cli.epsilon),
    };

    // The spec check runs before every actor start, and alone with --check-env.
    let report = check_env_specs(
        &registry,
        &env,
        policy.clone(),
        cli.envs.min(8),
        cli.steps.min(64),
        4,
        cli.seed,
    )?;
    if cli.check_env.is_some() {
        println!(
            "{}: spec check passed ({} envs x {} steps x {} chunks, {} episodes ended; fields: {})",
            report.env,
            report.envs,
            report.steps,
            report.chunks,
            report.episodes_finished,
            report.fields.join(", ")
        );
        return Ok(());
    }

    let config = ActorConfig {
        env: env.clone(),
        num_envs: cli.envs,
        steps: cli.steps,
        // Every actor and every restart explores differently.
        seed: cli.seed ^ ((cli.actor_id as u64) << 32) ^ ((cli.incarnation as u64) << 48),
        actor_id: cli.actor_id,
        incarnation: cli.incarnation,
        exploration,
    };
    if let Some(session) = session {
        let actor = Actor::with_envs(config, policy, envs)?;
        let (chunks, why) = match run_remote(session, actor, &spec)? {
            Stop::Shutdown { chunks } => (chunks, "the run ended"),
            Stop::LearnerGone { chunks } => (chunks, "the learner is gone"),
        };
        say(format!(
            "actor {}/{}: sent {chunks} chunks; {why}; exiting",
            cli.actor_id, cli.incarnation
        ));
        return Ok(());
    }
    if let Some(socket) = &cli.connect {
        let actor = Actor::with_envs(config, policy, envs)?;
        let (chunks, why) = match run_attached(std::path::Path::new(socket), actor, &spec)? {
            Stop::Shutdown { chunks } => (chunks, "the run ended"),
            Stop::LearnerGone { chunks } => (chunks, "the learner is gone"),
        };
        say(format!(
            "actor {}/{}: pushed {chunks} chunks; {why}; exiting",
            cli.actor_id, cli.incarnation
        ));
        return Ok(());
    }
    let mut actor = Actor::with_envs(config, policy.clone(), envs)?;
    // The chunks carry the checkpoint's version (an epsilon schedule reads it too).
    actor.set_policy(policy, version);
    if version > 0 {
        say(format!(
            "{env}: running checkpoint weights version {version}, exploration {} epsilon {}",
            exploration.name(),
            exploration.schedule()
        ));
    }
    let source = EnvSource {
        imports: cli.env_imports.clone(),
        kwargs,
        seed: Some(cli.seed),
    };
    run_standalone(&mut actor, &cli, &source)
}

/// `spec` with infinite bounds replaced by the largest finite `f32` (JSON has no infinity).
fn finite_bounds(mut spec: EnvSpec) -> EnvSpec {
    for space in [&mut spec.observation_space, &mut spec.action_space] {
        if let common::envs::Space::Box { low, high } = space {
            for x in low.iter_mut().chain(high.iter_mut()) {
                *x = x.clamp(f32::MIN, f32::MAX);
            }
        }
    }
    spec
}

/// Collects `--frames` frames (whole chunks) with `actor`, recording them into `--record` if
/// given, with a progress bar; prints what was done.
fn run_standalone(actor: &mut Actor, cli: &Cli, source: &EnvSource) -> anyhow::Result<()> {
    let env = actor.config().env.clone();
    let mut writer = match &cli.record {
        Some(dir) => Some(DatasetWriter::create_with_source(
            dir,
            &env,
            actor.schema(),
            source,
        )?),
        None => None,
    };
    let per_chunk = (cli.envs * cli.steps) as u64;
    let chunks = cli.frames.div_ceil(per_chunk);
    let bar = ProgressBar::new(chunks * per_chunk);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} frames {per_sec} {msg}")
            .expect("valid template"),
    );
    let start = Instant::now();
    let (mut episodes, mut return_sum, mut recent) = (0u64, 0.0f64, Vec::new());
    for _ in 0..chunks {
        let chunk = actor.collect()?;
        if let Some(w) = &mut writer {
            w.append(&chunk)?;
        }
        for ep in actor.take_finished() {
            episodes += 1;
            return_sum += ep.ret;
            recent.push(ep.ret);
        }
        if recent.len() > 100 {
            recent.drain(..recent.len() - 100);
        }
        let mean = if recent.is_empty() {
            f64::NAN
        } else {
            recent.iter().sum::<f64>() / recent.len() as f64
        };
        bar.set_message(format!(
            "episodes {episodes} mean return (last 100) {mean:.2}"
        ));
        bar.inc(per_chunk);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let frames = chunks * per_chunk;
    println!(
        "{env}: {frames} frames in {secs:.1} s ({:.0} frames/s), {episodes} episodes, mean return {}{}",
        frames as f64 / secs,
        if episodes > 0 { format!("{:.3}", return_sum / episodes as f64) } else { "n/a (no episode ended)".into() },
        match (&cli.record, &writer) {
            (Some(dir), Some(w)) => format!(", recorded {} chunks ({} bytes) to {}", w.chunks_written(), w.bytes_written(), dir.display()),
            _ => String::new(),
        }
    );
    Ok(())
}

/// Writes one line to stderr in a single `write`: actors share the learner's stderr, and
/// `eprintln!` writes each formatted piece separately, so lines of actors that exit at the
/// same moment interleave mid-line (the learner's log and the tests read them).
fn say(line: String) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
