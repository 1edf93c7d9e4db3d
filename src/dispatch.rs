//! Running an event's handlers. An event has a *plan*: its kind's handler (run in
//! the transaction that records it, inside a savepoint and under
//! `handler_timeout`) and the forwards that match it (POSTed after). Each run is
//! an attempt row naming its handler; a `processed` attempt, written with the
//! handler's effects, is that handler's completion, so a retry runs only the
//! handlers not yet done: a failed forward is retried without applying the
//! payment again, and the other way round.
//!
//! Forwards are sent with no transaction open, however slow their receiver: the
//! run commits a *lease* on the event first (no other run claims it until then),
//! sends, and records the answers in a new short transaction that ends the lease.
//! A run that dies mid-send leaves the lease to run out, and the event is claimed
//! and sent again: forwards are delivered at least once.
//!
//! The event is `processed` when every handler is done, `failed` while one will
//! run again (or a forward has yet to run), `dead` when what is left failed for
//! good. The retry loop claims due events with `FOR UPDATE SKIP LOCKED` (any
//! number of instances can run it); `try_dispatch_due` is one step of it, public so
//! tests and tools drive the queue without sleeping. Receiving wakes the loop as
//! soon as an event with forwards commits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};
use deadpool_postgres::{Pool, Transaction};
use tokio::sync::Notify;

use crate::config::{Forward, Settings};
use crate::duration;
use crate::handlers::forward::{self, Outgoing, Sent};
use crate::handlers::{Event, Handler, HandlerError, Registry};
use crate::metrics::{ForwardOutcome, Metrics};
use crate::shutdown::Shutdown;
use crate::store::audit::{self, Record};
use crate::store::events::{self, AttemptRecord, ClaimedEvent, EventStatus, HandlerRuns, Settled};
use crate::store::{self, DbConnector, StoreError};

/// How often an idle dispatcher looks for due retries (it is woken sooner when an
/// event with forwards arrives).
const POLL: Duration = Duration::from_millis(500);
/// How long it waits after a database error before trying again.
const BACKOFF_ON_ERROR: Duration = Duration::from_secs(2);
/// Longest `last_error` kept, in characters.
const MAX_ERROR_CHARS: usize = 2000;
/// How much longer than its forwards' timeout a lease lasts: time enough to
/// record their answers once they came.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Dispatcher {
    pool: Pool,
    /// How the pool connects, for cancelling a statement a handler left running.
    connector: DbConnector,
    registry: Arc<Registry>,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
    wake: Arc<Notify>,
}

/// One handler of an event.
#[derive(Clone, Copy)]
pub enum Step<'a> {
    /// The kind's handler: runs in the transaction that records it.
    Local {
        kind: &'a str,
        handler: &'a Arc<dyn Handler>,
    },
    /// A forward: a POST to another stack.
    Forward(&'a Forward),
}

impl Step<'_> {
    /// Its name in attempts and views: the kind, or `forward:NAME`.
    pub fn name(&self) -> String {
        match self {
            Step::Local { kind, .. } => (*kind).to_string(),
            Step::Forward(forward) => forward.handler_name(),
        }
    }
}

/// The outcome of an operator's retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The handlers ran again; the event now has this status.
    Applied(EventStatus),
    NotFound,
    /// The payload was purged: there is nothing to apply.
    Gone,
    /// No handler applies to the event: there is nothing to apply.
    NoHandler,
    /// Another run is sending the event's forwards right now (it holds the
    /// lease): nothing ran; retry once they have answered.
    InFlight,
}

impl RetryOutcome {
    /// How a retry ended, as one word (audit trail, bulk counts).
    pub fn name(&self) -> &'static str {
        match self {
            RetryOutcome::Applied(status) => status.as_str(),
            RetryOutcome::NotFound => "not_found",
            RetryOutcome::Gone => "gone",
            RetryOutcome::NoHandler => "no_handler",
            RetryOutcome::InFlight => "in_flight",
        }
    }
}

/// Who asked for an operator's retry: its audit row is written in the retry's
/// own transaction, so no retry that ran goes unaudited.
#[derive(Debug, Clone, Copy)]
pub struct RetryBy<'a> {
    pub who: &'a str,
    /// The `bulk_retried` audit row of the bulk request it is part of.
    pub bulk: Option<i64>,
}

/// What the transaction that claimed an event left to do.
enum Claimed<'p> {
    /// Nothing: the run is recorded; the event has this status.
    Settled(EventStatus),
    /// Send these forwards under the lease, then record their answers.
    Sending(Leased<'p>),
}

/// Forwards to send under a committed lease.
struct Leased<'p> {
    until: DateTime<Utc>,
    /// Each forward with its attempt number and its runs before this one.
    forwards: Vec<(&'p Forward, i32, i32)>,
    /// Where every handler stands, the forwards' places to be filled in.
    standings: Vec<(String, i32, Standing)>,
    attempts: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStep {
    /// One due event was attempted and now has this status.
    Attempted { id: i64, status: EventStatus },
    /// Nothing is due.
    Idle,
}

/// One handler run, as it ended.
#[derive(Debug, Clone)]
pub struct Run {
    pub handler: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub result: Result<(), HandlerError>,
    pub http_status: Option<i32>,
    pub response: Option<String>,
}

/// Where a handler of an event stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    Done,
    /// Will run again; with its latest error (none: it has not run yet).
    Again(Option<String>),
    /// Failed for good.
    Dead(String),
}

impl Dispatcher {
    pub fn new(
        pool: Pool,
        connector: DbConnector,
        registry: Arc<Registry>,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let timeout = settings
            .forwards
            .iter()
            .map(|f| f.timeout)
            .max()
            .unwrap_or(Duration::from_secs(10));
        let http = crate::outbound::client(timeout).unwrap_or_else(|problem| {
            log::error!("{problem}; forwards will fail until restart");
            reqwest::Client::new()
        });
        Self {
            pool,
            connector,
            registry,
            settings,
            metrics,
            http,
            wake: Arc::new(Notify::new()),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The handlers of an event of this source, type and kind: the kind's own
    /// first, then the matching forwards.
    pub fn plan(&self, source: &str, event_type: &str, kind: Option<&str>) -> Vec<Step<'_>> {
        let mut steps = Vec::new();
        if let Some((kind, handler)) = kind.and_then(|k| self.registry.entry(k)) {
            steps.push(Step::Local { kind, handler });
        }
        for forward in &self.settings.forwards {
            if forward.matches(source, event_type, kind) {
                steps.push(Step::Forward(forward));
            }
        }
        steps
    }

    /// The names of an event's handlers as the configuration has them now.
    pub fn plan_names(&self, event: &crate::store::history::EventSummary) -> Vec<String> {
        self.plan(&event.source, &event.event_type, event.kind.as_deref())
            .iter()
            .map(Step::name)
            .collect()
    }

    /// Wakes a waiting retry loop: an event is due now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Claims the most overdue failed event, if any, and runs its handlers.
    pub async fn try_dispatch_due(&self) -> Result<DispatchStep, StoreError> {
        let mut client = self.pool.get().await?;
        let claimed = async {
            let tx = client.transaction().await?;
            let Some(claimed) = events::claim_due(&tx).await? else {
                return Ok(None);
            };
            let left = self.run_again(&tx, &claimed, false).await?;
            tx.commit().await?;
            Ok(Some((claimed, left)))
        }
        .await;
        // No connection is held while the forwards are sent.
        let Some((claimed, left)) = store::give_back(client, claimed)? else {
            return Ok(DispatchStep::Idle);
        };
        let status = self.send_leased(&claimed, left, None).await?;
        Ok(DispatchStep::Attempted {
            id: claimed.id,
            status,
        })
    }

    /// Runs an event's handlers again now, whatever its status (operators'
    /// retry), including those that failed for good. Handlers already done do not
    /// run again. The audit row of `by` is written in the retry's transaction.
    pub async fn retry_now(&self, id: i64, by: RetryBy<'_>) -> Result<RetryOutcome, StoreError> {
        let mut client = self.pool.get().await?;
        let decided = async {
            let tx = client.transaction().await?;
            let Some(event) = events::lock_by_id(&tx, id).await? else {
                audit_retry(&tx, by, id, None, RetryOutcome::NotFound.name()).await?;
                tx.commit().await?;
                return Ok(Err(RetryOutcome::NotFound));
            };
            let refusal = if event.leased {
                Some(RetryOutcome::InFlight)
            } else if event.payload.is_none() {
                Some(RetryOutcome::Gone)
            } else if self
                .plan(&event.source, &event.event_type, event.kind.as_deref())
                .is_empty()
            {
                Some(RetryOutcome::NoHandler)
            } else {
                None
            };
            let source = Some(event.source.as_str());
            if let Some(outcome) = refusal {
                audit_retry(&tx, by, id, source, outcome.name()).await?;
                tx.commit().await?;
                return Ok(Err(outcome));
            }
            let left = self.run_again(&tx, &event, true).await?;
            let audited = match &left {
                Claimed::Settled(status) => {
                    audit_retry(&tx, by, id, source, status.as_str()).await?;
                    None
                }
                // Completed with the status once the forwards have answered.
                Claimed::Sending(_) => Some(audit_retry(&tx, by, id, source, "sending").await?),
            };
            tx.commit().await?;
            Ok(Ok((event, left, audited)))
        }
        .await;
        // No connection is held while the forwards are sent.
        let (event, left, audited) = match store::give_back(client, decided)? {
            Ok(run) => run,
            Err(refused) => return Ok(refused),
        };
        let status = self.send_leased(&event, left, audited).await?;
        Ok(RetryOutcome::Applied(status))
    }

    /// Sends the forwards a committed lease is for, with no transaction open, and
    /// records their answers in a new transaction that ends the lease (and
    /// completes the retry's audit row `audited`); returns the event's status.
    async fn send_leased(
        &self,
        claimed: &ClaimedEvent,
        left: Claimed<'_>,
        audited: Option<i64>,
    ) -> Result<EventStatus, StoreError> {
        let mut leased = match left {
            Claimed::Settled(status) => return Ok(status),
            Claimed::Sending(leased) => leased,
        };
        let sends = leased
            .forwards
            .iter()
            .map(|(forward, attempt, _)| self.send_forward(forward, claimed, *attempt));
        let runs = futures_util::future::join_all(sends).await;
        for ((_, _, previous), run) in leased.forwards.iter().zip(&runs) {
            let standing = self.standing_after(run, previous + 1);
            if let Some(place) = leased
                .standings
                .iter_mut()
                .find(|(name, _, _)| *name == run.handler)
            {
                *place = (run.handler.clone(), previous + 1, standing);
            }
        }
        let numbered: Vec<(i32, Run)> = leased
            .forwards
            .iter()
            .map(|(_, attempt, _)| *attempt)
            .zip(runs)
            .collect();
        let settled = self.settle(&leased.standings, leased.attempts);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        if !events::lock_leased(&tx, claimed.id, leased.until).await? {
            // Only if the answers outlived the lease: the run that took the event
            // over sends again (at least once), and records what it gets.
            log::warn!(
                "event {}: its lease ran out before its forwards answered; another run \
                 sends them again",
                claimed.id
            );
            return Ok(EventStatus::Failed);
        }
        self.record(&tx, claimed.id, &numbered, &leased.standings, &settled)
            .await?;
        if let Some(entry) = audited {
            audit::complete(
                &tx,
                entry,
                &serde_json::json!({"outcome": settled.status.as_str()}),
            )
            .await?;
        }
        tx.commit().await?;
        self.count_status(claimed.kind.as_deref(), settled.status);
        Ok(settled.status)
    }

    /// Runs due retries until shutdown; a run under way is finished first.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        while !shutdown.is_requested() {
            let pause = match self.try_dispatch_due().await {
                Ok(DispatchStep::Attempted { .. }) => continue,
                Ok(DispatchStep::Idle) => POLL,
                Err(error) => {
                    log::warn!("dispatcher: {error}; retrying in {BACKOFF_ON_ERROR:?}");
                    BACKOFF_ON_ERROR
                }
            };
            tokio::select! {
                () = self.wake.notified() => {}
                awake = shutdown.sleep(pause) => if !awake { break },
            }
        }
    }

    /// The handlers of a locked event that are not done: its kind's run and
    /// recorded in `tx`; its forwards, if any are to go, leased in `tx` to be sent
    /// once it commits. `operator` also runs those that failed for good.
    async fn run_again<'s>(
        &'s self,
        tx: &Transaction<'_>,
        claimed: &ClaimedEvent,
        operator: bool,
    ) -> Result<Claimed<'s>, StoreError> {
        let history = events::handler_runs(tx, claimed.id).await?;
        let plan = self.plan(
            &claimed.source,
            &claimed.event_type,
            claimed.kind.as_deref(),
        );
        let scheme = self
            .settings
            .source(&claimed.source)
            .map_or("", |s| s.scheme.name());
        let body = claimed.body.as_deref().unwrap_or_default();
        let mut attempt = claimed.attempts;
        let mut runs = Vec::new();
        let mut standings = Vec::new();
        let mut sending = Vec::new();
        if plan.is_empty() {
            // Its handler was removed from the configuration since.
            standings.push((
                claimed.kind.clone().unwrap_or_default(),
                0,
                Standing::Dead(format!(
                    "no handler applies to kind {} any more",
                    claimed.kind.as_deref().unwrap_or("none")
                )),
            ));
        }
        // An operator's retry of an event whose handlers are all done applies it
        // all again (idempotent handlers make that safe); otherwise only what is
        // not done runs.
        let all_done = plan.iter().all(|step| {
            let name = step.name();
            history.iter().any(|h| h.handler == name && h.done)
        });
        for step in &plan {
            let name = step.name();
            let before = history.iter().find(|h| h.handler == name);
            let previous = before.map_or(0, |h| h.runs);
            let skip = !(operator && all_done)
                && before
                    .is_some_and(|h| h.done || (!operator && h.last_outcome == EventStatus::Dead));
            if skip {
                standings.push((name, previous, standing_of(before)));
                continue;
            }
            attempt += 1;
            let Some(payload) = claimed.payload.as_ref() else {
                standings.push((
                    name,
                    previous,
                    Standing::Dead("the payload was purged".into()),
                ));
                continue;
            };
            let Step::Local { handler, .. } = step else {
                if let Step::Forward(forward) = step {
                    sending.push((*forward, attempt, previous));
                }
                standings.push((name, previous, Standing::Again(None)));
                continue;
            };
            let event = Event {
                id: claimed.id,
                source: &claimed.source,
                scheme,
                event_id: &claimed.event_id,
                event_type: &claimed.event_type,
                kind: claimed.kind.as_deref(),
                payload,
                body,
                attempt,
                received_at: claimed.received_at,
            };
            let run = self.run_step(tx, step, handler, &event).await?;
            let standing = self.standing_after(&run, previous + 1);
            standings.push((name, previous + 1, standing));
            runs.push((attempt, run));
        }
        let mut settled = self.settle(&standings, attempt);
        let Some(longest) = sending.iter().map(|(f, _, _)| f.timeout).max() else {
            self.record(tx, claimed.id, &runs, &standings, &settled)
                .await?;
            self.count_status(claimed.kind.as_deref(), settled.status);
            return Ok(Claimed::Settled(settled.status));
        };
        // The lease: PostgreSQL keeps microseconds, and the lease is found again
        // by its exact time.
        let until = duration::after(Utc::now(), longest + LEASE_MARGIN)
            .unwrap_or_else(Utc::now)
            .trunc_subsecs(6);
        settled.status = EventStatus::Failed;
        settled.next_attempt_at = Some(until);
        settled.lease_until = Some(until);
        self.record(tx, claimed.id, &runs, &standings, &settled)
            .await?;
        Ok(Claimed::Sending(Leased {
            until,
            forwards: sending,
            standings,
            attempts: attempt,
        }))
    }

    /// Runs the kind's handler `step` of `event` in a savepoint of `tx`. Only
    /// database errors outside the handler escape (they abort `tx`).
    pub async fn run_step(
        &self,
        tx: &Transaction<'_>,
        step: &Step<'_>,
        handler: &Arc<dyn Handler>,
        event: &Event<'_>,
    ) -> Result<Run, StoreError> {
        let started_at = Utc::now();
        let clock = Instant::now();
        let result = self.run_local(tx, handler, event).await?;
        let sent = Sent {
            result,
            http_status: None,
            response: None,
        };
        Ok(self.ran(step.name(), event, started_at, clock, sent))
    }

    /// POSTs `claimed` to `forward`, as run number `attempt` (no transaction is
    /// open: a slow receiver holds nothing in the database).
    async fn send_forward(&self, forward: &Forward, claimed: &ClaimedEvent, attempt: i32) -> Run {
        let started_at = Utc::now();
        let clock = Instant::now();
        let outgoing = Outgoing {
            source: &claimed.source,
            event_id: &claimed.event_id,
            event_type: &claimed.event_type,
            kind: claimed.kind.as_deref(),
            body: claimed.body.as_deref().unwrap_or_default(),
        };
        let sent = forward::send(&self.http, forward, &outgoing).await;
        let outcome = if sent.result.is_ok() {
            ForwardOutcome::Delivered
        } else {
            ForwardOutcome::Failed
        };
        self.metrics.forward(&forward.name, outcome);
        let event = Logged {
            id: claimed.id,
            source: &claimed.source,
            event_id: &claimed.event_id,
            attempt,
        };
        self.ran(forward.handler_name(), event, started_at, clock, sent)
    }

    /// A handler's run as it ended, timed and (when it failed) logged.
    fn ran<'e>(
        &self,
        name: String,
        event: impl Into<Logged<'e>>,
        started_at: DateTime<Utc>,
        clock: Instant,
        sent: Sent,
    ) -> Run {
        let event = event.into();
        let Sent {
            result,
            http_status,
            response,
        } = sent;
        self.metrics.handler_duration(&name, clock.elapsed());
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

    /// A handler inside a savepoint of `tx`, under `handler_timeout`.
    async fn run_local(
        &self,
        tx: &Transaction<'_>,
        handler: &Arc<dyn Handler>,
        event: &Event<'_>,
    ) -> Result<Result<(), HandlerError>, StoreError> {
        store::savepoint(tx).await?;
        let timeout = self.settings.handler_timeout;
        let result = match tokio::time::timeout(timeout, handler.apply(tx, event)).await {
            Ok(result) => result,
            Err(_) => {
                self.cancel_statement(tx).await;
                Err(HandlerError::Retry(format!(
                    "handler timed out after {}",
                    duration::format(timeout)
                )))
            }
        };
        if result.is_ok() {
            store::release_savepoint(tx).await?;
        } else {
            store::rollback_to_savepoint(tx).await?;
        }
        Ok(result)
    }

    /// Stops whatever statement an abandoned handler left running in `tx`'s session.
    pub(crate) async fn cancel_statement(&self, tx: &Transaction<'_>) {
        if let Err(error) = self.connector.cancel_query(tx.cancel_token()).await {
            log::warn!(
                "cannot cancel a handler's statement: {}",
                store::tls::explain(&error)
            );
        }
    }

    /// Where a handler stands after its `runs`-th run ended as `run` did.
    pub(crate) fn standing_after(&self, run: &Run, runs: i32) -> Standing {
        match &run.result {
            Ok(()) => Standing::Done,
            Err(HandlerError::Permanent(reason)) => Standing::Dead(reason.clone()),
            Err(HandlerError::Retry(reason)) if runs >= self.settings.max_attempts => {
                Standing::Dead(format!("{reason} (gave up after {runs} attempts)"))
            }
            Err(HandlerError::Retry(reason)) => Standing::Again(Some(reason.clone())),
        }
    }

    /// The event's row from where its handlers stand (name, runs, standing).
    pub(crate) fn settle(&self, standings: &[(String, i32, Standing)], attempts: i32) -> Settled {
        let named = standings.len() > 1;
        let error_of = |name: &str, reason: &str| {
            storable_error(&if named {
                format!("{name}: {reason}")
            } else {
                reason.to_string()
            })
        };
        let again: Vec<_> = standings
            .iter()
            .filter_map(|(name, runs, s)| match s {
                Standing::Again(reason) => Some((name, *runs, reason)),
                _ => None,
            })
            .collect();
        let dead = standings.iter().find_map(|(name, _, s)| match s {
            Standing::Dead(reason) => Some(error_of(name, reason)),
            _ => None,
        });
        if !again.is_empty() {
            // A handler that has not run yet (a forward) is due at once.
            let delay = if again.iter().any(|(_, _, reason)| reason.is_none()) {
                Duration::ZERO
            } else {
                let runs = again.iter().map(|(_, runs, _)| *runs).max().unwrap_or(1);
                retry_delay(self.settings.retry_base, self.settings.retry_cap, runs)
            };
            let last_error = again
                .iter()
                .find_map(|(name, _, reason)| reason.as_deref().map(|r| error_of(name, r)))
                .or(dead);
            return Settled {
                status: EventStatus::Failed,
                attempts,
                last_error,
                next_attempt_at: Some(duration::after(Utc::now(), delay).unwrap_or_else(Utc::now)),
                lease_until: None,
            };
        }
        match dead {
            Some(reason) => Settled {
                status: EventStatus::Dead,
                attempts,
                last_error: Some(reason),
                next_attempt_at: None,
                lease_until: None,
            },
            None => Settled {
                status: EventStatus::Processed,
                attempts,
                last_error: None,
                next_attempt_at: None,
                lease_until: None,
            },
        }
    }

    /// Writes a run's attempts and the event's new row in `tx`.
    async fn record(
        &self,
        tx: &Transaction<'_>,
        id: i64,
        runs: &[(i32, Run)],
        standings: &[(String, i32, Standing)],
        settled: &Settled,
    ) -> Result<(), StoreError> {
        let attempts: Vec<AttemptRecord> = runs
            .iter()
            .map(|(number, run)| {
                let standing = standings
                    .iter()
                    .find(|(name, _, _)| *name == run.handler)
                    .map(|(_, _, s)| s);
                attempt_record(id, *number, run, standing)
            })
            .collect();
        events::settle(tx, id, settled).await?;
        events::append_attempts(tx, &attempts).await?;
        Ok(())
    }

    pub(crate) fn count_status(&self, kind: Option<&str>, status: EventStatus) {
        self.metrics.event(kind, status);
    }
}

/// Which run of which event a log line is about.
struct Logged<'a> {
    id: i64,
    source: &'a str,
    event_id: &'a str,
    attempt: i32,
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

/// An operator's retry in the audit trail, written in `tx` (the retry's own);
/// returns the row's id.
async fn audit_retry(
    tx: &Transaction<'_>,
    by: RetryBy<'_>,
    id: i64,
    source: Option<&str>,
    outcome: &str,
) -> Result<i64, StoreError> {
    let mut detail = serde_json::json!({"outcome": outcome});
    if let Some(bulk) = by.bulk {
        detail["bulk"] = bulk.into();
    }
    audit::record(
        tx,
        &Record {
            who: by.who,
            action: "retried",
            webhook_event_id: Some(id),
            source,
            payment_id: None,
            detail: Some(detail),
        },
    )
    .await
}

/// The attempt row of a run, its outcome what the run means for its handler.
pub(crate) fn attempt_record(
    event: i64,
    attempt: i32,
    run: &Run,
    standing: Option<&Standing>,
) -> AttemptRecord {
    let outcome = match standing {
        Some(Standing::Done) => EventStatus::Processed,
        Some(Standing::Dead(_)) => EventStatus::Dead,
        _ => EventStatus::Failed,
    };
    let error = match standing {
        Some(Standing::Dead(reason)) | Some(Standing::Again(Some(reason))) => {
            Some(storable_error(reason))
        }
        _ => None,
    };
    AttemptRecord {
        event,
        attempt,
        handler: run.handler.clone(),
        started_at: run.started_at,
        finished_at: run.finished_at,
        outcome,
        error,
        http_status: run.http_status,
        response: run.response.clone(),
    }
}

/// Where a handler that does not run now stands, from its runs so far.
fn standing_of(runs: Option<&HandlerRuns>) -> Standing {
    match runs {
        Some(r) if r.done => Standing::Done,
        Some(r) if r.last_outcome == EventStatus::Dead => {
            Standing::Dead("failed for good before".into())
        }
        _ => Standing::Again(None),
    }
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
