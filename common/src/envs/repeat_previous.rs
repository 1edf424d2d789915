//! RepeatPrevious-v0: POPGym's RepeatPrevious (Easy), a pure memory task.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::{write_obs, ActionRef, Env, EnvError, Space, StepResult};

/// Name the suit of the card seen `K - 1` observations ago (POPGym RepeatPrevious, Easy).
///
/// One 52-card deck is shuffled at reset. Card `c_0` is dealt at reset; step `i` (`1..=51`)
/// takes an action (`Discrete(4)`, a suit) that names the suit of card `c_{i-K}` — the card
/// dealt `K - 1` observations before the latest one, `c_{i-1}` — and is rewarded
/// `+1/(52 - K)` if right and `-1/(52 - K)` if wrong once that card exists (`i >= K`), 0
/// before. Then card `c_i` is dealt. The observation is the one-hot suit `[4]` of the latest
/// card. The episode truncates at step 51 (one card left) and never terminates, so a perfect
/// policy returns exactly 1 and a policy that is always wrong returns -1.
#[derive(Clone, Debug)]
pub struct RepeatPrevious {
    /// Suit (`0..4`) of each card in dealing order.
    suits: [u8; 52],
    /// Index of the latest card dealt (`0` right after reset).
    dealt: usize,
}

impl RepeatPrevious {
    /// Cards in the deck.
    pub const DECK_SIZE: usize = 52;
    /// Number of suits (actions and observation width).
    pub const SUITS: usize = 4;
    /// How far back the named card lies: at step `i` the action names card `c_{i-K}`.
    pub const K: usize = 4;
    /// Steps per episode: one per card after the first.
    pub const EPISODE_STEPS: u64 = (Self::DECK_SIZE - 1) as u64;
    /// Magnitude of each rewarded step: `1/(52 - K)`.
    pub const REWARD: f64 = 1.0 / (Self::DECK_SIZE - Self::K) as f64;

    /// The unshuffled deck with its first card dealt; [`Env::reset`] shuffles a new one.
    pub fn new() -> Self {
        Self {
            suits: std::array::from_fn(|card| (card / 13) as u8),
            dealt: 0,
        }
    }

    fn observation(&self) -> [f32; 4] {
        let mut one_hot = [0.0; 4];
        one_hot[usize::from(self.suits[self.dealt])] = 1.0;
        one_hot
    }
}

impl Default for RepeatPrevious {
    fn default() -> Self {
        Self::new()
    }
}

impl Env for RepeatPrevious {
    fn id(&self) -> &str {
        "RepeatPrevious-v0"
    }

    /// `Box([0; 4], [1; 4])`: a one-hot suit.
    fn observation_space(&self) -> Space {
        Space::unit_box(Self::SUITS)
    }

    /// `Discrete(4)`: a suit.
    fn action_space(&self) -> Space {
        Space::Discrete { n: Self::SUITS }
    }

    /// Shuffles the 13 cards of each of the 4 suits with `StdRng::seed_from_u64(seed)` and deals
    /// the first.
    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        let mut rng = StdRng::seed_from_u64(seed);
        *self = Self::new();
        self.suits.shuffle(&mut rng);
        write_obs(self.id(), obs, &self.observation());
    }

    /// # Panics
    /// On an action other than `Discrete(0..4)`, or a step after the episode was truncated.
    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let suit = match action {
            ActionRef::Discrete(a @ 0..=3) => a as u8,
            other => panic!("RepeatPrevious-v0: action must be Discrete(0..4), got {other:?}"),
        };
        let i = self.dealt + 1;
        assert!(
            i < Self::DECK_SIZE,
            "RepeatPrevious-v0: step after the deck ran out (episode truncated); call reset"
        );
        let reward = if i < Self::K {
            0.0
        } else if suit == self.suits[i - Self::K] {
            Self::REWARD
        } else {
            -Self::REWARD
        };
        self.dealt = i;
        write_obs(self.id(), obs, &self.observation());
        StepResult {
            reward,
            terminated: false,
            truncated: i == Self::DECK_SIZE - 1,
        }
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        Some(super::encode_state(&(self.suits.to_vec(), self.dealt)))
    }

    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let (suits, dealt): (Vec<u8>, usize) = super::decode_state(self.id(), state)?;
        let id = self.id().to_owned();
        let bad = |reason: String| EnvError::State { id, reason };
        let suits: [u8; 52] = match suits.try_into() {
            Ok(s) => s,
            Err(s) => {
                let n = s.len();
                return Err(bad(format!("{n} cards, expected {}", Self::DECK_SIZE)));
            }
        };
        if dealt >= Self::DECK_SIZE || suits.iter().any(|&s| s as usize >= Self::SUITS) {
            return Err(bad(format!("card {dealt} dealt or a suit out of range")));
        }
        (self.suits, self.dealt) = (suits, dealt);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays one episode with `policy(env, step)` choosing the suit; returns the rewards.
    fn play(seed: u64, policy: impl Fn(&RepeatPrevious, usize) -> i64) -> Vec<f64> {
        let mut env = RepeatPrevious::new();
        let mut obs = [0.0f32; 4];
        env.reset(seed, &mut obs);
        let mut rewards = Vec::new();
        for i in 1..=51 {
            let r = env.step(ActionRef::Discrete(policy(&env, i)), &mut obs);
            assert!(!r.terminated);
            assert_eq!(r.truncated, i == 51, "step {i}");
            rewards.push(r.reward);
            if r.truncated {
                break;
            }
        }
        rewards
    }

    /// The suit the action at step `i` must name (any suit before step K).
    fn target(env: &RepeatPrevious, i: usize) -> u8 {
        env.suits[i.saturating_sub(RepeatPrevious::K)]
    }

    #[test]
    fn deck_has_13_of_each_suit_and_depends_on_seed() {
        let mut env = RepeatPrevious::new();
        let mut obs = [0.0f32; 4];
        env.reset(5, &mut obs);
        for s in 0..4 {
            assert_eq!(env.suits.iter().filter(|&&x| x == s).count(), 13);
        }
        let first = env.suits.to_vec();
        let mut one_hot = [0.0; 4];
        one_hot[usize::from(first[0])] = 1.0;
        assert_eq!(obs, one_hot);
        env.reset(5, &mut obs);
        assert_eq!(env.suits.to_vec(), first);
        env.reset(6, &mut obs);
        assert_ne!(env.suits.to_vec(), first);
    }

    #[test]
    fn perfect_policy_returns_one() {
        for seed in 0..5 {
            let rewards = play(seed, |env, i| i64::from(target(env, i)));
            assert_eq!(rewards.len(), 51);
            assert!(rewards[..RepeatPrevious::K - 1].iter().all(|&r| r == 0.0));
            let total: f64 = rewards.iter().sum();
            assert!((total - 1.0).abs() < 1e-9, "return {total}");
        }
    }

    #[test]
    fn always_wrong_returns_minus_one() {
        let rewards = play(3, |env, i| i64::from((target(env, i) + 1) % 4));
        assert!(rewards[..RepeatPrevious::K - 1].iter().all(|&r| r == 0.0));
        let total: f64 = rewards.iter().sum();
        assert!((total + 1.0).abs() < 1e-9, "return {total}");
    }

    #[test]
    fn observation_is_the_latest_card() {
        let mut env = RepeatPrevious::new();
        let mut obs = [0.0f32; 4];
        env.reset(9, &mut obs);
        for i in 1..=51 {
            env.step(ActionRef::Discrete(0), &mut obs);
            assert_eq!(env.dealt, i);
            let suit = usize::from(env.suits[i]);
            assert_eq!(obs[suit], 1.0);
            assert_eq!(obs.iter().sum::<f32>(), 1.0);
        }
    }

    #[test]
    #[should_panic(expected = "call reset")]
    fn stepping_past_the_deck_panics() {
        let mut env = RepeatPrevious::new();
        let mut obs = [0.0f32; 4];
        env.reset(0, &mut obs);
        for _ in 0..52 {
            env.step(ActionRef::Discrete(0), &mut obs);
        }
    }

    #[test]
    #[should_panic(expected = "got Discrete(4)")]
    fn invalid_suit_panics() {
        RepeatPrevious::new().step(ActionRef::Discrete(4), &mut [0.0; 4]);
    }
}
