//! `popgym-RepeatFirst{Easy,Medium,Hard}-v0` (`popgym/envs/repeat_first.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, ended_step, id_of, write_one_hot};
use super::{Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Name the suit of the first card dealt, at every step.
///
/// `num_decks` decks (Easy 1, Medium 8, Hard 16) are shuffled at reset and the first card is
/// dealt. Each step takes a suit (`Discrete(4)`), is rewarded `+1/(n - 1)` if it is the first
/// card's suit and `-1/(n - 1)` otherwise (`n` cards), then deals the next card. The
/// observation is the one-hot suit `[4]` of the latest card. The episode terminates on the
/// step that deals the last card (step `n - 1`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RepeatFirst {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    rng: Generator,
    deck: Deck,
    /// Suit of the first card.
    first: usize,
}

impl RepeatFirst {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let num_decks = level.pick([1, 8, 16]);
        Self {
            id: id_of("RepeatFirst", level),
            num_cards: Deck::SIZE * num_decks,
            rng: Generator::from_seed(0),
            deck: Deck::default(),
            first: 0,
        }
    }
}

impl Env for RepeatFirst {
    // Observation one-hot suit, `Box([0; 4], [1; 4])` (popgym: `Discrete(4)`).
    // Action `Discrete(4)`: a suit.
    super::popgym_env!(env => observation: Space::unit_box(4), action: Space::Discrete { n: 4 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 4);
        self.rng = Generator::from_seed(seed);
        self.deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.first = Deck::suit(self.deck.deal());
        write_one_hot(obs, self.first);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 4);
        let action = discrete_action(self.id, action, 4);
        let scale = 1.0 / (self.num_cards - 1) as f64;
        let reward = if action == self.first { scale } else { -scale };
        let terminated = self.deck.len == 1;
        let card = self.deck.deal();
        write_one_hot(obs, Deck::suit(card));
        ended_step(reward, terminated)
    }
}
