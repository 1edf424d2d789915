//! `recur-learner collect`: actors collect through the transport, nothing trains. Every chunk
//! is received and verified (the transport's exactly-once check), weights are republished every
//! `publish_every` chunks, and the transport's counts go to `RUN_DIR/summary.json`.

use std::path::PathBuf;
use std::time::Duration;

use common::policy::init_policy;
use common::policy::{chunk_schema, policy_config_for};
use common::weights::to_blob;

use crate::recording::Recording;
use crate::run_dir::write_summary;
use crate::transport::{CollectSummary, ShmTransport, Transport, TransportConfig};

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
        anyhow::ensure!(
            t.envs >= 1 && t.steps >= 1,
            "--envs and --steps must be at least 1 (got {} and {})",
            t.envs,
            t.steps
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
    let t = &config.transport;
    let policy_config = policy_config_for(&t.env)?
        .with_cell(t.cell)
        .with_hidden_size(t.hidden)
        .with_num_layers(t.layers)
        .with_encoder(t.encoder.clone());
    let schema = chunk_schema(&policy_config, t.envs, t.steps);
    let policy = init_policy(&policy_config, t.seed)?;
    let mut recording = Recording::create(config.save_replay.as_deref(), &t.env, &schema)?;
    let mut transport = ShmTransport::start(t, schema, &to_blob(&policy, 1))?;
    let mut next_publish = config.publish_every;
    while transport.stats().frames < config.frames && !transport.stop_requested() {
        transport.register();
        let chunks = transport.receive()?;
        recording.record(&chunks)?;
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
    let stopped = transport.stop_requested();
    let (summary, tail) = transport.finish(stopped)?;
    recording.record(&tail)?;
    write_summary(&t.run_dir, &summary)?;
    Ok(summary)
}
