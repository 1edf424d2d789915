//! The actor supervisor: spawns the actor processes of a run, notices when one dies, restarts
//! it under a new incarnation id (with backoff, up to `max_restarts` restarts per actor within a
//! sliding `restart_window`), and kills them all when the run ends — also when the learner
//! unwinds from a panic (drop guard).
//!
//! Every actor starts as `PROGRAM --connect SOCKET --actor-args JSON --actor-id N
//! --incarnation K`: the run's [`ActorArgs`] travel whole, as JSON, on the command line.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::actor_args::ActorArgs;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How actors are started and restarted.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// The `recur-actor` executable.
    pub program: PathBuf,
    /// The learner's control socket the actors attach to.
    pub connect: PathBuf,
    /// What every actor runs (env, policy, seed, exploration).
    pub actor_args: ActorArgs,
    pub actors: u32,
    /// The first actor's id; the others follow.
    pub first_actor: u32,
    /// Restarts allowed per actor within `restart_window` before the supervisor gives up on it.
    pub max_restarts: u32,
    /// The sliding window restarts are counted in (an actor that dies now and then over a long
    /// run is restarted every time; one that dies in a loop is given up on).
    pub restart_window: Duration,
    /// First restart delay; doubled after each restart of the same actor within the window,
    /// capped at 8 s.
    pub backoff: Duration,
}

/// Something that happened to an actor process.
#[derive(Clone, Debug, PartialEq)]
pub enum ActorEvent {
    Started {
        actor_id: u32,
        incarnation: u32,
        pid: u32,
    },
    Exited {
        actor_id: u32,
        incarnation: u32,
        status: String,
    },
    /// The actor died more than `max_restarts` times within the restart window; it is not
    /// started again.
    GaveUp { actor_id: u32, restarts: u32 },
}

struct Slot {
    actor_id: u32,
    incarnation: u32,
    child: Option<Child>,
    restarts: u32,
    /// When its recent restarts happened (those within the window).
    recent: VecDeque<Instant>,
    /// When set, the actor is to be (re)started at that instant.
    start_at: Option<Instant>,
    given_up: bool,
}

/// Owns the actor processes of one run.
pub struct Supervisor {
    config: SupervisorConfig,
    /// `config.actor_args` as JSON (`--actor-args`).
    args: String,
    slots: Vec<Slot>,
    stopping: bool,
}

impl Supervisor {
    /// Starts every actor (incarnation 0).
    pub fn start(config: SupervisorConfig) -> std::io::Result<(Self, Vec<ActorEvent>)> {
        let mut s = Supervisor {
            args: config.actor_args.to_json(),
            slots: (config.first_actor..config.first_actor + config.actors)
                .map(|actor_id| Slot {
                    actor_id,
                    incarnation: 0,
                    child: None,
                    restarts: 0,
                    recent: VecDeque::new(),
                    start_at: Some(Instant::now()),
                    given_up: false,
                })
                .collect(),
            config,
            stopping: false,
        };
        let events = s.poll()?;
        Ok((s, events))
    }

    fn spawn(&self, actor_id: u32, incarnation: u32) -> std::io::Result<Child> {
        Command::new(&self.config.program)
            .arg("--connect")
            .arg(&self.config.connect)
            .args([
                "--actor-args",
                &self.args,
                "--actor-id",
                &actor_id.to_string(),
                "--incarnation",
                &incarnation.to_string(),
            ])
            .stdin(Stdio::null())
            .spawn()
    }

    /// Reaps exited actors, schedules and performs restarts; returns what happened.
    pub fn poll(&mut self) -> std::io::Result<Vec<ActorEvent>> {
        let mut events = Vec::new();
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let exited: Option<ExitStatus> = match &mut self.slots[i].child {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                let slot = &mut self.slots[i];
                slot.child = None;
                events.push(ActorEvent::Exited {
                    actor_id: slot.actor_id,
                    incarnation: slot.incarnation,
                    status: describe(status),
                });
                if !self.stopping {
                    let window = self.config.restart_window;
                    while slot
                        .recent
                        .front()
                        .is_some_and(|&t| now.duration_since(t) > window)
                    {
                        slot.recent.pop_front();
                    }
                    if slot.recent.len() as u32 >= self.config.max_restarts {
                        slot.given_up = true;
                        events.push(ActorEvent::GaveUp {
                            actor_id: slot.actor_id,
                            restarts: slot.restarts,
                        });
                    } else {
                        let delay =
                            self.config.backoff * 2u32.pow((slot.recent.len() as u32).min(4));
                        slot.recent.push_back(now);
                        slot.restarts += 1;
                        slot.incarnation += 1;
                        slot.start_at = Some(now + delay.min(Duration::from_secs(8)));
                    }
                }
            }
            if self.stopping {
                continue;
            }
            let slot = &self.slots[i];
            if slot.child.is_none() && !slot.given_up && slot.start_at.is_some_and(|t| t <= now) {
                let (actor_id, incarnation) = (slot.actor_id, slot.incarnation);
                let child = self.spawn(actor_id, incarnation)?;
                events.push(ActorEvent::Started {
                    actor_id,
                    incarnation,
                    pid: child.id(),
                });
                let slot = &mut self.slots[i];
                slot.child = Some(child);
                slot.start_at = None;
            }
        }
        Ok(events)
    }

    /// Actors that exit from now on are not restarted (the run is ending).
    pub fn stop_restarting(&mut self) {
        self.stopping = true;
    }

    /// Pids of the running actors, by actor id.
    pub fn running(&self) -> Vec<(u32, u32, u32)> {
        self.slots
            .iter()
            .filter_map(|s| {
                s.child
                    .as_ref()
                    .map(|c| (s.actor_id, s.incarnation, c.id()))
            })
            .collect()
    }

    /// SIGKILLs the running `actor_id` if it is incarnation `incarnation` with process `pid`
    /// (a stalled actor: SIGKILL also ends a stopped process); the next [`poll`](Self::poll)
    /// reaps it and restarts it like any other death. Returns whether it was killed.
    pub fn kill(&mut self, actor_id: u32, incarnation: u32, pid: u32) -> bool {
        self.slots
            .iter_mut()
            .filter(|s| (s.actor_id, s.incarnation) == (actor_id, incarnation))
            .filter_map(|s| s.child.as_mut())
            .find(|c| c.id() == pid)
            .is_some_and(|c| c.kill().is_ok())
    }

    /// True when no actor runs and none is waiting for a restart.
    pub fn all_done(&self) -> bool {
        self.slots
            .iter()
            .all(|s| s.child.is_none() && (s.given_up || self.stopping || s.start_at.is_none()))
    }

    /// Stops restarting; asks the running actors to exit (SIGTERM), waits up to `grace`, then
    /// kills the rest (SIGKILL) and reaps them.
    pub fn shutdown(&mut self, grace: Duration) -> Vec<ActorEvent> {
        self.stopping = true;
        for slot in &self.slots {
            if let Some(child) = &slot.child {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        let mut events = Vec::new();
        loop {
            events.extend(self.poll().unwrap_or_default());
            if self.slots.iter().all(|s| s.child.is_none()) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill_all(&mut events);
        events
    }

    fn kill_all(&mut self, events: &mut Vec<ActorEvent>) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let status = child.wait().map(describe).unwrap_or_else(|e| e.to_string());
                events.push(ActorEvent::Exited {
                    actor_id: slot.actor_id,
                    incarnation: slot.incarnation,
                    status,
                });
            }
        }
    }
}

impl Drop for Supervisor {
    /// No orphans: whatever ends the learner's run (return, error, panic), its actors go too.
    fn drop(&mut self) {
        self.stopping = true;
        self.kill_all(&mut Vec::new());
    }
}

/// The `recur-actor` executable: `given`, or the one next to the running binary.
pub fn actor_program(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("recur-actor"),
    };
    anyhow::ensure!(
        path.exists(),
        "actor executable {} not found (build it, or pass --actor-bin)",
        path.display()
    );
    Ok(path)
}

/// Actor processes when a run does not say: one per core.
pub fn default_actor_count() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(program: &Path, max_restarts: u32) -> SupervisorConfig {
        SupervisorConfig {
            program: program.into(),
            connect: "/nonexistent/control.sock".into(),
            actor_args: ActorArgs::default(),
            actors: 2,
            first_actor: 0,
            max_restarts,
            restart_window: Duration::from_secs(60),
            backoff: Duration::from_millis(10),
        }
    }

    /// An executable shell script `body` (the supervisor's arguments land in `$1`..) in a
    /// fresh temporary directory, which goes when the script drops.
    struct Script {
        dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl std::ops::Deref for Script {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.path
        }
    }

    fn script(name: &str, body: &str) -> Script {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("recur-supervisor-")
            .tempdir()
            .unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Script { dir, path }
    }

    /// An actor is started as `PROGRAM --connect SOCKET --actor-args JSON --actor-id N
    /// --incarnation K`, and the JSON is the run's `ActorArgs`.
    #[test]
    fn actors_get_the_socket_their_identity_and_the_actor_args_as_json() {
        let program = script(
            "print-argv",
            "for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$(dirname \"$0\")/argv\"",
        );
        let mut c = config(&program, 0);
        c.actors = 1;
        c.actor_args = ActorArgs {
            env: "gymnasium:CartPole-v1".into(),
            env_imports: vec!["popgym".into()],
            seed: 7,
            ..ActorArgs::default()
        };
        let (mut s, mut all) = Supervisor::start(c.clone()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !all.iter().any(|e| matches!(e, ActorEvent::Exited { .. })) {
            assert!(Instant::now() < deadline, "{all:?}");
            all.extend(s.poll().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        let argv = std::fs::read_to_string(program.dir.path().join("argv")).unwrap();
        let argv: Vec<&str> = argv.lines().collect();
        assert_eq!(argv.len(), 8, "{argv:?}");
        assert_eq!(
            argv[..3],
            ["--connect", "/nonexistent/control.sock", "--actor-args"]
        );
        assert_eq!(ActorArgs::from_json(argv[3]).unwrap(), c.actor_args);
        assert_eq!(argv[4..], ["--actor-id", "0", "--incarnation", "0"]);
    }

    /// `kill` ends only the actor it names (id, incarnation and pid), also a stopped one
    /// (SIGSTOP), and the next polls restart it as the next incarnation.
    #[test]
    fn a_killed_stalled_actor_restarts_as_its_next_incarnation() {
        let program = script("sleep-long", "exec sleep 1000");
        let (mut s, events) = Supervisor::start(config(&program, 3)).unwrap();
        let Some(&ActorEvent::Started { pid, .. }) = events.first() else {
            panic!("{events:?}")
        };
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
        assert!(!s.kill(0, 1, pid), "another incarnation");
        assert!(!s.kill(0, 0, pid + 1), "another pid");
        assert!(s.kill(0, 0, pid));
        let mut all = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !all
            .iter()
            .any(|e| matches!(e, ActorEvent::Started { incarnation: 1, .. }))
        {
            assert!(Instant::now() < deadline, "{all:?}");
            all.extend(s.poll().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            matches!(&all[0], ActorEvent::Exited { incarnation: 0, status, .. } if status == "killed by signal 9"),
            "{all:?}"
        );
        s.shutdown(Duration::from_secs(1));
    }

    #[test]
    fn dead_actors_restart_with_new_incarnations_until_the_limit() {
        // `false --actor-id N --incarnation K` exits at once with code 1.
        let (mut s, events) = Supervisor::start(config(Path::new("false"), 2)).unwrap();
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, ActorEvent::Started { .. }))
                .count(),
            2
        );
        let mut all = events;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && all
                .iter()
                .filter(|e| matches!(e, ActorEvent::GaveUp { .. }))
                .count()
                < 2
        {
            all.extend(s.poll().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        for actor_id in 0..2 {
            let incarnations: Vec<u32> = all
                .iter()
                .filter_map(|e| match e {
                    ActorEvent::Started {
                        actor_id: a,
                        incarnation,
                        ..
                    } if *a == actor_id => Some(*incarnation),
                    _ => None,
                })
                .collect();
            assert_eq!(incarnations, [0, 1, 2], "actor {actor_id}: {all:?}");
            assert!(all.contains(&ActorEvent::GaveUp {
                actor_id,
                restarts: 2
            }));
        }
        assert!(all
            .iter()
            .any(|e| matches!(e, ActorEvent::Exited { status, .. } if status == "exit code 1")));
        assert!(s.all_done());
    }

    #[test]
    fn shutdown_kills_what_does_not_exit_and_drop_leaves_no_orphans() {
        // `exec` makes the supervised pid the sleeper itself.
        let stubborn = script("stubborn", "trap '' TERM; exec sleep 30");
        let (mut s, _) = Supervisor::start(config(&stubborn, 0)).unwrap();
        let pids: Vec<u32> = s.running().iter().map(|r| r.2).collect();
        assert_eq!(pids.len(), 2);
        // Let the shells install their trap; then they ignore SIGTERM, and shutdown must kill
        // them once the grace period is over.
        std::thread::sleep(Duration::from_millis(300));
        let asked = Instant::now();
        let events = s.shutdown(Duration::from_millis(200));
        assert!(
            asked.elapsed() >= Duration::from_millis(200),
            "they exited on SIGTERM: the test lost its point"
        );
        let exited = events
            .iter()
            .filter(|e| matches!(e, ActorEvent::Exited { .. }))
            .count();
        assert_eq!(exited, 2, "{events:?}");
        for pid in pids {
            assert!(
                kill(Pid::from_raw(pid as i32), None).is_err(),
                "actor {pid} survived shutdown"
            );
        }
        let sleeper = script("sleeper", "exec sleep 30");
        let (s, _) = Supervisor::start(config(&sleeper, 0)).unwrap();
        let pids: Vec<u32> = s.running().iter().map(|r| r.2).collect();
        assert_eq!(pids.len(), 2);
        drop(s);
        for pid in pids {
            assert!(
                kill(Pid::from_raw(pid as i32), None).is_err(),
                "actor {pid} outlived its supervisor"
            );
        }
    }

    /// Restarts are counted within the window: an actor whose deaths lie further apart than the
    /// window is restarted every time, past `max_restarts`.
    #[test]
    fn restarts_outside_the_window_do_not_count() {
        let flaky = script("flaky", "sleep 0.05; exit 1");
        let mut c = config(&flaky, 1);
        c.actors = 1;
        c.restart_window = Duration::from_millis(1);
        let (mut s, mut all) = Supervisor::start(c).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !all
            .iter()
            .any(|e| matches!(e, ActorEvent::Started { incarnation: 4, .. }))
        {
            assert!(Instant::now() < deadline, "{all:?}");
            all.extend(s.poll().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !all.iter().any(|e| matches!(e, ActorEvent::GaveUp { .. })),
            "{all:?}"
        );
    }
}
