//! Process identities that survive pid reuse (the pid and its start time from
//! `/proc/<pid>/stat`): the owners of shared-memory segments and the holders of ring slots.

/// A process identity that survives pid reuse: the pid and its start time (0 = unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessId {
    pub pid: u32,
    pub start: u64,
}

impl ProcessId {
    pub fn current() -> Self {
        let pid = std::process::id();
        let start = proc_stat(pid).ok().flatten().map_or(0, |(_, start)| start);
        ProcessId { pid, start }
    }

    /// Whether the process still runs (a zombie does not; a pid now held by a process that
    /// started at another time does not). When neither `/proc` nor `kill(pid, 0)` can tell,
    /// the answer is "alive": callers then wait for their timeout instead of deleting a live
    /// run's memory.
    pub fn alive(&self) -> bool {
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return false;
        }
        match proc_stat(self.pid) {
            Ok(Some((state, start))) => {
                !matches!(state, 'Z' | 'X' | 'x')
                    && (self.start == 0 || start == 0 || start == self.start)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            _ => {
                let pid = nix::unistd::Pid::from_raw(self.pid as i32);
                nix::sys::signal::kill(pid, None) != Err(nix::errno::Errno::ESRCH)
            }
        }
    }
}

/// State and start time of `pid` from `/proc/<pid>/stat`; `Ok(None)` if it does not parse.
fn proc_stat(pid: u32) -> std::io::Result<Option<(char, u64)>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    Ok(parse_stat(&text))
}

/// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are split
/// after the last ')'. Field 3 is the state, field 22 the start time.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let close = text.rfind(')')?;
    let mut fields = text[close + 1..].split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next());
    let start = fields.nth(18).and_then(|s| s.parse::<u64>().ok());
    state.zip(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_pid_zero_is_not() {
        let me = ProcessId::current();
        assert!(me.alive());
        assert!(me.start > 0, "/proc/self/stat gives a start time");
        assert!(!ProcessId { pid: 0, start: 0 }.alive());
        // Our pid with another start time: a later process that reused a dead owner's pid.
        assert!(!ProcessId {
            pid: me.pid,
            start: me.start + 1
        }
        .alive());
    }

    #[test]
    fn proc_stat_handles_odd_command_names() {
        let (state, start) = proc_stat(std::process::id()).unwrap().unwrap();
        assert!(state == 'R' || state == 'S', "{state}");
        assert!(start > 0);
        // A comm with spaces and parentheses must not shift the fields.
        let rest = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        assert_eq!(
            parse_stat(&format!("77 (a) b (c) {rest}")),
            Some(('S', 424242))
        );
        assert_eq!(parse_stat("77 (truncated"), None);
        assert_eq!(parse_stat("77 (x) Z 1"), None);
    }
}
