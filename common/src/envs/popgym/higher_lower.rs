//! `popgym-HigherLower{Easy,Medium,Hard}-v0` (`popgym/envs/higher_lower.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, ended_step, id_of, write_one_hot};
use super::{Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Guess whether the next card ranks higher or lower than the latest one.
///
/// `num_decks` decks (Easy 1, Medium 2, Hard 3; `n` cards) are shuffled at reset and one card
/// is dealt. Each step takes a guess (`Discrete(2)`: 0 = higher, 1 = lower) and deals the next
/// card: rewarded 0 if the ranks are equal, `+1/n` if the guess was right, `-1/n` if wrong.
/// The observation is the one-hot rank `[13]` of the latest card. The episode terminates on
/// the step that deals the last card (step `n - 1`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct HigherLower {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    rng: Generator,
    deck: Deck,
    /// Rank of the latest card.
    rank: usize,
}

impl HigherLower {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let num_decks = level.pick([1, 2, 3]);
        Self {
            id: id_of("HigherLower", level),
            num_cards: Deck::SIZE * num_decks,
            rng: Generator::from_seed(0),
            deck: Deck::default(),
            rank: 0,
        }
    }
}

impl Env for HigherLower {
    // Observation one-hot rank, `Box([0; 13], [1; 13])` (popgym: `Discrete(13)`).
    // Action `Discrete(2)`: 0 guesses higher, 1 lower.
    super::popgym_env!(env => observation: Space::unit_box(13), action: Space::Discrete { n: 2 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 13);
        self.rng = Generator::from_seed(seed);
        self.deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.rank = Deck::rank(self.deck.deal());
        write_one_hot(obs, self.rank);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 13);
        let guess_higher = discrete_action(self.id, action, 2) == 0;
        let terminated = self.deck.len <= 1;
        let next = Deck::rank(self.deck.deal());
        let scale = 1.0 / self.num_cards as f64;
        let reward = if next == self.rank {
            0.0
        } else if (next > self.rank) == guess_higher {
            scale
        } else {
            -scale
        };
        self.rank = next;
        write_one_hot(obs, next);
        ended_step(reward, terminated)
    }
}
