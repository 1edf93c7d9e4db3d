//! Failed sign-ins and unknown bearer tokens, counted per client: past a handful a
//! minute, the client is refused (429 with `Retry-After`) until its window ends,
//! whether its next attempt is right or wrong, so guessing gains nothing. Per
//! instance and in memory: it slows guessing, it is not an audit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed per client and window.
pub const MAX_FAILURES: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Clients remembered at once; past this the stalest windows are forgotten.
const MAX_CLIENTS: usize = 10_000;

#[derive(Debug, Default)]
pub struct FailureLimiter {
    windows: Mutex<HashMap<IpAddr, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl FailureLimiter {
    /// `Err(wait)` while `client` is over its limit.
    pub fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let Ok(windows) = self.windows.lock() else {
            return Ok(());
        };
        match windows.get(&client) {
            Some(w) if w.failures >= MAX_FAILURES && w.started.elapsed() < WINDOW => {
                Err(WINDOW.saturating_sub(w.started.elapsed()))
            }
            _ => Ok(()),
        }
    }

    pub fn record_failure(&self, client: IpAddr) {
        let Ok(mut windows) = self.windows.lock() else {
            return;
        };
        if windows.len() >= MAX_CLIENTS && !windows.contains_key(&client) {
            windows.retain(|_, w| w.started.elapsed() < WINDOW);
            if windows.len() >= MAX_CLIENTS
                && let Some(stalest) = windows.iter().min_by_key(|(_, w)| w.started)
            {
                let stalest = *stalest.0;
                windows.remove(&stalest);
            }
        }
        let now = Instant::now();
        let window = windows.entry(client).or_insert(Window {
            started: now,
            failures: 0,
        });
        if window.started.elapsed() >= WINDOW {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_refused_after_its_failures_and_others_are_not() {
        let limiter = FailureLimiter::default();
        let guesser = IpAddr::from([203, 0, 113, 7]);
        let staff = IpAddr::from([198, 51, 100, 2]);
        for _ in 0..MAX_FAILURES {
            assert!(limiter.check(guesser).is_ok());
            limiter.record_failure(guesser);
        }
        let wait = limiter.check(guesser).expect_err("over the limit");
        assert!(wait > Duration::from_secs(50) && wait <= WINDOW, "{wait:?}");
        assert!(limiter.check(staff).is_ok());
    }

    #[test]
    fn memory_stays_bounded_under_many_clients() {
        let limiter = FailureLimiter::default();
        for i in 0..(MAX_CLIENTS as u32 + 500) {
            limiter.record_failure(IpAddr::from(i.to_be_bytes()));
        }
        let remembered = limiter.windows.lock().map(|w| w.len()).unwrap_or(0);
        assert!(remembered <= MAX_CLIENTS, "{remembered}");
    }
}
