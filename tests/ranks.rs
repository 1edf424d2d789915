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
            .env("RUST_LOG", "info")
            // A session directory of its own: mpiruns started at once race to create the
            // shared default one (/tmp/ompi.<host>.<uid>) and one of them fails.
            .env("OMPI_MCA_orte_tmpdir_base", temp_dir("ompi"))
            .env(PMIX_GDS.0, PMIX_GDS.1);
        cmd
    }

    /// PMIx's store of the job's data in a hash table of each process, not in shared-memory
    /// segments (its `ds12`/`ds21` default): under a loaded machine and several mpiruns at once,
    /// a segment's creation failed with "PMIX ERROR: OUT-OF-RESOURCE ... dstore_segment.c" and
    /// the rank's MPI_Init aborted.
    const PMIX_GDS: (&str, &str) = ("PMIX_MCA_gds", "hash");

    /// What each rank logged it took of the run (`rank k of N: took F frames and E episodes of
    /// the run's`): its frames and episodes, in log order.
    fn took(stderr: &str) -> Vec<(u64, u64)> {
        (stderr.lines())
            .filter_map(|l| l.split_once(": took ")?.1.split_once(" of the run's"))
            .map(|(counts, _)| {
                let words: Vec<&str> = counts.split(' ').collect();
                (words[0].parse().unwrap(), words[3].parse().unwrap())
            })
            .collect()
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
        let on_disk = recur_tests::remote_support::summary(&dir);
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
        // metrics.csv (rank 0's) counts every rank's frames and episodes: its last row holds
        // the sums of what each rank says it took.
        let took = took(&stderr);
        assert_eq!(took.len(), 2, "{stderr}");
        assert!(took.iter().all(|&(f, e)| f > 0 && e > 0), "{took:?}");
        let metrics = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
        let header: Vec<&str> = metrics.lines().next().unwrap().split(',').collect();
        let last: Vec<&str> = metrics.lines().last().unwrap().split(',').collect();
        let column = |name: &str| -> u64 {
            let i = header.iter().position(|h| *h == name).unwrap();
            last[i].parse().unwrap()
        };
        assert_eq!(
            column("frames"),
            took[0].0 + took[1].0,
            "{took:?}\n{metrics}"
        );
        assert_eq!(
            column("episodes"),
            took[0].1 + took[1].1,
            "{took:?}\n{metrics}"
        );
        assert_eq!(summary["frames"], column("frames"));
        assert_eq!(summary["episodes"], column("episodes"));
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

    /// Remote actors on a group: each rank listens on a port of its own with rank 0's token and
    /// TLS certificate (the run's one token file pins it on every rank), takes the remote actor
    /// ids equal to its rank modulo 2 and refuses the others naming the rank to dial. With no
    /// local actors the group trains from the remote ones alone, so every rank was fed.
    #[test]
    fn remote_actors_feed_every_rank_over_tls() {
        use recur_tests::remote_support::actor;
        let dir = temp_dir("ranks-remote");
        let run_dir = dir.join("run");
        let run_s = run_dir.to_string_lossy().into_owned();
        let listen = ["--actors", "0", "--listen", "127.0.0.1:0", "--tls"];
        let args = train_args(&run_s, &[&["--frames", "4096"][..], &listen].concat());
        let run = recur_tests::Watched::spawn(mpirun_command(&[args.clone(), args]));
        let address = |k: usize| -> String {
            let marker = format!("learner rank {k} of 2 at tcp://");
            let line = run.wait_for(&marker, DEADLINE, |l| l.contains(&marker));
            let bound = line.split(&marker).nth(1).unwrap();
            format!("tcp://{}", bound.split_whitespace().next().unwrap())
        };
        let (rank0, rank1) = (address(0), address(1));
        assert_ne!(rank0, rank1, "one port per rank");
        let token = run_dir.join("token");
        let pinned = std::fs::read_to_string(&token).unwrap();
        assert!(pinned.contains("tls-sha256"), "{pinned}");
        // An odd id is rank 1's: rank 0 refuses it and names the rank to dial.
        let out = recur_tests::run_with_deadline(actor(&rank0, &token, 1), DEADLINE);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("dial rank 1"),
            "{err}"
        );
        // One remote actor per rank, each pinning the certificate of the run's token file.
        let feeders = [
            recur_tests::Watched::spawn(actor(&rank0, &token, 2)),
            recur_tests::Watched::spawn(actor(&rank1, &token, 3)),
        ];
        let (ok, _, lines) = run.finish(DEADLINE);
        let stderr = lines.join("\n");
        assert!(ok, "{stderr}");
        let summary = recur_tests::remote_support::summary(&run_dir);
        assert_eq!(summary["world_size"], 2, "{summary}");
        assert!(summary["frames"].as_u64().unwrap() >= 4096, "{summary}");
        // Each rank trained on frames of its own remote actor.
        let took = took(&stderr);
        assert_eq!(took.len(), 2, "{stderr}");
        assert!(took.iter().all(|&(f, _)| f > 0), "{took:?}");
        for (id, rank) in [(2, 0), (3, 1)] {
            let registered = format!("actor {id}/0");
            assert!(
                stderr.contains(&registered),
                "actor {id} on rank {rank}: {stderr}"
            );
        }
        // The remote actors leave once the group is done.
        for feeder in feeders {
            let (_, _, lines) = feeder.finish(DEADLINE);
            assert!(!lines.is_empty());
        }
    }

    /// `scripts/slurm/train-ranks.sbatch` with `ACTOR_NODES` under stand-ins for Slurm's
    /// `scontrol` (every node is this machine) and `srun` (`--mpi=...` runs `mpirun`, otherwise
    /// `--ntasks` copies with `SLURM_PROCID`): two learner ranks without local actors listen on
    /// `PORT` and `PORT + 1`, and the actor node's two actors (ids 0 and 1) each dial their rank
    /// over TLS, so the group trains from them alone to its frames.
    #[test]
    fn the_slurm_script_feeds_two_ranks_from_an_actor_node() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp_dir("ranks-slurm");
        let shims = root.join("bin");
        std::fs::create_dir_all(&shims).unwrap();
        let scontrol = "#!/bin/bash\nfor i in 1 2 3; do echo localhost; done\n";
        let srun = r#"#!/bin/bash
mpi=""; ntasks=1
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in --mpi=*) mpi=1 ;; --ntasks=*) ntasks=${1#--ntasks=} ;; esac; shift
done
if [[ -n $mpi ]]; then exec mpirun --allow-run-as-root --oversubscribe -n "$ntasks" "$@"; fi
pids=()
for (( p = 0; p < ntasks; p++ )); do SLURM_PROCID=$p "$@" & pids+=($!); done
s=0; for p in "${pids[@]}"; do wait "$p" || s=$?; done; exit $s
"#;
        for (name, text) in [("scontrol", scontrol), ("srun", srun)] {
            let path = shims.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let preset = std::fs::read_to_string(format!("{repo}/configs/masked_cartpole.toml"))
            .unwrap()
            .lines()
            .map(|l| match l.starts_with("frames =") {
                true => "frames = 4096",
                false => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let config = root.join("config.toml");
        std::fs::write(&config, preset).unwrap();
        // Two free ports in a row for the two ranks.
        let port = (20_000..60_000u16)
            .step_by(7)
            .find(|&p| (0..2).all(|k| std::net::TcpListener::bind(("0.0.0.0", p + k)).is_ok()))
            .unwrap();
        let run_dir = root.join("run");
        binary("recur-actor");
        let bin = binary("recur-learner").parent().unwrap().to_path_buf();
        let path = format!("{}:{}", shims.display(), std::env::var("PATH").unwrap());
        let mut cmd = Command::new("bash");
        cmd.arg("scripts/slurm/train-ranks.sbatch")
            .current_dir(repo)
            .env("PATH", path)
            .envs([("SLURM_JOB_NODELIST", "n[1-3]"), ("SLURM_JOB_ID", "1")])
            .envs([("ACTOR_NODES", "1"), ("ACTORS_PER_NODE", "2")])
            .env("PORT", port.to_string())
            .env("BIN", &bin)
            .env("RUN_DIR", &run_dir)
            .env("CONFIG", &config)
            .env("RUST_LOG", "info")
            .env("OMPI_MCA_orte_tmpdir_base", temp_dir("ompi"))
            .env(PMIX_GDS.0, PMIX_GDS.1);
        let out = run_with_deadline(cmd, DEADLINE);
        let (_, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let summary = recur_tests::remote_support::summary(&run_dir);
        assert_eq!(summary["world_size"], 2, "{summary}");
        assert!(summary["frames"].as_u64().unwrap() >= 4096, "{summary}");
        for (id, k) in [(0, 0), (1, 1)] {
            let dialed = format!(
                "actor {id}/0: registered with the learner at tcp://localhost:{}",
                port + k
            );
            assert!(stderr.contains(&dialed), "{dialed}: {stderr}");
        }
        let took = took(&stderr);
        assert!(
            took.len() == 2 && took.iter().all(|&(f, _)| f > 0),
            "{took:?}: {stderr}"
        );
    }

    /// A 2-rank run with a checkpoint every 2 updates, for the fault tests. (When a rank dies,
    /// mpirun ends the others with SIGTERM, then SIGKILL 1 s later: a survivor names the lost
    /// rank and stops its actors well within that.)
    fn faulty_run(dir: &std::path::Path, env: &[(&str, &str)]) -> recur_tests::Watched {
        let args = train_args(&dir.to_string_lossy(), &["--set", "run.checkpoint_every=2"]);
        let mut cmd = mpirun_command(&[args.clone(), args]);
        cmd.envs(env.iter().copied());
        recur_tests::Watched::spawn(cmd)
    }

    /// The pid rank `rank` of 2 logged as it joined.
    fn rank_pid(run: &recur_tests::Watched, rank: usize) -> i32 {
        let marker = format!("rank {rank} of 2 (pid ");
        let line = run.wait_for(&marker, DEADLINE, |l| l.contains(&marker));
        let pid = line.split(&marker).nth(1).unwrap().trim_end_matches(')');
        pid.parse().unwrap()
    }

    fn wait_for_checkpoint(dir: &std::path::Path) {
        let start = std::time::Instant::now();
        while !dir.join("checkpoint").is_dir() {
            assert!(start.elapsed() < DEADLINE, "no checkpoint");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every run id in a group's log: each rank's segments are `recur-<id>-...`.
    fn run_ids(lines: &[String]) -> Vec<String> {
        let mut ids: Vec<String> = (lines.iter())
            .filter_map(|l| {
                let id = l.split("ring recur-").nth(1)?.split("-ring-").next()?;
                Some(id.to_string())
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The group after a lost rank: it failed within `bound` of the fault with one of `named`
    /// in its log; every actor of both ranks exits (those of a killed rank notice their learner is
    /// gone); `--resume` on 2 ranks reaches the end; then no segment of either run is left.
    fn lost_then_resumed(
        run: recur_tests::Watched,
        fault: std::time::Instant,
        bound: Duration,
        dir: &std::path::Path,
        named: &[&str],
    ) {
        let (ok, _, lines) = run.finish(DEADLINE);
        let waited = fault.elapsed();
        let stderr = lines.join("\n");
        assert!(!ok, "the group went on: {stderr}");
        assert!(
            named.iter().any(|n| stderr.contains(n)),
            "none of {named:?} in:\n{stderr}"
        );
        assert!(
            waited < bound,
            "{waited:?} from the fault to the group's end"
        );
        let actors = recur_tests::run_support::actor_pids(&lines);
        assert!(actors.len() >= 2, "{stderr}");
        for pid in actors {
            let start = std::time::Instant::now();
            while recur_tests::process_alive(pid) && start.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                !recur_tests::process_alive(pid),
                "actor {pid} outlived its rank"
            );
        }
        // The last checkpoint is valid: the group resumes from it and reaches its frames.
        let resume = vec![
            "train".to_string(),
            "--resume".into(),
            dir.to_string_lossy().into_owned(),
            "--frames".into(),
            "8192".into(),
            "--quiet".into(),
        ];
        let out = mpirun(&[resume.clone(), resume]);
        let (stdout, resumed) = text(&out);
        assert!(out.status.success(), "{resumed}");
        assert!(resumed.contains("resumed at update"), "{resumed}");
        let summary: serde_json::Value =
            serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
        assert_eq!(summary["world_size"], 2, "{summary}");
        assert!(summary["frames"].as_u64().unwrap() >= 8192, "{summary}");
        let resumed: Vec<String> = resumed.lines().map(String::from).collect();
        let ids = [run_ids(&lines), run_ids(&resumed)].concat();
        assert!(ids.len() >= 4, "two runs of two ranks: {ids:?}");
        for id in ids {
            let left = recur_tests::segments_containing(&id);
            assert!(left.is_empty(), "segments of run {id} left: {left:?}");
        }
    }

    #[test]
    fn a_hung_rank_ends_the_group_within_the_timeout_and_the_run_resumes() {
        let dir = temp_dir("ranks-hung");
        let run = faulty_run(&dir, &[("RECUR_RANK_TIMEOUT_S", "5")]);
        let pid = rank_pid(&run, 1);
        // A checkpoint first (every 2 updates), then rank 1 hangs.
        wait_for_checkpoint(&dir);
        let stopped = std::time::Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGSTOP).unwrap();
        // Rank 1 stopped on its way to a collective, or inside one (its arrival notice sent):
        // rank 0 names it either way. The bound: the timeout, plus the launcher ending the
        // rest (the stopped rank, woken by mpirun's SIGCONT and SIGTERM, finds rank 0 gone).
        let named = [
            "rank 0 of 2: lost rank 1 (it did not reach the collective in 5 s".to_string(),
            format!("rank 0 of 2: lost rank 1 (its process is stopped: pid {pid}) inside"),
        ];
        let named: Vec<&str> = named.iter().map(String::as_str).collect();
        lost_then_resumed(run, stopped, Duration::from_secs(30), &dir, &named);
    }

    #[test]
    fn rank_1_killed_mid_update_is_named_and_the_run_resumes() {
        let dir = temp_dir("ranks-kill-1");
        // Collective 45: a gradient all-reduce of update 4, after the checkpoint of update 2.
        let run = faulty_run(&dir, &[("RECUR_FAULT_RANK", "1:45")]);
        let pid = rank_pid(&run, 1);
        run.wait_for("the fault", DEADLINE, |l| {
            l.contains("RECUR_FAULT_RANK: rank 1 of 2")
        });
        let killed = std::time::Instant::now();
        assert!(
            dir.join("checkpoint").is_dir(),
            "no checkpoint before update 4"
        );
        let named = format!("rank 0 of 2: lost rank 1 (its process is gone: pid {pid})");
        lost_then_resumed(run, killed, Duration::from_secs(30), &dir, &[&named]);
    }

    #[test]
    fn rank_0_killed_is_named_by_rank_1_and_the_run_resumes() {
        let dir = temp_dir("ranks-kill-0");
        let run = faulty_run(&dir, &[]);
        let pid = rank_pid(&run, 0);
        wait_for_checkpoint(&dir);
        let killed = std::time::Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
        let named = format!("rank 1 of 2: lost rank 0 (its process is gone: pid {pid})");
        lost_then_resumed(run, killed, Duration::from_secs(30), &dir, &[&named]);
    }

    /// `recur-learner train --resume DIR --quiet EXTRA` on 2 ranks.
    fn resume_args(dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
        let mut args = vec!["train", "--resume", dir.to_str().unwrap(), "--quiet"];
        args.extend(extra);
        args.into_iter().map(String::from).collect()
    }

    #[test]
    fn a_sync_group_killed_and_resumed_ends_bit_identical_to_the_uninterrupted_group() {
        let dir = temp_dir("ranks-exact");
        let run = |name: &str| {
            let run_dir = dir.join(name).to_string_lossy().into_owned();
            let sync = ["--frames", "6144", "--set", "collector.mode=sync"];
            train_args(
                &run_dir,
                &[&sync[..], &["--set", "run.checkpoint_every=2"]].concat(),
            )
        };
        let whole = run("whole");
        let out = mpirun(&[whole.clone(), whole]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let expected: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(expected["updates"], 12, "{expected}");
        // The same run, rank 1 killed mid-run (at its collective 60: a few updates in, how many
        // depends on the collectives an update takes), after a checkpoint; the group resumed
        // from that checkpoint.
        let killed = run("killed");
        let mut cmd = mpirun_command(&[killed.clone(), killed]);
        cmd.env("RECUR_FAULT_RANK", "1:60");
        let (ok, _, lines) = recur_tests::Watched::spawn(cmd).finish(DEADLINE);
        assert!(
            !ok && lines.iter().any(|l| l.contains("lost rank 1")),
            "{lines:?}"
        );
        let resume = resume_args(&dir.join("killed"), &[]);
        let out = mpirun(&[resume.clone(), resume]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let resumed_at: u64 = stderr
            .split("resumed at update ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no resume line: {stderr}"));
        assert!(
            (2..12).contains(&resumed_at) && resumed_at.is_multiple_of(2),
            "resumed at update {resumed_at}: {stderr}"
        );
        let got: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        for key in ["updates", "frames", "world_size"] {
            assert_eq!(got[key], expected[key], "{key}: {got} vs {expected}");
        }
        let weights = |name: &str| std::fs::read(dir.join(name).join("checkpoint/weights.bin"));
        assert!(
            weights("whole").unwrap() == weights("killed").unwrap(),
            "the resumed group's final weights differ from the uninterrupted group's"
        );
        // Both ranks' actors continued from their saved states (rank 1's from rank 0's
        // checkpoint).
        for id in [
            "actor 0/0 continues from its saved state",
            "actor 1/0 continues",
        ] {
            assert!(stderr.contains(id), "{id}: {stderr}");
        }
    }

    #[test]
    fn a_group_resumed_on_another_number_of_ranks_is_refused_naming_both() {
        let dir = temp_dir("ranks-resize");
        let two = dir.join("two");
        let args = train_args(&two.to_string_lossy(), &["--frames", "2048"]);
        let out = mpirun(&[args.clone(), args]);
        assert!(out.status.success(), "{}", text(&out).1);
        // Two ranks' checkpoint, one process.
        let mut one = std::process::Command::new(binary("recur-learner"));
        one.args(resume_args(&two, &["--frames", "4096"]))
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let out = run_with_deadline(one, DEADLINE);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("its checkpoint was written by 2 learner ranks (world_size = 2")
                && stderr.contains("and 1 was started"),
            "{stderr}"
        );
        // One process's checkpoint, two ranks.
        let single = dir.join("one");
        let mut cmd = std::process::Command::new(binary("recur-learner"));
        cmd.args(train_args(&single.to_string_lossy(), &["--frames", "1024"]))
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let out = run_with_deadline(cmd, DEADLINE);
        assert!(out.status.success(), "{}", text(&out).1);
        let resume = resume_args(&single, &["--frames", "4096"]);
        let out = mpirun(&[resume.clone(), resume]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("written by 1 learner rank (world_size = 1")
                && stderr.contains("and 2 were started"),
            "{stderr}"
        );
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
        let summary = recur_tests::remote_support::summary(&dir);
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

    /// A launcher that started several ranks while MPI sees this process alone (an MPI without
    /// PMI support under `srun`; here: a PMI launcher's variable with no mpirun behind it) is
    /// refused before anything starts, naming the variable and both counts.
    #[test]
    fn a_launcher_count_mpi_does_not_see_is_refused_naming_both() {
        binary("recur-actor");
        let dir = temp_dir("ranks-pmi-mismatch").join("run");
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.args(train_args(&dir.to_string_lossy(), &["--frames", "1024"]))
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PMI_SIZE", "2");
        let out = run_with_deadline(cmd, DEADLINE);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "joined as one of 2 ranks: {stderr}");
        assert!(
            stderr.contains("started 2 ranks (PMI_SIZE=2) but MPI reports 1"),
            "{stderr}"
        );
        assert!(!dir.exists(), "a refused rank wrote its run directory");
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

    /// Burn's autodiff update path (the one a CUDA learner takes) on 2 ranks: each rank's loss
    /// a part of the group's mean, the gradients summed over the host before the step.
    #[test]
    fn ppo_replay_on_burns_update_path_on_2_ranks_equals_one_process() {
        let root = temp_dir("ranks-replay-ppo-burn");
        let config = format!("{PPO_REPLAY}update = \"burn\"\n");
        let (data, config) = recorded(&root, &config);
        let one = one_process_as(2, &data, &config, &root);
        let group = ranks_replay(2, &data, &config, &root, None);
        let (rel, name) = worst(&group, &one);
        assert!(
            rel <= EQUAL,
            "burn's path on 2 ranks: {name} differs from one process's by {rel:e} (relative)"
        );
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
