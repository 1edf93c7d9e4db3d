//! The ledger of an event's handlers: what each handler's runs make of it, and
//! what their standings make of the event. Pure rules — no I/O, no database — so
//! "is this handler done?" is answered here and nowhere else: a handler is done
//! once one of its runs ended `processed` (that run's attempt row was written
//! with the handler's effects).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use crate::domain::HandlerName;
use crate::duration;
use crate::handlers::HandlerError;
use crate::store::events::{AttemptRecord, EventStatus, Settled};
use crate::store::forwards::{ForwardRow, ForwardState};
use crate::store::history::Attempt;

/// Longest `last_error` kept, in characters.
const MAX_ERROR_CHARS: usize = 2000;
/// Where a handler stands, from its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerStatus {
    /// A run succeeded: the handler is done.
    Processed,
    /// Its latest run failed; it runs again.
    Failed,
    /// Its latest run failed for good.
    Dead,
    /// It has not run yet.
    Pending,
}

impl HandlerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HandlerStatus::Processed => "processed",
            HandlerStatus::Failed => "failed",
            HandlerStatus::Dead => "dead",
            HandlerStatus::Pending => "pending",
        }
    }

    /// A handler's status from its attempts' outcomes, oldest first: done once
    /// any run was, else as its latest run left it.
    pub fn from_outcomes<'a>(outcomes: impl IntoIterator<Item = &'a str>) -> Self {
        let mut latest = HandlerStatus::Pending;
        for outcome in outcomes {
            if outcome == EventStatus::Processed.as_str() {
                return HandlerStatus::Processed;
            }
            latest = if outcome == EventStatus::Dead.as_str() {
                HandlerStatus::Dead
            } else {
                HandlerStatus::Failed
            };
        }
        latest
    }

    pub fn is_done(self) -> bool {
        self == HandlerStatus::Processed
    }
}

impl fmt::Display for HandlerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where one handler of an event stands, as the views show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HandlerState {
    pub handler: HandlerName,
    pub status: HandlerStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub http_status: Option<i32>,
}

/// Each handler's standing from an event's attempts: those of `plan` (the
/// handlers the event has now) and any that ran before, in plan order.
pub fn handler_states(attempts: &[Attempt], plan: &[HandlerName]) -> Vec<HandlerState> {
    let mut names: Vec<HandlerName> = plan.to_vec();
    for attempt in attempts {
        if !names.iter().any(|name| name.is(&attempt.handler)) {
            names.push(HandlerName::parse(&attempt.handler));
        }
    }
    names
        .into_iter()
        .map(|handler| {
            let runs: Vec<&Attempt> = attempts.iter().filter(|a| handler.is(&a.handler)).collect();
            let latest = runs.last();
            HandlerState {
                status: HandlerStatus::from_outcomes(runs.iter().map(|a| a.outcome.as_str())),
                attempts: i32::try_from(runs.len()).unwrap_or(i32::MAX),
                last_error: latest.and_then(|a| a.error.clone()),
                http_status: latest.and_then(|a| a.http_status),
                handler,
            }
        })
        .collect()
}

/// One handler run, as it ended.
#[derive(Debug, Clone)]
pub struct Run {
    pub handler: HandlerName,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub result: Result<(), HandlerError>,
    pub http_status: Option<i32>,
    pub response: Option<String>,
}

/// Where a handler of an event stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Done,
    /// Will run again; with its latest error (none: it has not run yet).
    Again(Option<String>),
    /// Failed for good.
    Dead(String),
}

impl Standing {
    /// Where a handler that does not run now stands, from its runs so far.
    pub fn before(status: HandlerStatus) -> Self {
        match status {
            HandlerStatus::Processed => Standing::Done,
            HandlerStatus::Dead => Standing::Dead("failed for good before".into()),
            HandlerStatus::Failed | HandlerStatus::Pending => Standing::Again(None),
        }
    }

    /// Where a handler stands after its `runs`-th run ended with `result`.
    pub fn after(result: &Result<(), HandlerError>, runs: i32, max_attempts: i32) -> Self {
        match result {
            Ok(()) => Standing::Done,
            Err(HandlerError::Permanent(reason)) => Standing::Dead(reason.clone()),
            Err(HandlerError::Retry(reason)) if runs >= max_attempts => {
                Standing::Dead(format!("{reason} (gave up after {runs} attempts)"))
            }
            Err(HandlerError::Retry(reason)) => Standing::Again(Some(reason.clone())),
        }
    }

    /// What a run that left its handler here means for it, in its attempt row.
    fn outcome(&self) -> EventStatus {
        match self {
            Standing::Done => EventStatus::Processed,
            Standing::Dead(_) => EventStatus::Dead,
            Standing::Again(_) => EventStatus::Failed,
        }
    }
}

/// One handler of an event: its name, its runs so far and where that leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerStanding {
    pub name: HandlerName,
    pub runs: i32,
    pub standing: Standing,
}

/// How often and how soon handlers are tried again.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: i32,
    pub retry_base: Duration,
    pub retry_cap: Duration,
}

/// The event's row from where its kind's handler stands (`standings`, run
/// here) and its forwards' rows, at `now`. A handler due again makes the event
/// `failed` and due for the retry loop; a forward still to go keeps it `failed`
/// but not due (its lane sends it); what failed for good makes it `dead` once
/// nothing is left to go; else it is `processed`.
pub fn settle(
    standings: &[HandlerStanding],
    forwards: &[ForwardRow],
    attempts: i32,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
) -> Settled {
    let named = standings.len() + forwards.len() > 1;
    let error_of = |name: &HandlerName, reason: &str| {
        storable_error(&if named {
            format!("{name}: {reason}")
        } else {
            reason.to_string()
        })
    };
    let forward_error = |row: &ForwardRow| {
        let name = HandlerName::Forward(row.forward.clone());
        row.last_error
            .as_deref()
            .map(|reason| error_of(&name, reason))
    };
    let again: Vec<_> = standings
        .iter()
        .filter_map(|h| match &h.standing {
            Standing::Again(reason) => Some((&h.name, h.runs, reason)),
            _ => None,
        })
        .collect();
    let dead = standings
        .iter()
        .find_map(|h| match &h.standing {
            Standing::Dead(reason) => Some(error_of(&h.name, reason)),
            _ => None,
        })
        .or_else(|| {
            forwards
                .iter()
                .filter(|f| f.state == ForwardState::Dead)
                .find_map(forward_error)
        });
    let pending: Vec<&ForwardRow> = forwards
        .iter()
        .filter(|f| f.state == ForwardState::Pending)
        .collect();
    if !again.is_empty() || !pending.is_empty() {
        let next_attempt_at = (!again.is_empty()).then(|| {
            let runs = again.iter().map(|(_, runs, _)| *runs).max().unwrap_or(1);
            let delay = retry_delay(policy.retry_base, policy.retry_cap, runs);
            duration::after(now, delay).unwrap_or(now)
        });
        let last_error = again
            .iter()
            .find_map(|(name, _, reason)| reason.as_deref().map(|r| error_of(name, r)))
            .or_else(|| pending.iter().copied().find_map(forward_error))
            .or(dead);
        return Settled {
            status: EventStatus::Failed,
            attempts,
            last_error,
            next_attempt_at,
        };
    }
    let (status, last_error) = match dead {
        Some(reason) => (EventStatus::Dead, Some(reason)),
        None => (EventStatus::Processed, None),
    };
    Settled {
        status,
        attempts,
        last_error,
        next_attempt_at: None,
    }
}

/// The attempt row of a run, its outcome what the run means for its handler.
pub fn attempt_record(
    event: i64,
    attempt: i32,
    run: &Run,
    standing: Option<&Standing>,
) -> AttemptRecord {
    let error = match standing {
        Some(Standing::Dead(reason)) | Some(Standing::Again(Some(reason))) => {
            Some(storable_error(reason))
        }
        _ => None,
    };
    AttemptRecord {
        event,
        attempt,
        handler: run.handler.to_string(),
        started_at: run.started_at,
        finished_at: run.finished_at,
        outcome: standing.map_or(EventStatus::Failed, Standing::outcome),
        error,
        http_status: run.http_status,
        response: run.response.clone(),
    }
}

/// The attempt rows of `runs` (each with its attempt number), each with the
/// outcome its handler's standing gives it.
pub fn attempt_records(
    event: i64,
    runs: &[(i32, Run)],
    standings: &[HandlerStanding],
) -> Vec<AttemptRecord> {
    runs.iter()
        .map(|(number, run)| {
            let standing = standings
                .iter()
                .find(|h| h.name == run.handler)
                .map(|h| &h.standing);
            attempt_record(event, *number, run, standing)
        })
        .collect()
}

/// An error message as a text column can hold it: no NUL, bounded length.
fn storable_error(error: &str) -> String {
    let mut text: String = error
        .chars()
        .map(|c| if c == '\0' { '\u{fffd}' } else { c })
        .take(MAX_ERROR_CHARS)
        .collect();
    if error.chars().count() > MAX_ERROR_CHARS {
        text.push('…');
    }
    text
}

/// Exponential backoff with "equal jitter": the delay doubles from `base` per
/// attempt up to `cap`, and half of it is random so that events failing together
/// do not all retry at the same instant.
pub fn retry_delay(base: Duration, cap: Duration, attempt: i32) -> Duration {
    let doublings = u32::try_from(attempt.saturating_sub(1))
        .unwrap_or(0)
        .min(32);
    let full = base
        .checked_mul(2u32.saturating_pow(doublings))
        .unwrap_or(cap)
        .min(cap);
    let half = full / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(rand::random_range(0..=jitter_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        retry_base: Duration::from_secs(10),
        retry_cap: Duration::from_secs(100),
    };

    fn kind() -> HandlerName {
        HandlerName::Kind("invoice_paid".into())
    }

    fn forward() -> HandlerName {
        HandlerName::Forward("billing".into())
    }

    fn standing(name: HandlerName, runs: i32, standing: Standing) -> HandlerStanding {
        HandlerStanding {
            name,
            runs,
            standing,
        }
    }

    fn run(name: HandlerName, result: Result<(), HandlerError>) -> Run {
        let now = Utc::now();
        Run {
            handler: name,
            started_at: now,
            finished_at: now,
            result,
            http_status: None,
            response: None,
        }
    }

    #[test]
    fn handler_names_keep_their_text_form() {
        assert_eq!(kind().to_string(), "invoice_paid");
        assert_eq!(forward().to_string(), "forward:billing");
        assert_eq!(HandlerName::parse("forward:billing"), forward());
        assert_eq!(HandlerName::parse("invoice_paid"), kind());
        assert!(forward().is("forward:billing"));
        assert!(!forward().is("billing"));
        assert!(!kind().is("forward:invoice_paid"));
        assert_eq!(
            serde_json::to_value(forward()).expect("json"),
            serde_json::json!("forward:billing")
        );
    }

    #[test]
    fn a_handler_is_done_once_any_run_succeeded() {
        let of = |outcomes: &[&str]| HandlerStatus::from_outcomes(outcomes.iter().copied());
        assert_eq!(of(&[]), HandlerStatus::Pending);
        assert_eq!(of(&["failed"]), HandlerStatus::Failed);
        assert_eq!(of(&["failed", "dead"]), HandlerStatus::Dead);
        assert_eq!(of(&["failed", "processed"]), HandlerStatus::Processed);
        // An operator's retry after it was done: still done.
        assert_eq!(of(&["processed", "failed"]), HandlerStatus::Processed);
        assert_eq!(
            HandlerStatus::Processed.as_str(),
            EventStatus::Processed.as_str()
        );
        assert_eq!(format!("{:9}|", HandlerStatus::Dead), "dead     |");
    }

    #[test]
    fn a_run_leaves_its_handler_done_again_or_dead() {
        let retry = Err(HandlerError::Retry("down".into()));
        assert_eq!(Standing::after(&Ok(()), 1, 3), Standing::Done);
        assert_eq!(
            Standing::after(&retry, 2, 3),
            Standing::Again(Some("down".into()))
        );
        assert_eq!(
            Standing::after(&retry, 3, 3),
            Standing::Dead("down (gave up after 3 attempts)".into())
        );
        assert_eq!(
            Standing::after(&Err(HandlerError::Permanent("bad".into())), 1, 3),
            Standing::Dead("bad".into())
        );
        assert_eq!(Standing::before(HandlerStatus::Processed), Standing::Done);
        assert_eq!(
            Standing::before(HandlerStatus::Pending),
            Standing::Again(None)
        );
        assert!(matches!(
            Standing::before(HandlerStatus::Dead),
            Standing::Dead(_)
        ));
    }

    fn forward_row(state: ForwardState, last_error: Option<&str>) -> ForwardRow {
        ForwardRow {
            forward: "billing".into(),
            state,
            attempts: 1,
            last_error: last_error.map(Into::into),
            next_attempt_at: Utc::now(),
            leased: false,
        }
    }

    #[test]
    fn an_event_settles_from_its_handlers_standings() {
        let now = Utc::now();
        let done = settle(&[standing(kind(), 1, Standing::Done)], &[], 1, &POLICY, now);
        assert_eq!(done.status, EventStatus::Processed);
        assert_eq!((done.last_error, done.next_attempt_at), (None, None));

        // One handler: its error unnamed; a retry after the backoff.
        let again = settle(
            &[standing(kind(), 2, Standing::Again(Some("down".into())))],
            &[],
            2,
            &POLICY,
            now,
        );
        assert_eq!(again.status, EventStatus::Failed);
        assert_eq!(again.last_error.as_deref(), Some("down"));
        let due = again.next_attempt_at.expect("due") - now;
        assert!(due >= chrono::Duration::seconds(10) && due <= chrono::Duration::seconds(20));

        // A forward still to go keeps the event failed, but not due for the
        // retry loop (its lane sends it); errors are named by handler.
        let pending = settle(
            &[standing(kind(), 1, Standing::Dead("bad".into()))],
            &[forward_row(ForwardState::Pending, None)],
            1,
            &POLICY,
            now,
        );
        assert_eq!(pending.status, EventStatus::Failed);
        assert_eq!(pending.next_attempt_at, None);
        assert_eq!(pending.last_error.as_deref(), Some("invoice_paid: bad"));

        let waiting = settle(
            &[standing(kind(), 1, Standing::Done)],
            &[forward_row(ForwardState::Pending, Some("503"))],
            2,
            &POLICY,
            now,
        );
        assert_eq!(waiting.status, EventStatus::Failed);
        assert_eq!(waiting.next_attempt_at, None);
        assert_eq!(waiting.last_error.as_deref(), Some("forward:billing: 503"));

        let dead = settle(
            &[standing(kind(), 1, Standing::Done)],
            &[forward_row(ForwardState::Dead, Some("410"))],
            3,
            &POLICY,
            now,
        );
        assert_eq!(dead.status, EventStatus::Dead);
        assert_eq!(dead.last_error.as_deref(), Some("forward:billing: 410"));
        assert_eq!(dead.next_attempt_at, None);

        let delivered = settle(
            &[],
            &[forward_row(ForwardState::Delivered, None)],
            1,
            &POLICY,
            now,
        );
        assert_eq!(delivered.status, EventStatus::Processed);
    }

    #[test]
    fn an_attempt_row_records_what_the_run_means_for_its_handler() {
        let runs = vec![
            (4, run(kind(), Ok(()))),
            (5, run(forward(), Err(HandlerError::Retry("a\0b".into())))),
        ];
        let standings = [
            standing(kind(), 1, Standing::Done),
            standing(forward(), 1, Standing::Again(Some("a\0b".into()))),
        ];
        let rows = attempt_records(7, &runs, &standings);
        assert_eq!(rows[0].outcome, EventStatus::Processed);
        assert_eq!((rows[0].event, rows[0].attempt), (7, 4));
        assert_eq!(rows[0].handler, "invoice_paid");
        assert_eq!(rows[1].outcome, EventStatus::Failed);
        assert_eq!(rows[1].handler, "forward:billing");
        assert_eq!(rows[1].error.as_deref(), Some("a\u{fffd}b"));
        let long = "x".repeat(MAX_ERROR_CHARS + 5);
        assert_eq!(storable_error(&long).chars().count(), MAX_ERROR_CHARS + 1);
    }

    #[test]
    fn handler_states_list_the_plan_then_what_ran_before() {
        let at = Utc::now();
        let attempt = |handler: &str, outcome: &str| Attempt {
            attempt: 1,
            handler: handler.into(),
            started_at: at,
            finished_at: at,
            duration_ms: 0.0,
            outcome: outcome.into(),
            error: None,
            http_status: None,
            response: None,
        };
        let attempts = [
            attempt("forward:old", "dead"),
            attempt("invoice_paid", "failed"),
            attempt("invoice_paid", "processed"),
        ];
        let states = handler_states(&attempts, &[kind(), forward()]);
        let seen: Vec<(String, HandlerStatus, i32)> = states
            .iter()
            .map(|s| (s.handler.to_string(), s.status, s.attempts))
            .collect();
        assert_eq!(
            seen,
            [
                ("invoice_paid".into(), HandlerStatus::Processed, 2),
                ("forward:billing".into(), HandlerStatus::Pending, 0),
                ("forward:old".into(), HandlerStatus::Dead, 1),
            ]
        );
    }

    #[test]
    fn retry_delays_double_up_to_the_cap_with_bounded_jitter() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(3600);
        for (attempt, full) in [(1, 1), (2, 2), (3, 4), (10, 512), (13, 3600), (40, 3600)] {
            for _ in 0..50 {
                let d = retry_delay(base, cap, attempt);
                let full = Duration::from_secs(full);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
    }
}
