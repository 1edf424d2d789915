//! Native POPGym environments (Morad et al., ICLR 2023), step for step equal to the Python
//! `popgym` package (1.0.x) under recur's seed contract.
//!
//! Each family is one file, with popgym's Easy/Medium/Hard parameters, and is registered in
//! [`super::Registry::builtin`] under popgym's own gymnasium id (`popgym-RepeatFirstEasy-v0`
//! ...; [`POPGYM_IDS`]). `gymnasium:popgym-...` stays the path to the Python package through
//! the [gymnasium bridge](super::gymnasium), and the two are interchangeable for a policy:
//!
//! * **Spaces.** Observations are what the bridge makes of popgym's observation: a
//!   `Discrete(n)` becomes a one-hot `Box([0; n], [1; n])`, a `MultiDiscrete` the
//!   concatenated one-hots, a `Tuple` its parts in order, a `Box` its float32 values with
//!   infinite bounds as `±f32::MAX` (`gym_worker.py`'s `flattener`). Actions are popgym's:
//!   `Discrete(n)`, `MultiDiscrete(nvec)` or (Pendulum) `Box([-2], [2])`.
//! * **Control.** The CartPole variants ([`PopgymCartPole`]) step
//!   [`CartPole`](super::CartPole)'s own dynamics (gymnasium's, bit for bit), the Pendulum
//!   variants ([`PopgymPendulum`]) [`Pendulum`](super::Pendulum)'s, except that their cost
//!   squares as numpy's scalar `**` 2 does, through ports of glibc's `pow` and `powf`
//!   (`libm.rs`), which are not correctly rounded.
//! * **Dynamics.** Rewards (as the same `f64`), `terminated` and `truncated` are popgym's,
//!   including its own episode ends (`max_episode_length` and friends). popgym registers its
//!   ids without a gymnasium `TimeLimit`, so neither does recur: the [`super::EnvSpec`] says
//!   `max_episode_steps: None`, as the bridge's spec does.
//! * **Randomness.** [`super::Env::reset`]`(seed)` reseeds the environment's generator exactly
//!   as `env.reset(seed=seed)` does in gymnasium: `np_random = default_rng(seed)`, ported bit
//!   for bit in [`numpy_rng`]. Every draw popgym makes (deck shuffles, ship placement, mine
//!   placement, bandit payouts, the CartPole and Pendulum variants' `uniform` reset state
//!   and observation noise) is the same draw from the same stream. None of the ported
//!   families draws from the global `np.random` in the code paths gymnasium runs:
//!   `Deck.__init__` shuffles with `np.random` only when built with `shuffle=True`, which no
//!   POPGym environment does, and `CountRecall.sample_deck` (which would use `np.random.choice`)
//!   is never called.
//!
//! `common/tests/popgym_parity.rs` checks all of this against the installed package: every
//! id, 3 seeds, 2,000 random-action steps with a new reset seed per episode; observations as
//! `f32` bits, rewards as `f64` bits, and both flags. See `docs/popgym.md`.
//!
//! The older native `RepeatPrevious-v0` ([`super::RepeatPrevious`]) is a different task
//! (it truncates at step 51 where `popgym-RepeatPreviousEasy-v0` terminates, and draws its
//! deck from `rand`, not numpy) and stays as it is.

pub mod numpy_rng;

mod autoencode;
mod battleship;
mod cartpole;
mod concentration;
mod count_recall;
mod higher_lower;
mod labyrinth;
mod libm;
mod minesweeper;
pub mod mt19937;
mod multiarmed_bandit;
mod pendulum;
mod repeat_first;
mod repeat_previous;

pub use autoencode::Autoencode;
pub use battleship::Battleship;
pub use cartpole::PopgymCartPole;
pub use concentration::Concentration;
pub use count_recall::CountRecall;
pub use higher_lower::HigherLower;
pub use labyrinth::Labyrinth;
pub use minesweeper::MineSweeper;
pub use multiarmed_bandit::MultiarmedBandit;
pub use pendulum::PopgymPendulum;
pub use repeat_first::RepeatFirst;
pub use repeat_previous::RepeatPrevious;

use numpy_rng::Generator;

use super::Env;

/// The native POPGym families: `POPGYM_IDS` (`popgym-<family><level>-v0`, family by family,
/// Easy, Medium, Hard) and the constructor `make` calls for each, from one list.
macro_rules! families {
    ($($family:literal => $make:path),+ $(,)?) => {
        /// The native POPGym ids, in popgym's own spelling, family by family (Easy, Medium, Hard).
        pub const POPGYM_IDS: &[&str] = &[$(
            concat!("popgym-", $family, "Easy-v0"),
            concat!("popgym-", $family, "Medium-v0"),
            concat!("popgym-", $family, "Hard-v0"),
        )+];

        /// Family `family` at `level`; `None` for an unknown family.
        fn make_family(family: &str, level: Difficulty) -> Option<Box<dyn Env>> {
            Some(match family {
                $($family => Box::new($make(level)),)+
                _ => return None,
            })
        }
    };
}

families! {
    "RepeatFirst" => RepeatFirst::new,
    "RepeatPrevious" => RepeatPrevious::new,
    "CountRecall" => CountRecall::new,
    "Autoencode" => Autoencode::new,
    "HigherLower" => HigherLower::new,
    "MultiarmedBandit" => MultiarmedBandit::new,
    "Concentration" => Concentration::new,
    "Battleship" => Battleship::new,
    "MineSweeper" => MineSweeper::new,
    "PositionOnlyCartPole" => PopgymCartPole::position_only,
    "NoisyPositionOnlyCartPole" => PopgymCartPole::noisy_position_only,
    // popgym's own spelling, lower-case "pole".
    "VelocityOnlyCartpole" => PopgymCartPole::velocity_only,
    "PositionOnlyPendulum" => PopgymPendulum::position_only,
    "NoisyPositionOnlyPendulum" => PopgymPendulum::noisy_position_only,
    "LabyrinthEscape" => Labyrinth::escape,
    "LabyrinthExplore" => Labyrinth::explore,
}

/// The `Env` methods every family writes alike: `id` (the struct's `id` field), the two spaces
/// (expressions over `$env`, bound to `&self`), and `save_state`/`load_state` for a struct that is
/// serde (its `id` skipped): the state is `(id, struct)`, and a state of another id is refused.
macro_rules! popgym_env {
    ($env:ident => observation: $observation:expr, action: $action:expr) => {
        fn id(&self) -> &str {
            self.id
        }

        #[allow(unused_variables)]
        fn observation_space(&self) -> crate::envs::Space {
            let $env = self;
            $observation
        }

        #[allow(unused_variables)]
        fn action_space(&self) -> crate::envs::Space {
            let $env = self;
            $action
        }

        fn save_state(&self) -> Option<Vec<u8>> {
            Some(crate::envs::encode_state(&(self.id, self)))
        }

        fn load_state(&mut self, state: &[u8]) -> Result<(), crate::envs::EnvError> {
            let (id, env): (String, Self) = crate::envs::decode_state(self.id, state)?;
            if id != self.id {
                return Err(crate::envs::EnvError::State {
                    id: self.id.to_owned(),
                    reason: format!("the state is one of {id}"),
                });
            }
            *self = Self { id: self.id, ..env };
            Ok(())
        }
    };
}
pub(crate) use popgym_env;

/// popgym's three difficulty levels; each family documents its parameters per level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Difficulty {
    /// `...Easy-v0`.
    Easy,
    /// `...Medium-v0`.
    Medium,
    /// `...Hard-v0`.
    Hard,
}

impl Difficulty {
    /// `"Easy"`, `"Medium"` or `"Hard"`, as in the ids.
    pub fn name(self) -> &'static str {
        self.pick(["Easy", "Medium", "Hard"])
    }

    /// The parameter of this level from a family's `[easy, medium, hard]`.
    fn pick<T>(self, [easy, medium, hard]: [T; 3]) -> T {
        match self {
            Difficulty::Easy => easy,
            Difficulty::Medium => medium,
            Difficulty::Hard => hard,
        }
    }
}

/// The native environment `id` (one of [`POPGYM_IDS`]), not wrapped in a time limit (popgym
/// ends its episodes itself); `None` for any other id.
pub fn make(id: &str) -> Option<Box<dyn Env>> {
    let rest = id.strip_prefix("popgym-")?.strip_suffix("-v0")?;
    let (family, level) = [Difficulty::Easy, Difficulty::Medium, Difficulty::Hard]
        .into_iter()
        .find_map(|level| rest.strip_suffix(level.name()).map(|f| (f, level)))?;
    make_family(family, level)
}

/// `popgym-<family><level>-v0`, as a `&'static str` from [`POPGYM_IDS`].
fn id_of(family: &str, level: Difficulty) -> &'static str {
    let want = format!("popgym-{family}{}-v0", level.name());
    POPGYM_IDS
        .iter()
        .copied()
        .find(|id| *id == want)
        .unwrap_or_else(|| panic!("{want} is not in POPGYM_IDS"))
}

/// Panics unless `obs` has length `dim` (the observation buffer contract of [`Env`]).
pub(crate) fn check_obs(id: &str, obs: &[f32], dim: usize) {
    assert_eq!(
        obs.len(),
        dim,
        "{id}: observation buffer has length {}, expected {dim}",
        obs.len()
    );
}

/// The step result of a family that ends its episodes only by terminating (never truncates).
fn ended_step(reward: f64, terminated: bool) -> super::StepResult {
    super::StepResult {
        reward,
        terminated,
        truncated: false,
    }
}

/// Writes the one-hot of `value` over `obs` (all of it).
fn write_one_hot(obs: &mut [f32], value: usize) {
    obs.fill(0.0);
    obs[value] = 1.0;
}

/// A `Discrete(n)` action as an index, or a panic naming the environment.
pub(crate) fn discrete_action(id: &str, action: super::ActionRef<'_>, n: usize) -> usize {
    match action {
        super::ActionRef::Discrete(a) if a >= 0 && (a as u64) < n as u64 => a as usize,
        other => panic!("{id}: action must be Discrete(0..{n}), got {other:?}"),
    }
}

/// A `MultiDiscrete([n0, n1])` action as two indices, or a panic naming the environment.
fn pair_action(id: &str, action: super::ActionRef<'_>, n: [usize; 2]) -> [usize; 2] {
    match action {
        super::ActionRef::MultiDiscrete(&[a, b])
            if a >= 0 && b >= 0 && (a as u64) < n[0] as u64 && (b as u64) < n[1] as u64 =>
        {
            [a as usize, b as usize]
        }
        other => panic!(
            "{id}: action must be MultiDiscrete([{}, {}]), got {other:?}",
            n[0], n[1]
        ),
    }
}

/// popgym's `Deck` (`popgym/core/deck.py`) as far as the ported games use it: `num_decks`
/// standard decks, card `c` of suit `c % 4`, colour `c % 2` and rank `(c % 52) / 4`.
/// `Deck.reset(rng=np_random)` is `idx = arange(n); np_random.shuffle(idx)`, and `deal` takes
/// the card at the end of what is left (`idx[deck_len - 1]`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Deck {
    /// `Deck.idx`: the card at each position.
    idx: Vec<u16>,
    /// `Deck.deck_len`: the cards not dealt yet are `idx[..len]`.
    len: usize,
}

impl Deck {
    /// Cards in one standard deck.
    const SIZE: usize = 52;

    /// `Deck(num_decks)` after `reset(rng=rng)`: every card, shuffled.
    fn shuffled(rng: &mut Generator, num_cards: usize) -> Self {
        let mut idx: Vec<u16> = (0..num_cards as u16).collect();
        rng.shuffle(&mut idx);
        Deck {
            len: num_cards,
            idx,
        }
    }

    /// `Deck.deal(player, 1)`: the card dealt.
    ///
    /// # Panics
    /// When the deck is empty (popgym raises `DeckEmptyError`).
    fn deal(&mut self) -> usize {
        assert!(
            self.len > 0,
            "the deck is empty (DeckEmptyError); call reset"
        );
        self.len -= 1;
        usize::from(self.idx[self.len])
    }

    fn suit(card: usize) -> usize {
        card % 4
    }

    fn color(card: usize) -> usize {
        card % 2
    }

    fn rank(card: usize) -> usize {
        (card % Self::SIZE) / 4
    }
}

/// What popgym's `deck_type` argument counts or matches cards by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum CardKind {
    /// 2 colours.
    Colors,
    /// 4 suits.
    Suits,
    /// 13 ranks.
    Ranks,
}

impl CardKind {
    /// `len(np.unique(deck_type))`.
    fn distinct(self) -> usize {
        match self {
            CardKind::Colors => 2,
            CardKind::Suits => 4,
            CardKind::Ranks => 13,
        }
    }

    /// `deck_idx_type[card]`.
    fn of(self, card: usize) -> usize {
        match self {
            CardKind::Colors => Deck::color(card),
            CardKind::Suits => Deck::suit(card),
            CardKind::Ranks => Deck::rank(card),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{ActionRef, Registry, Space};

    #[test]
    fn every_id_builds_and_resets_into_its_space() {
        for &id in POPGYM_IDS {
            let mut env = make(id).unwrap_or_else(|| panic!("{id} builds"));
            assert_eq!(env.id(), id);
            let space = env.observation_space();
            let mut obs = vec![f32::NAN; space.dim()];
            env.reset(3, &mut obs);
            assert!(space.contains_obs(&obs), "{id}: {obs:?}");
        }
        assert!(make("popgym-RepeatFirstExtreme-v0").is_none());
    }

    #[test]
    fn registered_without_a_time_limit() {
        let r = Registry::builtin();
        for &id in POPGYM_IDS {
            let spec = r.spec(id).unwrap();
            assert_eq!(spec.max_episode_steps, None, "{id}");
        }
    }

    /// A state saved mid-episode and loaded into a fresh environment continues the same
    /// episode: the same observations, rewards and flags under the same actions, episode ends
    /// and later (seeded) resets included. A state of another id is refused.
    #[test]
    fn a_saved_state_continues_the_same_episode() {
        let random_action = |space: &Space, rng: &mut Generator| -> (Vec<i64>, Vec<f32>) {
            match space {
                Space::Discrete { n } => (vec![rng.integers(0, *n as i64)], vec![]),
                Space::MultiDiscrete { nvec } => (
                    nvec.iter().map(|&n| rng.integers(0, n as i64)).collect(),
                    vec![],
                ),
                Space::Box { low, high } => (
                    vec![],
                    low.iter()
                        .zip(high)
                        .map(|(&l, &h)| rng.uniform(l.into(), h.into()) as f32)
                        .collect(),
                ),
                other => unreachable!("{} is not an action space", other.describe()),
            }
        };
        let play = |env: &mut dyn Env, actions: &[(Vec<i64>, Vec<f32>)], obs: &mut Vec<f32>| {
            let mut trace = Vec::new();
            for (k, (d, c)) in actions.iter().enumerate() {
                let action = match env.action_space() {
                    Space::Discrete { .. } => ActionRef::Discrete(d[0]),
                    Space::MultiDiscrete { .. } => ActionRef::MultiDiscrete(d),
                    Space::Box { .. } => ActionRef::Continuous(c),
                    other => unreachable!("{} is not an action space", other.describe()),
                };
                let r = env.step(action, obs);
                trace.push((r.reward.to_bits(), r.terminated, r.truncated, obs.clone()));
                if r.terminated || r.truncated {
                    env.reset(1000 + k as u64, obs);
                    trace.push((0, false, false, obs.clone()));
                }
            }
            trace
        };
        for &id in POPGYM_IDS {
            let mut env = make(id).unwrap();
            let space = env.action_space();
            let mut obs = vec![0.0; env.observation_space().dim()];
            let mut rng = Generator::from_seed(5);
            env.reset(9, &mut obs);
            let warmup: Vec<_> = (0..7).map(|_| random_action(&space, &mut rng)).collect();
            play(env.as_mut(), &warmup, &mut obs);
            let state = env
                .save_state()
                .unwrap_or_else(|| panic!("{id} saves its state"));
            let actions: Vec<_> = (0..300).map(|_| random_action(&space, &mut rng)).collect();
            let want = play(env.as_mut(), &actions, &mut obs);
            let mut restored = make(id).unwrap();
            restored.load_state(&state).unwrap();
            assert_eq!(play(restored.as_mut(), &actions, &mut obs), want, "{id}");
        }
        let state = make(POPGYM_IDS[0]).unwrap().save_state().unwrap();
        let err = make(POPGYM_IDS[1]).unwrap().load_state(&state).unwrap_err();
        assert!(err.to_string().contains(POPGYM_IDS[0]), "{err}");
    }

    /// Random actions until 3 episodes end: every observation stays in the space, and the same
    /// seeds give the same episodes.
    #[test]
    fn episodes_end_and_repeat_under_the_same_seed() {
        for &id in POPGYM_IDS {
            let run = || {
                let mut env = make(id).unwrap();
                let space = env.observation_space();
                let action_space = env.action_space();
                let mut obs = vec![0.0; space.dim()];
                let mut rng = Generator::from_seed(7);
                let mut trace = Vec::new();
                for episode in 0..3u64 {
                    env.reset(episode, &mut obs);
                    for _ in 0..100_000 {
                        let r = match &action_space {
                            Space::Discrete { n } => {
                                env.step(ActionRef::Discrete(rng.integers(0, *n as i64)), &mut obs)
                            }
                            Space::MultiDiscrete { nvec } => {
                                let a: Vec<i64> =
                                    nvec.iter().map(|&n| rng.integers(0, n as i64)).collect();
                                env.step(ActionRef::MultiDiscrete(&a), &mut obs)
                            }
                            Space::Box { low, high } => {
                                let a: Vec<f32> = low
                                    .iter()
                                    .zip(high)
                                    .map(|(&l, &h)| rng.uniform(l.into(), h.into()) as f32)
                                    .collect();
                                env.step(ActionRef::Continuous(&a), &mut obs)
                            }
                            other => unreachable!("{} is not an action space", other.describe()),
                        };
                        assert!(space.contains_obs(&obs), "{id}: {obs:?}");
                        trace.push((r.reward.to_bits(), obs.clone()));
                        if r.terminated || r.truncated {
                            break;
                        }
                    }
                }
                trace
            };
            assert_eq!(run(), run(), "{id}");
        }
    }
}
