//! `api_idempotency_keys`: the keys of the API gateway and of
//! `hookd::idempotency`. The claim is one autocommitted `INSERT … ON CONFLICT DO
//! UPDATE … WHERE` (the unique constraint on route, scope and key decides which
//! of any number of concurrent copies runs); the settling statements touch the
//! row only while this claim still owns it. The rules that choose between them
//! live in `crate::idempotency`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::StoreError;
use super::sql::{self, Param, Session, param, params};

/// Where a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    InProgress,
    Completed,
    Released,
    Unknown,
}

impl KeyState {
    pub const ALL: [KeyState; 4] = [
        KeyState::InProgress,
        KeyState::Completed,
        KeyState::Released,
        KeyState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::InProgress => "in_progress",
            KeyState::Completed => "completed",
            KeyState::Released => "released",
            KeyState::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<KeyState> {
        KeyState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// An answer kept for copies: the status, the headers a route keeps, and the
/// body (empty when `body_omitted`: it was over 1 MiB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub body_omitted: bool,
}

/// A claim to try: a new key, or one a resend may take. It owns its fields, so
/// that a batch of claims can be stored by another task (`gateway::commit`).
#[derive(Debug, Clone)]
pub struct ClaimAttempt {
    pub route: String,
    pub scope: Vec<u8>,
    pub key: String,
    pub fingerprint: Vec<u8>,
    /// The operation id if the key is new (a resend keeps the key's own).
    pub operation_id: String,
    pub claim_id: Vec<u8>,
    pub lock: Duration,
    pub retention: Duration,
    pub resend_unknown: bool,
    pub method: String,
    pub target: String,
}

/// A claimed key: its row id, its operation id and how many times it was
/// claimed to run.
pub type Taken = (i64, String, i32);

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The claim: one autocommitted statement (`try_claim`). Parameters: route,
/// scope, key, fingerprint, operation id, claim id, method, target, lock (ms),
/// retention (ms), whether resends are allowed. Public so that the gateway
/// benchmark's pgbench baseline runs this very text. The lock runs from the
/// statement's own time (`clock_timestamp()`), not its transaction's start: in
/// a batch of key writes a statement may wait behind another's row, and the
/// wait must not eat into the margin before a copy may take the key over. The
/// takeover test (`locked_until < now()`) reads the transaction's start, which
/// is earlier: it errs toward leaving the key to its claim. The same claim
/// (its `claim_id`) sent again takes its own key again, counted once: a batch
/// whose `COMMIT` committed but whose answer was lost is sent again write by
/// write, and its claims must still run.
pub const CLAIM_KEY: &str = "INSERT INTO api_idempotency_keys AS k
     (route, scope, idempotency_key, fingerprint, state, operation_id, claim_id,
      request_method, request_target, locked_until, retention)
 VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, $7, $8,
         clock_timestamp() + $9 * interval '1 millisecond', $10 * interval '1 millisecond')
 ON CONFLICT (route, scope, idempotency_key) DO UPDATE
     SET state = 'in_progress', claim_id = EXCLUDED.claim_id,
         locked_until = EXCLUDED.locked_until, retention = EXCLUDED.retention,
         runs = k.runs + (k.claim_id IS DISTINCT FROM EXCLUDED.claim_id)::int,
         claimed_at = now(), finished_at = NULL, expires_at = NULL
     WHERE k.fingerprint = EXCLUDED.fingerprint
       AND (k.state = 'released'
            OR (k.state = 'in_progress' AND k.claim_id = EXCLUDED.claim_id)
            OR ($11 AND (k.state = 'unknown'
                         OR (k.state = 'in_progress' AND k.locked_until < now()))))
 RETURNING id, operation_id, runs";

/// A key's row, read when the claim took nothing (`read_key`). Parameters:
/// route, scope, key.
pub const READ_KEY: &str = "SELECT id, fingerprint, state, operation_id,
        COALESCE(locked_until >= now(), false),
        response_status, response_headers, response_body, body_omitted
 FROM api_idempotency_keys WHERE route = $1 AND scope = $2 AND idempotency_key = $3";

/// The answer stored while the claim still owns the key (`complete`).
/// Parameters: row id, claim id, status, headers, body, whether it was omitted.
pub const COMPLETE_KEY: &str = "UPDATE api_idempotency_keys
 SET state = 'completed', response_status = $3, response_headers = $4,
     response_body = $5, body_omitted = $6, locked_until = NULL,
     finished_at = now(), expires_at = now() + retention
 WHERE id = $1 AND claim_id = $2 AND state = 'in_progress'";

/// Claims the key, when it is new, released, or (where resends are allowed)
/// `unknown` or held by a claim past its lock. Returns the row id, its
/// operation id and how many times it was claimed to run.
pub async fn try_claim(
    client: &impl Session,
    claim: &ClaimAttempt,
) -> Result<Option<Taken>, StoreError> {
    let values = KeyWrite::claim(claim);
    let row = sql::query_opt(client, CLAIM_KEY, &values.params()).await?;
    Ok(row.as_ref().map(taken))
}

/// A key's row as a request that could not claim it judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub id: i64,
    pub fingerprint: Vec<u8>,
    pub state: KeyState,
    pub operation_id: String,
    /// An `in_progress` claim whose lock is not over (by the database's clock).
    pub locked: bool,
    /// The stored answer of a `completed` key.
    pub answer: Option<StoredAnswer>,
}

pub async fn read_key(
    client: &impl Session,
    claim: &ClaimAttempt,
) -> Result<Option<StoredKey>, StoreError> {
    let row = sql::query_opt(
        client,
        READ_KEY,
        params![&claim.route, &claim.scope, &claim.key],
    )
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let state: String = row.get(2);
    let state = KeyState::parse(&state)
        .ok_or_else(|| StoreError::Schema(format!("api_idempotency_keys: state {state:?}")))?;
    let status: Option<i16> = row.get(5);
    let answer = match (state, status) {
        (KeyState::Completed, Some(status)) => Some(StoredAnswer {
            status: u16::try_from(status).unwrap_or(500),
            headers: headers_of(row.get(6)),
            body: row.get::<_, Option<Vec<u8>>>(7).unwrap_or_default(),
            body_omitted: row.get(8),
        }),
        _ => None,
    };
    Ok(Some(StoredKey {
        id: row.get(0),
        fingerprint: row.get(1),
        state,
        operation_id: row.get(3),
        locked: row.get(4),
        answer,
    }))
}

fn headers_of(value: Option<Value>) -> Vec<(String, String)> {
    value
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// A claim past its lock on a route that does not resend becomes `unknown`.
pub async fn mark_abandoned_unknown(client: &impl Session, id: i64) -> Result<(), StoreError> {
    sql::execute(
        client,
        "UPDATE api_idempotency_keys SET state = 'unknown', locked_until = NULL
         WHERE id = $1 AND state = 'in_progress' AND locked_until < now()",
        params![&id],
    )
    .await?;
    Ok(())
}

/// Stores the answer while `claim_id` still owns the key.
pub async fn complete(
    client: &impl Session,
    id: i64,
    claim_id: &[u8],
    answer: &StoredAnswer,
) -> Result<bool, StoreError> {
    let values = KeyWrite::complete(id, claim_id, answer);
    let changed = sql::execute(client, COMPLETE_KEY, &values.params()).await?;
    Ok(changed == 1)
}

/// The key `CLAIM_KEY` took: its row id, operation and runs.
fn taken(row: &tokio_postgres::Row) -> Taken {
    (row.get(0), row.get(1), row.get(2))
}

/// A claim or a stored answer with its statement's values, so that several
/// can be prepared first and then sent together in one transaction
/// (`gateway::commit`), the same statements `try_claim` and `complete` run.
pub enum KeyWrite<'a> {
    Claim {
        claim: &'a ClaimAttempt,
        lock: i64,
        retention: i64,
    },
    Complete {
        id: i64,
        claim_id: &'a [u8],
        status: i16,
        headers: Value,
        answer: &'a StoredAnswer,
    },
}

/// What a key write did: the claim's key taken, or whether the answer was stored.
pub enum KeyWriteDone {
    Claimed(Option<Taken>),
    Completed(bool),
}

// A write's outcome is of its own kind: the other is never seen.
impl KeyWriteDone {
    pub fn claimed(self) -> Result<Option<Taken>, StoreError> {
        match self {
            KeyWriteDone::Claimed(taken) => Ok(taken),
            KeyWriteDone::Completed(_) => {
                Err(StoreError::Schema("a claim's write completed".into()))
            }
        }
    }

    pub fn completed(self) -> Result<bool, StoreError> {
        match self {
            KeyWriteDone::Completed(stored) => Ok(stored),
            KeyWriteDone::Claimed(_) => {
                Err(StoreError::Schema("a completion's write claimed".into()))
            }
        }
    }
}

impl<'a> KeyWrite<'a> {
    pub fn claim(claim: &'a ClaimAttempt) -> Self {
        KeyWrite::Claim {
            claim,
            lock: millis(claim.lock),
            retention: millis(claim.retention),
        }
    }

    pub fn complete(id: i64, claim_id: &'a [u8], answer: &'a StoredAnswer) -> Self {
        KeyWrite::Complete {
            id,
            claim_id,
            status: i16::try_from(answer.status).unwrap_or(500),
            headers: serde_json::to_value(&answer.headers).unwrap_or(Value::Null),
            answer,
        }
    }

    fn params(&self) -> Vec<sql::Param<'_>> {
        match self {
            KeyWrite::Claim {
                claim,
                lock,
                retention,
            } => params![
                &claim.route,
                &claim.scope,
                &claim.key,
                &claim.fingerprint,
                &claim.operation_id,
                &claim.claim_id,
                &claim.method,
                &claim.target,
                lock,
                retention,
                &claim.resend_unknown,
            ]
            .to_vec(),
            KeyWrite::Complete {
                id,
                claim_id,
                status,
                headers,
                answer,
            } => params![
                id,
                claim_id,
                status,
                headers,
                &answer.body,
                &answer.body_omitted
            ]
            .to_vec(),
        }
    }

    /// Its statement prepared now (once per connection), so that `ReadyKeyWrite::run`
    /// puts it on the wire when first polled.
    pub async fn ready(&self, client: &impl Session) -> Result<ReadyKeyWrite<'_>, StoreError> {
        let text = match self {
            KeyWrite::Claim { .. } => CLAIM_KEY,
            KeyWrite::Complete { .. } => COMPLETE_KEY,
        };
        Ok(ReadyKeyWrite {
            claim: matches!(self, KeyWrite::Claim { .. }),
            statement: sql::ready(client, text, self.params()).await?,
        })
    }
}

/// A key write prepared (`KeyWrite::ready`).
pub struct ReadyKeyWrite<'p> {
    claim: bool,
    statement: sql::Ready<'p>,
}

impl ReadyKeyWrite<'_> {
    pub async fn run(&self, client: &impl Session) -> Result<KeyWriteDone, StoreError> {
        Ok(if self.claim {
            let rows = self.statement.query(client).await?;
            KeyWriteDone::Claimed(rows.first().map(taken))
        } else {
            KeyWriteDone::Completed(self.statement.execute(client).await? == 1)
        })
    }
}

/// Frees the key while `claim_id` still owns it; it expires after its retention.
pub async fn release(client: &impl Session, id: i64, claim_id: &[u8]) -> Result<bool, StoreError> {
    let changed = sql::execute(
        client,
        "UPDATE api_idempotency_keys
         SET state = 'released', locked_until = NULL, finished_at = now(),
             expires_at = now() + retention
         WHERE id = $1 AND claim_id = $2 AND state = 'in_progress'",
        params![&id, &claim_id],
    )
    .await?;
    Ok(changed == 1)
}

/// Marks the key `unknown` while `claim_id` still owns it (it never expires).
pub async fn outcome_unknown(
    client: &impl Session,
    id: i64,
    claim_id: &[u8],
) -> Result<bool, StoreError> {
    let changed = sql::execute(
        client,
        "UPDATE api_idempotency_keys SET state = 'unknown', locked_until = NULL
         WHERE id = $1 AND claim_id = $2 AND state = 'in_progress'",
        params![&id, &claim_id],
    )
    .await?;
    Ok(changed == 1)
}

/// Keys whose outcome nobody knows: `unknown`, and claims past their lock
/// (their instance died; the next copy takes them over as unknown).
pub async fn unknown_count(client: &impl Session) -> Result<i64, StoreError> {
    let row = sql::query_one(
        client,
        "SELECT count(*) FROM api_idempotency_keys
         WHERE state = 'unknown' OR (state = 'in_progress' AND locked_until < now())",
        params![],
    )
    .await?;
    Ok(row.get(0))
}

/// A key as the desk shows it (never the scope header's value: only a prefix of
/// its hash).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyView {
    pub id: i64,
    pub route: String,
    pub key: String,
    /// The first 8 hex digits of the scope's hash, or `none`.
    pub scope: String,
    pub state: KeyState,
    /// An `in_progress` claim past its lock: its instance died.
    pub abandoned: bool,
    pub operation: String,
    pub fingerprint: String,
    pub method: String,
    pub target: String,
    pub upstream_status: Option<i16>,
    pub runs: i32,
    pub body_omitted: bool,
    pub created_at: DateTime<Utc>,
    pub claimed_at: DateTime<Utc>,
    pub locked_until: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
}

const VIEW_COLUMNS: &str = "id, route, idempotency_key, \
     CASE WHEN scope = '' THEN 'none' ELSE encode(substr(scope, 1, 4), 'hex') END, \
     state, COALESCE(state = 'in_progress' AND locked_until < now(), false), operation_id, \
     encode(fingerprint, 'hex'), request_method, request_target, response_status, runs, \
     body_omitted, created_at, claimed_at, locked_until, finished_at, expires_at";

fn view(row: &tokio_postgres::Row) -> KeyView {
    let state: String = row.get(4);
    KeyView {
        id: row.get(0),
        route: row.get(1),
        key: row.get(2),
        scope: row.get(3),
        state: KeyState::parse(&state).unwrap_or(KeyState::Unknown),
        abandoned: row.get(5),
        operation: row.get(6),
        fingerprint: row.get(7),
        method: row.get(8),
        target: row.get(9),
        upstream_status: row.get(10),
        runs: row.get(11),
        body_omitted: row.get(12),
        created_at: row.get(13),
        claimed_at: row.get(14),
        locked_until: row.get(15),
        finished_at: row.get(16),
        expires_at: row.get(17),
    }
}

/// The desk's filters: each given one becomes a clause.
#[derive(Debug, Clone, Default)]
pub struct KeyFilter {
    pub route: Option<String>,
    pub state: Option<KeyState>,
    /// A key or an operation id.
    pub q: Option<String>,
    pub limit: i64,
    /// Continue after this `(created_at, id)`.
    pub after: Option<(DateTime<Utc>, i64)>,
}

/// Newest first, at most `filter.limit`.
pub async fn list(client: &impl Session, filter: &KeyFilter) -> Result<Vec<KeyView>, StoreError> {
    let state = filter.state.map(KeyState::as_str);
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<Param<'_>> = Vec::new();
    if let Some(route) = &filter.route {
        values.push(param(route));
        clauses.push(format!("route = ${}", values.len()));
    }
    if let Some(state) = &state {
        values.push(param(state));
        clauses.push(format!("state = ${}", values.len()));
    }
    if let Some(q) = &filter.q {
        values.push(param(q));
        let n = values.len();
        clauses.push(format!("(idempotency_key = ${n} OR operation_id = ${n})"));
    }
    if let Some((at, id)) = &filter.after {
        values.push(param(at));
        values.push(param(id));
        let n = values.len();
        clauses.push(format!("(created_at, id) < (${}, ${n})", n - 1));
    }
    values.push(param(&filter.limit));
    let where_sql = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT {VIEW_COLUMNS} FROM api_idempotency_keys {where_sql}
         ORDER BY created_at DESC, id DESC LIMIT ${}",
        values.len()
    );
    let rows = sql::query(client, &sql, &values).await?;
    Ok(rows.iter().map(view).collect())
}

/// What needs a person first: `unknown` keys, then claims running longer than
/// `long`, oldest first.
pub async fn needing_attention(
    client: &impl Session,
    long: Duration,
    limit: i64,
) -> Result<Vec<KeyView>, StoreError> {
    let long = millis(long);
    let sql = format!(
        "SELECT {VIEW_COLUMNS} FROM api_idempotency_keys
         WHERE state = 'unknown'
            OR (state = 'in_progress' AND claimed_at < now() - $1 * interval '1 millisecond')
         ORDER BY state = 'unknown' DESC, claimed_at, id LIMIT $2"
    );
    let rows = sql::query(client, &sql, params![&long, &limit]).await?;
    Ok(rows.iter().map(view).collect())
}

/// A key with its stored answer.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDetail {
    pub view: KeyView,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

pub async fn get(client: &impl Session, id: i64) -> Result<Option<KeyDetail>, StoreError> {
    let sql = format!(
        "SELECT {VIEW_COLUMNS}, response_headers, response_body FROM api_idempotency_keys
         WHERE id = $1"
    );
    let row = sql::query_opt(client, &sql, params![&id]).await?;
    Ok(row.map(|row| KeyDetail {
        view: view(&row),
        headers: headers_of(row.get(18)),
        body: row.get(19),
    }))
}

/// What an operator's release did.
#[derive(Debug, Clone, PartialEq)]
pub enum Released {
    NotFound,
    /// Only an `unknown` key (or a claim past its lock) is released by hand.
    NotUnknown(KeyState),
    Released(Box<KeyView>),
}

/// Releases an `unknown` key (or a claim past its lock) so the next copy runs
/// again; it expires after its retention if none comes.
pub async fn release_unknown(client: &impl Session, id: i64) -> Result<Released, StoreError> {
    let sql = format!(
        "UPDATE api_idempotency_keys
         SET state = 'released', locked_until = NULL, finished_at = now(),
             expires_at = now() + retention
         WHERE id = $1
           AND (state = 'unknown' OR (state = 'in_progress' AND locked_until < now()))
         RETURNING {VIEW_COLUMNS}"
    );
    if let Some(row) = sql::query_opt(client, &sql, params![&id]).await? {
        return Ok(Released::Released(Box::new(view(&row))));
    }
    let state = sql::query_opt(
        client,
        "SELECT state FROM api_idempotency_keys WHERE id = $1",
        params![&id],
    )
    .await?;
    Ok(match state {
        None => Released::NotFound,
        Some(row) => Released::NotUnknown(
            KeyState::parse(&row.get::<_, String>(0)).unwrap_or(KeyState::Unknown),
        ),
    })
}
