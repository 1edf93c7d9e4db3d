//! One event as support staff see it, and the history's pages.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::masking::mask_free_texts;
use super::{Desk, Origin};
use crate::filter;
use crate::ledger::{self, HandlerState};
use crate::mask::Cover;
use crate::store::StoreError;
use crate::store::audit::{self, Record};
use crate::store::events::EventStatus;
use crate::store::forwards;
use crate::store::history::{self, Attempt, EventDetail, EventFilter, EventSummary};

/// A page of the history, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    pub events: Vec<EventSummary>,
    pub next_cursor: Option<String>,
}

/// One event as support staff see it.
#[derive(Debug, Clone)]
pub struct EventView {
    pub detail: EventDetail,
    pub handlers: Vec<HandlerState>,
    pub origin: Origin,
    /// Whether the payload (and conflicting items) are shown with the source's
    /// `mask` applied; false once an operator revealed them.
    pub masked: bool,
    /// The page's only (the API's JSON leaves it out).
    pub provider_time: Option<ProviderTime>,
}

/// When the provider dated an event, for a scheme whose signature covers no
/// time: a genuine body can be sent again at any time, and once its dedupe key
/// is purged (`key_retention` after it was received) it is taken as a new
/// event. One dated more than `key_retention` before it arrived may be such a
/// body, its first delivery forgotten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTime {
    pub at: DateTime<Utc>,
    pub key_retention: std::time::Duration,
    /// `at` is more than `key_retention` before the event was received.
    pub beyond_key_retention: bool,
}

/// An event's columns where `attempts` lists its runs: the counter, which
/// outlives a purge of the list, is `attempt_count` there.
#[derive(Serialize)]
#[serde(remote = "EventSummary")]
struct CountedSummary {
    id: i64,
    source: String,
    event_id: String,
    event_type: String,
    kind: Option<String>,
    status: EventStatus,
    payment_id: Option<String>,
    customer_id: Option<String>,
    deliveries: i32,
    #[serde(rename = "attempt_count")]
    attempts: i32,
    last_error: Option<String>,
    signed_with: i32,
    received_at: DateTime<Utc>,
    last_delivery_at: DateTime<Utc>,
    processed_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    purged_at: Option<DateTime<Utc>>,
}

/// An event with its runs, as the detail and the payment view show it.
#[derive(Serialize)]
pub(super) struct EventRuns<'a> {
    #[serde(flatten, with = "CountedSummary")]
    pub(super) summary: &'a EventSummary,
    pub(super) attempts: &'a [Attempt],
}

/// The event's columns, `attempt_count`, `attempts` (the runs), `payload`,
/// `handlers` and `origin`.
#[derive(Serialize)]
struct EventJson<'a> {
    #[serde(flatten)]
    runs: EventRuns<'a>,
    payload: &'a Option<Value>,
    masked: bool,
    payload_sha256: &'a str,
    handlers: &'a [HandlerState],
    origin: &'a Origin,
    conflicts: &'a [crate::store::history::Conflict],
    conflicts_not_kept: i32,
}

impl Serialize for EventView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        EventJson {
            runs: EventRuns {
                summary: &self.detail.summary,
                attempts: &self.detail.attempts,
            },
            payload: &self.detail.payload,
            masked: self.masked,
            payload_sha256: &self.detail.payload_sha256,
            handlers: &self.handlers,
            origin: &self.origin,
            conflicts: &self.detail.conflicts,
            conflicts_not_kept: self.detail.conflicts_not_kept,
        }
        .serialize(serializer)
    }
}

impl Desk {
    /// A page of the history and the cursor of the next one.
    pub async fn list(&self, filter: EventFilter) -> Result<EventPage, StoreError> {
        let client = self.client().await?;
        let (mut events, next_cursor) = filter::history_page(&client, filter).await?;
        let texts = events.iter_mut().map(|e| (e, &mut [][..])).collect();
        self.mask_texts_of(&client, texts).await?;
        Ok(EventPage {
            events,
            next_cursor,
        })
    }

    /// An event's row as the list shows it (viewing it so is not audited).
    pub async fn summary(&self, id: i64) -> Result<Option<EventSummary>, StoreError> {
        Ok(history::load_event(&self.pool, id).await?.map(|mut event| {
            let values = self.quoted_values(&event.summary.source, event.payload.as_ref());
            mask_free_texts(&values, &mut event.summary.last_error, &mut []);
            event.summary
        }))
    }

    /// One event, its handlers and its origin, its payload masked unless
    /// `reveal` (which only operators may ask for); viewing it is audited, as
    /// `revealed_payload` when revealed.
    pub async fn event(
        &self,
        id: i64,
        who: &str,
        reveal: bool,
    ) -> Result<Option<EventView>, StoreError> {
        let client = self.client().await?;
        let Some(mut detail) = history::get_event(&client, id).await? else {
            return Ok(None);
        };
        let forwards = forwards::of_event(&client, id).await?;
        let origin = self.origin_with(&client, id).await?;
        let provider_time = self.provider_time(&detail);
        if !reveal {
            let values = self.quoted_values(&detail.summary.source, detail.payload.as_ref());
            mask_free_texts(
                &values,
                &mut detail.summary.last_error,
                &mut detail.attempts,
            );
            let cover = |payload: &mut Value| {
                self.cover(&detail.summary.source, payload, Cover::Mask);
            };
            detail.payload.iter_mut().for_each(cover);
            let conflicts = detail.conflicts.iter_mut();
            conflicts.for_each(|c| cover(&mut c.offered_payload));
        }
        // From the runs as shown: a handler's last error masked like its run's.
        let plan = self.dispatcher.plan_names(&detail.summary, &forwards);
        let handlers = ledger::handler_states(&detail.attempts, &plan);
        audit::record(
            &client,
            &Record {
                who,
                action: if reveal {
                    "revealed_payload"
                } else {
                    "viewed_event"
                },
                webhook_event_id: Some(id),
                source: Some(&detail.summary.source),
                payment_id: detail.summary.payment_id.as_deref(),
                detail: None,
            },
        )
        .await?;
        Ok(Some(EventView {
            detail,
            handlers,
            origin,
            masked: !reveal,
            provider_time,
        }))
    }

    /// When the provider dated the event, for a scheme that signs no time (see
    /// `ProviderTime`); `None` once the payload is purged.
    fn provider_time(&self, detail: &EventDetail) -> Option<ProviderTime> {
        let settings = self.settings.now();
        let source = settings.source(&detail.summary.source)?;
        let at = source
            .scheme
            .provider()
            .unsigned_time(detail.payload.as_ref()?)?;
        let key_retention = settings.key_retention;
        let age = (detail.summary.received_at - at)
            .to_std()
            .unwrap_or_default();
        Some(ProviderTime {
            at,
            key_retention,
            beyond_key_retention: age > key_retention,
        })
    }
}
