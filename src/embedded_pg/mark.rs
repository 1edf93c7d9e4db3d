//! A hookd process as the cluster's folder records it (the owner, the other
//! users): its pid and when it started, so a pid the kernel has since given to
//! another process is never taken for it.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    pid: u32,
    /// Its start time, in clock ticks after boot (`/proc/PID/stat`); 0 when
    /// unknown (a bare pid, as an earlier version wrote it).
    started: u64,
}

impl Mark {
    pub(super) fn this_process() -> Mark {
        let pid = std::process::id();
        Mark {
            pid,
            started: start_time(pid).unwrap_or(0),
        }
    }

    /// `PID STARTED`, or a bare `PID`.
    pub(super) fn parse(text: &str) -> Option<Mark> {
        let mut words = text.split_whitespace();
        let pid = words.next()?.parse().ok()?;
        let started = match words.next() {
            Some(word) => word.parse().ok()?,
            None => 0,
        };
        Some(Mark { pid, started })
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process it names still runs (the same one, where its start
    /// time is known).
    pub(super) fn alive(&self) -> bool {
        match start_time(self.pid) {
            Some(started) => self.started == 0 || started == self.started,
            None => false,
        }
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.pid, self.started)
    }
}

/// The start time in `/proc/PID/stat`.
fn start_time(pid: u32) -> Option<u64> {
    start_time_in(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `stat` line, counted after the command name (field 2, in
/// parentheses, which may itself hold spaces and parentheses).
fn start_time_in(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_reads_back_as_written() {
        let me = Mark::this_process();
        assert!(me.started > 0, "start time read");
        assert!(me.alive());
        assert_eq!(Mark::parse(&me.to_string()), Some(me));
    }

    #[test]
    fn a_pid_given_to_another_process_is_not_the_one_recorded() {
        let me = Mark::this_process();
        let other = Mark {
            started: me.started + 1,
            ..me
        };
        assert!(!other.alive());
        // A bare pid (an earlier version's file) is alive while the pid is.
        let bare = Mark::parse(&me.pid.to_string()).expect("bare pid");
        assert!(bare.alive());
        assert_eq!(Mark::parse("nope"), None);
        assert_eq!(Mark::parse(""), None);
    }

    #[test]
    fn the_start_time_is_field_22_whatever_the_command_name_holds() {
        // Fields 3 to 52 numbered as themselves, after a name with spaces and
        // parentheses.
        let fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let line = format!("4242 (a) b (c) {}\n", fields.join(" "));
        assert_eq!(start_time_in(&line), Some(22));
        assert_eq!(start_time_in("4242 (hookd) S 1"), None);
        assert_eq!(start_time_in("no name at all"), None);
    }
}
