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
    /// When it was planned (its event received).
    pub planned_at: DateTime<Utc>,
}

/// The select `ClaimedForward` is read from: `l`, the leased rows, joined to
/// their events `e`; the event's columns as `events::claimed` reads them, then
/// the forward's runs, lease and name.
macro_rules! select_claimed_from_l {
    () => {
        "SELECT e.id, e.source, e.event_id, e.event_type, e.kind, e.payload, e.attempts, e.body, \
                e.received_at, false, l.attempts, l.lease_until, l.forward, l.created_at
         FROM l JOIN webhook_events e ON e.id = l.webhook_event_id"
    };
}

/// Leases up to `limit` of `forward`'s due rows, in the order their events came, for
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
                 ORDER BY webhook_event_id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED
             ), l AS (
                 UPDATE event_forwards f
                 SET lease_until = now() + make_interval(secs => $3),
                     next_attempt_at = now() + make_interval(secs => $3)
                 FROM due
                 WHERE f.webhook_event_id = due.webhook_event_id AND f.forward = $1
                 RETURNING f.webhook_event_id, f.forward, f.attempts, f.lease_until, f.created_at
             ) ",
            select_claimed_from_l!(),
            " ORDER BY l.webhook_event_id"
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
                 RETURNING webhook_event_id, forward, attempts, lease_until, created_at
             ) ",
            select_claimed_from_l!(),
            " ORDER BY l.forward"
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
        planned_at: row.get(13),
    }
}

/// The select of an event's forwards, by name, with whether each is leased now.
macro_rules! select_of_event {
    () => {
        "SELECT forward, state, attempts, last_error, next_attempt_at,
                COALESCE(lease_until > now(), false)
             FROM event_forwards WHERE webhook_event_id = $1 ORDER BY forward"
    };
}

/// The forwards of event `id`, by name.
pub async fn of_event(client: &impl Session, id: i64) -> Result<Vec<ForwardRow>, StoreError> {
    let rows = sql::query(client, select_of_event!(), params![&id]).await?;
    Ok(forward_rows(&rows))
}

/// The forwards of event `id`, by name, locked for `tx` (an operator's retry):
/// a lane's claim skips them until `tx` ends, and one under way when they were
/// asked for is waited out, so the leases read here are the last word.
pub async fn lock_of_event(tx: &impl Session, id: i64) -> Result<Vec<ForwardRow>, StoreError> {
    let rows = sql::query(tx, concat!(select_of_event!(), " FOR UPDATE"), params![&id]).await?;
    Ok(forward_rows(&rows))
}

fn forward_rows(rows: &[tokio_postgres::Row]) -> Vec<ForwardRow> {
    rows.iter()
        .map(|row| ForwardRow {
            forward: row.get(0),
            state: ForwardState::parse(row.get(1)),
            attempts: row.get(2),
            last_error: row.get(3),
            next_attempt_at: row.get(4),
            leased: row.get(5),
        })
        .collect()
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

/// Where a forward stands for its lanes, shared by every instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneState {
    /// Its breaker is open: only probes go.
    pub open: bool,
    /// An operator paused it.
    pub paused: bool,
}

/// Where `forward` stands (a forward with no row is closed and running).
pub async fn lane_state(client: &impl Session, forward: &str) -> Result<LaneState, StoreError> {
    let row = sql::query_opt(
        client,
        "SELECT opened_at IS NOT NULL, paused_at IS NOT NULL
             FROM forward_states WHERE forward = $1",
        params![&forward],
    )
    .await?;
    Ok(row.map_or_else(LaneState::default, |row| LaneState {
        open: row.get(0),
        paused: row.get(1),
    }))
}

/// How long an open breaker waits between probes.
const PROBE_EVERY: &str = "1 minute";

/// Takes the next probe of an open `forward` for this lane, if one is due
/// (one instance's lane takes it; the others find it taken).
pub async fn take_probe(client: &impl Session, forward: &str) -> Result<bool, StoreError> {
    Ok(sql::query_opt(
        client,
        "UPDATE forward_states SET probe_at = now() + $2::text::interval, updated_at = now()
             WHERE forward = $1 AND opened_at IS NOT NULL AND probe_at <= now()
             RETURNING 1",
        params![&forward, &PROBE_EVERY],
    )
    .await?
    .is_some())
}

/// What a send did to its forward's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    Unchanged,
    /// Its failures reached `open_after`: its events wait, a probe goes each minute.
    Opened,
    /// A send went through while it was open: its waiting events are due now,
    /// to go in the order they came.
    Closed,
}

/// How a send to a forward's receiver went, as its breaker counts it.
#[derive(Debug, Clone)]
pub enum SendOutcome {
    /// The receiver took it (2xx).
    Taken,
    /// The receiver refused that event (a 4xx): it is there, but this is no
    /// sign that it takes events again.
    Refused,
    /// It failed and will be tried again (its error).
    Failed(String),
}

/// Counts a send to `forward`: consecutive failures open the breaker at
/// `open_after`, the first send taken closes it; a refusal breaks a run of
/// failures while it is closed, and leaves it open (its next probe a minute
/// on, as the claim of this one set it) while it is open.
pub async fn count_send(
    client: &impl Session,
    forward: &str,
    outcome: SendOutcome,
    open_after: i32,
) -> Result<Breaker, StoreError> {
    let error = match outcome {
        SendOutcome::Failed(error) => error,
        SendOutcome::Refused => {
            sql::execute(
                client,
                "UPDATE forward_states SET consecutive_failures = 0, updated_at = now()
                     WHERE forward = $1 AND opened_at IS NULL AND consecutive_failures > 0",
                params![&forward],
            )
            .await?;
            return Ok(Breaker::Unchanged);
        }
        SendOutcome::Taken => return close(client, forward).await,
    };
    let opened: bool = sql::query_one(
        client,
        "INSERT INTO forward_states AS s (forward, consecutive_failures, last_error, opened_at, probe_at)
             VALUES ($1, 1, $2, CASE WHEN $3 <= 1 THEN now() END,
                     CASE WHEN $3 <= 1 THEN now() + $4::text::interval END)
         ON CONFLICT (forward) DO UPDATE
             SET consecutive_failures = s.consecutive_failures + 1,
                 last_error = EXCLUDED.last_error,
                 updated_at = now(),
                 opened_at = CASE WHEN s.opened_at IS NULL AND s.consecutive_failures + 1 >= $3
                                  THEN now() ELSE s.opened_at END,
                 probe_at = CASE WHEN s.opened_at IS NULL AND s.consecutive_failures + 1 >= $3
                                 THEN now() + $4::text::interval ELSE s.probe_at END
         RETURNING opened_at IS NOT NULL AND opened_at = now()",
        params![&forward, &error, &open_after, &PROBE_EVERY],
    )
    .await?
    .get(0);
    Ok(if opened {
        Breaker::Opened
    } else {
        Breaker::Unchanged
    })
}

/// A send went through: the breaker closes if it was open (what waited is due
/// now) and the run of failures ends.
async fn close(client: &impl Session, forward: &str) -> Result<Breaker, StoreError> {
    let closed = sql::query_opt(
        client,
        "UPDATE forward_states s
             SET consecutive_failures = 0, opened_at = NULL, probe_at = NULL,
                 updated_at = now()
             FROM (SELECT opened_at IS NOT NULL AS was_open
                   FROM forward_states WHERE forward = $1) before
             WHERE s.forward = $1 AND (s.consecutive_failures > 0 OR s.opened_at IS NOT NULL)
             RETURNING before.was_open",
        params![&forward],
    )
    .await?
    .is_some_and(|row| row.get::<_, Option<bool>>(0).unwrap_or(false));
    if !closed {
        return Ok(Breaker::Unchanged);
    }
    sql::execute(
        client,
        "UPDATE event_forwards SET next_attempt_at = now()
             WHERE forward = $1 AND state = 'pending' AND lease_until IS NULL",
        params![&forward],
    )
    .await?;
    Ok(Breaker::Closed)
}

/// Pauses `forward` (`by`: who) or resumes it (`None`).
pub async fn set_paused(
    client: &impl Session,
    forward: &str,
    by: Option<&str>,
) -> Result<(), StoreError> {
    sql::execute(
        client,
        "INSERT INTO forward_states AS s (forward, paused_at, paused_by)
             VALUES ($1, CASE WHEN $2::text IS NOT NULL THEN now() END, $2)
         ON CONFLICT (forward) DO UPDATE
             SET paused_at = EXCLUDED.paused_at, paused_by = EXCLUDED.paused_by,
                 updated_at = now()",
        params![&forward, &by],
    )
    .await?;
    Ok(())
}

/// One forward as operators see it: its breaker, pause and backlog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardOverview {
    pub forward: String,
    pub consecutive_failures: i32,
    pub opened_at: Option<DateTime<Utc>>,
    pub paused_at: Option<DateTime<Utc>>,
    pub paused_by: Option<String>,
    pub last_error: Option<String>,
    /// Its events still to go.
    pub backlog: i64,
    /// The first in its lane's queue (the earliest received of those still to
    /// go): its event's row id and since when it has waited.
    pub oldest_waiting: Option<(i64, DateTime<Utc>)>,
}

/// Every forward that has a state or events still to go, by name.
pub async fn overview(client: &impl Session) -> Result<Vec<ForwardOverview>, StoreError> {
    let rows = sql::query(
        client,
        // Counted without sorting the backlog, and the oldest read from the head
        // of the lane's queue (`event_forwards_due`): a receiver down for days
        // leaves millions of rows, and the desk asks on every look.
        "WITH waiting AS (
             SELECT f.forward, f.backlog, head.webhook_event_id AS oldest,
                    head.created_at AS since
             FROM (SELECT forward, count(*) AS backlog FROM event_forwards
                   WHERE state = 'pending' AND forward <> $1 GROUP BY forward) f
             CROSS JOIN LATERAL (
                 SELECT webhook_event_id, created_at FROM event_forwards e
                 WHERE e.forward = f.forward AND e.state = 'pending'
                 ORDER BY e.webhook_event_id LIMIT 1) head
         )
         SELECT COALESCE(s.forward, w.forward), COALESCE(s.consecutive_failures, 0),
                s.opened_at, s.paused_at, s.paused_by, s.last_error,
                COALESCE(w.backlog, 0), w.oldest, w.since
         FROM forward_states s FULL JOIN waiting w ON w.forward = s.forward
         ORDER BY 1",
        params![&UNPLANNED],
    )
    .await?;
    Ok(rows.iter().map(overview_of).collect())
}

/// Every forward's shared state, without its backlog (`backlog` 0, no oldest):
/// what a metrics scrape needs, read from the few rows of `forward_states`
/// rather than counted over every event still to go.
pub async fn states(client: &impl Session) -> Result<Vec<ForwardOverview>, StoreError> {
    let rows = sql::query(
        client,
        "SELECT forward, consecutive_failures, opened_at, paused_at, paused_by, last_error,
                0::bigint, NULL::bigint, NULL::timestamptz
         FROM forward_states ORDER BY forward",
        params![],
    )
    .await?;
    Ok(rows.iter().map(overview_of).collect())
}

/// A row of `overview` (or `states`).
fn overview_of(row: &tokio_postgres::Row) -> ForwardOverview {
    let oldest: Option<i64> = row.get(7);
    let since: Option<DateTime<Utc>> = row.get(8);
    ForwardOverview {
        forward: row.get(0),
        consecutive_failures: row.get(1),
        opened_at: row.get(2),
        paused_at: row.get(3),
        paused_by: row.get(4),
        last_error: row.get(5),
        backlog: row.get(6),
        oldest_waiting: oldest.zip(since),
    }
}
