//! The native POPGym environments (`common::envs::popgym`) against the installed Python
//! `popgym` package, step for step.
//!
//! `popgym_trace.py` plays every native id with random actions from the package (3 seeds,
//! at least 2,000 steps each, episode `k` of seed `s` reset with `reset(seed=s * 1000 + k)`)
//! and records the observations flattened as recur's gymnasium bridge flattens them, the
//! rewards and both flags. The native environment replays the same actions from
//! `Env::reset(s * 1000 + k)` and must match bitwise: observations as `f32` bits, rewards as
//! `f64` bits, `terminated` and `truncated` exactly.
//!
//! A second test runs each id through the bridge itself (`gymnasium:popgym-...`): the same
//! spaces, the same first episode as the native id under the seed contract
//! ([`episode_seed`]), and the same automatic reset into the second.
//!
//! Like the repo's other Python tests, these pass without running (printing a `SKIPPED` line
//! on stderr) when `python3` (or `RECUR_PYTHON`) cannot import gymnasium, numpy and popgym,
//! unless `RECUR_REQUIRE_PYTHON` is set (CI sets it), which makes them fail.

mod python;

use common::envs::{
    episode_seed, popgym, ActionRef, GymnasiumOptions, Registry, Space, VecActions, POPGYM_IDS,
};
use serde_json::Value;

const SEEDS: [u64; 3] = [1, 2, 3];
const STEPS: usize = 2000;

/// Whether the interpreter has gymnasium, numpy, popgym and mazelib ([`python::modules_available`]).
fn popgym_available() -> bool {
    python::modules_available(
        &["gymnasium", "numpy", "popgym", "mazelib"],
        "run this test",
    )
}

/// The package's episodes for `ids`, one JSON object per (id, seed).
fn package_traces(ids: &[&str]) -> Vec<Value> {
    python::traces("popgym_trace.py", STEPS, &SEEDS, ids)
}

/// A sparse `[[index, f32 bits], ...]` observation as a dense vector of bits.
fn dense(sparse: &Value, dim: usize) -> Vec<u32> {
    let mut out = vec![0u32; dim];
    for pair in sparse.as_array().expect("sparse obs") {
        let i = pair[0].as_u64().unwrap() as usize;
        out[i] = pair[1].as_u64().unwrap() as u32;
    }
    out
}

fn bits(obs: &[f32]) -> Vec<u32> {
    obs.iter().map(|x| x.to_bits()).collect()
}

/// Replays one (id, seed) trace on the native environment; returns the steps compared.
fn replay(trace: &Value) -> usize {
    let id = trace["id"].as_str().unwrap();
    let seed = trace["seed"].as_u64().unwrap();
    let dim = trace["obs_dim"].as_u64().unwrap() as usize;
    let mut env = popgym::make(id).unwrap_or_else(|| panic!("{id} is native"));
    assert_eq!(env.observation_space().dim(), dim, "{id}: observation size");
    let action_space = env.action_space();
    let mut obs = vec![f32::NAN; dim];
    let mut steps = 0;
    for (k, episode) in trace["episodes"].as_array().unwrap().iter().enumerate() {
        let reset_seed = episode["seed"].as_u64().unwrap();
        assert_eq!(reset_seed, seed * 1000 + k as u64);
        env.reset(reset_seed, &mut obs);
        assert_eq!(
            bits(&obs),
            dense(&episode["obs"], dim),
            "{id} seed {seed} episode {k}: reset observation"
        );
        let records = episode["steps"].as_array().unwrap();
        for (t, step) in records.iter().enumerate() {
            let ctx = format!("{id} seed {seed} episode {k} (reset seed {reset_seed}) step {t}");
            let action: Vec<i64> = step[0]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_i64().unwrap())
                .collect();
            let r = match &action_space {
                Space::Discrete { .. } => env.step(ActionRef::Discrete(action[0]), &mut obs),
                Space::MultiDiscrete { .. } => {
                    env.step(ActionRef::MultiDiscrete(&action), &mut obs)
                }
                Space::Box { .. } => {
                    let a: Vec<f32> = action.iter().map(|&b| f32::from_bits(b as u32)).collect();
                    env.step(ActionRef::Continuous(&a), &mut obs)
                }
                other => unreachable!("{} is not an action space", other.describe()),
            };
            assert_eq!(bits(&obs), dense(&step[1], dim), "{ctx}: observation");
            let want = f64::from_bits(step[2].as_u64().unwrap());
            assert_eq!(
                r.reward.to_bits(),
                want.to_bits(),
                "{ctx}: reward {} vs package {want}",
                r.reward
            );
            assert_eq!(
                r.terminated,
                step[3].as_bool().unwrap(),
                "{ctx}: terminated"
            );
            assert_eq!(r.truncated, step[4].as_bool().unwrap(), "{ctx}: truncated");
            let last = t + 1 == records.len();
            assert_eq!(r.terminated || r.truncated, last, "{ctx}: episode end");
            steps += 1;
        }
    }
    steps
}

#[test]
fn every_native_id_matches_the_package_step_for_step() {
    if !popgym_available() {
        return;
    }
    let traces = package_traces(POPGYM_IDS);
    assert_eq!(traces.len(), POPGYM_IDS.len() * SEEDS.len());
    let mut report = String::new();
    for &id in POPGYM_IDS {
        let mut steps = Vec::new();
        for trace in traces.iter().filter(|t| t["id"] == id) {
            steps.push(replay(trace));
        }
        assert_eq!(steps.len(), SEEDS.len(), "{id}");
        assert!(steps.iter().all(|&s| s >= STEPS), "{id}: {steps:?}");
        report.push_str(&format!("{id}: {steps:?} steps\n"));
    }
    eprintln!("{report}");
}

/// The native id and `gymnasium:<id>` through recur's bridge: the same spaces, the same
/// first episode under the same vector seed and actions (reset with `episode_seed(seed, 0,
/// 0)`), and the same second episode's start (`episode_seed(seed, 0, 1)`).
#[test]
fn the_bridge_and_the_native_ids_are_interchangeable() {
    if !popgym_available() {
        return;
    }
    let options = GymnasiumOptions {
        imports: vec!["popgym".into()],
        workers: 1,
        ..GymnasiumOptions::default()
    };
    let registry = Registry::builtin().with_gymnasium(options);
    for &id in POPGYM_IDS {
        let seed = 11;
        let native_spec = registry.spec(id).unwrap();
        let mut bridged = registry
            .make_vec(&format!("gymnasium:{id}"), 1, seed)
            .unwrap();
        assert_eq!(
            bridged.observation_space(),
            native_spec.observation_space,
            "{id}: observation space"
        );
        assert_eq!(
            bridged.action_space(),
            native_spec.action_space,
            "{id}: action space"
        );
        let mut native = registry.make(id).unwrap();
        let mut obs = vec![0.0f32; native_spec.observation_space.dim()];
        native.reset(episode_seed(seed, 0, 0), &mut obs);
        assert_eq!(
            bits(&bridged.reset().unwrap().obs),
            bits(&obs),
            "{id}: reset"
        );
        let mut rng = popgym::numpy_rng::Generator::from_seed(99);
        for t in 0.. {
            let (r, b) = match &native_spec.action_space {
                Space::Discrete { n } => {
                    let action = [rng.integers(0, *n as i64)];
                    let r = native.step(ActionRef::Discrete(action[0]), &mut obs);
                    (r, bridged.step(VecActions::Discrete(&action)).unwrap())
                }
                Space::MultiDiscrete { nvec } => {
                    let action: Vec<i64> =
                        nvec.iter().map(|&n| rng.integers(0, n as i64)).collect();
                    let r = native.step(ActionRef::MultiDiscrete(&action), &mut obs);
                    (r, bridged.step(VecActions::Discrete(&action)).unwrap())
                }
                Space::Box { low, high } => {
                    let action: Vec<f32> = low
                        .iter()
                        .zip(high)
                        .map(|(&l, &h)| rng.uniform(l.into(), h.into()) as f32)
                        .collect();
                    let r = native.step(ActionRef::Continuous(&action), &mut obs);
                    (r, bridged.step(VecActions::Continuous(&action)).unwrap())
                }
                other => unreachable!("{} is not an action space", other.describe()),
            };
            let ctx = format!("{id} step {t}");
            assert_eq!(bits(&b.next_obs), bits(&obs), "{ctx}: observation");
            assert_eq!(b.reward[0], r.reward as f32, "{ctx}: reward");
            assert_eq!(b.terminated[0], r.terminated, "{ctx}: terminated");
            assert_eq!(b.truncated[0], r.truncated, "{ctx}: truncated");
            if r.terminated || r.truncated {
                native.reset(episode_seed(seed, 0, 1), &mut obs);
                assert_eq!(bits(&b.obs), bits(&obs), "{id}: the second episode's reset");
                break;
            }
        }
    }
}
