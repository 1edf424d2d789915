//! The `recur-actor` command line and what it runs: an actor standalone (optionally recording
//! a dataset), attached to a learner ([`crate::outlet`]), or the spec check of an environment.
//! The flags that say what an actor runs are parsed into one [`ActorArgs`] (or read whole from
//! `--actor-args`, as the learner passes them), and [`crate::start`] builds the actor from it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use common::actor_args::ActorArgs;
use common::dataset::{DatasetWriter, EnvSource};
use common::envs::Registry;
use common::policy::{CriticCore, PolicyConfig};
use common::rollout::{Actor, EpsilonSchedule, Exploration};
use common::tls::Fingerprint;
use indicatif::{ProgressBar, ProgressStyle};
use recur_rnn::CellKind;

use crate::outlet::shm::ShmOutlet;
use crate::outlet::tcp::{tcp_address, Learner, Session, TcpOutlet};
use crate::outlet::{self, Outlet};
use crate::start::{finite_bounds, registry_for, start, Identity};

/// The flags that [`ActorArgs`] holds: `--actor-args` replaces them all.
const ACTOR_ARGS_FLAGS: [&str; 15] = [
    "env",
    "env_imports",
    "env_kwargs",
    "env_keys",
    "envs",
    "steps",
    "cell",
    "hidden",
    "layers",
    "encoder",
    "cnn",
    "critic_core",
    "seed",
    "exploration",
    "epsilon",
];

/// `recur-actor`'s flags.
#[derive(Parser)]
#[command(
    name = "recur-actor",
    version,
    about = "recur's actor: environments + sequential-mode recurrent policy -> trajectory chunks"
)]
pub struct Cli {
    /// Check an environment's specs with a short rollout and exit.
    #[arg(long, value_name = "ENV", conflicts_with_all = ["env", "record", "actor_args"])]
    check_env: Option<String>,
    /// Print the spaces and time limit of the environment --env (or --actor-args) names as one
    /// JSON line and exit (the learner asks its actor binary this before a run).
    #[arg(long, conflicts_with_all = ["record", "check_env"])]
    describe_env: bool,
    /// Environment id: a registered one (--list-envs; all are named in --help) or
    /// gymnasium:<id> (the gymnasium bridge).
    #[arg(long, default_value = "MaskedCartPole-v1")]
    env: String,
    /// Print every registered environment id, one a line, and exit.
    #[arg(long, exclusive = true)]
    list_envs: bool,
    /// Python module imported before gymnasium.make (gymnasium ids; repeatable).
    #[arg(long = "env-import", value_name = "MODULE")]
    env_imports: Vec<String>,
    /// Keyword arguments of gymnasium.make, a JSON object (gymnasium ids).
    #[arg(long, value_name = "JSON")]
    env_kwargs: Option<String>,
    /// The keys of a Dict observation to keep, comma-separated (gymnasium ids; e.g.
    /// `image,direction` for MiniGrid, whose `mission` string a policy cannot take).
    #[arg(long, value_name = "KEY,...", value_delimiter = ',')]
    env_keys: Option<Vec<String>>,
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
    /// The convolutional encoder of each image, for an environment that observes images: a
    /// preset (`nature`, `minigrid`) or the encoder's JSON (`{"layers": [{"type": "conv",
    /// "out_channels": 8, "kernel": 3}], "scale": 1.0, "features": 16}`; docs/images.md).
    #[arg(long, value_parser = parse_cnn)]
    cnn: Option<recur_rnn::encoder::EncoderConfig>,
    /// Whether the policy's value head has a recurrent core of its own (`separate`) or
    /// reads the actor's (`shared`); set by the learner to match its policy.
    #[arg(long, default_value = "shared", value_parser = parse_critic_core)]
    critic_core: CriticCore,
    /// Seeds the environments, the sampling and the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// This actor's number in the run, stamped into its chunks (< 2048): the learner numbers
    /// the actors it starts from 0; an actor joining with --connect takes one no other actor
    /// of the run has, at least the learner's run.actors.
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
    /// Everything the flags from --env to --epsilon say, as one JSON object (how the learner
    /// starts its actors: every field required, no other accepted); replaces those flags.
    #[arg(long, value_name = "JSON", conflicts_with_all = ACTOR_ARGS_FLAGS)]
    actor_args: Option<String>,
    /// Attach to a learner (instead of running standalone): the control socket of a learner
    /// on this machine, or `tcp://HOST:PORT` for a learner elsewhere (with --token-file and
    /// --actor-id; the learner then gives the environment, the policy and the seeds, and
    /// those flags here are ignored).
    #[arg(long, value_name = "SOCKET|tcp://HOST:PORT", conflicts_with_all = ["record", "check_env"])]
    connect: Option<String>,
    /// The run token of the learner (`RUN_DIR/token`, copied to this machine): required with
    /// --connect tcp://. When it carries the learner's certificate fingerprint (a learner
    /// serving TLS writes it there) the actor joins through TLS 1.3 and accepts only that
    /// certificate.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// With --connect tcp://: refuse to join without TLS (an error when the token file holds
    /// no certificate fingerprint), even on a loopback address.
    #[arg(long, conflicts_with = "insecure_plaintext")]
    tls: bool,
    /// With --connect tcp://: join a plaintext learner (a token file without a fingerprint)
    /// on a non-loopback address: the token and every chunk cross the network in clear.
    #[arg(long)]
    insecure_plaintext: bool,
}

impl Cli {
    /// The command line of `recur-actor` with `registry`'s ids in `--env`'s long help (so the
    /// help cannot lag the environments), parsed; a bad one exits with clap's message.
    pub fn parse_for(registry: &Registry) -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let ids = registry.ids().join(", ");
        let command = Cli::command().mut_arg("env", |a| {
            a.long_help(format!(
                "Environment id: a registered one ({ids}) or gymnasium:<id> (the gymnasium \
                 bridge)"
            ))
        });
        Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }

    /// What the flags say the actor runs: `--actor-args` parsed and checked, or the flags
    /// from `--env` to `--epsilon` (`--check-env ENV` in place of `--env`).
    pub fn actor_args(&self) -> anyhow::Result<ActorArgs> {
        if let Some(text) = &self.actor_args {
            return ActorArgs::from_json(text).with_context(|| format!("--actor-args {text}"));
        }
        let env_kwargs = self.env_kwargs.as_ref().map(|text| {
            serde_json::from_str(text)
                .ok()
                .with_context(|| format!("--env-kwargs {text:?}: expected a JSON object"))
        });
        let args = ActorArgs {
            env: self.check_env.clone().unwrap_or_else(|| self.env.clone()),
            env_imports: self.env_imports.clone(),
            env_kwargs: env_kwargs.transpose()?,
            env_keys: self.env_keys.clone(),
            envs: self.envs,
            steps: self.steps,
            // The flags' architecture on the default environment's spaces: the actor runs it
            // on its environment's ([`start`]).
            policy: PolicyConfig {
                cell: self.cell,
                hidden_size: self.hidden,
                num_layers: self.layers,
                encoder: self.encoder.0.clone(),
                cnn: self.cnn.clone(),
                critic_core: self.critic_core,
                ..ActorArgs::default().policy
            },
            seed: self.seed,
            exploration: match self.exploration.as_str() {
                "greedy" => Exploration::Greedy(self.epsilon),
                _ => Exploration::Sample(self.epsilon),
            },
        };
        args.validate().context("the command line's actor flags")?;
        Ok(args)
    }

    fn identity(&self) -> Identity {
        Identity {
            actor_id: self.actor_id,
            incarnation: self.incarnation,
        }
    }
}

/// The names `--actor-args` JSON uses (serde's).
fn parse_critic_core(s: &str) -> Result<CriticCore, String> {
    serde_json::from_value(s.into())
        .map_err(|_| format!("critic core {s:?}: expected \"shared\" or \"separate\""))
}

/// `--cnn`: a preset's name or an encoder config's JSON.
fn parse_cnn(s: &str) -> Result<recur_rnn::encoder::EncoderConfig, String> {
    use recur_rnn::encoder::{EncoderConfig, PRESETS};
    if s.trim_start().starts_with('{') {
        return serde_json::from_str(s)
            .map_err(|e| format!("cnn {s:?}: not an encoder's JSON: {e}"));
    }
    EncoderConfig::preset(s.trim()).map_err(|_| {
        format!("cnn {s:?}: expected a preset (one of {PRESETS:?}) or the encoder's JSON")
    })
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

/// How the token is protected on the way to `addr`: TLS pinning the token file's fingerprint
/// when it has one; plaintext otherwise, on a loopback address or with `--insecure-plaintext`
/// (loudly) only, and never with `--tls`.
fn protection(
    cli: &Cli,
    fingerprint: Option<Fingerprint>,
    addr: &str,
    token_file: &Path,
) -> anyhow::Result<Option<Fingerprint>> {
    if fingerprint.is_some() {
        return Ok(fingerprint);
    }
    let file = token_file.display();
    let old = "(a token file from before TLS, or of a learner started with --insecure-plaintext)";
    anyhow::ensure!(
        !cli.tls,
        "--tls: token file {file} holds no TLS certificate fingerprint {old}; copy the \
         learner's current RUN_DIR/token (a learner serving TLS writes its fingerprint there)"
    );
    if cli.insecure_plaintext {
        say(format!(
            "WARNING: --insecure-plaintext: joining tcp://{addr} without TLS; the run token and \
             every chunk cross the network in clear"
        ));
        return Ok(None);
    }
    let loopback = common::tls::is_loopback(addr).map_err(|e| anyhow::anyhow!("--connect: {e}"))?;
    anyhow::ensure!(
        loopback,
        "--connect tcp://{addr} is not a loopback address and token file {file} holds no TLS \
         certificate fingerprint {old}: the token would cross the network in clear. Copy the \
         learner's current RUN_DIR/token (a learner on a non-loopback address serves TLS and \
         writes its fingerprint there), or pass --insecure-plaintext to join a plaintext \
         learner anyway"
    );
    Ok(None)
}

/// Runs what `cli` asks for with the environments of `registry` (and gymnasium ids).
pub fn run_with(cli: Cli, registry: Registry) -> anyhow::Result<()> {
    if cli.list_envs {
        println!("{}", registry.ids().join("\n"));
        return Ok(());
    }
    if let Some(addr) = cli.connect.as_deref().and_then(tcp_address) {
        let token_file = cli.token_file.as_ref().with_context(|| {
            format!("--connect tcp://{addr} needs --token-file (the learner's RUN_DIR/token)")
        })?;
        let file = common::remote::read_token_file(token_file)?;
        let learner = Learner {
            addr: addr.to_string(),
            token: file.token,
            tls: protection(&cli, file.fingerprint, addr, token_file)?,
        };
        // The learner gives the arguments and the incarnation; this side gives its id.
        let session = Session::open(learner, cli.actor_id)?;
        let id = Identity {
            actor_id: cli.actor_id,
            incarnation: session.welcome.incarnation,
        };
        let mut started = start(&session.welcome.args.clone(), id, registry, None)?;
        let mut outlet = TcpOutlet::register(session, &started.actor, &started.spec)?;
        return attached(&mut started.actor, &mut outlet, id, "sent");
    }
    anyhow::ensure!(
        cli.token_file.is_none(),
        "--token-file is for --connect tcp://HOST:PORT"
    );
    let args = cli.actor_args()?;
    if cli.describe_env {
        let spec = registry_for(&args, registry).spec(&args.env)?;
        println!("{}", serde_json::to_string(&finite_bounds(spec))?);
        return Ok(());
    }
    let mut started = start(&args, cli.identity(), registry, cli.checkpoint.as_deref())?;
    if cli.check_env.is_some() {
        let report = &started.report;
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
    if let Some(socket) = &cli.connect {
        let mut outlet = ShmOutlet::attach(Path::new(socket), &started.actor, &started.spec)?;
        return attached(&mut started.actor, &mut outlet, cli.identity(), "pushed");
    }
    let actor = &mut started.actor;
    // The chunks carry the checkpoint's version (an epsilon schedule reads it too).
    actor.set_policy(actor.policy().clone(), started.version);
    if started.version > 0 {
        say(format!(
            "{}: running checkpoint weights version {}, exploration {} epsilon {}",
            args.env,
            started.version,
            args.exploration.name(),
            args.exploration.schedule()
        ));
    }
    let source = EnvSource {
        imports: args.env_imports.clone(),
        kwargs: args.env_kwargs.clone().map(serde_json::Value::Object),
        keys: args.env_keys.clone(),
        seed: Some(args.seed),
    };
    run_standalone(actor, &cli, &source)
}

/// Runs the attach loop of `actor` into `outlet` and says how it ended (`verb`: what the
/// outlet did with the chunks).
fn attached(
    actor: &mut Actor,
    outlet: &mut impl Outlet,
    id: Identity,
    verb: &str,
) -> anyhow::Result<()> {
    let stop = outlet::run(actor, outlet)?;
    say(format!(
        "actor {}/{}: {verb} {} chunks; {}; exiting",
        id.actor_id,
        id.incarnation,
        stop.chunks,
        stop.why()
    ));
    Ok(())
}

/// Collects `--frames` frames (whole chunks) with `actor`, recording them into `--record` if
/// given, with a progress bar; prints what was done.
fn run_standalone(actor: &mut Actor, cli: &Cli, source: &EnvSource) -> anyhow::Result<()> {
    let env = actor.config().env.clone();
    let mut writer = cli
        .record
        .as_ref()
        .map(|dir| DatasetWriter::create_with_source(dir, &env, actor.schema(), source))
        .transpose()?;
    let per_chunk = (actor.config().num_envs * actor.config().steps) as u64;
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
        let mean = recent.iter().sum::<f64>() / recent.len() as f64; // NaN before an episode ends
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("recur-actor").chain(args.iter().copied()))
    }

    /// The flags' defaults are `ActorArgs::default()`, and every flag lands in its field.
    #[test]
    fn flags_parse_into_the_same_actor_args_as_their_json() {
        let defaults = parse(&[]).unwrap().actor_args().unwrap();
        assert_eq!(defaults, ActorArgs::default());
        let flags = parse(&[
            "--env",
            "gymnasium:CartPole-v1",
            "--env-import",
            "popgym",
            "--env-kwargs",
            r#"{"k": [1, 2]}"#,
            "--envs",
            "3",
            "--steps",
            "5",
            "--cell",
            "gru",
            "--hidden",
            "7",
            "--layers",
            "2",
            "--encoder",
            "",
            "--cnn",
            "minigrid",
            "--critic-core",
            "separate",
            "--seed",
            "11",
            "--exploration",
            "greedy",
            "--epsilon",
            "1:0.1:30",
        ])
        .unwrap()
        .actor_args()
        .unwrap();
        assert_eq!(
            flags.env_kwargs.as_ref().unwrap()["k"],
            serde_json::json!([1, 2])
        );
        let p = &flags.policy;
        assert_eq!(
            (flags.envs, flags.steps, p.cell, p.hidden_size, p.num_layers),
            (3, 5, CellKind::Gru, 7, 2)
        );
        assert!(p.encoder.is_empty() && p.critic_core == CriticCore::Separate);
        assert_eq!(p.cnn, Some(recur_rnn::encoder::EncoderConfig::minigrid()));
        // The encoder's JSON; a bad one is refused naming the flag's value.
        let small = r#"{"layers": [{"type": "conv", "out_channels": 4, "kernel": 2}], "scale": 1.0, "features": 8}"#;
        let cnn = parse(&["--cnn", small])
            .unwrap()
            .actor_args()
            .unwrap()
            .policy
            .cnn;
        assert_eq!(cnn.unwrap().features, 8);
        for bad in ["atari", r#"{"layers": []"#] {
            let err = parse(&["--cnn", bad]).err().unwrap().to_string();
            assert!(err.contains("cnn") && err.contains(bad), "{err}");
        }
        assert_eq!(
            flags.exploration,
            Exploration::Greedy("1:0.1:30".parse().unwrap())
        );
        let json = flags.to_json();
        let from_json = parse(&["--actor-args", &json, "--connect", "/x.sock"]).unwrap();
        assert_eq!(from_json.actor_args().unwrap(), flags);
    }

    /// A malformed `--actor-args` fails before anything starts, naming the flag, the value and
    /// what is wrong; mixing it with the flags it replaces is refused by the parser.
    #[test]
    fn malformed_actor_args_are_refused_naming_flag_and_problem() {
        let good = ActorArgs::default().to_json();
        let cases = [
            ("{\"env\": ".to_string(), "EOF while parsing"),
            (
                good.replace("\"steps\":32", "\"steps\":\"32\""),
                "invalid type: string \"32\"",
            ),
            (
                good.replace("\"seed\":0", "\"seed\":0,\"sed\":1"),
                "unknown field `sed`",
            ),
            (
                good.replace("\"hidden_size\":64", "\"hidden_size\":0"),
                "actor argument hidden = 0",
            ),
        ];
        for (text, expected) in cases {
            let cli = parse(&["--actor-args", &text, "--connect", "/nonexistent.sock"]).unwrap();
            let err = format!("{:#}", run_with(cli, Registry::builtin()).unwrap_err());
            assert!(err.starts_with("--actor-args "), "{err}");
            assert!(
                err.contains(&text) && err.contains(expected),
                "{text}: {err}"
            );
        }
        let mixed = parse(&["--actor-args", &good, "--envs", "4"]);
        let err = mixed
            .err()
            .expect("--actor-args with --envs parsed")
            .to_string();
        assert!(
            err.contains("--envs") && err.contains("--actor-args"),
            "{err}"
        );
    }
}
