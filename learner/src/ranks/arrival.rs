//! Who has reached a collective: the side channel that lets a rank name the rank it lost.
//!
//! A blocking MPI collective says nothing while a rank is missing, and forever: a killed or hung
//! (SIGSTOP) rank would leave the others blocked in it with no word of who is gone. So before
//! each collective every rank sends every other a one-byte **arrival notice** (a non-blocking
//! send, tagged with the collective's sequence number) and then waits, polling, until it holds
//! every other rank's notice for that collective; only then does it enter the collective, which
//! can no longer block on a missing rank (but for a rank lost inside it, which the watchdog
//! bounds). While it waits it knows exactly which ranks have not arrived, and it gives the
//! group up ([`RankLost`], naming them) as soon as
//!
//! - a missing rank's process is **gone**: ranks on one machine (one kernel boot and one pid
//!   namespace: [`Peer::machine`]) check each other's pid every [`LIVENESS_EVERY`], so a
//!   SIGKILLed rank is named within a fraction of a second; or
//! - the wait passes the timeout (`RECUR_RANK_TIMEOUT_S`, default 60 s): the missing ranks are
//!   **silent** (hung, killed on another machine, or cut off).
//!
//! The cost is `N - 1` one-byte messages sent and received per rank per collective, next to a
//! gradient all-reduce of the whole flat gradient: nothing at the few ranks recur runs on one
//! machine, and still small beside the all-reduce at tens of ranks.

use std::time::{Duration, Instant};

use super::Rank;

/// How often a waiting rank checks that the missing ranks on its machine still exist.
pub const LIVENESS_EVERY: Duration = Duration::from_millis(100);

/// Where a rank's process lives, exchanged once when the group forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: u32,
    /// A hash of the kernel's boot id and the pid namespace: ranks with the same (non-zero)
    /// value see each other's pids. 0 where either cannot be read (no liveness check).
    pub machine: u64,
}

impl Peer {
    /// This process.
    pub fn this() -> Peer {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
        let ns = std::fs::read_link("/proc/self/ns/pid");
        let machine = match (boot, ns) {
            (Ok(boot), Ok(ns)) => {
                let key = format!("{}|{}", boot.trim(), ns.display());
                common::hash::fnv1a(key.bytes()).max(1)
            }
            _ => 0,
        };
        Peer {
            pid: std::process::id(),
            machine,
        }
    }

    /// Whether `self`'s process is seen, from `me`'s machine, to be gone (never for a rank on
    /// another machine: only its silence tells).
    pub fn gone_from(&self, me: &Peer) -> bool {
        me.machine != 0 && self.machine == me.machine && !alive(self.pid)
    }
}

impl Peer {
    /// Whether `self`'s process is seen, from `me`'s machine, to be stopped (SIGSTOP, a
    /// debugger): hung, though alive.
    pub fn stopped_from(&self, me: &Peer) -> bool {
        me.machine != 0
            && self.machine == me.machine
            && state(self.pid).is_some_and(|s| s == 'T' || s == 't')
    }
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// The state letter of process `pid` (`/proc/<pid>/stat`), `None` when it does not exist.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// A rank gave the group up: ranks it waited for did not reach a collective.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "{me}: lost {} {why} while waiting in {what}; giving the group up. The last checkpoint in \
     rank 0's run directory stays valid: --resume continues the run",
    names(.lost)
)]
pub struct RankLost {
    /// The rank that gave up.
    pub me: Rank,
    /// The ranks that did not arrive.
    pub lost: Vec<usize>,
    /// The collective (`an all-reduce`, `a broadcast`).
    pub what: &'static str,
    pub why: Why,
}

/// How a waiting rank knew the others were lost.
#[derive(Clone, Debug, PartialEq)]
pub enum Why {
    /// Their processes, on this rank's machine, are gone (`pids`, one per lost rank).
    Gone { pids: Vec<u32> },
    /// They sent nothing for the timeout.
    Silent(Duration),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Gone { pids } => {
                let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                write!(f, "(its process is gone: pid {})", pids.join(", "))
            }
            Why::Silent(t) => write!(
                f,
                "(it did not reach the collective in {:.0} s: hung, killed on another machine \
                 or cut off; RECUR_RANK_TIMEOUT_S)",
                t.as_secs_f64()
            ),
        }
    }
}

/// `rank 1`, `ranks 1, 3`.
pub fn names(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// The notices of one collective, as the MPI world carries them (a fake in the tests).
pub trait Notices {
    /// Sends this rank's arrival at collective `seq` to every other rank.
    fn announce(&self, seq: u64);
    /// Whether rank `from`'s arrival at collective `seq` has come (taking it if so).
    fn arrived(&self, from: usize, seq: u64) -> bool;
}

/// Announces this rank's arrival at collective `seq` and waits until every other rank has
/// arrived too; a rank gone from this machine, or silent for `timeout`, is [`RankLost`].
pub fn wait_for_all(
    notices: &impl Notices,
    me: Rank,
    peers: &[Peer],
    seq: u64,
    what: &'static str,
    timeout: Duration,
) -> Result<(), RankLost> {
    notices.announce(seq);
    let mut missing: Vec<usize> = (0..me.size).filter(|&r| r != me.rank).collect();
    let start = Instant::now();
    let mut checked = start;
    let mut pause = Duration::ZERO;
    loop {
        missing.retain(|&r| !notices.arrived(r, seq));
        if missing.is_empty() {
            return Ok(());
        }
        let lost = |why| RankLost {
            me,
            lost: missing.clone(),
            what,
            why,
        };
        if checked.elapsed() >= LIVENESS_EVERY {
            checked = Instant::now();
            let gone: Vec<usize> = (missing.iter().copied())
                .filter(|&r| peers[r].gone_from(&peers[me.rank]))
                .collect();
            if !gone.is_empty() {
                let pids = gone.iter().map(|&r| peers[r].pid).collect();
                return Err(RankLost {
                    lost: gone,
                    ..lost(Why::Gone { pids })
                });
            }
        }
        if start.elapsed() >= timeout {
            return Err(lost(Why::Silent(timeout)));
        }
        // Spin briefly (the others are usually a few microseconds away), then back off to a
        // millisecond so that a long wait leaves the cores to the actors.
        if pause.is_zero() && start.elapsed() < Duration::from_micros(200) {
            std::thread::yield_now();
        } else {
            pause = (pause * 2).clamp(Duration::from_micros(20), Duration::from_millis(1));
            std::thread::sleep(pause);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashSet;

    use super::*;

    /// Ranks whose notices arrive (all others never do); what was announced.
    struct Fake {
        present: HashSet<usize>,
        announced: RefCell<Vec<u64>>,
    }

    impl Notices for Fake {
        fn announce(&self, seq: u64) {
            self.announced.borrow_mut().push(seq);
        }
        fn arrived(&self, from: usize, _seq: u64) -> bool {
            self.present.contains(&from)
        }
    }

    fn fake(present: &[usize]) -> Fake {
        Fake {
            present: present.iter().copied().collect(),
            announced: RefCell::new(Vec::new()),
        }
    }

    fn me(rank: usize, size: usize) -> Rank {
        Rank { rank, size }
    }

    /// Peers on another machine: only their silence tells.
    fn remote(n: usize) -> Vec<Peer> {
        (0..n)
            .map(|r| Peer {
                pid: 1 + r as u32,
                machine: 100 + r as u64,
            })
            .collect()
    }

    #[test]
    fn every_rank_arrived_is_ok_and_the_arrival_is_announced() {
        let f = fake(&[0, 2, 3]);
        let got = wait_for_all(&f, me(1, 4), &remote(4), 7, "an all-reduce", Duration::ZERO);
        assert_eq!(got, Ok(()));
        assert_eq!(*f.announced.borrow(), vec![7]);
    }

    #[test]
    fn silent_ranks_are_named_after_the_timeout() {
        let f = fake(&[0, 3]);
        let timeout = Duration::from_millis(50);
        let start = Instant::now();
        let err = wait_for_all(&f, me(0, 4), &remote(4), 1, "a broadcast", timeout).unwrap_err();
        assert!(start.elapsed() >= timeout);
        assert_eq!(err.lost, vec![1, 2]);
        assert_eq!(err.why, Why::Silent(timeout));
        let msg = err.to_string();
        assert!(
            msg.starts_with("rank 0 of 4: lost ranks 1, 2 (it did not reach the collective in"),
            "{msg}"
        );
        assert!(msg.contains("while waiting in a broadcast") && msg.contains("--resume"));
    }

    #[test]
    fn a_rank_whose_process_is_gone_on_this_machine_is_named_at_once() {
        // Rank 1 is a pid that has exited (a child reaped), on this machine; rank 2 is alive
        // (this process) but silent, on this machine too: only rank 1 is named, long before
        // the timeout.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let here = Peer::this();
        assert_ne!(
            here.machine, 0,
            "this machine's boot id and pid namespace are readable"
        );
        let peers = [
            here,
            Peer { pid: dead, ..here },
            Peer {
                pid: std::process::id(),
                ..here
            },
        ];
        let start = Instant::now();
        let f = fake(&[]);
        let err = wait_for_all(
            &f,
            me(0, 3),
            &peers,
            1,
            "an all-reduce",
            Duration::from_secs(30),
        )
        .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(err.lost, vec![1]);
        assert_eq!(err.why, Why::Gone { pids: vec![dead] });
        assert!(
            err.to_string().starts_with(&format!(
                "rank 0 of 3: lost rank 1 (its process is gone: pid {dead})"
            )),
            "{err}"
        );
        // The same pid seen from another machine is not judged.
        let elsewhere = Peer {
            machine: here.machine ^ 1,
            ..here
        };
        assert!(!peers[1].gone_from(&elsewhere));
        assert!(peers[1].gone_from(&here) && !peers[2].gone_from(&here));
    }
}
