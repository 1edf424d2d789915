//! `recur-actor` as a real process: record a dataset, read it back, and check what crossed:
//! frame counts, checksums (decoding verifies each chunk's CRC and schema hash), sequence
//! numbers, trajectory ids, is_init at episode starts; `--check-env` and bad input.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use common::dataset::read_dataset;
use recur_tests::{binary, run_with_deadline};

#[test]
fn recorded_dataset_holds_every_chunk_intact() {
    let dir = std::env::temp_dir().join(format!("recur-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env",
        "MaskedCartPole-v1",
        "--envs",
        "4",
        "--steps",
        "25",
        "--frames",
        "1000",
        "--seed",
        "3",
        "--record",
    ])
    .arg(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "recur-actor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1000 frames") && stdout.contains("recorded 10 chunks"),
        "{stdout}"
    );

    let data = read_dataset(&dir).unwrap();
    assert_eq!(data.ignored_tail_bytes, 0);
    assert_eq!(data.meta.env, "MaskedCartPole-v1");
    assert_eq!(data.chunks.len(), 10);
    let s = &data.meta.schema;
    assert_eq!((s.envs, s.steps, s.obs_dim), (4, 25, 2));
    let mut traj_ids = HashSet::new();
    for (i, chunk) in data.chunks.iter().enumerate() {
        assert_eq!(chunk.meta.seq, i as u64, "sequence numbers without gaps");
        for env in 0..4 {
            for t in 0..25 {
                let p = env * 25 + t;
                traj_ids.insert(chunk.traj_ids[p]);
                let starts = if t == 0 {
                    i == 0 || data.chunks[i - 1].next_done[env * 25 + 24] == 1
                } else {
                    chunk.next_done[p - 1] == 1
                };
                assert_eq!(
                    chunk.is_init[p] == 1,
                    starts,
                    "is_init at chunk {i} env {env} t {t}"
                );
            }
        }
    }
    let episodes: usize = data
        .chunks
        .iter()
        .map(|c| c.next_done.iter().filter(|&&d| d == 1).count())
        .sum();
    // Every finished episode has its own trajectory id, and so has the episode still running
    // in each env (unless its env's episode ended on the very last recorded step).
    let last = data.chunks.last().unwrap();
    let running = (0..4)
        .filter(|env| last.next_done[env * 25 + 24] == 0)
        .count();
    assert_eq!(traj_ids.len(), episodes + running);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_env_passes_for_every_builtin_env_and_names_unknown_ones() {
    for env in [
        "CartPole-v1",
        "MaskedCartPole-v1",
        "Pendulum-v1",
        "RepeatPrevious-v0",
    ] {
        let mut cmd = Command::new(binary("recur-actor"));
        cmd.args(["--check-env", env]);
        let out = run_with_deadline(cmd, Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("spec check passed"),
            "{env}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args(["--check-env", "CartPole-v0"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"CartPole-v0\"") && err.contains("CartPole-v1"),
        "{err}"
    );
}

#[test]
fn recording_into_an_existing_dataset_is_refused() {
    let dir = std::env::temp_dir().join(format!("recur-record-twice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for attempt in 0..2 {
        let mut cmd = Command::new(binary("recur-actor"));
        cmd.args([
            "--env",
            "CartPole-v1",
            "--envs",
            "2",
            "--steps",
            "8",
            "--frames",
            "16",
            "--record",
        ])
        .arg(&dir);
        let out = run_with_deadline(cmd, Duration::from_secs(120));
        if attempt == 0 {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
        }
    }
    assert_eq!(
        read_dataset(&dir).unwrap().chunks.len(),
        1,
        "the first recording is intact"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `scripts/read_dataset.py` (numpy alone) reads what recur-actor recorded, including a
/// file cut short, with the same values as the Rust reader. Runs where python3 with numpy is
/// installed; CI installs numpy and sets RECUR_REQUIRE_PYTHON=1, so there it cannot be skipped.
#[test]
fn the_python_reader_agrees_with_the_rust_reader() {
    let has_numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_numpy {
        assert!(
            std::env::var_os("RECUR_REQUIRE_PYTHON").is_none(),
            "RECUR_REQUIRE_PYTHON is set but python3 with numpy is not available"
        );
        eprintln!("NOTE: python3 with numpy not found; scripts/read_dataset.py was not exercised");
        return;
    }
    let dir = std::env::temp_dir().join(format!("recur-record-py-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env",
        "Pendulum-v1",
        "--envs",
        "3",
        "--steps",
        "10",
        "--frames",
        "120",
        "--cell",
        "lstm",
        "--record",
    ])
    .arg(&dir);
    assert!(run_with_deadline(cmd, Duration::from_secs(120))
        .status
        .success());
    // Cut the last chunk short, as a crash would (before its index record was written).
    let bin = dir.join("chunks-00000.bin");
    let len = std::fs::metadata(&bin).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&bin)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let index = dir.join("index.bin");
    let index_len = std::fs::metadata(&index).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(index_len - 32)
        .unwrap();

    let rust = read_dataset(&dir).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/read_dataset.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(&dir).arg("--json");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(py["chunks"], rust.chunks.len());
    assert_eq!(py["chunks"], 3, "4 chunks recorded, the last one cut");
    assert_eq!(py["tail"], rust.ignored_tail_bytes);
    assert_eq!(py["indexed"], 3, "the index points at every complete chunk");
    let f32_sum = |f: &dyn Fn(&common::chunk::Chunk) -> &Vec<f32>| {
        rust.chunks
            .iter()
            .flat_map(|c| f(c).iter())
            .map(|&x| x as f64)
            .sum::<f64>()
    };
    let close = |key: &str, want: f64| {
        let got = py["sums"][key].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{key}: python {got}, rust {want}"
        );
    };
    close("observation", f32_sum(&|c| &c.observation));
    close("rs_h", f32_sum(&|c| &c.rs_h));
    close("rs_c", f32_sum(&|c| c.rs_c.as_ref().unwrap()));
    close("next.reward", f32_sum(&|c| &c.next_reward));
    close("sample_log_prob", f32_sum(&|c| &c.sample_log_prob));
    let traj: f64 = rust
        .chunks
        .iter()
        .flat_map(|c| c.traj_ids.iter())
        .map(|&x| x as f64)
        .sum();
    close("collector.traj_ids", traj);
    std::fs::remove_dir_all(&dir).unwrap();
}
