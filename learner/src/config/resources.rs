//! What a config asks of the machine: the memory its policy, rings, replay buffer and update
//! plan to use, estimated before anything allocates and refused above the machine's RAM
//! (`/proc/meminfo`), so that a huge size is an error naming the key, not an aborted
//! allocation.

use super::schema::{PolicySection, TrainConfig};
use super::validate::Checker;
use super::ConfigError;

/// Memory a run may plan to use: the machine's RAM (`MemTotal`), or 16 GiB where it cannot be
/// read.
fn memory_limit() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .map_or(16 << 30, |kib| kib * 1024)
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

/// Bytes of one stored frame at least (its recurrent state and a few scalars; observations
/// aside), and of the policy's parameters with their training copies (gradients, Adam's two
/// moments, a target network, an inference copy: 6 copies of f32).
fn frame_bytes(p: &PolicySection) -> u64 {
    (2 * p.num_layers as u64 * p.hidden_size as u64 + 16) * 4
}

fn training_bytes(p: &PolicySection) -> u64 {
    let gates = p.cell.gates() as u128;
    let h = p.hidden_size as u128;
    let input = p.encoder.mlp().last().copied().unwrap_or(8) as u128;
    // W_ih and b_ih, plus W_hh and b_hh where the cell has them.
    let per_gate = if p.cell.has_hidden_weights() {
        input + h + 2
    } else {
        input + 1
    };
    let core = gates * h * per_gate * p.num_layers as u128;
    let encoder: u128 = p
        .encoder
        .mlp()
        .windows(2)
        .map(|w| w[0] as u128 * w[1] as u128)
        .sum::<u128>()
        + p.encoder.mlp().first().copied().unwrap_or(0) as u128 * 64;
    let params = core + encoder + h * 64;
    u64::try_from(params * 4 * 6).unwrap_or(u64::MAX)
}

impl Checker<'_> {
    /// `key` = `value` would make the run plan `bytes` of memory: refused above the machine's
    /// RAM (before anything allocates, so that an allocation cannot abort the process).
    fn memory(
        &self,
        key: &str,
        value: impl std::fmt::Display,
        bytes: u64,
        what: &str,
    ) -> Result<(), ConfigError> {
        let limit = memory_limit();
        if bytes <= limit {
            return Ok(());
        }
        self.fail(
            key,
            value,
            &format!(
                "{what} would need {} of memory; this machine has {}",
                human(bytes),
                human(limit)
            ),
        )
    }

    /// The policy with its training state.
    pub(super) fn policy_memory(&self, p: &PolicySection) -> Result<(), ConfigError> {
        self.memory(
            "policy.hidden_size",
            p.hidden_size,
            training_bytes(p),
            "the policy with its training state",
        )
    }

    /// The policy, the actors' rings, DQN's replay buffer and one PPO update's frames.
    pub(super) fn train_memory(&self, c: &TrainConfig) -> Result<(), ConfigError> {
        let (p, col) = (&c.policy, &c.collector);
        self.policy_memory(p)?;
        let frame = frame_bytes(p);
        let actors = c.run.actors.unwrap_or(1) as u64;
        let rings = (actors as u128)
            * col.ring_slots as u128
            * col.envs_per_actor as u128
            * col.steps as u128
            * frame as u128;
        // Blamed on the largest factor; the message lists them all.
        let (key, value) = [
            ("collector.ring_slots", col.ring_slots),
            ("collector.envs_per_actor", col.envs_per_actor),
            ("collector.steps", col.steps),
        ]
        .into_iter()
        .max_by_key(|&(_, v)| v)
        .expect("three factors");
        self.memory(
            key,
            value,
            u64::try_from(rings).unwrap_or(u64::MAX),
            &format!(
                "{actors} actors x {} ring slots x {} envs x {} steps of recurrent state",
                col.ring_slots, col.envs_per_actor, col.steps
            ),
        )?;
        if let Some(d) = &c.dqn {
            self.memory(
                "dqn.buffer_size",
                d.buffer_size,
                (d.buffer_size as u64).saturating_mul(frame),
                "the replay buffer",
            )?;
        }
        if let Some(o) = &c.ppo {
            self.memory(
                "ppo.frames_per_update",
                o.frames_per_update,
                (o.frames_per_update as u64)
                    .saturating_mul(frame)
                    .saturating_mul(4),
                "one update's frames with their advantages and activations",
            )?;
        }
        Ok(())
    }
}
