//! `summary.json`: the outcome of a training run ([`TrainSummary`]) and the run's last log line.

use serde::Serialize;

use super::intake::{Returns, TrainState};
use crate::actors::transport::CollectSummary;
use crate::config::TrainConfig;
use crate::ranks;

/// The outcome of a run (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrainSummary {
    pub env: String,
    pub frames: u64,
    pub updates: u64,
    pub seconds: f64,
    pub episodes: u64,
    /// Mean return of the last 20 episodes at the end.
    pub final_mean_return: f64,
    /// Best mean return after any update (`None` before the first finished episodes).
    pub best_mean_return: Option<f64>,
    pub target_return: Option<f64>,
    pub frames_to_target: Option<u64>,
    pub seconds_to_target: Option<f64>,
    /// The last greedy evaluation (`[eval]`): mean return, the frames it was taken at and its
    /// episodes.
    pub final_eval_return: Option<f64>,
    pub final_eval_frames: Option<u64>,
    pub final_eval_episodes: Option<usize>,
    /// The best greedy evaluation (the later of a tie; its weights are in `best/` with
    /// `eval.keep_best`): mean return and frames.
    pub best_eval_return: Option<f64>,
    pub best_eval_frames: Option<u64>,
    /// The first greedy evaluation reaching `target_return`: frames and training seconds
    /// (`frames_to_target` and `seconds_to_target` are the training mean's).
    pub eval_frames_to_target: Option<u64>,
    pub eval_seconds_to_target: Option<f64>,
    pub dropped_chunks: u64,
    pub stopped_by_request: bool,
    /// The learner ranks that trained the run ([`crate::ranks`]; 1: one learner process).
    pub world_size: usize,
    /// Why the run ended early because its actors were gone for good (the last actor exit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actors_gone: Option<String>,
    /// The write that stopped the run ([`WriteFailed`]), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    pub transport: CollectSummary,
    /// Wall seconds per phase of the learner's loop ([`crate::run::profile`]): `receive`, `idle`
    /// (no chunk to take), `take` (admission and `add_chunk`; PPO's `critic` pass and `gae`
    /// inside it), `update` (PPO: `minibatch` per step, `fused.forward`, `fused.loss`,
    /// `fused.backward`, `fused.optimizer` or `burn.loss`, `burn.backward_step`; `sync` writes
    /// the weights back), `publish`, `report`, `checkpoint`.
    pub profile: std::collections::BTreeMap<String, f64>,
    /// How many times each phase ran (`minibatch`: minibatch steps).
    pub profile_calls: std::collections::BTreeMap<String, u64>,
}

impl TrainSummary {
    /// The run's last log line: the greedy evaluation first when there is one (the policy a
    /// user takes away), the training mean (of sampled actions) beside it.
    pub fn headline(&self) -> String {
        let done = format!(
            "{} frames, {} updates in {:.1} s",
            grouped(self.frames),
            self.updates,
            self.seconds
        );
        let mean = format!(
            "mean return (last 20 episodes) {:.2}",
            self.final_mean_return
        );
        let train_target = match (self.target_return, self.frames_to_target) {
            (Some(t), Some(f)) => format!(
                "; reached {t} after {} frames, {:.1} s",
                grouped(f),
                self.seconds_to_target.unwrap_or(0.0)
            ),
            (Some(t), None) => format!("; did not reach {t}"),
            _ => String::new(),
        };
        let (Some(ret), Some(at), Some(n)) = (
            self.final_eval_return,
            self.final_eval_frames,
            self.final_eval_episodes,
        ) else {
            return format!("{done}; {mean}{train_target}");
        };
        let eval_target = match (self.target_return, self.eval_frames_to_target) {
            (Some(t), Some(f)) => format!("; first >= {t} at {}", grouped(f)),
            (Some(t), None) => format!("; target {t} not reached"),
            _ => String::new(),
        };
        let train_at = self
            .frames_to_target
            .map_or(String::new(), |f| format!(" (>= target at {})", grouped(f)));
        format!(
            "greedy {ret:.1} over {n} episodes at {} frames{eval_target}; training {mean}\
             {train_at}; {done}",
            grouped(at)
        )
    }

    /// The fields the run's counters give (the others are filled in where they are known).
    pub(super) fn counted(config: &TrainConfig, state: &TrainState, returns: &Returns) -> Self {
        TrainSummary {
            env: config.run.env.clone(),
            frames: state.frames,
            updates: state.updates,
            seconds: state.wall_s,
            episodes: state.episodes,
            final_mean_return: returns.mean(),
            best_mean_return: state.best_mean_return,
            target_return: config.run.target_return,
            frames_to_target: state.frames_to_target,
            seconds_to_target: state.seconds_to_target,
            world_size: ranks::world().size,
            ..Default::default()
        }
    }
}

/// `n` with a comma every three digits (`50,176`).
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `[eval]` the line leads with the greedy evaluation; without, the training mean.
    #[test]
    fn the_headline_leads_with_the_greedy_evaluation() {
        let mut s = TrainSummary {
            frames: 50_176,
            updates: 98,
            seconds: 61.04,
            final_mean_return: 457.05,
            target_return: Some(475.0),
            ..Default::default()
        };
        assert_eq!(
            s.headline(),
            "50,176 frames, 98 updates in 61.0 s; mean return (last 20 episodes) 457.05; did \
             not reach 475"
        );
        s.final_eval_return = Some(500.0);
        s.final_eval_frames = Some(50_176);
        s.final_eval_episodes = Some(20);
        s.eval_frames_to_target = Some(20_480);
        assert_eq!(
            s.headline(),
            "greedy 500.0 over 20 episodes at 50,176 frames; first >= 475 at 20,480; training \
             mean return (last 20 episodes) 457.05; 50,176 frames, 98 updates in 61.0 s"
        );
        assert_eq!(grouped(1_000_000), "1,000,000");
        assert_eq!(grouped(999), "999");
    }
}
