//! Retrying an event's handlers (through [`crate::runner`], which receiving
//! shares; [`crate::ledger`] says what each run means). An event has a *plan*:
//! its kind's handler (run in the transaction that records it, inside a savepoint
//! and under `handler_timeout`) and the forwards that match it (POSTed after). Each run is
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
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::config::{Forward, LiveSettings, MAX_FORWARD_TIMEOUT, Settings};
use crate::duration;
use crate::handlers::Registry;
use crate::handlers::forward::{self, Outgoing};
use crate::ledger::{HandlerName, HandlerStanding, HandlerStatus, Run, Standing};
use crate::metrics::{ForwardOutcome, Metrics};
use crate::providers;
use crate::runner::{Logged, Runner, Step};
use crate::shutdown::Shutdown;
use crate::store::audit::{self, Record};
use crate::store::events::{self, ClaimedEvent, EventStatus};
use crate::store::{self, DbConnector, StoreError};

/// How often an idle dispatcher looks for due retries (it is woken sooner when an
/// event with forwards arrives).
const POLL: Duration = Duration::from_millis(500);
/// How long it waits after a database error before trying again.
const BACKOFF_ON_ERROR: Duration = Duration::from_secs(2);
/// How much longer than its forwards' timeout a lease lasts: time enough to
/// record their answers once they came.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Dispatcher {
    pool: Pool,
    runner: Runner,
    http: reqwest::Client,
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
    standings: Vec<HandlerStanding>,
    attempts: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStep {
    /// One due event was attempted and now has this status.
    Attempted { id: i64, status: EventStatus },
    /// Nothing is due.
    Idle,
}

impl Dispatcher {
    pub fn new(
        pool: Pool,
        connector: DbConnector,
        registry: Arc<Registry>,
        settings: LiveSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        // Each send sets its forward's own timeout; the client's is only the
        // ceiling, the longest any forward (a reloaded one too) may have.
        let http = crate::outbound::client(MAX_FORWARD_TIMEOUT).unwrap_or_else(|problem| {
            log::error!("{problem}; forwards will fail until restart");
            reqwest::Client::new()
        });
        Self {
            pool,
            runner: Runner::new(connector, registry, settings, metrics),
            http,
        }
    }

    /// What runs the handlers, shared with receiving.
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// The names of an event's handlers as the configuration has them now.
    pub fn plan_names(&self, event: &crate::store::history::EventSummary) -> Vec<HandlerName> {
        let settings = self.runner.settings();
        self.runner
            .plan(
                &settings,
                &event.source,
                &event.event_type,
                event.kind.as_deref(),
            )
            .iter()
            .map(Step::name)
            .collect()
    }

    /// An event whose provider keeps the whole request with each of its events
    /// (GoCardless): its own item of it, which handlers and forwards read.
    fn own_item(&self, mut claimed: ClaimedEvent) -> ClaimedEvent {
        let settings = self.runner.settings();
        let Some(source) = settings.source(&claimed.source) else {
            return claimed;
        };
        let no_headers: Vec<(String, String)> = Vec::new();
        if let Some(body) = &claimed.body
            && let Some((payload, bytes)) =
                providers::own_item(&source.scheme, &no_headers, body, &claimed.event_id)
        {
            claimed.payload = Some(payload);
            claimed.body = Some(bytes);
        }
        claimed
    }

    /// Claims the most overdue failed event, if any, and runs its handlers.
    pub async fn try_dispatch_due(&self) -> Result<DispatchStep, StoreError> {
        // One configuration for the whole run, its forwards' sends included.
        let settings = self.runner.settings();
        let mut client = self.pool.get().await?;
        let claimed = async {
            let tx = crate::store::begin(&mut client).await?;
            let Some(claimed) = events::claim_due(&tx).await? else {
                return Ok(None);
            };
            let claimed = self.own_item(claimed);
            let span = tracing::trace_span!(
                "dispatch",
                hookd.row_id = claimed.id,
                hookd.source = claimed.source.as_str(),
                hookd.event_id = claimed.event_id.as_str(),
            );
            let left = async {
                let left = self.run_again(&tx, &settings, &claimed, false).await?;
                tx.commit()
                    .instrument(tracing::trace_span!("commit"))
                    .await?;
                Ok::<_, StoreError>(left)
            }
            .instrument(span.clone())
            .await?;
            Ok(Some((claimed, left, span)))
        }
        .await;
        // No connection is held while the forwards are sent.
        let Some((claimed, left, span)) = store::give_back(client, claimed)? else {
            return Ok(DispatchStep::Idle);
        };
        let status = self
            .send_leased(&claimed, left, None)
            .instrument(span)
            .await?;
        Ok(DispatchStep::Attempted {
            id: claimed.id,
            status,
        })
    }

    /// Runs an event's handlers again now, whatever its status (operators'
    /// retry), including those that failed for good. Handlers already done do not
    /// run again. The audit row of `by` is written in the retry's transaction.
    pub async fn retry_now(&self, id: i64, by: RetryBy<'_>) -> Result<RetryOutcome, StoreError> {
        let span = tracing::trace_span!("dispatch", hookd.row_id = id, hookd.operator = true);
        self.retry_now_in(id, by).instrument(span).await
    }

    async fn retry_now_in(&self, id: i64, by: RetryBy<'_>) -> Result<RetryOutcome, StoreError> {
        let settings = self.runner.settings();
        let mut client = self.pool.get().await?;
        let decided = async {
            let tx = crate::store::begin(&mut client).await?;
            let Some(event) = events::lock_by_id(&tx, id).await? else {
                audit_retry(&tx, by, id, None, RetryOutcome::NotFound.name()).await?;
                tx.commit().await?;
                return Ok(Err(RetryOutcome::NotFound));
            };
            let event = self.own_item(event);
            let refusal = if event.leased {
                Some(RetryOutcome::InFlight)
            } else if event.payload.is_none() {
                Some(RetryOutcome::Gone)
            } else if self
                .runner
                .plan(
                    &settings,
                    &event.source,
                    &event.event_type,
                    event.kind.as_deref(),
                )
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
            let left = self.run_again(&tx, &settings, &event, true).await?;
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
            let standing = self.runner.standing_after(run, previous + 1);
            if let Some(place) = leased.standings.iter_mut().find(|h| h.name == run.handler) {
                place.runs = previous + 1;
                place.standing = standing;
            }
        }
        let numbered: Vec<(i32, Run)> = leased
            .forwards
            .iter()
            .map(|(_, attempt, _)| *attempt)
            .zip(runs)
            .collect();
        let settled = self.runner.settle(&leased.standings, leased.attempts);
        let mut client = self.pool.get().await?;
        let tx = crate::store::begin(&mut client).await?;
        if !events::lock_leased(&tx, claimed.id, leased.until).await? {
            // Only if the answers outlived the lease: the run that took the event
            // over sends again (at least once), and records what it gets.
            log::warn!(
                "event {}: its lease ran out before its forwards answered; another run \
                 sends them again",
                claimed.id
            );
            if let Some(entry) = audited {
                // The operator's row says what became of the retry, not "sending".
                audit::complete(&tx, entry, &serde_json::json!({"outcome": "superseded"})).await?;
                tx.commit().await?;
            }
            return Ok(EventStatus::Failed);
        }
        self.runner
            .record(&tx, claimed.id, &numbered, &leased.standings, &settled)
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
        self.runner
            .count_status(claimed.kind.as_deref(), settled.status);
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
                () = self.runner.woken() => {}
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
        settings: &'s Settings,
        claimed: &ClaimedEvent,
        operator: bool,
    ) -> Result<Claimed<'s>, StoreError> {
        let history = events::handler_runs(tx, claimed.id).await?;
        let runner = &self.runner;
        let plan = runner.plan(
            settings,
            &claimed.source,
            &claimed.event_type,
            claimed.kind.as_deref(),
        );
        let mut attempt = claimed.attempts;
        let mut runs = Vec::new();
        let mut standings = Vec::new();
        let mut sending = Vec::new();
        if plan.is_empty() {
            // Its handler was removed from the configuration since.
            standings.push(HandlerStanding {
                name: HandlerName::Kind(claimed.kind.clone().unwrap_or_default()),
                runs: 0,
                standing: Standing::Dead(format!(
                    "no handler applies to kind {} any more",
                    claimed.kind.as_deref().unwrap_or("none")
                )),
            });
        }
        // Where each handler of the plan stands from its runs so far.
        let before: Vec<(i32, HandlerStatus)> = plan
            .iter()
            .map(|step| {
                let name = step.name();
                history.iter().find(|h| name.is(&h.handler)).map_or(
                    (0, HandlerStatus::Pending),
                    |h| {
                        let outcomes = h.outcomes.iter().map(String::as_str);
                        (h.runs, HandlerStatus::from_outcomes(outcomes))
                    },
                )
            })
            .collect();
        // An operator's retry of an event whose handlers are all done applies it
        // all again (idempotent handlers make that safe); otherwise only what is
        // not done runs.
        let all_done = before.iter().all(|(_, status)| status.is_done());
        for (step, &(previous, status)) in plan.iter().zip(&before) {
            let name = step.name();
            let skip = !(operator && all_done)
                && (status.is_done() || (!operator && status == HandlerStatus::Dead));
            let mut standing = |runs: i32, standing: Standing| {
                standings.push(HandlerStanding {
                    name: name.clone(),
                    runs,
                    standing,
                });
            };
            if skip {
                standing(previous, Standing::before(status));
                continue;
            }
            attempt += 1;
            let Some(payload) = claimed.payload.as_ref() else {
                standing(previous, Standing::Dead("the payload was purged".into()));
                continue;
            };
            let Step::Local { handler, .. } = step else {
                if let Step::Forward(forward) = step {
                    sending.push((*forward, attempt, previous));
                }
                standing(previous, Standing::Again(None));
                continue;
            };
            let event = runner.view_claimed(claimed, payload, attempt);
            let run = runner.run_step(tx, step, handler, &event).await?;
            standing(previous + 1, runner.standing_after(&run, previous + 1));
            runs.push((attempt, run));
        }
        let mut settled = runner.settle(&standings, attempt);
        let Some(longest) = sending.iter().map(|(f, _, _)| f.timeout).max() else {
            runner
                .record(tx, claimed.id, &runs, &standings, &settled)
                .await?;
            runner.count_status(claimed.kind.as_deref(), settled.status);
            return Ok(Claimed::Settled(settled.status));
        };
        // The lease, by the database's clock, which every instance's claim
        // compares it with (an instance's own clock may be behind). PostgreSQL
        // keeps microseconds, and the lease is found again by its exact time.
        let now = events::database_now(tx).await?;
        let until = duration::after(now, longest + LEASE_MARGIN)
            .unwrap_or(now)
            .trunc_subsecs(6);
        settled.status = EventStatus::Failed;
        settled.next_attempt_at = Some(until);
        settled.lease_until = Some(until);
        runner
            .record(tx, claimed.id, &runs, &standings, &settled)
            .await?;
        Ok(Claimed::Sending(Leased {
            until,
            forwards: sending,
            standings,
            attempts: attempt,
        }))
    }

    /// POSTs `claimed` to `forward`, as run number `attempt` (no transaction is
    /// open: a slow receiver holds nothing in the database).
    async fn send_forward(&self, forward: &Forward, claimed: &ClaimedEvent, attempt: i32) -> Run {
        let started_at = Utc::now();
        let clock = Instant::now();
        // A forward carries JSON: a body kept in another format (Braintree's
        // form) goes as the JSON hookd read from it.
        let as_json;
        let kept = claimed.body.as_deref().unwrap_or_default();
        let body = match &claimed.payload {
            Some(payload) if serde_json::from_slice::<serde::de::IgnoredAny>(kept).is_err() => {
                as_json = serde_json::to_vec(payload).unwrap_or_default();
                as_json.as_slice()
            }
            _ => kept,
        };
        let outgoing = Outgoing {
            source: &claimed.source,
            event_id: &claimed.event_id,
            event_type: &claimed.event_type,
            kind: claimed.kind.as_deref(),
            body,
        };
        let span = forward_span(forward, attempt);
        let sent = forward::send(&self.http, forward, &outgoing)
            .instrument(span.clone())
            .await;
        if let Some(code) = sent.http_status {
            span.record("http.response.status_code", code);
        }
        if let Err(error) = &sent.result {
            crate::traces::fail(&span, error);
        }
        let outcome = if sent.result.is_ok() {
            ForwardOutcome::Delivered
        } else {
            ForwardOutcome::Failed
        };
        self.runner.metrics().forward(&forward.name, outcome);
        let event = Logged {
            id: claimed.id,
            source: &claimed.source,
            event_id: &claimed.event_id,
            attempt,
        };
        let name = forward.handler_name();
        self.runner.ran(name, event, started_at, clock, sent)
    }
}

/// A forward's span (kind client): its `traceparent` goes to the receiver.
fn forward_span(forward: &Forward, attempt: i32) -> Span {
    tracing::trace_span!(
        "forward",
        otel.kind = "client",
        hookd.forward = forward.name.as_str(),
        hookd.attempt = attempt,
        url.full = %forward.endpoint(),
        http.response.status_code = Empty,
        otel.status_message = Empty,
    )
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
