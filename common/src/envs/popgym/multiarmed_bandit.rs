//! `popgym-MultiarmedBandit{Easy,Medium,Hard}-v0` (`popgym/envs/multiarmed_bandit.py`).

use super::numpy_rng::Generator;
use super::Difficulty;
use super::{check_obs, discrete_action, id_of, write_one_hot};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// An episode of `k` Bernoulli bandits with unknown payout probabilities.
///
/// At reset each bandit's probability is drawn as `np_random.random(k, dtype=np.float32)`
/// (Easy: 10 bandits, 200 steps; Medium: 20, 400; Hard: 30, 600). Each step pulls one
/// (`Discrete(k)`): it pays (observation 1, reward `+1/T`) when `np_random.random()` (float64)
/// is below its probability, otherwise observation 0 and reward `-1/T`. The observation is
/// that outcome as a one-hot `[2]` (0 at reset). The episode truncates at step `T`; it never
/// terminates.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MultiarmedBandit {
    #[serde(skip)]
    id: &'static str,
    episode_length: u64,
    rng: Generator,
    bandits: Vec<f32>,
    steps: u64,
}

impl MultiarmedBandit {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let (bandits, episode_length) = level.pick([(10, 200), (20, 400), (30, 600)]);
        Self {
            id: id_of("MultiarmedBandit", level),
            episode_length,
            rng: Generator::from_seed(0),
            bandits: vec![0.0; bandits],
            steps: 0,
        }
    }
}

impl Env for MultiarmedBandit {
    // Observation one-hot payout, `Box([0; 2], [1; 2])` (popgym: `Discrete(2)`).
    // Action `Discrete(k)`: the bandit to pull.
    super::popgym_env!(env => observation: Space::unit_box(2),
        action: Space::Discrete { n: env.bandits.len() });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 2);
        self.rng = Generator::from_seed(seed);
        self.steps = 0;
        for p in &mut self.bandits {
            *p = self.rng.random_f32();
        }
        write_one_hot(obs, 0);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 2);
        let arm = discrete_action(self.id, action, self.bandits.len());
        // float64 draw against a float32 probability: numpy compares them as float64.
        let paid = self.rng.random() < f64::from(self.bandits[arm]);
        let t = self.episode_length as f64;
        let reward = if paid { 1.0 / t } else { -1.0 / t };
        let truncated = self.steps >= self.episode_length - 1;
        self.steps += 1;
        write_one_hot(obs, usize::from(paid));
        StepResult {
            reward,
            terminated: false,
            truncated,
        }
    }
}
