//! Helpers of the remote-actor tests (tests/remote.rs, tests/tls.rs): the learner and actor
//! commands, the listening address a learner logs, its summary, and network namespaces
//! joined by a veth pair (root only; deleted on drop).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{binary, Watched};

pub fn learner(args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(args);
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cmd.env("RUST_LOG", "info");
    cmd
}

/// `recur-learner collect` into `run_dir` with `actors` local actors, listening on `listen`,
/// 4 envs x 16 steps per chunk and no frame limit to speak of, plus `extra` arguments: the
/// learner every remote-actor test starts.
pub fn collect(actors: &str, listen: &str, run_dir: &std::path::Path, extra: &[&str]) -> Command {
    let run_dir = run_dir.to_string_lossy();
    let mut args = vec![
        "collect",
        "--actors",
        actors,
        "--listen",
        listen,
        "--frames",
        "1000000000000",
        "--envs",
        "4",
        "--steps",
        "16",
        "--run-dir",
        &run_dir,
    ];
    args.extend_from_slice(extra);
    learner(&args)
}

/// The `tcp://` address a learner logged (`listening on tcp://HOST:PORT`), with `host` in
/// place of the address it bound.
pub fn listen_address(run: &Watched, host: &str) -> String {
    let line = run.wait_for("the listening line", Duration::from_secs(60), |l| {
        l.contains("listening on tcp://")
    });
    let bound = line
        .split("listening on tcp://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("an address");
    let port = bound.rsplit(':').next().expect("a port");
    format!("tcp://{host}:{port}")
}

pub fn summary(run_dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap()
}

/// A network namespace joined to this one by a veth pair: the learner side `HOST_IP` in the
/// root namespace, the actor side `ACTOR_IP` inside. Deleted on drop (also when a test fails).
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub host_ip: String,
}

static NETNS_COUNT: AtomicU32 = AtomicU32::new(0);

pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// A new namespace and link, or why the kernel refused (`None` after the skip message
    /// when namespaces are unavailable and not required).
    pub fn create() -> Option<Netns> {
        let k = NETNS_COUNT.fetch_add(1, Ordering::SeqCst);
        assert!(k < 60, "too many namespaces for one test process");
        let pid = std::process::id();
        let id = format!("{}x{k}", pid % 100_000);
        let name = format!("rcn{id}");
        if let Err(e) = ip(&["netns", "add", &name]) {
            assert!(
                std::env::var_os("RECUR_REQUIRE_NETNS").is_none(),
                "RECUR_REQUIRE_NETNS is set but a network namespace cannot be created: {e}"
            );
            crate::report_skip(&format!(
                "network namespaces are not available here ({e}); run as root \
                 (CI does) to run this test"
            ));
            return None;
        }
        // From here on the namespace exists: the guard deletes it whatever fails next.
        let base = format!("10.231.{}", pid % 250);
        let ns = Netns {
            name: name.clone(),
            host_if: format!("rch{id}"),
            host_ip: format!("{base}.{}", 4 * k + 1),
        };
        let peer = format!("rca{id}");
        let actor_ip = format!("{base}.{}", 4 * k + 2);
        let steps: Vec<Vec<String>> = vec![
            vec![
                "link".into(),
                "add".into(),
                ns.host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                peer.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                peer.clone(),
                "netns".into(),
                name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{}/30", ns.host_ip),
                "dev".into(),
                ns.host_if.clone(),
            ],
            vec!["link".into(), "set".into(), ns.host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                name.clone(),
                "addr".into(),
                "add".into(),
                format!("{actor_ip}/30"),
                "dev".into(),
                peer.clone(),
            ],
            vec![
                "-n".into(),
                name.clone(),
                "link".into(),
                "set".into(),
                peer.clone(),
                "up".into(),
            ],
            vec![
                "-n".into(),
                name.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            ip(&args).unwrap_or_else(|e| panic!("setting up namespace {name}: {e}"));
        }
        Some(ns)
    }

    /// `recur-actor` inside the namespace (`ip netns exec` execs it: the child's pid is the
    /// actor's).
    pub fn actor(&self, addr: &str, token: &std::path::Path, actor_id: u32) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(binary("recur-actor"))
            .args(["--connect", addr, "--token-file"])
            .arg(token)
            .args(["--actor-id", &actor_id.to_string()]);
        cmd
    }

    /// Takes the learner's side of the link down (`false`) or up again (`true`).
    pub fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]).unwrap();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Waits for `child` to exit (killing it and failing after `deadline`); returns its success.
pub fn exits_within(w: Watched, deadline: Duration, what: &str) -> (bool, Vec<String>) {
    let start = Instant::now();
    let mut w = w;
    loop {
        if w.child.try_wait().unwrap().is_some() {
            let (ok, _, lines) = w.finish(Duration::from_secs(5));
            return (ok, lines);
        }
        assert!(
            start.elapsed() < deadline,
            "{what} did not exit within {deadline:?}:\n{}",
            w.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `recur-actor --connect ADDR --token-file TOKEN --actor-id ID` on this machine.
pub fn actor(addr: &str, token: &std::path::Path, id: u32) -> Command {
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args(["--connect", addr, "--token-file"])
        .arg(token)
        .args(["--actor-id", &id.to_string()]);
    cmd
}

/// Refusals logged so far by a learner (each refused connection logs one line).
pub fn run_refusals(run: &Watched) -> usize {
    run.lines()
        .iter()
        .filter(|l| l.contains("remote connection from") && l.contains("refused"))
        .count()
}
