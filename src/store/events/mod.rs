//! The `webhook_events` table: recording deliveries (the dedupe decision), recording
//! handler attempts, and claiming due retries.

/// Attempt rows, and what each handler of an event has run.
mod attempts;
/// Several events' dedupe decisions in a statement per rule.
mod batch;
/// Conflicting items kept beside their events.
mod conflicts;
/// A batch, its payment merges and attempts in one statement.
mod folded;
/// One delivery's dedupe decision.
mod record;
/// Claiming due events, locking them and settling their rows.
mod retries;

use super::sql;
use crate::event::EventId;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

pub use attempts::{APPEND_ATTEMPTS, AttemptRecord, HandlerRuns, append_attempts, handler_runs};
pub use batch::{BatchItem, record_batch};
pub use conflicts::{CONFLICTS_KEPT, record_conflict};
pub use folded::{BoundFoldedStatement, FoldedStatement, MergeRow};
pub use record::{RECORD_BODY_DELIVERY, RECORD_DELIVERY, lost_id_race, record_delivery};
pub(super) use retries::claimed;
pub use retries::{
    ClaimedEvent, Settled, backlog, claim_due, is_stored, lock_by_id, lock_for_forward,
    lock_postponed, postpone, settle, status_of,
};

/// Where an event stands: `processed` (every handler done), `ignored` (none
/// applies), `failed` (a handler will run again at `next_attempt_at`, or a forward
/// has yet to run), `dead` (waits for a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    Processed,
    Ignored,
    Failed,
    Dead,
}

impl EventStatus {
    pub const ALL: [EventStatus; 4] = [
        EventStatus::Processed,
        EventStatus::Ignored,
        EventStatus::Failed,
        EventStatus::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Processed => "processed",
            EventStatus::Ignored => "ignored",
            EventStatus::Failed => "failed",
            EventStatus::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for EventStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status binds as its text, the `status` column's.
impl ToSql for EventStatus {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.as_str().to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl sql::PgType for EventStatus {
    const TYPE: Type = Type::TEXT;
}

impl sql::PgElement for EventStatus {
    const ARRAY: Type = Type::TEXT_ARRAY;
}

/// What the one dedupe statement decided about a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// First delivery: the row was inserted in the caller's transaction.
    New { id: i64 },
    /// Same event, same payload: `deliveries` was counted on its row. `event_id`
    /// is the id it was first stored under, which the answer names: another
    /// than the delivery's when a source that dedupes on the body found it.
    Duplicate { id: i64, event_id: EventId },
    /// Same event id, different payload: nothing changed.
    Conflict,
}

/// How a new event's row is first written: as its run at receipt usually ends,
/// so that success, the common case, needs no second write of the row (an UPDATE
/// that would touch every index). No new event is due for a retry: a handler
/// that fails at receipt schedules its own (`events::settle`), and forwards wait
/// in their own rows (`store::forwards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstWrite {
    pub status: EventStatus,
    /// Handler runs at receipt (0 or 1).
    pub attempts: i32,
}
