//! Which environments define a success, and what it is.
//!
//! Some environments' return says how well an episode went but not whether its goal was
//! reached; those that define success say so here, by id, and `recur-learner eval` (and
//! `eval.csv` beside training) report a `success_rate` for them alone: an environment without
//! a success notion gets no `success_rate` at all, not a 0.
//!
//! The rule is declared by id so that it holds the same for every path that builds the id (the
//! gymnasium bridge, a dataset's env, `--env` of `recur-learner eval`), without a round trip to
//! Python:
//!
//! | ids | success |
//! | --- | --- |
//! | `gymnasium:MiniGrid-*`, `gymnasium:BabyAI-*` (the `minigrid` package), the native `MiniGrid-Memory*` ids ([`super::MINIGRID_IDS`]) | the episode's final reward is positive ([`Success::PositiveFinalReward`]) |
//!
//! MiniGrid rewards only at the end, `1 - 0.9 * steps / max_steps` when the mission is
//! accomplished and 0 otherwise (a wrong choice in the memory rooms, a time-out anywhere), so a
//! positive final reward is its success; the return alone cannot say it (a late success and a
//! failure both return little). A previous-action suffix keeps the rule of the id it wraps.

use super::gymnasium::GYMNASIUM_PREFIX;

/// How an environment's episodes count as successes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Success {
    /// An episode succeeded when its last reward is positive (MiniGrid's).
    PositiveFinalReward,
}

/// Prefixes (after `gymnasium:`) of the gymnasium ids whose success is a positive final reward.
const POSITIVE_FINAL_REWARD: &[&str] = &["MiniGrid-", "BabyAI-"];

impl Success {
    /// The success rule of environment `id`, if it defines one.
    pub fn of(id: &str) -> Option<Success> {
        let name = match id.strip_prefix(GYMNASIUM_PREFIX) {
            Some(name) => name,
            None => {
                let base = id.strip_suffix(super::PREVIOUS_ACTION_SUFFIX).unwrap_or(id);
                return super::MINIGRID_IDS
                    .contains(&base)
                    .then_some(Success::PositiveFinalReward);
            }
        };
        POSITIVE_FINAL_REWARD
            .iter()
            .any(|p| name.starts_with(p))
            .then_some(Success::PositiveFinalReward)
    }

    /// Whether an episode whose last reward was `last_reward` succeeded.
    pub fn succeeded(self, last_reward: f64) -> bool {
        match self {
            Success::PositiveFinalReward => last_reward > 0.0,
        }
    }

    /// The fraction of `last_rewards` (one per episode, the episode's final reward) that
    /// succeeded; `None` for no episodes.
    pub fn rate(self, last_rewards: &[f64]) -> Option<f64> {
        (!last_rewards.is_empty()).then(|| {
            let wins = last_rewards.iter().filter(|&&r| self.succeeded(r)).count();
            wins as f64 / last_rewards.len() as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minigrid_ids_define_success_and_others_do_not() {
        for id in [
            "gymnasium:MiniGrid-MemoryS7-v0",
            "gymnasium:MiniGrid-MemoryS11-v0",
            "MiniGrid-MemoryS7-v0", // native
            "MiniGrid-MemoryS17Random-v0+prev-action",
            "gymnasium:BabyAI-GoToRedBall-v0",
        ] {
            assert_eq!(Success::of(id), Some(Success::PositiveFinalReward), "{id}");
        }
        for id in [
            "MiniGrid-Empty-5x5-v0", // not through the bridge: no such built-in id
            "gymnasium:CartPole-v1",
            "gymnasium:popgym-RepeatPreviousEasy-v0",
            "CartPole-v1",
            "PixelCartPole-v1",
        ] {
            assert_eq!(Success::of(id), None, "{id}");
        }
    }

    #[test]
    fn success_rate_counts_positive_final_rewards() {
        let rule = Success::PositiveFinalReward;
        // Two successes (one late, so small), a wrong choice (0), a negative final reward.
        assert_eq!(rule.rate(&[0.97, 0.0, 0.01, -1.0]), Some(0.5));
        assert_eq!(rule.rate(&[0.0; 3]), Some(0.0));
        assert_eq!(rule.rate(&[0.5]), Some(1.0));
        assert_eq!(rule.rate(&[]), None);
        assert!(!rule.succeeded(0.0) && rule.succeeded(1e-6));
    }
}
