//! A new user's first hour with the real binaries (issue 58): runs started from any directory
//! with the default config and relative paths, default run names that never collide, a last
//! line that leads with the greedy evaluation, exit 130 after a signal, `--resume` that refuses
//! what it cannot continue (and never drops a finished run's metrics), and errors that keep
//! their shape without a backtrace.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::{binary, run_with_deadline, temp_dir, Watched};
use serde_json::Value;

/// `recur-learner train ARGS --quiet` started in `cwd`, with `RUST_BACKTRACE=1` as in a
/// developer's shell.
fn train_in(cwd: &Path, args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train").args(args).arg("--quiet").current_dir(cwd);
    cmd.env("RUST_LOG", "info")
        .env("RUST_BACKTRACE", "1")
        .env_remove("RECUR_BACKTRACE");
    cmd
}

/// A tiny run of the default config: 1 actor, 2 updates, one greedy evaluation of 2 episodes
/// at the end.
const TINY: [&str; 10] = [
    "--actors",
    "1",
    "--frames",
    "1024",
    "--set",
    "ppo.frames_per_update=512",
    "--set",
    "eval.every_frames=0",
    "--set",
    "eval.episodes=2",
];

fn tiny(cwd: &Path, extra: &[&str]) -> Watched {
    let args: Vec<&str> = TINY.iter().chain(extra).copied().collect();
    Watched::spawn(train_in(cwd, &args))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// From another directory: the default config is found, a relative `--run-dir` lands in the
/// user's directory, and two default-named runs started together both complete, each in a
/// directory of its own. The last line leads with the greedy evaluation.
#[test]
fn runs_from_another_directory_land_there_and_never_collide() {
    let cwd = temp_dir("first-hour-paths");
    let named = tiny(&cwd, &["--run-dir", "out"]);
    let defaults = [tiny(&cwd, &[]), tiny(&cwd, &[])];
    let (ok, _, lines) = named.finish(Duration::from_secs(300));
    assert!(ok, "{}", lines.join("\n"));
    let s = json(&cwd.join("out/summary.json"));
    assert_eq!(s["final_eval_episodes"], 2, "{s}");
    assert!(s.get("frames_to_target").is_some() && s.get("eval_frames_to_target").is_some());
    let last = lines.last().unwrap();
    assert!(
        last.contains(&format!(
            "greedy {:.1} over 2 episodes at 1,024 frames",
            s["final_eval_return"].as_f64().unwrap()
        )) && last.contains("training mean return (last 20 episodes)")
            && last.ends_with("results in out"),
        "{last}"
    );
    for run in defaults {
        let (ok, _, lines) = run.finish(Duration::from_secs(300));
        assert!(ok, "{}", lines.join("\n"));
    }
    let mut names: Vec<String> = std::fs::read_dir(cwd.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    for name in &names {
        assert!(
            name.starts_with("MaskedCartPole-v1-") && name.contains("-s0-"),
            "{name}"
        );
        assert!(cwd.join("runs").join(name).join("summary.json").exists());
    }
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// A run ended by a signal exits 130 (so `train && next` stops), its last line saying how to
/// continue it.
#[test]
fn a_signal_exits_130_and_says_how_to_continue() {
    let cwd = temp_dir("first-hour-signal");
    let run = Watched::spawn(train_in(
        &cwd,
        &["--actors", "1", "--frames", "100000000", "--run-dir", "run"],
    ));
    run.wait_for("an update", Duration::from_secs(120), |l| {
        l.contains("update 10:")
    });
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGINT).unwrap();
    let (interrupted, _, lines) = run.finish_interrupted(Duration::from_secs(120));
    assert!(interrupted, "{}", lines.join("\n"));
    let last = lines.last().unwrap();
    assert!(
        last.contains("interrupted by a signal") && last.ends_with("continue it with --resume run"),
        "{last}"
    );
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// `--resume`: a `--set` of what a resume may change is applied and logged, one of what the
/// checkpoint was built for is refused, `--config` is refused; a missing or empty directory is
/// "not a run directory" (once); a finished run whose checkpoints are gone is refused with its
/// `metrics.csv` untouched. User errors print no backtrace unless `RECUR_BACKTRACE=1`, and a
/// TOML error keeps its caret diagram's lines.
#[test]
fn resume_refuses_what_it_cannot_continue_and_errors_keep_their_shape() {
    let cwd = temp_dir("first-hour-resume");
    let (ok, _, lines) = tiny(&cwd, &["--run-dir", "run"]).finish(Duration::from_secs(300));
    assert!(ok, "{}", lines.join("\n"));
    let run = |args: &[&str]| run_with_deadline(train_in(&cwd, args), Duration::from_secs(120));

    let out = run(&["--resume", "run", "--set", "run.tensorboard=false"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--resume: --set run.tensorboard=false changes"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--resume", "run", "--set", "policy.hidden_size=8"]);
    assert!(
        !out.status.success() && stderr(&out).contains("a resumed run keeps `policy`"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--resume", "run", "--config", "other.toml"]);
    assert!(
        out.status.code() == Some(2) && stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );

    std::fs::create_dir(cwd.join("empty")).unwrap();
    for dir in ["missing", "empty"] {
        let out = run(&["--resume", dir]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.matches("not a run directory").count(), 1, "{err}");
        assert!(!err.contains("backtrace"), "{err}");
    }
    let mut cmd = train_in(&cwd, &["--resume", "missing"]);
    cmd.env("RECUR_BACKTRACE", "1");
    let err = stderr(&run_with_deadline(cmd, Duration::from_secs(60)));
    assert!(err.contains("Stack backtrace"), "{err}");

    let metrics = std::fs::read(cwd.join("run/metrics.csv")).unwrap();
    for gone in ["checkpoint", "checkpoint.old"] {
        let _ = std::fs::remove_dir_all(cwd.join("run").join(gone));
    }
    let out = run(&["--resume", "run"]);
    assert!(
        !out.status.success() && stderr(&out).contains("nothing to continue from"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(cwd.join("run/metrics.csv")).unwrap(), metrics);

    std::fs::write(
        cwd.join("bad.toml"),
        "[run]\nenv = \"CartPole-v1\"\nframes = = 3\n",
    )
    .unwrap();
    let err = stderr(&run(&["--config", "bad.toml"]));
    let lines: Vec<&str> = err.lines().map(str::trim_end).collect();
    assert!(
        lines.contains(&"3 | frames = = 3") && lines.iter().any(|l| l.trim() == "|          ^"),
        "{err}"
    );
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// Help that cannot lag the code: `recur-actor --list-envs` prints the registry, `--help`
/// names every id in it, `--actor-id` says what it is, and `train --help` names the algorithms,
/// the config reference and the env list. An unknown id gets the closest one and that command,
/// not all 53 ids, from the actor and from the learner's config check alike.
#[test]
fn help_lists_what_runs_and_an_unknown_id_gets_the_closest_one() {
    let cwd = temp_dir("first-hour-help");
    let run = |program: &str, args: &[&str]| {
        let mut cmd = Command::new(binary(program));
        cmd.args(args).current_dir(&cwd);
        run_with_deadline(cmd, Duration::from_secs(60))
    };
    let stdout = |out: Output| String::from_utf8_lossy(&out.stdout).into_owned();
    let list = stdout(run("recur-actor", &["--list-envs"]));
    let ids: Vec<&str> = list.lines().collect();
    assert!(
        ids.len() >= 53 && ids.contains(&"MaskedPendulum-v1"),
        "{list}"
    );
    let help = stdout(run("recur-actor", &["--help"]));
    let named = help.split("a registered one (").nth(1).unwrap();
    let named: Vec<&str> = named.split(')').next().unwrap().split(", ").collect();
    assert_eq!(named, ids, "{help}");
    let actor_id = help.split("--actor-id <ACTOR_ID>").nth(1).unwrap();
    assert!(
        actor_id.trim_start().starts_with("This actor's number"),
        "{help}"
    );
    let help = stdout(run("recur-learner", &["train", "--help"]));
    for needle in [
        "\"ppo\"",
        "\"dqn\"",
        "docs/config.md",
        "recur-actor --list-envs",
    ] {
        assert!(help.contains(needle), "no {needle} in\n{help}");
    }

    let hint = "did you mean \"MaskedCartPole-v1\"?";
    for (program, args) in [
        ("recur-actor", &["--check-env", "MaskedCartpole-v1"][..]),
        (
            "recur-learner",
            &[
                "train",
                "--set",
                "run.env=MaskedCartpole-v1",
                "--run-dir",
                "r",
            ][..],
        ),
    ] {
        let err = stderr(&run(program, args));
        assert!(
            err.contains(hint) && err.contains("--list-envs") && !err.contains("popgym"),
            "{program}: {err}"
        );
    }
    std::fs::remove_dir_all(&cwd).unwrap();
}
