//! `popgym-CountRecall{Easy,Medium,Hard}-v0` (`popgym/envs/count_recall.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, ended_step, id_of, write_one_hot};
use super::{CardKind, Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Say how many times the queried kind of card has been dealt so far.
///
/// Two decks of `n` cards each, a value deck and a query deck, are shuffled at reset (in that
/// order, from the one generator). Every deal draws one card from each: the value card is
/// counted, the query card asks for a count. Cards are told apart by colour (Easy, 1 deck),
/// suit (Medium, 2 decks) or rank (Hard, 4 decks): `d` = 2, 4 or 13 kinds, at most
/// `m = n / d` of each. The observation is `[one-hot value kind (d), one-hot query kind (d)]`
/// (popgym: `MultiDiscrete([d, d])`). Each step takes a count (`Discrete(m + 1)`), rewarded
/// `+1/(n - 1)` if it equals the count of the previous query's kind before this deal and
/// `-1/(n - 1)` otherwise, then deals. The episode terminates when the value deck runs out
/// (step `n - 1`).
///
/// popgym's `CountRecall.sample_deck` would draw from the global `np.random`, but nothing
/// calls it: every draw comes from the seeded generator.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CountRecall {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    kind: CardKind,
    rng: Generator,
    value_deck: Deck,
    query_deck: Deck,
    counts: Vec<u32>,
    query: usize,
}

impl CountRecall {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let (num_decks, kind) = level.pick([
            (1, CardKind::Colors),
            (2, CardKind::Suits),
            (4, CardKind::Ranks),
        ]);
        Self {
            id: id_of("CountRecall", level),
            num_cards: Deck::SIZE * num_decks,
            kind,
            rng: Generator::from_seed(0),
            value_deck: Deck::default(),
            query_deck: Deck::default(),
            counts: vec![0; kind.distinct()],
            query: 0,
        }
    }

    fn distinct(&self) -> usize {
        self.kind.distinct()
    }

    /// `max_card_count`.
    fn max_count(&self) -> usize {
        self.num_cards / self.distinct()
    }

    /// Deals one value and one query card, counts the value and writes the observation.
    fn deal(&mut self, obs: &mut [f32]) {
        let value = self.kind.of(self.value_deck.deal());
        self.query = self.kind.of(self.query_deck.deal());
        self.counts[value] += 1;
        let d = self.distinct();
        write_one_hot(&mut obs[..d], value);
        write_one_hot(&mut obs[d..], self.query);
    }
}

impl Env for CountRecall {
    // Observation two one-hot kinds, `Box([0; 2d], [1; 2d])` (popgym: `MultiDiscrete([d, d])`).
    // Action `Discrete(n / d + 1)`: a count.
    super::popgym_env!(env => observation: Space::unit_box(2 * env.distinct()),
        action: Space::Discrete { n: env.max_count() + 1 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 2 * self.distinct());
        self.rng = Generator::from_seed(seed);
        self.value_deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.query_deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.counts.fill(0);
        self.deal(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 2 * self.distinct());
        let action = discrete_action(self.id, action, self.max_count() + 1);
        let prev_count = self.counts[self.query] as usize;
        self.deal(obs);
        let scale = 1.0 / (self.num_cards - 1) as f64;
        let reward = if action == prev_count { scale } else { -scale };
        ended_step(reward, self.value_deck.len == 0)
    }
}
