//! Helpers for the integration tests: build and locate recur's binaries, run them with a
//! deadline so that a hung child fails the test instead of hanging CI.

use std::path::PathBuf;
pub mod remote_support;
pub mod run_support;

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static BUILD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The path of workspace binary `name` (e.g. `recur-bench`), built first in the same profile
/// as the tests (`cargo test` builds only library targets of other packages).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf();
    let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "--workspace", "--bin", name]);
        // Not the variables `cargo test` sets for this test binary: ring's build script asks
        // to rerun when CARGO_PKG_NAME, CARGO_MANIFEST_DIR, ... change, and with this crate's
        // values here every build from a test would rebuild ring and all that depends on it.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_CRATE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_MANIFEST_LINKS",
                ]
                .contains(&key.as_ref())
                || key == "OUT_DIR"
            {
                cmd.env_remove(key.as_ref());
            }
        }
        // `cargo test -p recur-tests --features mpi`: the learner joins launchers' groups.
        if cfg!(feature = "mpi") && name == "recur-learner" {
            cmd.args(["--features", "recur-learner/mpi"]);
        }
        if dir.file_name().is_some_and(|p| p == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "building binary {name} failed");
        built.push(name.to_string());
    }
    let path = dir.join(name);
    assert!(path.exists(), "binary {} was not built", path.display());
    path
}

/// Runs `cmd` to completion, killing it (and failing) after `deadline`.
pub fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} ran past {deadline:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process whose stderr lines are collected by a thread, so that a test can wait for a log
/// line while the process runs.
pub struct Watched {
    pub child: std::process::Child,
    lines: std::sync::Arc<Mutex<Vec<String>>>,
    stderr: Option<std::thread::JoinHandle<()>>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Watched {
    pub fn spawn(mut cmd: Command) -> Watched {
        use std::io::{BufRead, Read};
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&lines);
        let stderr = child.stderr.take().expect("piped stderr");
        let stderr = Some(std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        }));
        let mut out = child.stdout.take().expect("piped stdout");
        let stdout = Some(std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }));
        Watched {
            child,
            lines,
            stderr,
            stdout,
        }
    }

    /// Stderr lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until a stderr line satisfies `pred`, returning it; panics after `deadline`.
    pub fn wait_for(&self, what: &str, deadline: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| pred(l)) {
                return line;
            }
            assert!(
                start.elapsed() < deadline,
                "no {what} within {deadline:?}; stderr:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit; returns (success, stdout, stderr lines). Kills it after
    /// `deadline`.
    pub fn finish(self, deadline: Duration) -> (bool, String, Vec<String>) {
        let (status, stdout, lines) = self.finish_status(deadline);
        (status.success(), stdout, lines)
    }

    /// [`finish`](Self::finish) of a run a signal ended cleanly: `true` when it exited 130.
    pub fn finish_interrupted(self, deadline: Duration) -> (bool, String, Vec<String>) {
        let (status, stdout, lines) = self.finish_status(deadline);
        (status.code() == Some(130), stdout, lines)
    }

    fn finish_status(
        mut self,
        deadline: Duration,
    ) -> (std::process::ExitStatus, String, Vec<String>) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if start.elapsed() > deadline {
                let _ = self.child.kill();
                panic!(
                    "process ran past {deadline:?}; stderr:\n{}",
                    self.lines().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        // Take every line: the reader ends at EOF, once the process and the children that
        // share its stderr (actors) have closed the pipe; bounded in case one outlives it.
        if let Some(reader) = self.stderr.take() {
            let start = Instant::now();
            while !reader.is_finished() && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        (status, stdout, self.lines())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True while `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The shared-memory segments in /dev/shm whose names contain `needle`.
pub fn segments_containing(needle: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// A fresh, empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    // Unique within this process by a counter: the tests of one binary run on parallel threads,
    // and a name from the clock alone let two of them share (and remove) one directory.
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("recur-{tag}-{}-{n}", std::process::id(),));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The path of example `name` of package `package` (e.g. the T-maze actor of `recur-actor`),
/// built first in the tests' profile (`cargo test -p recur-tests` builds no other package's
/// examples).
pub fn example(package: &str, name: &str) -> PathBuf {
    let dir = binary_dir();
    let key = format!("{package}/{name}");
    let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&key) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", package, "--example", name]);
        if dir.file_name().is_some_and(|p| p == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "building example {key} failed");
        built.push(key);
    }
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "example {} was not built", path.display());
    path
}

fn binary_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf()
}

/// Whether the gymnasium bridge's Python side is usable (`RECUR_PYTHON` or `python3` with
/// gymnasium and numpy). When it is not, bridge tests say so on stderr and pass without
/// running, unless `RECUR_REQUIRE_PYTHON` is set (`.ci/run` sets it), which makes them fail.
pub fn gymnasium_available() -> bool {
    python_module_available("gymnasium, numpy")
}

/// Whether `python3` (or `RECUR_PYTHON`) can import `module` (see [`gymnasium_available`]).
pub fn python_module_available(module: &str) -> bool {
    let python = std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let required = std::env::var_os("RECUR_REQUIRE_PYTHON").is_some();
        assert!(
            !required,
            "RECUR_REQUIRE_PYTHON=1 but {python} cannot import {module} \
             (python3 -m pip install gymnasium numpy popgym)"
        );
        report_skip(&format!(
            "{python} cannot import {module}; install it \
             (python3 -m pip install numpy gymnasium popgym) to run this test"
        ));
    }
    ok
}

/// Says that the calling test passes without running, and why, on the process's real stderr:
/// `cargo test` captures a passing test's `eprintln!`, and a skip must be seen in the run's
/// output (`SKIPPED <test>: <why>`, just above that binary's `test result:` line).
pub fn report_skip(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}
