//! Running an event's handlers, for both who do: receiving (the run at receipt,
//! alone or batched) and the dispatcher (retries, forwards). The runner plans an
//! event's handlers (its kind's first, then the matching forwards), builds the
//! view a handler gets, runs the kind's handler in the transaction that records
//! it (in a savepoint, under `handler_timeout`), and records the run with what
//! the ledger makes of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde_json::Value;
use tokio::sync::Notify;
use tracing::Instrument;
use tracing::field::Empty;

use crate::config::{Forward, LiveSettings, Settings};
use crate::duration;
use crate::event::IncomingEvent;
use crate::handlers::forward::RunOutcome;
use crate::handlers::{Event, Handler, HandlerError, PaymentMerge, Registry};
use crate::ledger::{self, HandlerName, HandlerStanding, RetryPolicy, Run, Standing};
use crate::metrics::Metrics;
use crate::provider_api::Api;
use crate::store::events::{self, ClaimedEvent, EventStatus, Settled};
use crate::store::forwards::ForwardRow;
use crate::store::{self, DbConnector, StoreError};

/// What runs an event's handlers; cheap to clone.
#[derive(Clone)]
pub struct Runner {
    /// How the pool connects, for cancelling a statement a handler left running.
    connector: DbConnector,
    registry: Arc<Registry>,
    settings: LiveSettings,
    metrics: Arc<Metrics>,
    /// Wakes a forward's lane: an event for it was stored.
    lanes: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

/// One handler of an event.
#[derive(Clone, Copy)]
pub enum Step<'a> {
    /// The kind's handler: runs in the transaction that records it.
    Local {
        kind: &'a str,
        handler: &'a Arc<dyn Handler>,
        /// The handler's payment merge, when it is hookd's own (`PaymentMerge`).
        merge: Option<PaymentMerge>,
    },
    /// A forward: a POST to another stack.
    Forward(&'a Forward),
}

/// The names of the forwards of `plan`.
pub fn forward_names<'a>(plan: &[Step<'a>]) -> Vec<&'a str> {
    plan.iter()
        .filter_map(|step| match step {
            Step::Forward(forward) => Some(forward.name.as_str()),
            Step::Local { .. } => None,
        })
        .collect()
}

impl Step<'_> {
    /// Its name in attempts and views: the kind, or `forward:NAME`.
    pub fn name(&self) -> HandlerName {
        match self {
            Step::Local { kind, .. } => HandlerName::Kind((*kind).to_string()),
            Step::Forward(forward) => forward.handler_name(),
        }
    }
}

/// How a run of the kind's handler ended.
pub enum Ran {
    /// Within `handler_timeout`, well or not: its transaction goes on.
    Ended(Run),
    /// Cut at `handler_timeout` (the run is that failure), its savepoint not
    /// rolled back: the cancel sent for the statement it left running may
    /// reach the session late, on whatever it runs next, so the transaction is
    /// to be given up and the session closed, not pooled.
    Cut(Run),
}

/// Why a handler's batch failed, and whether it was cut at `handler_timeout`
/// (its session then to be closed, as after `Ran::Cut`).
pub struct BatchFailed {
    pub why: String,
    pub cut: bool,
}

/// Which run of which event a log line is about.
pub struct Logged<'a> {
    pub id: i64,
    pub source: &'a str,
    pub event_id: &'a str,
    pub attempt: i32,
}

impl<'a> From<&Event<'a>> for Logged<'a> {
    fn from(event: &Event<'a>) -> Self {
        Logged {
            id: event.id,
            source: event.source,
            event_id: event.event_id,
            attempt: event.attempt,
        }
    }
}

impl Runner {
    pub fn new(
        connector: DbConnector,
        registry: Arc<Registry>,
        settings: LiveSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            connector,
            registry,
            settings,
            metrics,
            lanes: Arc::default(),
        }
    }

    /// The settings in force now (see `LiveSettings::now`).
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.now()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The handlers of an event of this source, type and kind: the kind's own
    /// first, then the forwards of `settings` (the caller's copy, which the
    /// steps borrow) that match.
    pub fn plan<'a>(
        &'a self,
        settings: &'a Settings,
        source: &str,
        event_type: &str,
        kind: Option<&str>,
    ) -> Vec<Step<'a>> {
        let mut steps = Vec::new();
        if let Some(entry) = kind.and_then(|k| self.registry.entry(k)) {
            steps.push(Step::Local {
                kind: entry.kind,
                handler: entry.handler,
                merge: entry.merge,
            });
        }
        for forward in &settings.forwards {
            if forward.matches(source, event_type, kind) {
                steps.push(Step::Forward(forward));
            }
        }
        steps
    }

    /// What wakes the lane of `forward` (one waker a name, made when first asked).
    pub fn lane_waker(&self, forward: &str) -> Arc<Notify> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        lanes.entry(forward.to_string()).or_default().clone()
    }

    /// Wakes the lanes of the forwards of `plan`: an event for them was stored.
    pub fn wake_forwards(&self, plan: &[Step<'_>]) {
        for step in plan {
            if let Step::Forward(forward) = step {
                self.lane_waker(&forward.name).notify_one();
            }
        }
    }

    /// The handlers' view of a delivery just stored as row `id` (its first run).
    pub fn view_received<'a>(
        &'a self,
        event: &'a IncomingEvent,
        id: i64,
        received_at: DateTime<Utc>,
    ) -> Event<'a> {
        Event {
            id,
            source: &event.source,
            scheme: event.scheme,
            event_id: &event.event_id,
            event_type: &event.event_type,
            kind: event.kind.as_deref(),
            payload: &event.payload,
            body: &event.body,
            attempt: 1,
            received_at,
        }
    }

    /// The handlers' view of a stored event, for its run number `attempt`.
    pub fn view_claimed<'a>(
        &'a self,
        claimed: &'a ClaimedEvent,
        payload: &'a Value,
        attempt: i32,
    ) -> Event<'a> {
        Event {
            id: claimed.id,
            source: &claimed.source,
            scheme: self.scheme(&claimed.source),
            event_id: &claimed.event_id,
            event_type: &claimed.event_type,
            kind: claimed.kind.as_deref(),
            payload,
            body: claimed.body.as_deref().unwrap_or_default(),
            attempt,
            received_at: claimed.received_at,
        }
    }

    /// The signature scheme of a source, as handlers are told it.
    fn scheme(&self, source: &str) -> &'static str {
        self.settings
            .now()
            .source(source)
            .map_or("", |s| s.scheme.name())
    }

    /// Runs the kind's handler `step` of `event` in a savepoint of `tx`. Only
    /// database errors outside the handler escape (they abort `tx`). A run cut
    /// at `handler_timeout` is left as it is: `tx` is to be given up and its
    /// session closed (see `Ran::Cut`). `read_first`:
    /// the event a delivery only names, read before `tx` began (see
    /// [`Runner::read_named`]); `None` reads it in the run, if it names one.
    pub async fn run_step_or_cut(
        &self,
        tx: &Transaction<'_>,
        step: &Step<'_>,
        handler: &Arc<dyn Handler>,
        event: &Event<'_>,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<Ran, StoreError> {
        let started_at = Utc::now();
        let clock = Instant::now();
        let span = tracing::trace_span!(
            "handler",
            hookd.handler = %step.name(),
            hookd.event_id = event.event_id,
            hookd.attempt = event.attempt,
            otel.status_message = Empty,
        );
        let (result, cut) = self
            .run_local(tx, handler, event, read_first)
            .instrument(span.clone())
            .await?;
        if let Err(error) = &result {
            crate::traces::fail(&span, error);
        }
        let sent = RunOutcome {
            result,
            http_status: None,
            response: None,
        };
        let run = self.ran(step.name(), event, started_at, clock, sent);
        Ok(if cut { Ran::Cut(run) } else { Ran::Ended(run) })
    }

    /// The handler of `kind`'s batch in `tx` under `handler_timeout`; on failure
    /// (any event's, or its time limit) why — and `tx` is to be undone (and,
    /// when cut at the time limit, its session closed: see `Ran::Cut`).
    pub async fn apply_batch(
        &self,
        tx: &Transaction<'_>,
        kind: &str,
        handler: &Arc<dyn Handler>,
        events: &[Event<'_>],
    ) -> Result<(), BatchFailed> {
        let limit = self.settings.now().handler_timeout;
        let span = tracing::trace_span!(
            "handler",
            hookd.handler = kind,
            hookd.batch.size = events.len(),
            otel.status_message = Empty,
        );
        let fetched_and_applied = async {
            let mut fetched = Vec::with_capacity(events.len());
            for event in events {
                fetched.push(self.fetched(event.source, event.payload).await?);
            }
            let views: Vec<Event<'_>> = events
                .iter()
                .zip(&fetched)
                .map(|(event, fetched)| match fetched {
                    Some(payload) => Event { payload, ..*event },
                    None => Event { ..*event },
                })
                .collect();
            handler.apply_batch(tx, &views).await
        };
        let applied = tokio::time::timeout(limit, fetched_and_applied)
            .instrument(span.clone())
            .await;
        let result = match applied {
            Ok(Ok(())) => Ok(()),
            Ok(Err(HandlerError::Retry(why) | HandlerError::Permanent(why))) => {
                Err(BatchFailed { why, cut: false })
            }
            Err(_) => {
                self.cancel_statement(tx).await;
                Err(BatchFailed {
                    why: "a handler's batch ran out of time".into(),
                    cut: true,
                })
            }
        };
        if let Err(failed) = &result {
            crate::traces::fail(&span, &failed.why);
        }
        result
    }

    /// A handler's run as it ended, timed and (when it failed) logged.
    pub fn ran<'e>(
        &self,
        name: HandlerName,
        event: impl Into<Logged<'e>>,
        started_at: DateTime<Utc>,
        clock: Instant,
        sent: RunOutcome,
    ) -> Run {
        let event = event.into();
        let RunOutcome {
            result,
            http_status,
            response,
        } = sent;
        self.metrics
            .handler_duration(&name.to_string(), clock.elapsed());
        if let Err(error) = &result {
            log::warn!(
                "event {} ({}/{:?}) {name} attempt {}: {:?}",
                event.id,
                event.source,
                event.event_id,
                event.attempt,
                error.to_string()
            );
        }
        Run {
            handler: name,
            started_at,
            finished_at: Utc::now(),
            result,
            http_status,
            response,
        }
    }

    /// A handler inside a savepoint of `tx`, under `handler_timeout`, and
    /// whether it was cut there (then left as it is, not rolled back).
    async fn run_local(
        &self,
        tx: &Transaction<'_>,
        handler: &Arc<dyn Handler>,
        event: &Event<'_>,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<(Result<(), HandlerError>, bool), StoreError> {
        let timeout = self.settings.now().handler_timeout;
        // SAVEPOINT is sent first and the handler's first statement right behind
        // it, in one round trip (statements on a connection run in the order sent).
        let (saved, applied) = tokio::join!(
            store::savepoint(tx),
            tokio::time::timeout(timeout, self.apply(tx, handler, event, read_first))
        );
        saved?;
        let result = match applied {
            Ok(result) => result,
            Err(_) => {
                self.cancel_statement(tx).await;
                let why = format!("handler timed out after {}", duration::format(timeout));
                return Ok((Err(HandlerError::Retry(why)), true));
            }
        };
        // A savepoint kept is released by the COMMIT: no round trip of its own.
        if result.is_err() {
            store::rollback_to_savepoint(tx).await?;
        }
        Ok((result, false))
    }

    /// The handler's run of `event`, on the event it names when the delivery
    /// only names one (read before the run's transaction when `read_first`
    /// says what the API answered, else fetched now: a failed fetch is a
    /// failed run).
    async fn apply(
        &self,
        tx: &Transaction<'_>,
        handler: &Arc<dyn Handler>,
        event: &Event<'_>,
        read_first: Option<&Result<Value, HandlerError>>,
    ) -> Result<(), HandlerError> {
        let fetched_now;
        let named = match read_first {
            Some(read) => Some(read.as_ref().map_err(HandlerError::clone)?),
            None => {
                fetched_now = self.fetched(event.source, event.payload).await?;
                fetched_now.as_ref()
            }
        };
        match named {
            Some(payload) => handler.apply(tx, &Event { payload, ..*event }).await,
            None => handler.apply(tx, event).await,
        }
    }

    /// Whether a delivery only names its event (see `Provider::event_fetch`):
    /// receiving reads that event before the transaction its handler runs in.
    pub fn names_its_event(&self, source: &str, payload: &Value) -> bool {
        let settings = self.settings.now();
        settings
            .source(source)
            .is_some_and(|source| source.scheme.provider().event_fetch(payload).is_some())
    }

    /// The event a delivery only names, read from its source's API now (no
    /// transaction open, no session held, so a slow API holds nothing in the
    /// database); `None` when the payload is the event. Held to
    /// `handler_timeout`, as a read inside a handler's run is: one that runs
    /// out of time is a failed run, retried as any.
    pub async fn read_named(
        &self,
        source: &str,
        payload: &Value,
    ) -> Option<Result<Value, HandlerError>> {
        let limit = self.settings.now().handler_timeout;
        match tokio::time::timeout(limit, self.fetched(source, payload)).await {
            Ok(read) => read.transpose(),
            Err(_) => Some(Err(HandlerError::Retry(format!(
                "fetching the event from the provider's API: no answer within {}",
                duration::format(limit)
            )))),
        }
    }

    /// The event a delivery only names (see `Provider::event_fetch`), read
    /// from its source's API with its key; `None` when the payload is the
    /// event. A fetch that failed is tried again as a failed run is; one that
    /// can never be asked for is a permanent failure.
    async fn fetched(&self, source: &str, payload: &Value) -> Result<Option<Value>, HandlerError> {
        let settings = self.settings.now();
        let Some(source) = settings.source(source) else {
            return Ok(None);
        };
        let Some(fetch) = source.scheme.provider().event_fetch(payload) else {
            return Ok(None);
        };
        let why = |problem: &dyn std::fmt::Display| {
            format!("fetching the event from the provider's API: {problem}")
        };
        let fetch = fetch.map_err(|problem| HandlerError::Permanent(why(&problem)))?;
        let fetched = async {
            let mut api = Api::for_fetch(source)?;
            fetch.send(&mut api).await
        };
        match fetched.await {
            Ok(value) => Ok(Some(value)),
            Err(error) => Err(HandlerError::Retry(why(&error.0))),
        }
    }

    /// Stops whatever statement an abandoned handler left running in `tx`'s session.
    async fn cancel_statement(&self, tx: &Transaction<'_>) {
        self.cancel(tx.cancel_token()).await;
    }

    /// Asks the server to cancel what a connection is running (if anything).
    pub async fn cancel(&self, token: tokio_postgres::CancelToken) {
        if let Err(error) = self.connector.cancel_query(token).await {
            log::warn!(
                "cannot cancel a handler's statement: {}",
                store::tls::explain(&error)
            );
        }
    }

    /// Where a handler stands after its `runs`-th run ended as `run` did.
    pub fn standing_after(&self, run: &Run, runs: i32) -> Standing {
        Standing::after(&run.result, runs, self.settings.now().max_attempts)
    }

    /// The event's row from where its kind's handler stands and its forwards' rows.
    pub fn settle(
        &self,
        standings: &[HandlerStanding],
        forwards: &[ForwardRow],
        attempts: i32,
    ) -> Settled {
        ledger::settle(
            standings,
            forwards,
            attempts,
            &self.retry_policy(),
            Utc::now(),
        )
    }

    /// How often and how soon handlers and forwards are tried again, now.
    pub fn retry_policy(&self) -> RetryPolicy {
        let settings = self.settings.now();
        RetryPolicy {
            max_attempts: settings.max_attempts,
            retry_base: settings.retry_base,
            retry_cap: settings.retry_cap,
        }
    }

    /// Writes a run's attempts (each with its number) and the event's new row in `tx`.
    pub async fn record(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        runs: &[(i32, Run)],
        standings: &[HandlerStanding],
        settled: &Settled,
    ) -> Result<(), StoreError> {
        events::settle(tx, id, settled).await?;
        events::append_attempts(tx, &ledger::attempt_records(id, runs, standings)).await?;
        Ok(())
    }

    /// Records in `tx` the first run of a new event's kind's handler, whose row
    /// was written as `expected` (processed, or failed while `forwards`, just
    /// planned, are to go); returns the event's status.
    pub async fn record_first(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        run: Run,
        forwards: &[&str],
        expected: EventStatus,
    ) -> Result<EventStatus, StoreError> {
        let standing = self.standing_after(&run, 1);
        let mut status = expected;
        let standings = vec![HandlerStanding {
            name: run.handler.clone(),
            runs: 1,
            standing,
        }];
        if standings[0].standing != Standing::Done {
            let planned: Vec<ForwardRow> = forwards
                .iter()
                .map(|name| ForwardRow::planned(name))
                .collect();
            let settled = self.settle(&standings, &planned, 1);
            events::settle(tx, id, &settled).await?;
            status = settled.status;
        }
        events::append_attempts(tx, &ledger::attempt_records(id, &[(1, run)], &standings)).await?;
        Ok(status)
    }

    pub fn count_status(&self, kind: Option<&str>, status: EventStatus) {
        self.metrics.event(kind, status);
    }
}
