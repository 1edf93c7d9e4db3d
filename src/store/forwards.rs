//! The `event_forwards` table: each forward an event goes to, planned in the
//! transaction that stores the event and sent from that forward's own lane.
//! A lane claims its due rows with `SKIP LOCKED` and leases them (no transaction
//! stays open while a receiver answers); the answer is recorded under the
//! event's row lock, so concurrent lanes of one event settle it one at a time.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::events::ClaimedEvent;
use super::sql::{self, Session, params};

/// Where one forward of an event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardState {
    /// To be sent at its next attempt time.
    Pending,
    Delivered,
    /// Failed for good: waits for a person.
    Dead,
}

impl ForwardState {
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardState::Pending => "pending",
            ForwardState::Delivered => "delivered",
            ForwardState::Dead => "dead",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "delivered" => ForwardState::Delivered,
            "dead" => ForwardState::Dead,
            _ => ForwardState::Pending,
        }
    }
}

/// The row standing for the forwards of an event stored before forwards had
/// rows: the configuration's matching forwards, written out when it is retried.
pub const UNPLANNED: &str = "*";

/// One forward of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRow {
    pub forward: String,
    pub state: ForwardState,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    /// A lane is sending it now.
    pub leased: bool,
}

impl ForwardRow {
    /// The row of a forward planned just now, not sent yet.
    pub fn planned(forward: &str) -> Self {
        ForwardRow {
            forward: forward.to_string(),
            state: ForwardState::Pending,
            attempts: 0,
            last_error: None,
            next_attempt_at: Utc::now(),
            leased: false,
        }
    }
}

/// Plans forwards for new events (`(event row id, forward name)`), in the
/// transaction that stores them: each is due at once.
pub async fn plan(client: &impl Session, rows: &[(i64, &str)]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let (ids, names): (Vec<i64>, Vec<&str>) = rows.iter().copied().unzip();
    sql::execute(
        client,
        "INSERT INTO event_forwards (webhook_event_id, forward)
             SELECT * FROM unnest($1::bigint[], $2::text[])
             ON CONFLICT DO NOTHING",
        params![&ids, &names],
    )
    .await?;
    Ok(())
}

/// A forward's row claimed by a lane, with its event.
#[derive(Debug, Clone)]
pub struct ClaimedForward {
    pub event: ClaimedEvent,
    pub forward: String,
    /// The forward's runs before this one.
    pub attempts: i32,
    /// Until when this lane holds it; the answer is recorded only while it does.
    pub lease_until: DateTime<Utc>,
}

/// The columns `ClaimedForward` is read from (`l`, the leased rows, joined to
/// their events `e`): the event's as `events::claimed` reads them, then the
/// forward's runs, lease and name.
macro_rules! claimed_forward_columns {
    () => {
        "e.id, e.source, e.event_id, e.event_type, e.kind, e.payload, e.attempts, e.body, \
         e.received_at, false, l.attempts, l.lease_until, l.forward"
    };
}

/// Leases up to `limit` of `forward`'s due rows, most overdue first, for
/// `lease_secs` (by the database's clock; their next attempt moves to the
/// lease's end, so no other lane claims them meanwhile).
pub async fn claim_due(
    client: &impl Session,
    forward: &str,
    limit: i64,
    lease_secs: f64,
) -> Result<Vec<ClaimedForward>, StoreError> {
    let rows = sql::query(
        client,
        concat!(
            "WITH due AS (
                 SELECT webhook_event_id FROM event_forwards
                 WHERE forward = $1 AND state = 'pending' AND next_attempt_at <= now()
                 ORDER BY next_attempt_at, webhook_event_id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED
             ), l AS (
                 UPDATE event_forwards f
                 SET lease_until = now() + make_interval(secs => $3),
                     next_attempt_at = now() + make_interval(secs => $3)
                 FROM due
                 WHERE f.webhook_event_id = due.webhook_event_id AND f.forward = $1
                 RETURNING f.webhook_event_id, f.forward, f.attempts, f.lease_until
             )
             SELECT ",
            claimed_forward_columns!(),
            " FROM l JOIN webhook_events e ON e.id = l.webhook_event_id
             ORDER BY l.webhook_event_id"
        ),
        params![&forward, &limit, &lease_secs],
    )
    .await?;
    Ok(rows.iter().map(claimed_forward).collect())
}

/// Leases, for an operator's retry of event `id` in `tx` (which holds the
/// event's row), the forwards `names`: pending again whatever they were, and
/// held by this retry for `lease_secs`.
pub async fn lease_for_retry(
    tx: &impl Session,
    id: i64,
    names: &[&str],
    lease_secs: f64,
) -> Result<Vec<ClaimedForward>, StoreError> {
    let rows = sql::query(
        tx,
        concat!(
            "WITH l AS (
                 UPDATE event_forwards
                 SET state = 'pending',
                     lease_until = now() + make_interval(secs => $3),
                     next_attempt_at = now() + make_interval(secs => $3)
                 WHERE webhook_event_id = $1 AND forward = ANY($2)
                 RETURNING webhook_event_id, forward, attempts, lease_until
             )
             SELECT ",
            claimed_forward_columns!(),
            " FROM l JOIN webhook_events e ON e.id = l.webhook_event_id
             ORDER BY l.forward"
        ),
        params![&id, &names, &lease_secs],
    )
    .await?;
    Ok(rows.iter().map(claimed_forward).collect())
}

fn claimed_forward(row: &tokio_postgres::Row) -> ClaimedForward {
    ClaimedForward {
        event: super::events::claimed(row),
        attempts: row.get(10),
        lease_until: row.get(11),
        forward: row.get(12),
    }
}

/// The forwards of event `id`, by name.
pub async fn of_event(client: &impl Session, id: i64) -> Result<Vec<ForwardRow>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT forward, state, attempts, last_error, next_attempt_at,
                COALESCE(lease_until > now(), false)
             FROM event_forwards WHERE webhook_event_id = $1 ORDER BY forward",
        params![&id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| ForwardRow {
            forward: row.get(0),
            state: ForwardState::parse(row.get(1)),
            attempts: row.get(2),
            last_error: row.get(3),
            next_attempt_at: row.get(4),
            leased: row.get(5),
        })
        .collect())
}

/// How a forward's run ended, to record.
#[derive(Debug, Clone)]
pub struct ForwardOutcome<'a> {
    pub state: ForwardState,
    /// When a pending forward is due again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<&'a str>,
}

/// Records a run of `forward` for event `id` in `tx` (which holds the event's
/// row), if `lease_until` is still its lease; whether it was (when it was not,
/// the lease ran out and another lane took the row over: nothing is written).
pub async fn record(
    tx: &impl Session,
    id: i64,
    forward: &str,
    lease_until: DateTime<Utc>,
    outcome: &ForwardOutcome<'_>,
) -> Result<bool, StoreError> {
    let changed = sql::execute(
        tx,
        "UPDATE event_forwards
             SET state = $4, attempts = attempts + 1, lease_until = NULL,
                 next_attempt_at = COALESCE($5, next_attempt_at), last_error = $6
             WHERE webhook_event_id = $1 AND forward = $2 AND lease_until = $3",
        params![
            &id,
            &forward,
            &lease_until,
            &outcome.state.as_str(),
            &outcome.next_attempt_at,
            &outcome.last_error,
        ],
    )
    .await?;
    Ok(changed == 1)
}

/// Writes out the unplanned row of event `id` (stored before forwards had rows)
/// as `rows`: `(forward, state, runs so far)`.
pub async fn replace_unplanned(
    tx: &impl Session,
    id: i64,
    rows: &[(&str, ForwardState, i32)],
) -> Result<(), StoreError> {
    sql::execute(
        tx,
        "DELETE FROM event_forwards WHERE webhook_event_id = $1 AND forward = $2",
        params![&id, &UNPLANNED],
    )
    .await?;
    let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let states: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    let runs: Vec<i32> = rows.iter().map(|r| r.2).collect();
    sql::execute(
        tx,
        "INSERT INTO event_forwards (webhook_event_id, forward, state, attempts)
             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::int[])
             ON CONFLICT DO NOTHING",
        params![&id, &names, &states, &runs],
    )
    .await?;
    Ok(())
}
