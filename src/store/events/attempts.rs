//! Handler runs: the attempt rows, and what each handler of an event has run.

use crate::store::sql::{self, Session, params};
use chrono::{DateTime, Utc};

use crate::store::StoreError;

use super::EventStatus;

/// What one handler of an event has done so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerRuns {
    /// The kind, or `forward:NAME`.
    pub handler: String,
    pub runs: i32,
    /// Each run's outcome, oldest first (what they make of the handler is the
    /// ledger's to say).
    pub outcomes: Vec<String>,
    /// Its latest run's error.
    pub last_error: Option<String>,
}

/// Each handler's runs of an event (attempts written before handlers were named
/// count as the kind's).
pub async fn handler_runs(client: &impl Session, id: i64) -> Result<Vec<HandlerRuns>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT COALESCE(a.handler, e.kind, ''), count(*)::int,
                    array_agg(a.outcome ORDER BY a.attempt, a.id),
                    (array_agg(a.error ORDER BY a.attempt DESC, a.id DESC))[1]
             FROM webhook_event_attempts a
             JOIN webhook_events e ON e.id = a.webhook_event_id
             WHERE a.webhook_event_id = $1
             GROUP BY 1",
        params![&id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| HandlerRuns {
            handler: row.get(0),
            runs: row.get(1),
            outcomes: row.get(2),
            last_error: row.get(3),
        })
        .collect())
}

/// How one handler run ended.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub event: i64,
    /// The event's run number: 1 for the first, then 2, 3, …
    pub attempt: i32,
    /// The kind, or `forward:NAME`.
    pub handler: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `processed`, `failed` or `dead`: what this run means for its handler.
    pub outcome: EventStatus,
    pub error: Option<String>,
    /// Forwards: the receiver's status and the first bytes of its answer.
    pub http_status: Option<i32>,
    pub response: Option<String>,
}

/// Attempt rows, any number at once (also the pgbench baseline's, with one).
pub const APPEND_ATTEMPTS: &str = "INSERT INTO webhook_event_attempts
        (webhook_event_id, attempt, handler, started_at, finished_at, outcome, error,
         http_status, response)
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[],
                         $5::timestamptz[], $6::text[], $7::text[], $8::int[],
                         $9::text[])";

/// Appends attempt rows, in one statement.
pub async fn append_attempts(
    client: &impl Session,
    attempts: &[AttemptRecord],
) -> Result<(), StoreError> {
    if attempts.is_empty() {
        return Ok(());
    }
    let events: Vec<i64> = attempts.iter().map(|a| a.event).collect();
    let columns = AttemptColumns::from_attempts(attempts.iter());
    let mut params = vec![sql::param(&events)];
    params.extend(columns.params());
    sql::execute(client, APPEND_ATTEMPTS, &params).await?;
    Ok(())
}

/// The columns of attempt rows but their event's id, in `APPEND_ATTEMPTS`' order.
pub(super) struct AttemptColumns<'a> {
    numbers: Vec<i32>,
    handlers: Vec<&'a str>,
    started: Vec<DateTime<Utc>>,
    finished: Vec<DateTime<Utc>>,
    outcomes: Vec<&'static str>,
    errors: Vec<Option<&'a str>>,
    statuses: Vec<Option<i32>>,
    responses: Vec<Option<&'a str>>,
}

impl<'a> AttemptColumns<'a> {
    pub(super) fn from_attempts(attempts: impl Iterator<Item = &'a AttemptRecord> + Clone) -> Self {
        AttemptColumns {
            numbers: attempts.clone().map(|a| a.attempt).collect(),
            handlers: attempts.clone().map(|a| a.handler.as_str()).collect(),
            started: attempts.clone().map(|a| a.started_at).collect(),
            finished: attempts.clone().map(|a| a.finished_at).collect(),
            outcomes: attempts.clone().map(|a| a.outcome.as_str()).collect(),
            errors: attempts.clone().map(|a| a.error.as_deref()).collect(),
            statuses: attempts.clone().map(|a| a.http_status).collect(),
            responses: attempts.map(|a| a.response.as_deref()).collect(),
        }
    }

    pub(super) fn params(&self) -> [sql::Param<'_>; 8] {
        [
            sql::param(&self.numbers),
            sql::param(&self.handlers),
            sql::param(&self.started),
            sql::param(&self.finished),
            sql::param(&self.outcomes),
            sql::param(&self.errors),
            sql::param(&self.statuses),
            sql::param(&self.responses),
        ]
    }
}
