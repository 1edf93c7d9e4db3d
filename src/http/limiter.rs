//! Failed sign-ins, unknown bearer tokens and forged cookies, counted per client
//! and token name (the token a session cookie names; none for a presented
//! token): past a handful a minute, that client's wrong attempts for that token
//! are answered 429 with `Retry-After` until its window ends. Only what failed
//! is asked about: a right token or a valid session is never refused, so
//! guessing, from one address or rotated over many, cannot lock staff out. (Nor
//! can it slow a guesser, who tells a right token from a wrong one whatever the
//! wrong one's status: what keeps a token from being guessed is its length.)
//! When failures from all clients together pass a global rate, each is allowed
//! fewer. The entries are a bounded LRU: past its size the client that failed
//! longest ago is forgotten once its window has ended; while every remembered
//! client is still in its window (guessing rotated over more addresses than the
//! table holds), a new client is not remembered and, at the busy rate, its
//! failures are refused. Per instance and in memory; it is not an audit.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed per client, token and window.
pub const MAX_FAILURES: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Failures of all clients together per window past which each is allowed only
/// `BUSY_MAX_FAILURES`.
pub const BUSY_FAILURES: u32 = 100;
pub const BUSY_MAX_FAILURES: u32 = 3;
/// Clients (and tokens) remembered at once.
const MAX_ENTRIES: usize = 10_000;

/// A client's address and the token name it claims, if any.
type Key = (IpAddr, Option<String>);

#[derive(Debug, Default)]
pub struct FailureLimiter {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// The keys by their last failure, oldest first: the order of eviction.
    by_age: BTreeMap<u64, Key>,
    /// Stamps the failures in order.
    clock: u64,
    /// Every client's failures together.
    all: Option<Window>,
}

#[derive(Debug)]
struct Entry {
    window: Window,
    stamp: u64,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Window {
    fn new() -> Self {
        Window {
            started: Instant::now(),
            failures: 0,
        }
    }

    fn left(&self) -> Option<Duration> {
        WINDOW.checked_sub(self.started.elapsed())
    }

    /// This window if it has time left, else a new one.
    fn current(self) -> Self {
        if self.left().is_some() {
            self
        } else {
            Window::new()
        }
    }
}

impl State {
    /// Whether every remembered client is still in its window (the table full of
    /// them): a client not remembered may then be one of many rotating addresses.
    fn full_of_live_windows(&self) -> bool {
        self.entries.len() >= MAX_ENTRIES
            && self
                .by_age
                .first_key_value()
                .and_then(|(_, oldest)| self.entries.get(oldest))
                .is_some_and(|entry| entry.window.left().is_some())
    }

    /// Failures each client may have in its window now.
    fn allowance(&self) -> u32 {
        match self.all.and_then(|w| w.left().map(|_| w.failures)) {
            Some(failures) if failures >= BUSY_FAILURES => BUSY_MAX_FAILURES,
            _ => MAX_FAILURES,
        }
    }
}

impl FailureLimiter {
    /// `Err(wait)` while `client` is over its limit for `token`.
    pub fn check(&self, client: IpAddr, token: Option<&str>) -> Result<(), Duration> {
        let Ok(state) = self.state.lock() else {
            return Ok(());
        };
        let key = (client, token.map(String::from));
        let Some(entry) = state.entries.get(&key) else {
            // Guessing rotated over more addresses than the table holds: while
            // it is full of live windows and failures run at the busy rate, a
            // client it cannot remember is refused until the global window ends.
            if state.full_of_live_windows() && state.allowance() == BUSY_MAX_FAILURES {
                return Err(state.all.and_then(|w| w.left()).unwrap_or(WINDOW));
            }
            return Ok(());
        };
        match entry.window.left() {
            Some(wait) if entry.window.failures >= state.allowance() => Err(wait),
            _ => Ok(()),
        }
    }

    pub fn record_failure(&self, client: IpAddr, token: Option<&str>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let state = &mut *state;
        let mut all = state.all.map_or_else(Window::new, Window::current);
        all.failures = all.failures.saturating_add(1);
        state.all = Some(all);
        state.clock += 1;
        let stamp = state.clock;
        let key = (client, token.map(String::from));
        let mut window = match state.entries.remove(&key) {
            Some(entry) => {
                state.by_age.remove(&entry.stamp);
                entry.window.current()
            }
            None => {
                if state.full_of_live_windows() {
                    // Only the global count remembers it (see `check`).
                    return;
                }
                if state.entries.len() >= MAX_ENTRIES
                    && let Some((_, oldest)) = state.by_age.pop_first()
                {
                    state.entries.remove(&oldest);
                }
                Window::new()
            }
        };
        window.failures = window.failures.saturating_add(1);
        state.by_age.insert(stamp, key.clone());
        state.entries.insert(key, Entry { window, stamp });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(i: u32) -> IpAddr {
        IpAddr::from(i.to_be_bytes())
    }

    #[test]
    fn rotating_over_more_addresses_than_the_table_holds_gains_nothing() {
        let limiter = FailureLimiter::default();
        let clients = u32::try_from(MAX_ENTRIES).expect("fits") + 1;
        let mut allowed = 0u32;
        for _ in 0..5 {
            for i in 0..clients {
                if limiter.check(address(i), None).is_ok() {
                    allowed += 1;
                }
                limiter.record_failure(address(i), None);
            }
        }
        let at_most = (clients - 1) * BUSY_MAX_FAILURES;
        assert!(
            allowed <= at_most,
            "{allowed} guesses allowed, at most {at_most}"
        );
        assert!(limiter.check(address(clients - 1), None).is_err());
    }

    #[test]
    fn a_client_is_refused_after_its_failures_and_others_are_not() {
        let limiter = FailureLimiter::default();
        let guesser = IpAddr::from([203, 0, 113, 7]);
        let staff = IpAddr::from([198, 51, 100, 2]);
        for _ in 0..MAX_FAILURES {
            assert!(limiter.check(guesser, None).is_ok());
            limiter.record_failure(guesser, None);
        }
        let wait = limiter.check(guesser, None).expect_err("over the limit");
        assert!(wait > Duration::from_secs(50) && wait <= WINDOW, "{wait:?}");
        assert!(limiter.check(staff, None).is_ok());
        // Guessing from an address does not lock out a token's session there.
        assert!(limiter.check(guesser, Some("alice")).is_ok());
        for _ in 0..MAX_FAILURES {
            limiter.record_failure(guesser, Some("alice"));
        }
        assert!(limiter.check(guesser, Some("alice")).is_err());
        assert!(limiter.check(guesser, Some("bob")).is_ok());
    }

    #[test]
    fn many_failing_clients_leave_each_fewer_failures() {
        let limiter = FailureLimiter::default();
        // Each below its own limit...
        for i in 0..BUSY_FAILURES {
            limiter.record_failure(address(i), None);
        }
        let newcomer = IpAddr::from([192, 0, 2, 99]);
        for _ in 0..BUSY_MAX_FAILURES {
            assert!(limiter.check(newcomer, None).is_ok());
            limiter.record_failure(newcomer, None);
        }
        // ...but together past the global rate: three now lock a client out.
        assert!(limiter.check(newcomer, None).is_err());
        assert!(limiter.check(address(0), None).is_ok(), "one failure each");
        assert!(limiter.check(IpAddr::from([192, 0, 2, 100]), None).is_ok());

        let calm = FailureLimiter::default();
        for _ in 0..BUSY_MAX_FAILURES {
            calm.record_failure(newcomer, None);
        }
        assert!(calm.check(newcomer, None).is_ok(), "alone, ten are allowed");
    }

    #[test]
    fn memory_stays_bounded_and_the_longest_idle_client_goes_first() {
        let limiter = FailureLimiter::default();
        let persistent = IpAddr::from([198, 51, 100, 9]);
        for _ in 0..MAX_FAILURES {
            limiter.record_failure(persistent, None);
        }
        for i in 0..(MAX_ENTRIES as u32 + 500) {
            limiter.record_failure(address(i), None);
            if i % 1000 == 0 {
                // Still failing: recently used, so never the one evicted.
                limiter.record_failure(persistent, None);
            }
        }
        {
            let state = limiter.state.lock().expect("lock");
            assert_eq!(state.entries.len(), MAX_ENTRIES);
            assert_eq!(state.entries.len(), state.by_age.len());
        }
        // The table is full of live windows: a new client is not remembered, and
        // while failures run at the busy rate it is refused.
        let newest = address(MAX_ENTRIES as u32 + 499);
        assert!(
            !limiter
                .state
                .lock()
                .expect("lock")
                .entries
                .contains_key(&(newest, None))
        );
        assert!(limiter.check(newest, None).is_err());
        assert!(limiter.check(persistent, None).is_err());

        // Once the longest idle client's window has ended, it is the one forgotten.
        {
            let mut state = limiter.state.lock().expect("lock");
            let oldest = state
                .by_age
                .first_key_value()
                .map(|(_, k)| k.clone())
                .expect("oldest");
            assert_eq!(oldest, (address(0), None), "the longest idle client");
            let ended = Instant::now()
                .checked_sub(WINDOW + Duration::from_secs(1))
                .expect("clock");
            if let Some(entry) = state.entries.get_mut(&oldest) {
                entry.window.started = ended;
            }
        }
        limiter.record_failure(newest, None);
        let state = limiter.state.lock().expect("lock");
        assert!(
            !state.entries.contains_key(&(address(0), None)),
            "oldest gone"
        );
        assert!(state.entries.contains_key(&(newest, None)));
        assert_eq!(state.entries.len(), MAX_ENTRIES);
    }
}
