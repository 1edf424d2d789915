//! `popgym-Autoencode{Easy,Medium,Hard}-v0` (`popgym/envs/autoencode.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, ended_step, id_of, write_one_hot};
use super::{Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Watch a sequence of cards, then recite their suits in reverse order.
///
/// `num_decks` decks (Easy 1, Medium 2, Hard 3; `n` cards) are shuffled at reset and one card
/// is dealt. While watching, each step deals the next card (reward 0, the action is
/// ignored); the step that deals the last card switches to playing. While playing, each step
/// names a suit (`Discrete(4)`) for the latest card not yet recited, rewarded `+1/n` if right
/// and `-1/n` if wrong; the step that recites the first card terminates (step `2n - 1`).
/// The observation is `[one-hot mode (2; watch = 1, play = 0), one-hot suit (4)]` (popgym:
/// `Tuple(Discrete(2), Discrete(4))`): the card just dealt while watching, suit 0 while
/// playing.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Autoencode {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    rng: Generator,
    deck: Deck,
    /// Suits dealt and not yet recited (popgym's `hands["system"]`).
    hand: Vec<u8>,
    watching: bool,
}

impl Autoencode {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let num_decks = level.pick([1, 2, 3]);
        Self {
            id: id_of("Autoencode", level),
            num_cards: Deck::SIZE * num_decks,
            rng: Generator::from_seed(0),
            deck: Deck::default(),
            hand: Vec::new(),
            watching: true,
        }
    }

    fn write(&self, obs: &mut [f32], suit: usize) {
        write_one_hot(&mut obs[..2], usize::from(self.watching));
        write_one_hot(&mut obs[2..], suit);
    }
}

impl Env for Autoencode {
    // Observation `Box([0; 6], [1; 6])`: one-hot mode and one-hot suit (popgym:
    // `Tuple(Discrete(2), Discrete(4))`). Action `Discrete(4)`: a suit.
    super::popgym_env!(env => observation: Space::unit_box(6), action: Space::Discrete { n: 4 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 6);
        self.rng = Generator::from_seed(seed);
        self.deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.hand.clear();
        let suit = Deck::suit(self.deck.deal());
        self.hand.push(suit as u8);
        self.watching = true;
        self.write(obs, suit);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 6);
        let action = discrete_action(self.id, action, 4);
        let mut reward = 0.0;
        let mut terminated = false;
        if self.watching {
            let suit = Deck::suit(self.deck.deal());
            self.hand.push(suit as u8);
            if self.deck.len == 0 {
                self.watching = false;
            }
            self.write(obs, suit);
        } else {
            terminated = self.hand.len() == 1;
            let correct = usize::from(
                self.hand
                    .pop()
                    .unwrap_or_else(|| panic!("{}: step after the episode ended", self.id)),
            );
            let scale = 1.0 / self.num_cards as f64;
            reward = if action == correct { scale } else { -scale };
            // popgym: make_obs(np.array([0])), the suit of card 0.
            self.write(obs, Deck::suit(0));
        }
        ended_step(reward, terminated)
    }
}
