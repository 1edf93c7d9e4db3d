//! The process's own metrics, the `process_…` set every Prometheus client
//! exports, read at scrape time from the kernel (`/proc/self`, `getrusage`,
//! `getrlimit`). On a system without `/proc` the ones it holds are left out.

use std::fs;

use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage};
use nix::unistd::{SysconfVar, sysconf};

use super::Metric;

/// The process's gauges and its CPU counter, as they are now.
pub fn read() -> Vec<(Metric, f64)> {
    let mut out = Vec::new();
    if let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        out.push((
            Metric::ProcessCpuSeconds,
            seconds(usage.user_time()) + seconds(usage.system_time()),
        ));
    }
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        for (field, metric) in [
            ("VmRSS:", Metric::ProcessResidentMemory),
            ("VmSize:", Metric::ProcessVirtualMemory),
        ] {
            if let Some(kib) = kib_field(&status, field) {
                out.push((metric, kib as f64 * 1024.0));
            }
        }
    }
    if let Ok(entries) = fs::read_dir("/proc/self/fd") {
        out.push((Metric::ProcessOpenFds, entries.count() as f64));
    }
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) {
        out.push((Metric::ProcessMaxFds, soft as f64));
    }
    if let Some(start) = start_time() {
        out.push((Metric::ProcessStartTime, start));
    }
    out
}

/// `VmRSS:    1234 kB` → 1234.
fn kib_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Unix seconds: the boot time (`btime` of `/proc/stat`) plus the process's
/// start in clock ticks after boot (field 22 of `/proc/self/stat`).
fn start_time() -> Option<f64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let boot = fs::read_to_string("/proc/stat").ok()?;
    let ticks_per_second = sysconf(SysconfVar::CLK_TCK).ok()??;
    start_from(&stat, &boot, ticks_per_second as f64)
}

fn start_from(stat: &str, boot: &str, ticks_per_second: f64) -> Option<f64> {
    // The command name (field 2) is in parentheses and may hold spaces or `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let ticks: f64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = boot
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    (ticks_per_second > 0.0).then(|| btime + ticks / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_procfs_text() {
        let status = "Name:\thookd\nVmSize:\t  123456 kB\nVmRSS:\t   20480 kB\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(20480));
        assert_eq!(kib_field(status, "VmSize:"), Some(123456));
        assert_eq!(kib_field(status, "VmSwap:"), None);
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 3 2 0 0 20 0 \
                    6 0 250000 123 456 18446744073709551615";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(start_from(stat, boot, 100.0), Some(1_700_002_500.0));
    }

    #[test]
    fn this_process_is_measured() {
        let read = read();
        let get = |metric: Metric| read.iter().find(|(m, _)| *m == metric).map(|(_, v)| *v);
        assert!(get(Metric::ProcessResidentMemory).is_some_and(|v| v > 0.0));
        assert!(get(Metric::ProcessOpenFds).is_some_and(|v| v >= 3.0));
        let now = chrono::Utc::now().timestamp() as f64;
        let start = get(Metric::ProcessStartTime).expect("start time");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }
}
