//! `recur-learner collect`: actors collect through the transport, nothing trains. Every chunk
//! is received and verified (the transport's exactly-once check), weights are republished every
//! `publish_every` chunks, and the transport's counts go to `RUN_DIR/summary.json`.

use std::path::PathBuf;
use std::time::Duration;

use common::envs::Registry;
use common::policy::{chunk_schema, init_policy};
use common::weights::to_blob;

use crate::actors::transport::{CollectSummary, TransportConfig};
use crate::actors::Actors;
use crate::run::dir::{write_summary, RunDir};
use crate::run::recording::Recording;

/// What a collection run does.
#[derive(Clone, Debug)]
pub struct CollectConfig {
    pub transport: TransportConfig,
    /// Stop after this many frames in total (whole chunks).
    pub frames: u64,
    /// Publish the weights again (next version) every this many chunks; 0 = once.
    pub publish_every: u64,
    /// Also write every received chunk to this new dataset directory.
    pub save_replay: Option<PathBuf>,
}

impl CollectConfig {
    /// Checks the sizes (`--envs`, `--steps`, `--slots`, `--actors`).
    pub fn validate(&self) -> anyhow::Result<()> {
        let t = &self.transport;
        let a = &t.actor_args;
        anyhow::ensure!(
            a.envs >= 1 && a.steps >= 1,
            "--envs and --steps must be at least 1 (got {} and {})",
            a.envs,
            a.steps
        );
        anyhow::ensure!(t.slots >= 2, "--slots must be at least 2, got {}", t.slots);
        anyhow::ensure!(
            (1..2048).contains(&t.actors) || t.actors == 0 && t.listen.is_some(),
            "--actors must be in 1..2048 (0 only with --listen), got {}",
            t.actors
        );
        Ok(())
    }
}

/// Runs actors until `config.frames` frames arrived (or a stop request); writes and returns
/// the summary.
pub fn run_collect(config: &CollectConfig) -> anyhow::Result<CollectSummary> {
    // The actors run the flags' policy fitted to the environment's spaces.
    let mut t = config.transport.clone();
    let spec = Registry::builtin().spec(&t.actor_args.env)?;
    t.actor_args.policy = t.actor_args.policy.fitted_to(&spec);
    let (t, a) = (&t, &t.actor_args);
    let schema = chunk_schema(&a.policy, a.envs, a.steps);
    let policy = init_policy(&a.policy, a.seed)?;
    let save_replay = config.save_replay.as_deref();
    let mut recording = Recording::create(save_replay, &a.env, &schema, &Default::default())?;
    let signals = crate::run::signals::install()?;
    let run_dir = RunDir::create(&t.run_dir, false)?;
    let mut transport = Actors::start(run_dir.names(), t, schema, &to_blob(&policy, 1))?;
    let mut next_publish = config.publish_every;
    let stop = |transport: &Actors| signals.raised() || transport.stop_requested();
    while transport.stats().frames < config.frames && !stop(&transport) {
        transport.register(&Default::default());
        let chunks = transport.receive()?;
        recording.record(chunks.iter().map(|r| &r.chunk))?;
        let stats = transport.stats();
        if config.publish_every > 0 && stats.chunks >= next_publish {
            next_publish = stats.chunks + config.publish_every;
            let version = stats.policy_version + 1;
            transport.publish(version, &to_blob(&policy, version))?;
        }
        if chunks.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let stopped = stop(&transport);
    let (summary, tail) = transport.finish(stopped)?;
    recording.record(tail.iter().map(|r| &r.chunk))?;
    write_summary(&t.run_dir, &summary)?;
    Ok(summary)
}
