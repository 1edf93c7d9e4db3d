//! Running events' handlers again at an operator's request, one event or
//! every one a filter matches.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::{Desk, DeskError};
use crate::dispatch::{RetryBy, RetryOutcome};
use crate::store::audit::{self, Record};
use crate::store::history::{self, EventFilter};

/// Events one bulk retry may touch; more matching is refused (narrow the filter).
pub const BULK_RETRY_LIMIT: usize = 1000;

/// What a bulk retry did (or, as a preview, would do).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BulkOutcome {
    pub matched: usize,
    pub retried: usize,
    /// How many ended in each status, or `gone` (payload purged) / `no_handler`.
    pub outcomes: BTreeMap<String, usize>,
}

impl Desk {
    /// Runs an event's handlers again now, in its turn among retries; audited in
    /// the retry's transaction.
    pub async fn retry(&self, id: i64, who: &str) -> Result<RetryOutcome, DeskError> {
        let _permit = self.retry_permit().await?;
        Ok(self
            .dispatcher
            .retry_now(id, RetryBy { who, bulk: None })
            .await?)
    }

    /// Retries every event the filter matches (at most `BULK_RETRY_LIMIT`), or
    /// with `dry_run` only counts them. Audited as it goes (a dry-run preview is
    /// not): a `bulk_retried` row before the first event runs, completed with the
    /// counts at the end, and each event's `retried` row, naming it, in that
    /// retry's transaction — a bulk retry cut off half-way leaves every retry it
    /// made audited.
    pub async fn bulk_retry(
        &self,
        mut filter: EventFilter,
        dry_run: bool,
        who: &str,
    ) -> Result<BulkOutcome, DeskError> {
        filter.limit = i64::try_from(BULK_RETRY_LIMIT + 1).unwrap_or(i64::MAX);
        filter.after = None;
        let matched = history::list_events(&self.client().await?, &filter).await?;
        if matched.len() > BULK_RETRY_LIMIT {
            return Err(DeskError::TooMany {
                matched: matched.len(),
            });
        }
        let mut outcome = BulkOutcome {
            matched: matched.len(),
            retried: 0,
            outcomes: BTreeMap::new(),
        };
        if dry_run {
            return Ok(outcome);
        }
        // One turn among retries for the whole run.
        let _permit = self.retry_permit().await?;
        let bulk = audit::record(
            &self.client().await?,
            &Record {
                who,
                action: "bulk_retried",
                detail: Some(json!({
                    "filter": filter_json(&filter),
                    "matched": outcome.matched,
                })),
                ..Record::default()
            },
        )
        .await?;
        let by = RetryBy {
            who,
            bulk: Some(bulk),
        };
        // Oldest first, one at a time: a bulk retry never crowds out deliveries.
        for event in matched.iter().rev() {
            let result = self.dispatcher.retry_now(event.id, by).await?;
            if matches!(result, RetryOutcome::Applied(_)) {
                outcome.retried += 1;
            }
            *outcome
                .outcomes
                .entry(result.name().to_string())
                .or_default() += 1;
        }
        audit::complete(
            &self.client().await?,
            bulk,
            &json!({"retried": outcome.retried, "outcomes": outcome.outcomes}),
        )
        .await?;
        Ok(outcome)
    }
}

/// The log line of an operator's retry, wherever it came from (`request_id` is
/// `-` in the terminal).
pub fn log_retry(who: &str, request_id: &str, id: i64, outcome: &RetryOutcome) {
    log::info!(
        token = who, event = id, request_id = request_id;
        "admin retry of event {id} by {who}: {outcome:?} request_id={request_id}"
    );
}

/// The log line of a bulk retry that ran (a preview is not logged).
pub fn log_bulk_retry(who: &str, request_id: &str, outcome: &BulkOutcome) {
    log::info!(
        token = who, request_id = request_id;
        "admin bulk retry by {who}: {} matched, {} retried, {:?} request_id={request_id}",
        outcome.matched,
        outcome.retried,
        outcome.outcomes
    );
}

fn filter_json(filter: &EventFilter) -> Value {
    json!({
        "source": filter.source, "kind": filter.kind, "type": filter.event_type,
        "status": filter.status, "since": filter.since, "until": filter.until, "q": filter.q,
    })
}
