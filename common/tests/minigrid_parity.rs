//! The native MiniGrid memory rooms (`common::envs::minigrid`) against the installed Python
//! `minigrid` package, step for step.
//!
//! `minigrid_trace.py` plays every native id from the package (3 seeds, at least 2,000 steps
//! each, episode `k` of seed `s` reset with `reset(seed=s * 1000 + k)`; random actions, and
//! for two of the seeds walks toward the split's ends, so that both ends are reached) and
//! records the `direction` and `image` of every observation, the rewards and both flags. The
//! native environment replays the same actions from `Env::reset(s * 1000 + k)` and must match
//! exactly: the one-hot direction, every byte of the image, rewards as `f64` bits, `terminated`
//! and `truncated`.
//!
//! A second test runs each id through the bridge itself (`gymnasium:MiniGrid-...` with
//! `run.env_keys = ["direction", "image"]`): the same spaces, and the same first episode
//! (values and pixels) as the native id under the seed contract ([`episode_seed`]), and the
//! same automatic reset into the second.
//!
//! Like the repo's other Python tests, these pass without running (printing a `SKIPPED` line
//! on stderr) when `python3` (or `RECUR_PYTHON`) cannot import gymnasium, numpy and minigrid,
//! unless `RECUR_REQUIRE_PYTHON` is set (CI sets it), which makes them fail.

mod python;

use common::envs::{
    episode_seed, minigrid, ActionRef, GymnasiumOptions, Registry, VecActions, MINIGRID_IDS,
};
use serde_json::Value;

const SEEDS: [u64; 3] = [1, 2, 3];
const STEPS: usize = 2000;
const IMAGE: usize = 7 * 7 * 3;

/// Whether the interpreter has gymnasium, numpy and minigrid ([`python::modules_available`]).
fn minigrid_available() -> bool {
    python::modules_available(&["gymnasium", "numpy", "minigrid"], "run this test")
}

/// The package's episodes for `ids`, one JSON object per (id, seed).
fn package_traces(ids: &[&str]) -> Vec<Value> {
    python::traces("minigrid_trace.py", STEPS, &SEEDS, ids)
}

fn unhex(hex: &Value) -> Vec<u8> {
    let hex = hex.as_str().expect("hex");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex byte"))
        .collect()
}

fn one_hot(direction: &Value) -> Vec<f32> {
    let mut v = vec![0.0; 4];
    v[direction.as_u64().expect("direction") as usize] = 1.0;
    v
}

/// Replays one (id, seed) trace on the native environment; returns (steps, successes).
fn replay(trace: &Value) -> (usize, usize) {
    let id = trace["id"].as_str().unwrap();
    let seed = trace["seed"].as_u64().unwrap();
    let mut env = minigrid::make(id).unwrap_or_else(|| panic!("{id} is native"));
    let (mut obs, mut px) = (vec![f32::NAN; 4], vec![0u8; IMAGE]);
    let (mut steps, mut successes) = (0, 0);
    for (k, episode) in trace["episodes"].as_array().unwrap().iter().enumerate() {
        let reset_seed = episode["seed"].as_u64().unwrap();
        assert_eq!(reset_seed, seed * 1000 + k as u64);
        env.reset(reset_seed, &mut obs);
        env.pixels(&mut px);
        let ctx = format!("{id} seed {seed} episode {k}");
        assert_eq!(
            obs,
            one_hot(&episode["direction"]),
            "{ctx}: reset direction"
        );
        assert_eq!(px, unhex(&episode["image"]), "{ctx}: reset image");
        let records = episode["steps"].as_array().unwrap();
        for (t, step) in records.iter().enumerate() {
            let ctx = format!("{ctx} (reset seed {reset_seed}) step {t}");
            let r = env.step(ActionRef::Discrete(step[0].as_i64().unwrap()), &mut obs);
            env.pixels(&mut px);
            assert_eq!(obs, one_hot(&step[1]), "{ctx}: direction");
            assert_eq!(px, unhex(&step[2]), "{ctx}: image");
            let want = f64::from_bits(step[3].as_u64().unwrap());
            assert_eq!(
                r.reward.to_bits(),
                want.to_bits(),
                "{ctx}: reward {} vs package {want}",
                r.reward
            );
            assert_eq!(
                r.terminated,
                step[4].as_bool().unwrap(),
                "{ctx}: terminated"
            );
            assert_eq!(r.truncated, step[5].as_bool().unwrap(), "{ctx}: truncated");
            let last = t + 1 == records.len();
            assert_eq!(r.terminated || r.truncated, last, "{ctx}: episode end");
            successes += usize::from(last && r.reward > 0.0);
            steps += 1;
        }
    }
    (steps, successes)
}

#[test]
fn every_native_id_matches_the_package_step_for_step() {
    if !minigrid_available() {
        return;
    }
    let traces = package_traces(MINIGRID_IDS);
    assert_eq!(traces.len(), MINIGRID_IDS.len() * SEEDS.len());
    let mut report = String::new();
    for &id in MINIGRID_IDS {
        let runs: Vec<(usize, usize)> = traces
            .iter()
            .filter(|t| t["id"] == id)
            .map(replay)
            .collect();
        assert_eq!(runs.len(), SEEDS.len(), "{id}");
        assert!(runs.iter().all(|&(s, _)| s >= STEPS), "{id}: {runs:?}");
        // The walks toward the split reach the matching end many times.
        assert!(
            runs.iter().map(|r| r.1).sum::<usize>() >= 20,
            "{id}: {runs:?}"
        );
        report.push_str(&format!("{id}: (steps, successes) {runs:?}\n"));
    }
    eprintln!("{report}");
}

/// The native id and `gymnasium:<id>` through recur's bridge (keys `direction` and `image`):
/// the same spaces and spec, the same first episode under the same vector seed and actions
/// (reset with `episode_seed(seed, 0, 0)`), and the same second episode's start.
#[test]
fn the_bridge_and_the_native_ids_are_interchangeable() {
    if !minigrid_available() {
        return;
    }
    let options = GymnasiumOptions {
        imports: vec!["minigrid".into()],
        keys: Some(vec!["direction".into(), "image".into()]),
        workers: 1,
        ..GymnasiumOptions::default()
    };
    let registry = Registry::builtin().with_gymnasium(options);
    for &id in MINIGRID_IDS {
        let seed = 11;
        let native_spec = registry.spec(id).unwrap();
        let bridged_spec = registry.spec(&format!("gymnasium:{id}")).unwrap();
        assert_eq!(
            bridged_spec.observation_space, native_spec.observation_space,
            "{id}: observation space"
        );
        assert_eq!(bridged_spec.action_space, native_spec.action_space, "{id}");
        assert_eq!(
            bridged_spec.max_episode_steps, native_spec.max_episode_steps,
            "{id}: time limit"
        );
        let mut bridged = registry
            .make_vec(&format!("gymnasium:{id}"), 1, seed)
            .unwrap();
        let mut native = registry.make(id).unwrap();
        let (mut obs, mut px) = (vec![0.0f32; 4], vec![0u8; IMAGE]);
        native.reset(episode_seed(seed, 0, 0), &mut obs);
        native.pixels(&mut px);
        let b = bridged.reset().unwrap();
        assert_eq!((&b.obs, &b.pixels), (&obs, &px), "{id}: reset");
        // Walk east, then toward one end: the episode ends well before its time limit.
        let mut rng = common::envs::popgym::numpy_rng::Generator::from_seed(99);
        for t in 0.. {
            let action = if t < 40 {
                [[2, 2, 2, 0, 1][rng.integers(0, 5) as usize]]
            } else {
                [rng.integers(0, 7)]
            };
            let r = native.step(ActionRef::Discrete(action[0]), &mut obs);
            native.pixels(&mut px);
            let b = bridged.step(VecActions::Discrete(&action)).unwrap();
            let ctx = format!("{id} step {t}");
            assert_eq!((&b.next_obs, &b.next_pixels), (&obs, &px), "{ctx}");
            assert_eq!(b.reward[0], r.reward as f32, "{ctx}: reward");
            assert_eq!(b.terminated[0], r.terminated, "{ctx}: terminated");
            assert_eq!(b.truncated[0], r.truncated, "{ctx}: truncated");
            if r.terminated || r.truncated {
                native.reset(episode_seed(seed, 0, 1), &mut obs);
                native.pixels(&mut px);
                assert_eq!((&b.obs, &b.pixels), (&obs, &px), "{id}: the second reset");
                break;
            }
        }
    }
}
