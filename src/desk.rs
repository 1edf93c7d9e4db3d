//! The support desk: what the admin API, the page and the terminal show and do —
//! events, payments, the dashboard, retries one at a time or in bulk, the audit
//! trail, and proof of an event's origin — in one place, so the three cannot
//! disagree. Viewing a payload, revealing its personal data, retrying and
//! forgetting a customer are recorded in the audit trail under the name of who
//! did it. Payloads are shown with their source's `mask` applied unless an
//! operator reveals them.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::LiveSettings;
use crate::dispatch::{Dispatcher, RetryBy, RetryOutcome};
use crate::filter::{self, FilterError};
use crate::ledger::{self, HandlerState};
use crate::mask::{self, Cover};
use crate::providers;
use crate::rollup::{Rollups, day_of, hour_of};
use crate::store::audit::{self, AuditEntry, Record};
use crate::store::forwards;
use crate::store::history::{
    self, Attempt, EventDetail, EventFilter, EventSummary, SignedDelivery, Stats,
};
use crate::store::idempotency;
pub use crate::store::idempotency::{Claim, RENEW_EVERY};
use crate::store::payments::{self, Payment};
use crate::store::{StoreError, events::EventStatus, rollups};

mod forgetting;

/// Events one bulk retry may touch; more matching is refused (narrow the filter).
pub const BULK_RETRY_LIMIT: usize = 1000;
/// Events a payment view shows at most.
const PAYMENT_EVENTS: i64 = 500;
/// The dashboard's windows.
const DASHBOARD_WINDOW: chrono::Duration = chrono::Duration::hours(24);
const SECRETS_WINDOW: chrono::Duration = chrono::Duration::days(7);
/// The charts: hours of the last day, days of the last week (the current ones
/// included, last).
const SERIES_HOURS: i64 = 24;
const SERIES_DAYS: i64 = 7;

#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Filter(#[from] FilterError),
    #[error(
        "{matched} events match; a bulk retry takes at most {BULK_RETRY_LIMIT}: narrow the filter"
    )]
    TooMany { matched: usize },
    #[error("shutting down")]
    ShuttingDown,
    #[error("no source named {0:?} is configured")]
    UnknownSource(String),
}

/// The support desk of one instance.
#[derive(Clone)]
pub struct Desk {
    pool: Pool,
    dispatcher: Dispatcher,
    settings: LiveSettings,
    /// Retries running at once, wherever they come from: a handler run holds a
    /// pool connection, and deliveries need most of them.
    retry_permits: Arc<tokio::sync::Semaphore>,
    rollups: Rollups,
}

/// A page of the history, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    pub events: Vec<EventSummary>,
    pub next_cursor: Option<String>,
}

/// A page of a customer's payments, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentPage {
    pub payments: Vec<Payment>,
    pub next_cursor: Option<String>,
}

/// A page of the audit trail, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
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
struct EventRuns<'a> {
    #[serde(flatten, with = "CountedSummary")]
    summary: &'a EventSummary,
    attempts: &'a [Attempt],
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

/// Whether a stored event's signature still proves where it came from, and
/// what beside the body it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// `None` when the source is no longer configured.
    #[serde(flatten)]
    pub covers: Option<Covered>,
}

/// Whether the signature covers the event id and type. GitHub's and a generic
/// source's headers travel beside the signed body: whoever holds one real
/// delivery may change them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Covered {
    pub id_signed: bool,
    pub type_signed: bool,
}

impl Covered {
    pub fn of(scheme: &crate::providers::Scheme) -> Self {
        Covered {
            id_signed: crate::providers::of(scheme).signs_id(),
            type_signed: crate::providers::of(scheme).signs_type(),
        }
    }

    /// What people are told when the signature leaves the id or type out.
    pub fn caveat(self) -> Option<String> {
        let what = match (self.id_signed, self.type_signed) {
            (true, true) => return None,
            (false, false) => "the event id and type were",
            (false, true) => "the event id was",
            (true, false) => "the event type was",
        };
        Some(format!(
            "{what} not signed (the scheme signs only the body)"
        ))
    }
}

/// The signature check of a stored event, with the source's current secrets as
/// of the time it was received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// The kept body and headers verify with secret number `secret` (1-based).
    Verified { secret: i32 },
    /// They do not verify (a secret was rotated away since, or the record changed).
    Unverified { reason: String },
    /// Its customer (or a customer of its kept request) was forgotten: the
    /// personal data was erased from what is kept, which therefore no longer
    /// matches its signature.
    Redacted { reason: String },
    /// The exact body or its signature headers are not kept (purged, or stored
    /// before hookd kept them), or the source is no longer configured.
    Unavailable { reason: String },
    /// Recovered from the provider's API (`hookd reconcile`): no signature
    /// came with it; the TLS connection made with the source's key proves it.
    ProviderApi { proof: String },
}

/// A payment with the events that made it, oldest first, each with its runs.
#[derive(Debug, Clone)]
pub struct PaymentView {
    pub payment: Payment,
    /// Whether the source's provider states amounts: GoCardless's does not, so
    /// the row's amounts say nothing and a refund leaves its status as it was.
    pub amounts_sent: bool,
    pub events: Vec<(EventSummary, Vec<Attempt>)>,
}

/// `payment`, `amounts_sent`, and its `events`, each with its runs as in the
/// event detail.
#[derive(Serialize)]
struct PaymentJson<'a> {
    payment: &'a Payment,
    amounts_sent: bool,
    events: Vec<EventRuns<'a>>,
}

impl Serialize for PaymentView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let events = self
            .events
            .iter()
            .map(|(summary, attempts)| EventRuns { summary, attempts })
            .collect();
        PaymentJson {
            payment: &self.payment,
            amounts_sent: self.amounts_sent,
            events,
        }
        .serialize(serializer)
    }
}

/// The top of the page.
#[derive(Debug, Clone, Serialize)]
pub struct Dashboard {
    /// Events received in the last 24 hours, by status, kind and source.
    pub last_24h: history::Stats,
    /// All events waiting for a person, and those waiting for a retry.
    pub dead: i64,
    pub failed: i64,
    /// Failed events waiting for a retry (the same as `failed`).
    pub retry_backlog: i64,
    /// Per source, which secret positions signed events in the last 7 days.
    pub secrets: Vec<SourceSecrets>,
    /// Events recovered from the providers' APIs in the last 7 days (never
    /// delivered: `hookd reconcile`).
    pub recovered_7_days: i64,
    /// The charts' counts.
    pub series: Series,
}

/// Events per hour of the last 24 (by where they stand now) with the signatures
/// refused in each, and failed and dead events per day of the last 7, oldest
/// first; the current hour and day last.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Series {
    pub hours: Vec<HourCounts>,
    pub days: Vec<DayCounts>,
}

/// The events received in one UTC hour, by their status now.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HourCounts {
    pub start: DateTime<Utc>,
    pub processed: i64,
    pub ignored: i64,
    pub failed: i64,
    pub dead: i64,
    pub rejected_signatures: i64,
}

/// The events received in one UTC day that are failed or dead now.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DayCounts {
    pub start: DateTime<Utc>,
    pub failed: i64,
    pub dead: i64,
}

impl Series {
    /// The series ending in `now`'s hour and day, from per-hour counts.
    fn of(
        now: DateTime<Utc>,
        by_status: &[(DateTime<Utc>, String, i64)],
        rejected: &[(DateTime<Utc>, i64)],
    ) -> Series {
        let hour = chrono::Duration::hours(1);
        let first_hour = hour_of(now) - hour * i32::try_from(SERIES_HOURS - 1).unwrap_or(0);
        let first_day = day_of(now) - chrono::Duration::days(SERIES_DAYS - 1);
        let mut hours: Vec<HourCounts> = (0..SERIES_HOURS)
            .map(|i| HourCounts {
                start: first_hour + hour * i32::try_from(i).unwrap_or(0),
                ..HourCounts::default()
            })
            .collect();
        let mut days: Vec<DayCounts> = (0..SERIES_DAYS)
            .map(|i| DayCounts {
                start: first_day + chrono::Duration::days(i),
                ..DayCounts::default()
            })
            .collect();
        let slot = |start: DateTime<Utc>, first: DateTime<Utc>, width: chrono::Duration| {
            let i = (start - first)
                .num_seconds()
                .div_euclid(width.num_seconds());
            usize::try_from(i).ok()
        };
        for (at, status, n) in by_status {
            if let Some(h) = slot(*at, first_hour, hour).and_then(|i| hours.get_mut(i)) {
                match status.as_str() {
                    "processed" => h.processed += n,
                    "ignored" => h.ignored += n,
                    "failed" => h.failed += n,
                    "dead" => h.dead += n,
                    _ => {}
                }
            }
            if let Some(d) =
                slot(*at, first_day, chrono::Duration::days(1)).and_then(|i| days.get_mut(i))
            {
                match status.as_str() {
                    "failed" => d.failed += n,
                    "dead" => d.dead += n,
                    _ => {}
                }
            }
        }
        for (at, n) in rejected {
            if let Some(h) = slot(*at, first_hour, hour).and_then(|i| hours.get_mut(i)) {
                h.rejected_signatures += n;
            }
        }
        Series { hours, days }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceSecrets {
    pub source: String,
    pub positions: Vec<SecretUse>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SecretUse {
    /// 1-based, as `signed_with` counts.
    pub position: i32,
    pub last_used: Option<DateTime<Utc>>,
    /// Used in the last 7 days; a position unused that long can be retired.
    pub used_in_7_days: bool,
}

/// What forgetting a customer did (or, as a dry run, would do).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Forgotten {
    pub dry_run: bool,
    /// Their events, each now marked redacted (purged ones included: they lose
    /// the customer's id).
    pub events: usize,
    /// Stored payloads and exact bodies rewritten without the personal data
    /// (bodies: the events' own, and the requests kept once beside them).
    pub payloads: usize,
    pub bodies: usize,
    /// Exact bodies that are not JSON (a form, XML), which cannot be rewritten
    /// field by field: dropped.
    pub bodies_dropped: usize,
    /// Conflicting items kept beside their events, rewritten.
    pub conflicts: usize,
    /// Payments that no longer name the customer (their state stays).
    pub payments: u64,
}

impl Forgotten {
    /// Counts a kept body (if any) as rewritten, or dropped when `redacted` is none.
    pub(super) fn count_body(&mut self, kept: Option<&[u8]>, redacted: Option<&[u8]>) {
        self.bodies += usize::from(redacted.is_some());
        self.bodies_dropped += usize::from(kept.is_some() && redacted.is_none());
    }
}

/// What a bulk retry did (or, as a preview, would do).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BulkOutcome {
    pub matched: usize,
    pub retried: usize,
    /// How many ended in each status, or `gone` (payload purged) / `no_handler`.
    pub outcomes: BTreeMap<String, usize>,
}

impl Desk {
    pub fn new(
        pool: Pool,
        dispatcher: Dispatcher,
        settings: LiveSettings,
        rollups: Rollups,
    ) -> Self {
        // A quarter of the pool: the rest is the deliveries'.
        let permits = (pool.status().max_size / 4).max(1);
        Desk {
            pool,
            dispatcher,
            settings,
            retry_permits: Arc::new(tokio::sync::Semaphore::new(permits)),
            rollups,
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Waits its turn rather than taking the connections deliveries need.
    async fn retry_permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, DeskError> {
        self.retry_permits
            .acquire()
            .await
            .map_err(|_| DeskError::ShuttingDown)
    }

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

    /// Events received from the start of `since`'s hour on, by status, kind and
    /// source (the rollups count whole hours).
    pub async fn stats(&self, since: DateTime<Utc>) -> Result<Stats, StoreError> {
        self.rollups.catch_up().await?;
        rollups::stats(&self.client().await?, hour_of(since)).await
    }

    /// The charts' counts, up to `now`.
    pub async fn series(&self, now: DateTime<Utc>) -> Result<Series, StoreError> {
        self.rollups.catch_up().await?;
        self.series_with(&self.client().await?, now).await
    }

    async fn series_with(
        &self,
        client: &deadpool_postgres::Object,
        now: DateTime<Utc>,
    ) -> Result<Series, StoreError> {
        // The week's first day starts before the day's first hour.
        let since = day_of(now) - chrono::Duration::days(SERIES_DAYS - 1);
        let by_status = rollups::hourly_by_status(client, since).await?;
        let rejected = rollups::hourly_rejections(client, since).await?;
        Ok(Series::of(now, &by_status, &rejected))
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

    /// The values a free text beside `payload` (of an event of `source`) may
    /// quote: those its source's `mask` names; every one when the source is not
    /// configured any more; none once the payload is purged.
    fn quoted_values(&self, source: &str, payload: Option<&Value>) -> Vec<String> {
        let Some(payload) = payload else {
            return Vec::new();
        };
        match self.settings.now().source(source) {
            Some(source) => mask::values(payload, &source.mask),
            None => mask::values(payload, &[String::new()]),
        }
    }

    /// Masks, for viewers, the free texts of `events` (each with its runs, if
    /// shown) as their payloads are masked.
    async fn mask_texts_of(
        &self,
        client: &deadpool_postgres::Object,
        events: Vec<(&mut EventSummary, &mut [Attempt])>,
    ) -> Result<(), StoreError> {
        let quoting = |(summary, runs): &(&mut EventSummary, &mut [Attempt])| {
            summary.last_error.is_some()
                || runs
                    .iter()
                    .any(|a| a.error.is_some() || a.response.is_some())
        };
        let ids: Vec<i64> = events
            .iter()
            .filter(|e| quoting(e))
            .map(|(s, _)| s.id)
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let payloads = history::payloads_of(client, &ids).await?;
        for (summary, runs) in events {
            let values = self.quoted_values(&summary.source, payloads.get(&summary.id));
            mask_free_texts(&values, &mut summary.last_error, runs);
        }
        Ok(())
    }

    /// When the provider dated the event, for a scheme that signs no time (see
    /// `ProviderTime`); `None` once the payload is purged.
    fn provider_time(&self, detail: &EventDetail) -> Option<ProviderTime> {
        let settings = self.settings.now();
        let source = settings.source(&detail.summary.source)?;
        let at = providers::of(&source.scheme).unsigned_time(detail.payload.as_ref()?)?;
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

    /// Covers a payload's personal data as its source's `mask` says; all of it
    /// when the source is not configured any more (its fields are unknown).
    fn cover(&self, source: &str, payload: &mut Value, how: Cover) {
        match self.settings.now().source(source) {
            Some(source) => mask::cover(payload, &source.mask, how),
            None => mask::cover_all(payload, how),
        }
    }

    /// Re-checks a stored event's signature against the source's current
    /// secrets, as of the time it was received.
    pub async fn verify_origin(&self, id: i64) -> Result<Origin, StoreError> {
        self.origin_with(&self.client().await?, id).await
    }

    async fn origin_with(
        &self,
        client: &deadpool_postgres::Object,
        id: i64,
    ) -> Result<Origin, StoreError> {
        let delivery = history::signed_delivery(client, id).await?;
        let settings = self.settings.now();
        let source = delivery.as_ref().and_then(|d| settings.source(&d.source));
        let covers = source.map(|s| Covered::of(&s.scheme));
        let verdict = match (delivery, source) {
            (
                Some(SignedDelivery {
                    redacted_at: None,
                    recovered: true,
                    received_at,
                    ..
                }),
                _,
            ) => Verdict::ProviderApi {
                proof: format!(
                    "recovered from the provider's API on {}: listed over TLS to the \
                     provider's own API, asked with the source's key (no signature came with it)",
                    received_at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            (
                Some(SignedDelivery {
                    redacted_at: Some(at),
                    ..
                }),
                _,
            ) => Verdict::Redacted {
                reason: format!(
                    "a customer's personal data was erased from it on {}",
                    at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            (
                Some(SignedDelivery {
                    kept: Some((body, headers)),
                    received_at,
                    ..
                }),
                Some(source),
            ) => {
                match source
                    .verifier()
                    .verify_kept(&headers, &body, received_at.timestamp())
                {
                    Ok(verified) => Verdict::Verified {
                        secret: verified.signed_with,
                    },
                    Err(error) => Verdict::Unverified {
                        reason: format!(
                            "{error} (with the current secrets, as of its received time)"
                        ),
                    },
                }
            }
            (
                Some(SignedDelivery {
                    kept: Some(_),
                    source,
                    ..
                }),
                None,
            ) => Verdict::Unavailable {
                reason: format!("source {source} is not configured any more"),
            },
            _ => Verdict::Unavailable {
                reason: "the exact body and signature headers are not kept (purged, or stored \
                         before hookd kept them)"
                    .into(),
            },
        };
        Ok(Origin { verdict, covers })
    }

    /// A payment and its events; viewing it is audited.
    pub async fn payment(
        &self,
        source: &str,
        payment_id: &str,
        who: &str,
    ) -> Result<Option<PaymentView>, StoreError> {
        if !storable(source) || !storable(payment_id) {
            return Ok(None);
        }
        let client = self.client().await?;
        let Some(payment) = payments::get(&client, source, payment_id).await? else {
            return Ok(None);
        };
        let events =
            history::events_of_payment(&client, source, payment_id, PAYMENT_EVENTS).await?;
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let mut attempts = history::attempts_of(&client, &ids).await?;
        let mut events: Vec<(EventSummary, Vec<Attempt>)> = events
            .into_iter()
            .map(|event| {
                let runs = attempts.remove(&event.id).unwrap_or_default();
                (event, runs)
            })
            .collect();
        let texts = events.iter_mut().map(|(e, runs)| (e, &mut runs[..]));
        self.mask_texts_of(&client, texts.collect()).await?;
        audit::record(
            &client,
            &Record {
                who,
                action: "viewed_payment",
                source: Some(source),
                payment_id: Some(payment_id),
                ..Record::default()
            },
        )
        .await?;
        let amounts_sent = self
            .settings
            .now()
            .source(source)
            .is_none_or(|s| crate::providers::of(&s.scheme).sends_amounts());
        Ok(Some(PaymentView {
            payment,
            amounts_sent,
            events,
        }))
    }

    /// A customer's payments, newest first, and the cursor of the next page.
    pub async fn customer_payments(
        &self,
        customer: &str,
        limit: i64,
        cursor: Option<&str>,
    ) -> Result<PaymentPage, DeskError> {
        let after = cursor.map(filter::cursor::decode).transpose()?;
        if !storable(customer) {
            return Ok(PaymentPage {
                payments: Vec::new(),
                next_cursor: None,
            });
        }
        let mut found =
            payments::of_customer(&self.client().await?, customer, limit + 1, after.as_ref())
                .await?;
        let next = if found.len() as i64 > limit {
            found.truncate(usize::try_from(limit).unwrap_or(0));
            found.last().map(|p| {
                filter::cursor::encode(&(p.created_at, p.source.clone(), p.payment_id.clone()))
            })
        } else {
            None
        };
        Ok(PaymentPage {
            payments: found,
            next_cursor: next,
        })
    }

    pub async fn dashboard(&self, now: DateTime<Utc>) -> Result<Dashboard, StoreError> {
        self.rollups.catch_up().await?;
        let client = self.client().await?;
        let last_24h = rollups::stats(&client, hour_of(now - DASHBOARD_WINDOW)).await?;
        let series = self.series_with(&client, now).await?;
        let counts = rollups::totals(
            &client,
            &[EventStatus::Dead.as_str(), EventStatus::Failed.as_str()],
        )
        .await?;
        let count = |s: EventStatus| counts.get(s.as_str()).copied().unwrap_or(0);
        let mut secrets = Vec::new();
        for source in &self.settings.now().sources {
            let mut positions = Vec::new();
            for position in 1..=i32::try_from(source.secrets.len()).unwrap_or(i32::MAX) {
                let last_used = history::secret_last_used(&client, &source.name, position).await?;
                positions.push(SecretUse {
                    position,
                    last_used,
                    used_in_7_days: last_used.is_some_and(|t| t >= now - SECRETS_WINDOW),
                });
            }
            secrets.push(SourceSecrets {
                source: source.name.clone(),
                positions,
            });
        }
        let recovered_7_days =
            crate::store::reconcile::recovered_since(&client, now - SECRETS_WINDOW).await?;
        Ok(Dashboard {
            last_24h,
            recovered_7_days,
            dead: count(EventStatus::Dead),
            failed: count(EventStatus::Failed),
            retry_backlog: count(EventStatus::Failed),
            secrets,
            series,
        })
    }

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

    /// The audit trail, newest first, and the cursor of the next page.
    pub async fn audit(&self, limit: i64, cursor: Option<&str>) -> Result<AuditPage, DeskError> {
        let after = cursor.map(filter::cursor::decode).transpose()?;
        let mut entries = audit::list(&self.client().await?, limit + 1, after).await?;
        let next = if entries.len() as i64 > limit {
            entries.truncate(usize::try_from(limit).unwrap_or(0));
            entries
                .last()
                .map(|e| filter::cursor::encode(&(e.at, e.id)))
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            next_cursor: next,
        })
    }

    /// Claims an `Idempotency-Key` of `token`'s for the request `fingerprint` names.
    pub async fn claim_key(
        &self,
        token: &str,
        key: &str,
        fingerprint: &[u8],
    ) -> Result<Claim, StoreError> {
        idempotency::claim(&self.client().await?, token, key, fingerprint).await
    }

    /// Keeps a running request's claim from being taken for an abandoned one.
    pub async fn renew_key(&self, token: &str, key: &str, claim: &[u8]) -> Result<(), StoreError> {
        idempotency::renew(&self.client().await?, token, key, claim).await
    }

    /// Stores the answer a repeat of the request gets.
    pub async fn complete_key(
        &self,
        token: &str,
        key: &str,
        claim: &[u8],
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        idempotency::complete(&self.client().await?, token, key, claim, status, body).await
    }

    /// Frees the key for a repeat to run (the answer was one that passes).
    pub async fn release_key(
        &self,
        token: &str,
        key: &str,
        claim: &[u8],
    ) -> Result<(), StoreError> {
        idempotency::release(&self.client().await?, token, key, claim).await
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

/// The log line of a customer forgotten (a dry run is not logged); the
/// customer's id is left out, as in the audit trail.
pub fn log_forget(who: &str, request_id: &str, outcome: &Forgotten) {
    log::info!(
        token = who, request_id = request_id;
        "admin forget of a customer by {who}: {} events, {} payments request_id={request_id}",
        outcome.events,
        outcome.payments
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

/// Masks an event's free texts — its last error, its runs' errors and
/// receivers' answers — where they quote `values` or an e-mail address.
fn mask_free_texts(values: &[String], last_error: &mut Option<String>, runs: &mut [Attempt]) {
    let cover = |text: &mut Option<String>, cut: fn(&str) -> bool| {
        if let Some(text) = text {
            *text = mask::cover_quoted(text, values, Cover::Mask, cut(text));
        }
    };
    cover(last_error, error_cut);
    for run in runs {
        cover(&mut run.error, error_cut);
        cover(&mut run.response, answer_cut);
    }
}

/// A stored error cut short ends in `…`.
fn error_cut(error: &str) -> bool {
    error.ends_with('…')
}

/// A receiver's answer is kept up to `RESPONSE_EXCERPT` bytes (a character cut
/// in two may leave it up to three short).
fn answer_cut(answer: &str) -> bool {
    answer.len() + 3 >= crate::handlers::forward::RESPONSE_EXCERPT
}

/// PostgreSQL text cannot hold NUL, so no stored source, payment or customer
/// id has one: a key with one names nothing (and must not reach a query, which
/// would fail).
fn storable(key: &str) -> bool {
    !key.contains('\0')
}
