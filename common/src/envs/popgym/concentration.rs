//! `popgym-Concentration{Easy,Medium,Hard}-v0` (`popgym/envs/concentration.py`).

use super::numpy_rng::Generator;
use super::{check_obs, discrete_action, id_of};
use super::{CardKind, Deck, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// The card game Concentration (Memory): flip two face-down cards; a matching pair stays up.
///
/// `n` cards (Easy: 1 deck matched by colour; Medium: 2 decks by colour; Hard: 1 deck by
/// rank) are shuffled face down at reset. Each step flips the card at one position
/// (`Discrete(n)`). Flipping a card that is already face up (as either card of the turn)
/// costs `f` per card in play (`f = -1/T`, `T = ceil(2n - n/(2n - 1))`) and ends the turn.
/// The second card of a turn either matches the first (a different position, same colour or
/// rank: reward `1/(n/2)`, both stay face up, and the episode terminates when all are) or
/// costs `2f`; either way the turn ends. The observation shows every card face up or in play
/// by its kind and every other card as face down: per position a one-hot of `d + 1` values
/// (`d` = 2 colours or 13 ranks, `d` = face down), `n (d + 1)` values in all (popgym:
/// `MultiDiscrete([d + 1] * n)`), as it was after the flip, before the turn ends. The
/// episode truncates at step `T`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Concentration {
    #[serde(skip)]
    id: &'static str,
    num_cards: usize,
    kind: CardKind,
    episode_length: u64,
    rng: Generator,
    deck: Deck,
    /// Whether the card at each position is face up for good.
    face_up: Vec<bool>,
    face_up_count: usize,
    /// Positions flipped this turn (0, 1 or 2).
    in_play: Vec<usize>,
    /// The kind of the card at each position (`deck_idx_type[deck.idx[pos]]`).
    kinds: Vec<u8>,
    /// What each position shows outside the turn: its kind once face up, else face down.
    shown: Vec<u8>,
    step: u64,
}

impl Concentration {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let (num_decks, kind) = level.pick([
            (1, CardKind::Colors),
            (2, CardKind::Colors),
            (1, CardKind::Ranks),
        ]);
        let n = Deck::SIZE * num_decks;
        let nf = n as f64;
        Self {
            id: id_of("Concentration", level),
            num_cards: n,
            kind,
            episode_length: (2.0 * nf - (nf / (2.0 * nf - 1.0))).ceil() as u64,
            rng: Generator::from_seed(0),
            deck: Deck::default(),
            face_up: vec![false; n],
            face_up_count: 0,
            in_play: Vec::with_capacity(2),
            kinds: vec![0; n],
            shown: vec![0; n],
            step: 0,
        }
    }

    /// Values per position: the kinds and face down.
    fn width(&self) -> usize {
        self.kind.distinct() + 1
    }

    fn dim(&self) -> usize {
        self.num_cards * self.width()
    }

    /// popgym's `get_obs`: every position as [`Self::shown`], the cards in play by their kind.
    fn write(&self, obs: &mut [f32]) {
        let w = self.width();
        obs.fill(0.0);
        for (cell, &value) in obs.chunks_exact_mut(w).zip(&self.shown) {
            cell[usize::from(value)] = 1.0;
        }
        for &pos in &self.in_play {
            let cell = &mut obs[pos * w..(pos + 1) * w];
            cell.fill(0.0);
            cell[usize::from(self.kinds[pos])] = 1.0;
        }
    }
}

impl Env for Concentration {
    // Observation per position a one-hot of `d + 1` values, `Box([0; n (d + 1)], [1; n (d + 1)])`
    // (popgym: `MultiDiscrete([d + 1] * n)`). Action `Discrete(n)`: the position to flip.
    super::popgym_env!(env => observation: Space::unit_box(env.dim()),
        action: Space::Discrete { n: env.num_cards });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, self.dim());
        self.rng = Generator::from_seed(seed);
        self.deck = Deck::shuffled(&mut self.rng, self.num_cards);
        self.face_up.fill(false);
        self.face_up_count = 0;
        let kind = self.kind;
        self.kinds.clear();
        self.kinds
            .extend(self.deck.idx.iter().map(|&c| kind.of(usize::from(c)) as u8));
        self.shown.fill(kind.distinct() as u8);
        self.in_play.clear();
        self.step = 0;
        self.write(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, self.dim());
        let pos = discrete_action(self.id, action, self.num_cards);
        let failure = -1.0 / self.episode_length as f64;
        let truncated = self.step >= self.episode_length - 1;
        let mut terminated = false;
        let mut reward = 0.0;
        self.in_play.push(pos);
        self.write(obs);
        if self.in_play.iter().any(|&p| self.face_up[p]) {
            reward = failure * self.in_play.len() as f64;
            self.in_play.clear();
        } else if self.in_play.len() == 2 {
            let (a, b) = (self.in_play[0], self.in_play[1]);
            let kind = |p: usize| self.kind.of(usize::from(self.deck.idx[p]));
            if kind(a) == kind(b) && a != b {
                reward = 1.0 / (self.num_cards / 2) as f64;
                self.face_up[a] = true;
                self.face_up[b] = true;
                self.shown[a] = self.kinds[a];
                self.shown[b] = self.kinds[b];
                self.face_up_count += 2;
                terminated = self.face_up_count == self.num_cards;
            } else {
                reward = 2.0 * failure;
            }
            self.in_play.clear();
        }
        self.step += 1;
        StepResult {
            reward,
            terminated,
            truncated,
        }
    }
}
