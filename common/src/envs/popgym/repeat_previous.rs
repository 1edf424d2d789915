//! `popgym-RepeatPrevious{Easy,Medium,Hard}-v0` (`popgym/envs/repeat_previous.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, ended_step, id_of, write_one_hot};
use super::{Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Name the suit of the card dealt `k` cards before the latest one.
///
/// `num_decks` decks are shuffled at reset and one card is dealt (Easy: 1 deck, `k = 4`;
/// Medium: 2 decks, `k = 32`; Hard: 3 decks, `k = 64`). Each step takes a suit
/// (`Discrete(4)`); once `k` cards have been dealt it is rewarded `+1/(n - k)` if it names
/// the suit of the `k`-th latest card and `-1/(n - k)` otherwise (0 before), then the next
/// card is dealt. The observation is the one-hot suit `[4]` of the latest card. The episode
/// terminates on the step that deals the last card (step `n - 1`).
///
/// Not the older native `RepeatPrevious-v0` ([`crate::envs::RepeatPrevious`]), which
/// truncates where this one terminates and shuffles with `rand`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RepeatPrevious {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    k: usize,
    rng: Generator,
    deck: Deck,
    /// Suits of the cards dealt, in order (popgym's `hands["player"]`).
    hand: Vec<u8>,
}

impl RepeatPrevious {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let (num_decks, k) = level.pick([(1, 4), (2, 32), (3, 64)]);
        Self {
            id: id_of("RepeatPrevious", level),
            num_cards: Deck::SIZE * num_decks,
            k,
            rng: Generator::from_seed(0),
            deck: Deck::default(),
            hand: Vec::new(),
        }
    }

    fn deal(&mut self, obs: &mut [f32]) {
        let suit = Deck::suit(self.deck.deal());
        self.hand.push(suit as u8);
        write_one_hot(obs, suit);
    }
}

impl Env for RepeatPrevious {
    // Observation one-hot suit, `Box([0; 4], [1; 4])` (popgym: `Discrete(4)`).
    // Action `Discrete(4)`: a suit.
    super::popgym_env!(env => observation: Space::unit_box(4), action: Space::Discrete { n: 4 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 4);
        self.rng = Generator::from_seed(seed);
        self.deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.hand.clear();
        self.deal(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 4);
        let action = discrete_action(self.id, action, 4);
        let scale = 1.0 / (self.num_cards - self.k) as f64;
        let terminated = self.deck.len == 1;
        let mut reward = 0.0;
        if self.hand.len() >= self.k {
            let named = usize::from(self.hand[self.hand.len() - self.k]);
            reward = if action == named { scale } else { -scale };
        }
        self.deal(obs);
        ended_step(reward, terminated)
    }
}
