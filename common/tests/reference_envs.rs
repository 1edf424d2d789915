//! The built-in environments against gymnasium 1.4 rollouts (`envs/cartpole.json`,
//! `envs/pendulum.json` under `RECUR_REFERENCE_DIR`; see `envs/README.md` there).
//!
//! Every recorded episode is replayed from its `initial_state` (gymnasium's reset RNG cannot be
//! reproduced) through a [`TimeLimit`] of the limit [`make`] uses, with the recorded actions,
//! and every step is compared. CartPole must match bit for bit (float32 observations and
//! float64 states); Pendulum within 1e-6 on observations and rewards. Flags must match exactly.
//! The tests fail, never skip, when a file is missing.

use common::envs::{
    max_episode_steps, ActionRef, CartPole, Env, MaskedCartPole, Pendulum, StepResult, TimeLimit,
};
use serde_json::Value;

/// Every float64 array that follows `"key": [` in `text`, in file order, parsed with Rust's
/// correctly rounded `str::parse` (serde_json's default float parsing may be one ulp off, which
/// would defeat a bit-exact comparison of the float64 states).
fn exact_arrays(text: &str, key: &str) -> Vec<Vec<f64>> {
    let pattern = format!("\"{key}\": [");
    text.match_indices(&pattern)
        .map(|(at, _)| {
            let rest = &text[at + pattern.len()..];
            let end = rest
                .find(']')
                .unwrap_or_else(|| panic!("unterminated {key} array"));
            rest[..end]
                .split(',')
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .unwrap_or_else(|e| panic!("{key}: {v:?} is not a number: {e}"))
                })
                .collect()
        })
        .collect()
}

/// The raw text of a reference file; fails (never skips) when it is missing.
fn load_text(relative: &str) -> String {
    let path = common::reference::reference_dir().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reference file {} cannot be read ({e}); set RECUR_REFERENCE_DIR to the directory \
             holding envs/ (default tests/reference in the repository)",
            path.display()
        )
    })
}

/// A reference JSON file; fails (never skips) when it is missing.
fn load_json(relative: &str) -> Value {
    serde_json::from_str(&load_text(relative))
        .unwrap_or_else(|e| panic!("{relative}: invalid JSON: {e}"))
}

/// A JSON array of numbers as float32 (the files print float32 values exactly, as float64).
fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn f64_bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The exact float64 states of a file: one `initial_state` per episode, and `state` and
/// `next_state` per step in file order.
struct ExactStates {
    initial: Vec<Vec<f64>>,
    before: Vec<Vec<f64>>,
    after: Vec<Vec<f64>>,
}

impl ExactStates {
    fn load(relative: &str, file: &Value) -> Self {
        let text = load_text(relative);
        let states = Self {
            initial: exact_arrays(&text, "initial_state"),
            before: exact_arrays(&text, "state"),
            after: exact_arrays(&text, "next_state"),
        };
        let episodes = file["episodes"].as_array().expect("episodes");
        let steps: usize = episodes
            .iter()
            .map(|e| e["steps"].as_array().expect("steps").len())
            .sum();
        assert_eq!(
            states.initial.len(),
            episodes.len(),
            "{relative}: initial states"
        );
        assert_eq!(states.before.len(), steps, "{relative}: states");
        assert_eq!(states.after.len(), steps, "{relative}: next states");

        // The scan must have read the same arrays, in the same order, as the JSON parser
        // (which may differ in the last bit only).
        let parsed = |v: &Value| -> Vec<f64> {
            v.as_array()
                .expect("an array")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect()
        };
        let initial: Vec<_> = episodes
            .iter()
            .map(|e| parsed(&e["initial_state"]))
            .collect();
        let (before, after): (Vec<_>, Vec<_>) = episodes
            .iter()
            .flat_map(|e| e["steps"].as_array().expect("steps"))
            .map(|s| (parsed(&s["state"]), parsed(&s["next_state"])))
            .unzip();
        let mut last_bit = 0;
        for (exact, parsed) in [
            (&states.initial, initial),
            (&states.before, before),
            (&states.after, after),
        ] {
            for (x, p) in exact.iter().flatten().zip(parsed.iter().flatten()) {
                let ulps = x.to_bits().abs_diff(p.to_bits());
                assert!(
                    ulps <= 1,
                    "{relative}: scanned {x} but the JSON parser read {p}"
                );
                last_bit += usize::from(ulps == 1);
            }
        }
        eprintln!("{relative}: {last_bit} state values where serde_json's parse is one ulp off");
        states
    }
}

/// Checks the file's header and returns its episodes and time limit.
fn episodes<'a>(file: &'a Value, env_id: &str) -> (&'a [Value], u64) {
    assert_eq!(file["format_version"], 1);
    assert_eq!(file["env_id"], env_id);
    let limit = file["max_episode_steps"]
        .as_u64()
        .expect("max_episode_steps");
    assert_eq!(
        max_episode_steps(env_id).unwrap(),
        limit,
        "{env_id}: make's time limit differs from gymnasium's"
    );
    let episodes = file["episodes"].as_array().expect("episodes");
    assert!(!episodes.is_empty(), "{env_id}: no episodes");
    (episodes, limit)
}

/// The episode-level facts every replay checks: flags of step `k` of `len`, the end, the
/// return.
fn check_flags(what: &str, episode: &Value, k: usize, step: &Value, got: &StepResult) {
    let len = episode["length"].as_u64().expect("length") as usize;
    assert_eq!(
        got.terminated,
        step["terminated"].as_bool().unwrap(),
        "{what}: terminated"
    );
    assert_eq!(
        got.truncated,
        step["truncated"].as_bool().unwrap(),
        "{what}: truncated"
    );
    let last = k + 1 == len;
    assert_eq!(got.terminated || got.truncated, last, "{what}: episode end");
    if last {
        let end = episode["end"].as_str().expect("end");
        assert_eq!(end == "terminated", got.terminated, "{what}: end is {end}");
        assert_eq!(end == "truncated", got.truncated, "{what}: end is {end}");
    }
}

#[test]
fn cartpole_matches_gymnasium_bit_for_bit() {
    let file = load_json("envs/cartpole.json");
    let (episodes, limit) = episodes(&file, "CartPole-v1");
    let exact = ExactStates::load("envs/cartpole.json", &file);
    let mut flat = 0;
    let mut truncations = 0;
    for (e, episode) in episodes.iter().enumerate() {
        let seed = &episode["seed"];
        let initial: [f64; 4] = exact.initial[e].clone().try_into().expect("4 components");
        let mut env = TimeLimit::new(CartPole::from_state(initial), limit).unwrap();
        let mut masked = TimeLimit::new(MaskedCartPole::from_state(initial), limit).unwrap();
        let mut obs = env.inner().observation().to_vec();
        let mut masked_obs = [0.0f32; 2];
        assert_eq!(
            bits(&obs),
            bits(&f32s(&episode["initial_obs"])),
            "seed {seed}: initial obs"
        );

        let steps = episode["steps"].as_array().expect("steps");
        assert_eq!(steps.len() as u64, episode["length"].as_u64().unwrap());
        let mut ret = 0.0;
        for (k, step) in steps.iter().enumerate() {
            let what = format!("CartPole seed {seed} step {k}");
            assert_eq!(bits(&obs), bits(&f32s(&step["obs"])), "{what}: obs");
            assert_eq!(
                f64_bits(&env.inner().state()),
                f64_bits(&exact.before[flat]),
                "{what}: state {:?} vs {:?}",
                env.inner().state(),
                exact.before[flat]
            );
            let action = step["action"].as_i64().expect("an integer action");
            assert!(action == 0 || action == 1, "{what}: action {action}");
            let got = env.step(ActionRef::Discrete(action), &mut obs);
            assert_eq!(
                bits(&obs),
                bits(&f32s(&step["next_obs"])),
                "{what}: next_obs"
            );
            assert_eq!(
                f64_bits(&env.inner().state()),
                f64_bits(&exact.after[flat]),
                "{what}: next_state {:?} vs {:?}",
                env.inner().state(),
                exact.after[flat]
            );
            assert_eq!(
                got.reward,
                step["reward"].as_f64().unwrap(),
                "{what}: reward"
            );
            check_flags(&what, episode, k, step, &got);
            truncations += usize::from(got.truncated);

            // MaskedCartPole: the same transition seen through [x, theta].
            let masked_got = masked.step(ActionRef::Discrete(action), &mut masked_obs);
            assert_eq!(masked_got, got, "{what}: masked step result");
            assert_eq!(
                bits(&masked_obs),
                bits(&[obs[0], obs[2]]),
                "{what}: masked obs"
            );

            ret += got.reward;
            flat += 1;
        }
        assert_eq!(env.elapsed_steps(), steps.len() as u64);
        assert_eq!(
            ret,
            episode["return"].as_f64().unwrap(),
            "seed {seed}: return"
        );
    }
    assert!(truncations > 0, "no episode reaches the time limit");
}

#[test]
fn pendulum_matches_gymnasium() {
    const TOL: f64 = 1e-6;
    let file = load_json("envs/pendulum.json");
    let (episodes, limit) = episodes(&file, "Pendulum-v1");
    assert_eq!(file["g"].as_f64(), Some(Pendulum::G));
    let exact = ExactStates::load("envs/pendulum.json", &file);
    let close = |what: &str, got: &[f64], want: &[f64], tol: f64| {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol,
                "{what}[{i}]: {g} vs {w} (tolerance {tol:e})"
            );
        }
    };
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let mut flat = 0;
    // Largest deviations seen (reported, to show how far inside the tolerance we are).
    let (mut worst_state, mut worst_obs, mut worst_reward) = (0.0f64, 0.0f64, 0.0f64);
    for (e, episode) in episodes.iter().enumerate() {
        let seed = &episode["seed"];
        let initial: [f64; 2] = exact.initial[e].clone().try_into().expect("2 components");
        let mut env = TimeLimit::new(Pendulum::from_state(initial), limit).unwrap();
        let mut obs = env.inner().observation().to_vec();
        close(
            &format!("Pendulum seed {seed}: initial obs"),
            &widen(&obs),
            &widen(&f32s(&episode["initial_obs"])),
            TOL,
        );
        let steps = episode["steps"].as_array().expect("steps");
        assert_eq!(steps.len() as u64, episode["length"].as_u64().unwrap());
        let mut ret = 0.0;
        for (k, step) in steps.iter().enumerate() {
            let what = format!("Pendulum seed {seed} step {k}");
            close(
                &format!("{what}: obs"),
                &widen(&obs),
                &widen(&f32s(&step["obs"])),
                TOL,
            );
            let state = env.inner().state();
            close(&format!("{what}: state"), &state, &exact.before[flat], TOL);
            let action = f32s(&step["action"]);
            assert_eq!(action.len(), 1, "{what}: action {action:?}");
            let got = env.step(ActionRef::Continuous(&action), &mut obs);
            close(
                &format!("{what}: next_obs"),
                &widen(&obs),
                &widen(&f32s(&step["next_obs"])),
                TOL,
            );
            let next = env.inner().state();
            close(
                &format!("{what}: next_state"),
                &next,
                &exact.after[flat],
                TOL,
            );
            for (g, w) in next.iter().zip(&exact.after[flat]) {
                worst_state = worst_state.max((g - w).abs());
            }
            for (g, w) in obs.iter().zip(f32s(&step["next_obs"])) {
                worst_obs = worst_obs.max(f64::from((g - w).abs()));
            }
            let reward = step["reward"].as_f64().unwrap();
            worst_reward = worst_reward.max((got.reward - reward).abs());
            assert!(
                (got.reward - reward).abs() <= TOL,
                "{what}: reward {} vs {reward}",
                got.reward
            );
            check_flags(&what, episode, k, step, &got);
            ret += got.reward;
            flat += 1;
        }
        let want = episode["return"].as_f64().unwrap();
        assert!(
            (ret - want).abs() <= TOL * steps.len() as f64,
            "seed {seed}: return {ret} vs {want}"
        );
    }
    eprintln!(
        "Pendulum: largest deviation over all steps: state {worst_state:e}, obs {worst_obs:e}, \
         reward {worst_reward:e}"
    );
}
