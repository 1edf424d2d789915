//! `recur-bench rnn` as a user runs it: a real process, JSON lines on stdout.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use recur_tests::{binary, run_with_deadline};
use serde_json::Value;

const FIELDS: [&str; 19] = [
    "bench",
    "cell",
    "backend",
    "pass",
    "batch",
    "steps",
    "reset_prob",
    "median_ms",
    "frames_per_s",
    "threads",
    "recompute",
    "gflop",
    "gflop_per_s",
    "peak_gflop_per_s",
    "peak_fraction",
    "saved_bytes",
    "device",
    "matmul_precision",
    "first_call_ms",
];

/// Runs `recur-bench ARGS` (within 300 s), asserts success and returns its JSON lines.
fn bench_rows(args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(args);
    let out = run_with_deadline(cmd, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "recur-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn quick_rnn_bench_prints_a_row_for_every_cell_backend_and_pass() {
    // The anchor workload's shape scaled down so that a debug build finishes in seconds.
    let all = bench_rows(&[
        "rnn",
        "--quick",
        "--batch",
        "4",
        "--input",
        "8",
        "--hidden",
        "16",
        "--steps",
        "12",
        "--threads",
        "1",
        "--recompute",
        "none,full",
    ]);
    // First the practical-peak GEMM row, then the rnn rows.
    let gemm = &all[0];
    assert_eq!(gemm["bench"], "gemm", "{gemm}");
    assert_eq!(gemm["n"], 1024);
    assert_eq!(gemm["threads"], 1);
    let peak = gemm["gflop_per_s"].as_f64().unwrap();
    assert!(
        peak > 0.0 && gemm["median_ms"].as_f64().unwrap() > 0.0,
        "{gemm}"
    );
    let rows = &all[1..];
    let mut seen = BTreeSet::new();
    for row in rows {
        for f in FIELDS {
            assert!(row.get(f).is_some(), "row lacks `{f}`: {row}");
        }
        assert_eq!(row["bench"], "rnn");
        assert_eq!(row["batch"], 4);
        assert_eq!(row["steps"], 12);
        let fps = row["frames_per_s"].as_f64().unwrap();
        let ms = row["median_ms"].as_f64().unwrap();
        assert!(fps > 0.0 && ms > 0.0, "{row}");
        let first = row["first_call_ms"].as_f64().unwrap();
        assert!(first > 0.0 && first.is_finite(), "{row}");
        // frames/s is derived from the median: batch * steps / median.
        assert!((fps * ms / 1e3 - 48.0).abs() < 1e-6 * 48.0, "{row}");
        // GEMM FLOPs: forward 2 B T (in G H + H G H); backward twice that; recompute once more.
        let g = if row["cell"] == "lstm" { 4.0 } else { 3.0 };
        let forward = 2.0 * 48.0 * (8.0 * g * 16.0 + 16.0 * g * 16.0) / 1e9;
        let factor = match (
            row["pass"].as_str().unwrap(),
            row["recompute"].as_str().unwrap(),
        ) {
            ("fwd", "none") => 1.0,
            ("fwdbwd", "none") => 3.0,
            ("fwdbwd", "full") => 4.0,
            other => panic!("unexpected pass/recompute {other:?}: {row}"),
        };
        let gflop = row["gflop"].as_f64().unwrap();
        assert!((gflop - forward * factor).abs() < 1e-12, "{row}");
        let rate = row["gflop_per_s"].as_f64().unwrap();
        assert!(
            (rate * ms / 1e3 - gflop).abs() < 1e-9 * gflop.max(1.0),
            "{row}"
        );
        // Each row's peak is the GEMM measured around it, not the gemm row itself.
        let row_peak = row["peak_gflop_per_s"].as_f64().unwrap();
        assert!(row_peak > 0.0 && row_peak.is_finite(), "{row}");
        let fraction = row["peak_fraction"].as_f64().unwrap();
        assert!((fraction - rate / row_peak).abs() < 1e-12, "{row}");
        // Saved bytes: known for fused fwdbwd rows only.
        let fused_fwdbwd = row["backend"] == "fused" && row["pass"] == "fwdbwd";
        assert_eq!(row["saved_bytes"].is_u64(), fused_fwdbwd, "{row}");
        seen.insert((
            row["cell"].as_str().unwrap().to_string(),
            row["backend"].as_str().unwrap().to_string(),
            row["pass"].as_str().unwrap().to_string(),
            row["recompute"].as_str().unwrap().to_string(),
        ));
    }
    let mut want = BTreeSet::new();
    for cell in ["gru", "lstm"] {
        for backend in ["pad", "scan", "fused"] {
            for pass in ["fwd", "fwdbwd"] {
                want.insert((cell.into(), backend.into(), pass.into(), "none".into()));
            }
        }
        want.insert((cell.into(), "fused".into(), "fwdbwd".into(), "full".into()));
    }
    assert_eq!(seen, want);
    // Two p values per (cell, backend, pass, recompute).
    assert_eq!(rows.len(), 2 * want.len());
    // recompute = "full" keeps fewer bytes: LSTM h, c vs h, c + 4 gates (B T H floats each).
    let saved = |cell: &str, recompute: &str| {
        rows.iter()
            .find(|r| {
                r["cell"] == cell
                    && r["backend"] == "fused"
                    && r["recompute"] == recompute
                    && r["pass"] == "fwdbwd"
            })
            .unwrap()["saved_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(saved("lstm", "none"), 4 * 48 * 16 * 6);
    assert_eq!(saved("lstm", "full"), 4 * 48 * 16 * 2);
    assert_eq!(saved("gru", "none"), 4 * 48 * 16 * 5);
    assert_eq!(saved("gru", "full"), 4 * 48 * 16);
}

#[test]
fn bad_options_are_refused_with_the_value_named() {
    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(["rnn", "--backends", "fastest"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fastest") && err.contains("backend"), "{err}");

    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(["rnn", "--reset-probs", "1.5"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.5"));

    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(["rnn", "--recompute", "partial"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("partial") && err.contains("recompute"),
        "{err}"
    );
}

#[test]
fn quick_transport_bench_prints_bandwidth_and_weight_rows() {
    let rows = bench_rows(&["transport", "--quick"]);
    let bandwidth: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "bandwidth").collect();
    let weights: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "weights").collect();
    assert!(!bandwidth.is_empty() && !weights.is_empty(), "{rows:?}");
    for r in bandwidth {
        for f in ["chunk_bytes", "producers", "gb_per_s", "memcpy_gb_per_s"] {
            assert!(r[f].as_f64().is_some_and(|v| v > 0.0), "`{f}` in {r}");
        }
    }
    for r in weights {
        for f in ["weight_bytes", "median_us"] {
            assert!(r[f].as_f64().is_some_and(|v| v > 0.0), "`{f}` in {r}");
        }
    }
    // The loopback-TCP rows (remote actors) beside them, compared with the ring row of the run.
    let tcp: Vec<&Value> = rows
        .iter()
        .filter(|r| r["kind"] == "tcp_bandwidth")
        .collect();
    let tcp_weights: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "tcp_weights").collect();
    assert!(!tcp.is_empty() && !tcp_weights.is_empty(), "{rows:?}");
    for r in tcp {
        let (gb, shm, ratio) = (
            r["gb_per_s"].as_f64().unwrap(),
            r["shm_gb_per_s"].as_f64().unwrap(),
            r["ratio_to_shm"].as_f64().unwrap(),
        );
        assert!(gb > 0.0 && shm > 0.0, "{r}");
        assert!((ratio - gb / shm).abs() < 1e-9 * ratio.max(1.0), "{r}");
    }
    for r in tcp_weights {
        assert!(r["median_us"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }
}

#[test]
fn quick_learner_bench_prints_a_row_per_algo_with_the_contract_fields() {
    let rows = bench_rows(&[
        "learner",
        "--quick",
        "--threads",
        "1",
        "--backends",
        "pad,scan",
    ]);
    let algos: BTreeSet<&str> = rows.iter().map(|r| r["algo"].as_str().unwrap()).collect();
    assert_eq!(algos, BTreeSet::from(["bc", "dqn", "ppo"]), "{rows:?}");
    // Every algo once per backend.
    let pairs: BTreeSet<(&str, &str)> = rows
        .iter()
        .map(|r| (r["algo"].as_str().unwrap(), r["backend"].as_str().unwrap()))
        .collect();
    assert_eq!((rows.len(), pairs.len()), (6, 6), "{rows:?}");
    for r in &rows {
        assert_eq!(r["bench"], "learner");
        assert_eq!(r["slice_len"], 16);
        assert_eq!(r["batch"], 8);
        let steps = r["steps_per_s"].as_f64().unwrap();
        let ms = r["median_ms"].as_f64().unwrap();
        assert!(steps > 0.0 && ms > 0.0, "{r}");
        // steps_per_s is the trained steps of one gradient step over its median time.
        assert!(
            (steps - 16.0 * 8.0 / (ms / 1e3)).abs() < 1e-6 * steps,
            "{r}"
        );
    }

    // A burn-in that leaves nothing to learn on is refused, naming both options.
    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(["learner", "--slice-len", "8", "--burn-in", "8"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--burn-in 8") && err.contains("--slice-len"),
        "{err}"
    );
}

#[test]
fn ppo_rows_name_their_update_path_and_train_runs_the_whole_loop_on_both() {
    // On the fused backend, PPO gives one row per update path.
    let rows = bench_rows(&[
        "learner",
        "--quick",
        "--threads",
        "1",
        "--algo",
        "ppo",
        "--backends",
        "fused",
    ]);
    let updates: BTreeSet<&str> = rows.iter().map(|r| r["update"].as_str().unwrap()).collect();
    assert_eq!(updates, BTreeSet::from(["burn", "fused"]), "{rows:?}");

    // The whole loop as learner and actor processes: a row per run, then per path the median
    // and its ratio to burn's.
    binary("recur-learner");
    binary("recur-actor");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/masked_cartpole.toml");
    let rows = bench_rows(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--seed",
        "0",
        "--frames",
        "1024",
    ]);
    let (runs, summaries): (Vec<&Value>, Vec<&Value>) =
        rows.iter().partition(|r| r["summary"].is_null());
    assert_eq!((runs.len(), summaries.len()), (2, 2), "{rows:?}");
    for r in &runs {
        assert_eq!(r["bench"], "train");
        assert_eq!(r["env"], "MaskedCartPole-v1");
        assert!(r["frames"].as_u64().unwrap() >= 1024, "{r}");
        let rate = r["frames_per_s"].as_f64().unwrap();
        let expected = r["frames"].as_f64().unwrap() / r["seconds"].as_f64().unwrap();
        assert!(rate > 0.0 && (rate - expected).abs() < 1e-6 * rate, "{r}");
        // The learner's profile: the update's phases of the path that ran.
        let phase = match r["update"].as_str().unwrap() {
            "fused" => "fused.backward",
            _ => "burn.backward_step",
        };
        assert!(r["profile"][phase].as_f64().unwrap() > 0.0, "{r}");
    }
    let burn = summaries.iter().find(|r| r["update"] == "burn").unwrap();
    let fused = summaries.iter().find(|r| r["update"] == "fused").unwrap();
    assert_eq!(burn["vs_burn"].as_f64(), Some(1.0));
    let ratio = fused["median_frames_per_s"].as_f64().unwrap()
        / burn["median_frames_per_s"].as_f64().unwrap();
    assert!(
        (fused["vs_burn"].as_f64().unwrap() - ratio).abs() < 1e-9,
        "{fused}"
    );
}

#[test]
fn encoder_bench_prints_a_row_per_preset_pass_and_shape() {
    // --no-torch: this test needs no Python; the torch side is the same rows' other half.
    let rows = bench_rows(&[
        "encoder",
        "--no-torch",
        "--presets",
        "minigrid,nature",
        "--actor-frames",
        "3",
        "--learner-batches",
        "2x2",
        "--rounds",
        "1",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
    ]);
    let got: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["bench"], "encoder");
            for field in ["recur_ms", "frames_per_s", "fwd_gflop"] {
                assert!(r[field].as_f64().unwrap() > 0.0, "{field} in {r}");
            }
            for field in ["torch_ms", "vs_torch", "torch_format"] {
                assert!(r[field].is_null(), "{field} without torch in {r}");
            }
            assert!(r["cpu"].as_str().is_some_and(|c| !c.is_empty()), "{r}");
            assert_eq!(r["threads"], 1);
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("preset"), s("pass"), s("shape"))
        })
        .collect();
    let want = [
        ("minigrid", "fwd", "3"),
        ("minigrid", "fwdbwd", "2x2"),
        ("nature", "fwd", "3"),
        ("nature", "fwdbwd", "2x2"),
    ];
    assert_eq!(
        got,
        want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
    assert_eq!(rows[1]["frames"], 4);

    let mut cmd = Command::new(binary("recur-bench"));
    cmd.args(["encoder", "--learner-batches", "8*32"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--learner-batches") && err.contains("8*32"),
        "{err}"
    );
}
