//! What the tests that compare a port with a Python package share: the interpreter
//! (`RECUR_PYTHON`, else `python3`), the check that it has the package's modules (a `SKIPPED`
//! line on the real stderr when not, a panic under `RECUR_REQUIRE_PYTHON`, as
//! `tests/support.rs`'s `python_module_available`), and running a trace script of this
//! directory that prints one JSON line per (id, seed).

#![allow(dead_code)] // each test crate uses the part it needs

use std::process::{Command, Stdio};

use serde_json::Value;

/// The interpreter the tests run.
pub fn python() -> String {
    std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether the interpreter imports every one of `modules`; when not, reports the skip of the
/// current test (`what`: what the test would have done) or panics under `RECUR_REQUIRE_PYTHON`.
pub fn modules_available(modules: &[&str], what: &str) -> bool {
    let python = python();
    let ok = Command::new(&python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let (names, pip) = (modules.join(", "), modules.join(" "));
        assert!(
            std::env::var_os("RECUR_REQUIRE_PYTHON").is_none(),
            "RECUR_REQUIRE_PYTHON=1 but {python} cannot import {names} (python3 -m pip install \
             {pip})"
        );
        use std::io::Write;
        let thread = std::thread::current();
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED {}: {python} cannot import {names}; install them (python3 -m pip install \
             {pip}) to {what}",
            thread.name().unwrap_or("a test")
        );
    }
    ok
}

/// `common/tests/<script> STEPS SEED,SEED,... ID...`: its JSON lines, one per (id, seed).
pub fn traces(script: &str, steps: usize, seeds: &[u64], ids: &[&str]) -> Vec<Value> {
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
    let output = Command::new(python())
        .arg(&path)
        .arg(steps.to_string())
        .arg(seeds.join(","))
        .args(ids)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        output.status.success(),
        "{script} failed: {}",
        output.status
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON trace line"))
        .collect()
}
