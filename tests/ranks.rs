//! Learner ranks across real processes. Without the `mpi` feature: a learner launched as one
//! of several ranks refuses to start. With it (`cargo test -p recur-tests --features mpi --test
//! ranks`, Open MPI's `mpirun`): two ranks train one run (one summary, the same final weights on
//! both, distinct actors), and a group that cannot form one run is refused naming why.

use std::process::{Command, Output};
use std::time::Duration;

use recur_tests::{binary, run_with_deadline, temp_dir};

/// A hang fails the test instead of CI; the runs take seconds.
const DEADLINE: Duration = Duration::from_secs(300);

fn text(out: &Output) -> (String, String) {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (s(&out.stdout), s(&out.stderr))
}

/// `recur-learner train ARGS --quiet` on MaskedCartPole-v1 from the repository root.
fn train_args(run_dir: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "train",
        "--config",
        "configs/masked_cartpole.toml",
        "--run-dir",
        run_dir,
        "--quiet",
    ];
    args.extend(extra);
    args.into_iter().map(String::from).collect()
}

#[cfg(not(feature = "mpi"))]
#[test]
fn a_learner_launched_as_one_of_several_ranks_without_mpi_refuses_to_start() {
    binary("recur-actor");
    let dir = temp_dir("ranks-not-built").join("run");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(train_args(&dir.to_string_lossy(), &["--frames", "1024"]))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("OMPI_COMM_WORLD_SIZE", "2");
    let out = run_with_deadline(cmd, DEADLINE);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "started as one of 2 ranks: {stderr}");
    assert!(
        stderr.contains("OMPI_COMM_WORLD_SIZE=2") && stderr.contains("--features mpi"),
        "{stderr}"
    );
    assert!(!dir.exists(), "a refused rank wrote its run directory");
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    /// `mpirun -n N` over `ranks`, each rank's `recur-learner` arguments (MPMD: `A : B`), from
    /// the repository root.
    fn mpirun_command(ranks: &[Vec<String>]) -> Command {
        binary("recur-actor");
        let learner = binary("recur-learner");
        let mut cmd = Command::new("mpirun");
        // CI runs as root; two ranks and their actors on two cores.
        cmd.args(["--allow-run-as-root", "--oversubscribe"]);
        for (i, args) in ranks.iter().enumerate() {
            if i > 0 {
                cmd.arg(":");
            }
            cmd.args(["-n", "1"]).arg(&learner).args(args);
        }
        cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .env("RUST_LOG", "info");
        cmd
    }

    /// [`mpirun_command`] run to its end.
    fn mpirun(ranks: &[Vec<String>]) -> Output {
        run_with_deadline(mpirun_command(ranks), DEADLINE)
    }

    #[test]
    fn two_ranks_train_one_run_to_the_same_weights() {
        let dir = temp_dir("ranks-train");
        let dir_s = dir.to_string_lossy().into_owned();
        let args = train_args(&dir_s, &["--frames", "8192"]);
        let out = mpirun(&[args.clone(), args]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        // One run: rank 0's summary alone, on stdout and in the run directory.
        let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(lines.len(), 1, "one summary line: {stdout}");
        let summary: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(summary["world_size"], 2, "{summary}");
        assert!(summary["frames"].as_u64().unwrap() >= 8192, "{summary}");
        let updates = summary["updates"].as_u64().unwrap();
        assert!(
            updates >= 10,
            "the weight check runs every 10 updates: {summary}"
        );
        let on_disk: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(on_disk["world_size"], 2);
        assert!(dir.join("checkpoint").is_dir() && dir.join("metrics.csv").is_file());
        // The same weights on both ranks at the end.
        let finals: Vec<(&str, &str)> = (stderr.lines())
            .filter_map(|l| l.split_once(": final weights "))
            .map(|(who, hash)| (who.rsplit("INFO").next().unwrap_or(who), hash.trim()))
            .collect();
        assert_eq!(finals.len(), 2, "{stderr}");
        assert_eq!(
            finals[0].1, finals[1].1,
            "the ranks' final weights differ: {finals:?}"
        );
        // Distinct actors: rank 0's is actor 0, rank 1's actor 1 (run.actors = 2 over 2).
        for id in ["actor 0/0 started", "actor 1/0 started"] {
            assert_eq!(stderr.matches(id).count(), 1, "{id}: {stderr}");
        }
        // Rank 1 ran in a scratch directory, removed at the end.
        for line in stderr.lines().filter(|l| l.contains("run directory ")) {
            let path = line.split("run directory ").nth(1).unwrap();
            let path = path.trim_end_matches(" (locked)");
            if path != dir_s {
                assert!(!std::path::Path::new(path).exists(), "{path} left behind");
            }
        }
    }

    #[test]
    fn a_hung_rank_ends_the_group_within_the_timeout_and_the_run_resumes() {
        let dir = temp_dir("ranks-hung");
        let dir_s = dir.to_string_lossy().into_owned();
        let args = train_args(&dir_s, &["--set", "run.checkpoint_every=2"]);
        let mut cmd = mpirun_command(&[args.clone(), args]);
        cmd.env("RECUR_RANK_TIMEOUT_S", "5");
        let run = recur_tests::Watched::spawn(cmd);
        let line = run.wait_for("rank 1's pid", DEADLINE, |l| {
            l.contains("rank 1 of 2 (pid ")
        });
        let pid: i32 = line
            .split("(pid ")
            .nth(1)
            .unwrap()
            .trim_end_matches(')')
            .parse()
            .unwrap();
        // A checkpoint first (every 2 updates), then rank 1 hangs.
        let checkpoint = dir.join("checkpoint");
        let start = std::time::Instant::now();
        while !checkpoint.is_dir() {
            assert!(start.elapsed() < DEADLINE, "no checkpoint");
            std::thread::sleep(Duration::from_millis(50));
        }
        let stopped = std::time::Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGSTOP).unwrap();
        let (ok, _, lines) = run.finish(DEADLINE);
        let waited = stopped.elapsed();
        let stderr = lines.join("\n");
        assert!(!ok, "the group went on without rank 1: {stderr}");
        assert!(
            stderr.contains("rank 0 of 2: waited 5 s in an all-reduce for the other ranks"),
            "{stderr}"
        );
        // The bound: the timeout, plus the launcher ending the rest.
        assert!(waited < Duration::from_secs(30), "{waited:?}");
        // The last checkpoint is valid: the group resumes from it.
        let resume = vec![
            "train".to_string(),
            "--resume".into(),
            dir_s.clone(),
            "--frames".into(),
            "8192".into(),
            "--quiet".into(),
        ];
        let out = mpirun(&[resume.clone(), resume]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("resum"), "{stderr}");
        assert!(stdout.contains("\"world_size\":2"), "{stdout}");
    }

    #[test]
    fn sigint_to_mpirun_stops_every_rank_after_the_same_update() {
        let dir = temp_dir("ranks-sigint");
        let args = train_args(&dir.to_string_lossy(), &["--frames", "100000000"]);
        let run = recur_tests::Watched::spawn(mpirun_command(&[args.clone(), args]));
        run.wait_for("update 20", DEADLINE, |l| l.contains("update 20:"));
        let pid = nix::unistd::Pid::from_raw(run.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
        let (_, _, lines) = run.finish(DEADLINE);
        let stderr = lines.join("\n");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["stopped_by_request"], true, "{summary}");
        let finals: Vec<&str> = (stderr.lines())
            .filter_map(|l| l.split_once(": final weights ").map(|(_, h)| h.trim()))
            .collect();
        assert_eq!(finals.len(), 2, "{stderr}");
        assert_eq!(finals[0], finals[1], "{stderr}");
    }

    #[test]
    fn a_batch_that_does_not_divide_over_the_ranks_is_refused_naming_the_key() {
        let dir = temp_dir("ranks-divide").join("run");
        let args = train_args(&dir.to_string_lossy(), &["--actors", "3"]);
        let out = mpirun(&[args.clone(), args]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success());
        assert!(
            stderr.contains("run.actors = 3 does not divide over 2 learner ranks"),
            "{stderr}"
        );
    }

    #[test]
    fn ranks_with_different_configs_are_refused_naming_the_rank() {
        let dir = temp_dir("ranks-config").join("run");
        let dir_s = dir.to_string_lossy().into_owned();
        let rank0 = train_args(&dir_s, &[]);
        let rank1 = train_args(&dir_s, &["--set", "ppo.lr=0.001"]);
        let out = mpirun(&[rank0, rank1]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success());
        assert!(
            stderr.contains("rank 1 of 2: its resolved config differs from rank 0's"),
            "{stderr}"
        );
    }

    // Replay on ranks: the group against one process given the same minibatches.

    /// The PPO replay config of the equality tests: a recording's architecture (LSTM-16,
    /// stored states), 20 updates of 2 epochs, 4 minibatches each, observation
    /// normalization on (its statistics are the group's), 4 chunks per update.
    const PPO_REPLAY: &str = r#"
[replay]
algo = "ppo"
updates = 20
seed = 3
eval_every = 0
eval_episodes = 1
checkpoint_every = 1000
tensorboard = false

[policy]
cell = "lstm"
hidden_size = 16
num_layers = 1
encoder = [16]
backend = "auto"
obs_norm = true

[ppo]
frames_per_update = 1024
epochs = 2
slice_len = 16
num_slices = 16
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
pack_slices = true
"#;

    /// The BC replay config of the equality tests: 25 gradient steps of 16 slices.
    const BC_REPLAY: &str = r#"
[replay]
algo = "bc"
updates = 25
seed = 3
eval_every = 0
eval_episodes = 1
checkpoint_every = 1000
tensorboard = false

[policy]
cell = "lstm"
hidden_size = 16
num_layers = 1
encoder = [16]
backend = "auto"

[bc]
slice_len = 8
burn_in = 2
num_slices = 16
lr = 1e-3
max_grad_norm = 1.0
initial_state = "zeros"
"#;

    /// The relative tolerance of the equality: per tensor, the largest difference over the
    /// tensor's largest magnitude.
    const EQUAL: f64 = 1e-5;

    /// Records a MaskedCartPole-v1 dataset (16 chunks of 8 envs x 32 steps, an LSTM-16
    /// policy sampling its actions) under `root`, with `config` beside it; returns both.
    fn recorded(root: &std::path::Path, config: &str) -> (String, String) {
        let data = root.join("data");
        let mut cmd = Command::new(binary("recur-actor"));
        cmd.args(["--env", "MaskedCartPole-v1", "--envs", "8", "--steps", "32"])
            .args(["--frames", "4096", "--cell", "lstm", "--hidden", "16"])
            .args(["--encoder", "16", "--seed", "5", "--record"])
            .arg(&data);
        let out = run_with_deadline(cmd, DEADLINE);
        assert!(out.status.success(), "{}", text(&out).1);
        let file = root.join("replay.toml");
        std::fs::write(&file, config).unwrap();
        let s = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        (s(data), s(file))
    }

    /// `replay` arguments on `data` with `config` into `run_dir`, and `extra`.
    fn replay_args(data: &str, config: &str, run_dir: &str, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "replay",
            "--dataset",
            data,
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--quiet",
        ];
        args.extend(extra);
        args.into_iter().map(String::from).collect()
    }

    /// The run's final weights, per tensor: `recur-learner export` of its checkpoint, read
    /// out of `policy.safetensors` (an 8-byte header length, a JSON header, then the f32s).
    fn weights(run_dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<f32>> {
        let out_dir = run_dir.with_extension("export");
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.arg("export")
            .arg("--checkpoint")
            .arg(run_dir)
            .arg("--out")
            .arg(&out_dir);
        let out = run_with_deadline(cmd, DEADLINE);
        assert!(out.status.success(), "{}", text(&out).1);
        let bytes = std::fs::read(out_dir.join("policy.safetensors")).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        let data = &bytes[8 + n..];
        let mut tensors = std::collections::BTreeMap::new();
        for (name, t) in header.as_object().unwrap() {
            if name == "__metadata__" {
                continue;
            }
            assert_eq!(t["dtype"], "F32", "{name}");
            let at = |i: usize| t["data_offsets"][i].as_u64().unwrap() as usize;
            let values = (data[at(0)..at(1)].chunks_exact(4))
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            tensors.insert(name.clone(), values);
        }
        assert!(tensors.len() > 4, "{tensors:?}");
        tensors
    }

    /// The worst relative difference of `a` from `b` over their tensors (the tensor's largest
    /// difference over its largest magnitude in `b`), and that tensor's name.
    fn worst(
        a: &std::collections::BTreeMap<String, Vec<f32>>,
        b: &std::collections::BTreeMap<String, Vec<f32>>,
    ) -> (f64, String) {
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        let mut worst = (0.0f64, String::new());
        for (name, x) in a {
            let y = &b[name];
            assert_eq!(x.len(), y.len(), "{name}");
            let scale = y.iter().fold(0.0f64, |m, &v| m.max(v.abs() as f64));
            let diff = (x.iter().zip(y)).fold(0.0f64, |m, (&p, &q)| m.max((p - q).abs() as f64));
            let rel = if scale > 0.0 { diff / scale } else { diff };
            if rel > worst.0 {
                worst = (rel, name.clone());
            }
        }
        worst
    }

    /// One process trained as `n` ranks would (`--as-ranks n`): its final weights.
    fn one_process_as(n: usize, data: &str, config: &str, root: &std::path::Path) -> Weights {
        let dir = root.join(format!("as-{n}"));
        let n_s = n.to_string();
        let args = replay_args(data, config, &dir.to_string_lossy(), &["--as-ranks", &n_s]);
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let out = run_with_deadline(cmd, DEADLINE);
        assert!(out.status.success(), "{}", text(&out).1);
        weights(&dir)
    }

    type Weights = std::collections::BTreeMap<String, Vec<f32>>;

    /// `mpirun -n n replay` (with `fault` as [`FAULT_VAR`]'s value): its final weights, after
    /// checking that the group was one run (rank 0's summary alone, its world size, the same
    /// final weights logged by every rank).
    fn ranks_replay(
        n: usize,
        data: &str,
        config: &str,
        root: &std::path::Path,
        fault: Option<&str>,
    ) -> Weights {
        let dir = root.join(format!(
            "ranks-{n}-{}",
            fault.unwrap_or("none").replace(':', "-")
        ));
        let args = replay_args(data, config, &dir.to_string_lossy(), &[]);
        let mut cmd = mpirun_command(&vec![args; n]);
        if let Some(fault) = fault {
            cmd.env("RECUR_TEST_RANK_GRADIENT", fault);
        }
        let out = run_with_deadline(cmd, DEADLINE);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(lines.len(), 1, "one summary line: {stdout}");
        let summary: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(summary["world_size"], n, "{summary}");
        assert!(summary["updates"].as_u64().unwrap() >= 20, "{summary}");
        let finals: Vec<&str> = (stderr.lines())
            .filter_map(|l| l.split_once(": final weights ").map(|(_, h)| h.trim()))
            .collect();
        assert_eq!(finals.len(), n, "{stderr}");
        assert!(finals.iter().all(|h| *h == finals[0]), "{finals:?}");
        weights(&dir)
    }

    /// PPO or BC replay on 2 and on 4 ranks ends at the weights of one process trained on the
    /// same global minibatches (`--as-ranks`), within [`EQUAL`].
    fn replay_on_ranks_equals_one_process(tag: &str, config: &str) {
        let root = temp_dir(tag);
        let (data, config) = recorded(&root, config);
        for n in [2, 4] {
            let one = one_process_as(n, &data, &config, &root);
            let group = ranks_replay(n, &data, &config, &root, None);
            let (rel, name) = worst(&group, &one);
            assert!(
                rel <= EQUAL,
                "{n} ranks: {name} differs from one process's by {rel:e} (relative)"
            );
        }
    }

    #[test]
    fn ppo_replay_on_2_and_4_ranks_equals_one_process_on_their_minibatches() {
        replay_on_ranks_equals_one_process("ranks-replay-ppo", PPO_REPLAY);
    }

    #[test]
    fn bc_replay_on_2_and_4_ranks_equals_one_process_on_their_minibatches() {
        replay_on_ranks_equals_one_process("ranks-replay-bc", BC_REPLAY);
    }

    /// The equality catches a rank's gradient dropped or counted twice: with rank 1's
    /// gradient zeroed or doubled before the all-reduce, the group's weights are far from one
    /// process's (and the weight-hash check still passes: every rank steps alike).
    #[test]
    fn a_rank_gradient_dropped_or_counted_twice_breaks_the_replay_equality() {
        for (tag, config) in [("ppo", PPO_REPLAY), ("bc", BC_REPLAY)] {
            let root = temp_dir(&format!("ranks-replay-fault-{tag}"));
            let (data, config) = recorded(&root, config);
            let one = one_process_as(2, &data, &config, &root);
            for fault in ["1:zero", "1:double"] {
                let group = ranks_replay(2, &data, &config, &root, Some(fault));
                let (rel, name) = worst(&group, &one);
                assert!(
                    rel > 100.0 * EQUAL,
                    "{tag}, rank 1's gradient {fault}: the weights still match one process's \
                     ({name} within {rel:e})"
                );
            }
        }
    }

    #[test]
    fn dqn_replay_on_ranks_is_refused_naming_the_setting() {
        let root = temp_dir("ranks-replay-dqn");
        let (data, _) = recorded(&root, "");
        let dir = root.join("run");
        let args = vec![
            "replay".to_string(),
            "--dataset".into(),
            data,
            "--algo".into(),
            "dqn".into(),
            "--run-dir".into(),
            dir.to_string_lossy().into_owned(),
            "--quiet".into(),
        ];
        let out = mpirun(&[args.clone(), args]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success());
        assert!(
            stderr.contains("replay.algo = \"dqn\" on 2 learner ranks"),
            "{stderr}"
        );
    }
}
