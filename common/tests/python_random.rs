//! recur's ports of CPython's `random` and numpy's legacy `np.random` Mersenne Twisters
//! (`common::envs::popgym::mt19937`, which the native labyrinths draw their mazes from), against
//! Python and numpy themselves: the seeded state, `getrandbits`, `randrange`, `choice` and
//! `np.random.shuffle` of lists, draw for draw.
//!
//! Without Python and numpy they pass without running and print a `SKIPPED <test>: <why>` line,
//! unless `RECUR_REQUIRE_PYTHON` is set (CI sets it), which makes them fail.

use std::process::{Command, Stdio};

use common::envs::popgym::mt19937::{LegacyRandomState, PyRandom};
use serde_json::Value;

const SEEDS: [u64; 6] = [0, 1, 42, 12345, 4_294_967_295, (1 << 40) + 7];

const SCRIPT: &str = r#"
import json, random, sys
import numpy as np

out = []
for seed in [int(s) for s in sys.argv[1:]]:
    d = {"seed": seed}
    r = random.Random(seed)
    d["py_key"] = list(r.getstate()[1][:624])
    d["bits"] = [[k, r.getrandbits(k)] for k in [1, 2, 3, 5, 8, 13, 31, 32] for _ in range(200)]
    d["randrange"] = [[a, b, s, r.randrange(a, b, s)]
                      for (a, b, s) in [(1, 11, 2), (1, 19, 2), (0, 4, 1), (0, 3, 1), (5, 1000, 7)]
                      for _ in range(300)]
    d["choice"] = [r.choice(list(range(n))) for n in [1, 2, 3, 4, 7] for _ in range(300)]
    if seed < 2**32:
        rs = np.random.RandomState(seed)
        d["np_key"] = [int(v) for v in rs.get_state()[1]]
        np.random.seed(seed)
        shuffles = []
        for n in [0, 1, 2, 3, 4, 5, 17] * 60:
            x = list(range(n))
            np.random.shuffle(x)
            shuffles.append(x)
        d["shuffles"] = shuffles
    out.append(d)
print(json.dumps(out))
"#;

fn python() -> String {
    std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Python's draws, or `None` (with a `SKIPPED` line) when Python or numpy is missing.
fn python_draws() -> Option<Vec<Value>> {
    let seeds: Vec<String> = SEEDS.iter().map(u64::to_string).collect();
    let output = Command::new(python())
        .arg("-c")
        .arg(SCRIPT)
        .args(&seeds)
        .stderr(Stdio::inherit())
        .output();
    match output {
        Ok(o) if o.status.success() => {
            Some(serde_json::from_slice(&o.stdout).expect("the script prints JSON"))
        }
        other => {
            assert!(
                std::env::var_os("RECUR_REQUIRE_PYTHON").is_none(),
                "RECUR_REQUIRE_PYTHON=1 but {} with numpy did not run: {other:?}",
                python()
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED python_random: {} with numpy is not available",
                python()
            );
            None
        }
    }
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn cpython_random_and_numpy_legacy_shuffle_match_draw_for_draw() {
    let Some(all) = python_draws() else { return };
    assert_eq!(all.len(), SEEDS.len());
    for d in &all {
        let seed = d["seed"].as_u64().unwrap();
        let mut r = PyRandom::seeded(seed);
        let key: Vec<u64> = r.key().iter().map(|&w| u64::from(w)).collect();
        assert_eq!(key, u64s(&d["py_key"]), "seed {seed}: random.seed state");
        for (i, kv) in d["bits"].as_array().unwrap().iter().enumerate() {
            let (k, want) = (kv[0].as_u64().unwrap() as u32, kv[1].as_u64().unwrap());
            assert_eq!(
                u64::from(r.getrandbits(k)),
                want,
                "seed {seed}: getrandbits #{i} ({k})"
            );
        }
        for (i, row) in d["randrange"].as_array().unwrap().iter().enumerate() {
            let v = u64s(row);
            let got = r.randrange(v[0] as usize, v[1] as usize, v[2] as usize);
            assert_eq!(got as u64, v[3], "seed {seed}: randrange #{i} {v:?}");
        }
        let lens = [1usize, 2, 3, 4, 7];
        for (i, want) in d["choice"].as_array().unwrap().iter().enumerate() {
            let seq: Vec<u64> = (0..lens[i / 300] as u64).collect();
            assert_eq!(
                r.choice(&seq),
                want.as_u64().unwrap(),
                "seed {seed}: choice #{i}"
            );
        }
        if seed >> 32 != 0 {
            continue;
        }
        let mut np = LegacyRandomState::seeded(seed);
        let key: Vec<u64> = np.key().iter().map(|&w| u64::from(w)).collect();
        assert_eq!(key, u64s(&d["np_key"]), "seed {seed}: np.random.seed state");
        for (i, want) in d["shuffles"].as_array().unwrap().iter().enumerate() {
            let want = u64s(want);
            let mut x: Vec<u64> = (0..want.len() as u64).collect();
            np.shuffle(&mut x);
            assert_eq!(x, want, "seed {seed}: shuffle #{i}");
        }
    }
}
