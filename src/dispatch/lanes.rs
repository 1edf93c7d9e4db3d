//! Forward lanes: each configured forward is sent from a lane of its own, so a
//! receiver that is slow, failing or silent delays only its own events — never
//! another forward's, nor the retries of handlers.
//!
//! A lane claims its due rows (`store::forwards`, `SKIP LOCKED`: any number of
//! instances run lanes side by side) up to the forward's `concurrency`, leases
//! them, and sends each with no transaction open; the answer is recorded in a
//! short transaction under the event's row lock, which settles the event with
//! its other handlers. A send whose instance dies leaves its lease to run out,
//! and the row is claimed and sent again: forwards are delivered at least once,
//! with the same `webhook-id`.
//!
//! Lanes follow the configuration: a forward added by a reload gets a lane, a
//! removed one's lane stops (its rows wait for an instance that has it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::Pool;
use tokio::task::{JoinHandle, JoinSet};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::own_item;
use crate::config::{Forward, MAX_FORWARD_TIMEOUT, Settings};
use crate::duration;
use crate::handlers::HandlerError;
use crate::handlers::forward::{self, Outgoing, RunOutcome};
use crate::ledger::{self, HandlerName, HandlerStanding, HandlerStatus, Run, Standing};
use crate::metrics::ForwardOutcome as SentOutcome;
use crate::runner::{Logged, Runner};
use crate::shutdown::Shutdown;
use crate::store::events::{self, ClaimedEvent, EventStatus};
use crate::store::forwards::{
    self, Breaker, ClaimedForward, ForwardOutcome, ForwardState, SendOutcome,
};
use crate::store::{self, StoreError};

/// How often an idle lane looks for due rows (it is woken sooner when an event
/// for it is stored here), and how often lanes are matched to the configuration.
const POLL: Duration = Duration::from_millis(500);
/// How long a lane waits after a database error before trying again.
const BACKOFF_ON_ERROR: Duration = Duration::from_secs(2);
/// How much longer than its forward's timeout a lease lasts: time enough to
/// record the answer once it came.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// Sends forwards, a lane per forward; cheap to clone.
#[derive(Clone)]
pub struct Forwarder {
    pool: Pool,
    runner: Runner,
    http: reqwest::Client,
}

/// How long a lease on a send to `forward` lasts, in seconds.
fn lease_of(forward: &Forward) -> f64 {
    (forward.timeout + LEASE_MARGIN).as_secs_f64()
}

/// How long an operator's retry leases an event's forwards, in seconds: the
/// longest timeout a forward of `settings` has, and the margin.
pub fn lease_secs(settings: &Settings) -> f64 {
    let longest = settings.forwards.iter().map(|f| f.timeout).max();
    (longest.unwrap_or(MAX_FORWARD_TIMEOUT) + LEASE_MARGIN).as_secs_f64()
}

impl Forwarder {
    pub fn new(pool: Pool, runner: Runner) -> Self {
        // Each send sets its forward's own timeout; the client's is only the
        // ceiling, the longest any forward (a reloaded one too) may have.
        let http = crate::outbound::client(MAX_FORWARD_TIMEOUT).unwrap_or_else(|problem| {
            log::error!("{problem}; forwards will fail until restart");
            reqwest::Client::new()
        });
        Forwarder { pool, runner, http }
    }

    /// One step of `forward`'s lane: claims up to its `concurrency` due rows,
    /// sends them at once and records the answers; how many were sent. Public
    /// so tests and tools drive a lane without sleeping.
    pub async fn try_send_due(&self, forward: &str) -> Result<usize, StoreError> {
        let settings = self.runner.settings();
        let Some(forward) = settings.forward(forward) else {
            return Ok(0);
        };
        let claimed = self.claim_next(forward, forward.concurrency).await?;
        let count = claimed.len();
        let sends = claimed
            .into_iter()
            .map(|claimed| self.send_leased(&settings, claimed));
        for sent in futures_util::future::join_all(sends).await {
            sent?;
        }
        Ok(count)
    }

    /// Runs a lane for every forward of the configuration in force until
    /// shutdown; sends under way are finished first.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        let mut lanes: HashMap<String, JoinHandle<()>> = HashMap::new();
        loop {
            lanes.retain(|_, lane| !lane.is_finished());
            for forward in &self.runner.settings().forwards {
                if !lanes.contains_key(&forward.name) {
                    let lane = self
                        .clone()
                        .run_lane(forward.name.clone(), shutdown.clone());
                    lanes.insert(forward.name.clone(), tokio::spawn(lane));
                }
            }
            if !shutdown.sleep(POLL).await {
                break;
            }
        }
        for (_, lane) in lanes {
            let _ = lane.await;
        }
    }

    /// The lane of forward `name`: up to its `concurrency` sends at once, a new
    /// claim as soon as one ends; one probe a minute while its breaker is open,
    /// none while it is paused; it stops when a reload removed the forward.
    async fn run_lane(self, name: String, mut shutdown: Shutdown) {
        let wake = self.runner.lane_waker(&name);
        let mut sending = JoinSet::new();
        loop {
            let settings = self.runner.settings();
            let Some(forward) = settings.forward(&name) else {
                break;
            };
            let free = forward.concurrency.saturating_sub(sending.len());
            let mut pause = POLL;
            if free > 0 {
                match self.claim_next(forward, free).await {
                    Ok(claimed) => {
                        // More may be due: claim again as soon as a send ends.
                        if claimed.len() == free {
                            pause = Duration::ZERO;
                        }
                        for claimed in claimed {
                            let (this, settings, name) =
                                (self.clone(), settings.clone(), name.clone());
                            sending.spawn(async move {
                                if let Err(error) = this.send_leased(&settings, claimed).await {
                                    log::warn!("forward {name}: recording a send: {error}");
                                }
                            });
                        }
                    }
                    Err(error) => {
                        log::warn!("forward {name}: {error}; retrying in {BACKOFF_ON_ERROR:?}");
                        pause = BACKOFF_ON_ERROR;
                    }
                }
            }
            if shutdown.is_requested() {
                break;
            }
            if pause.is_zero() && sending.len() < forward.concurrency {
                continue;
            }
            tokio::select! {
                Some(_) = sending.join_next(), if !sending.is_empty() => {}
                () = wake.notified() => {}
                awake = shutdown.sleep(pause.max(POLL)) => if !awake { break },
            }
        }
        // Sends under way finish (each within its forward's timeout).
        while sending.join_next().await.is_some() {}
    }

    /// What the lane of `forward` sends next, up to `free` rows: nothing while
    /// it is paused; while its breaker is open, one probe when one is due.
    async fn claim_next(
        &self,
        forward: &Forward,
        free: usize,
    ) -> Result<Vec<ClaimedForward>, StoreError> {
        let client = self.pool.get().await?;
        let state = forwards::lane_state(&client, &forward.name).await;
        let state = store::give_back(client, state)?;
        if forward.paused || state.paused {
            return Ok(Vec::new());
        }
        if !state.open {
            return self.claim(forward, free).await;
        }
        let client = self.pool.get().await?;
        let probe = forwards::take_probe(&client, &forward.name).await;
        if !store::give_back(client, probe)? {
            return Ok(Vec::new());
        }
        log::info!(
            "forward {}: its breaker is open; sending one event as a probe",
            forward.name
        );
        self.claim(forward, 1).await
    }

    /// Leases up to `limit` of `forward`'s due rows.
    async fn claim(
        &self,
        forward: &Forward,
        limit: usize,
    ) -> Result<Vec<ClaimedForward>, StoreError> {
        let client = self.pool.get().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let claimed = forwards::claim_due(&client, &forward.name, limit, lease_of(forward)).await;
        store::give_back(client, claimed)
    }

    /// Sends a leased row and records the answer; the event's status after
    /// it (`None` when the lease ran out first: another run sends it again).
    pub(super) async fn send_leased(
        &self,
        settings: &Settings,
        claimed: ClaimedForward,
    ) -> Result<Option<EventStatus>, StoreError> {
        let span = tracing::trace_span!(
            "dispatch",
            hookd.row_id = claimed.event.id,
            hookd.source = claimed.event.source.as_str(),
            hookd.event_id = claimed.event.event_id.as_str(),
        );
        self.send_and_record(settings, claimed)
            .instrument(span)
            .await
    }

    async fn send_and_record(
        &self,
        settings: &Settings,
        claimed: ClaimedForward,
    ) -> Result<Option<EventStatus>, StoreError> {
        let event = own_item(settings, claimed.event.clone());
        let attempt = claimed.attempts + 1;
        let forward = settings.forward(&claimed.forward);
        let run = match forward {
            Some(forward) => self.send(forward, &event, attempt).await,
            // Only an operator's retry leases a forward this instance does not
            // have: it gives up on it (a removed forward's backlog is let go so).
            None => self.runner.ran(
                HandlerName::Forward(claimed.forward.clone()),
                logged(&event, attempt),
                Utc::now(),
                Instant::now(),
                RunOutcome {
                    result: Err(HandlerError::Permanent(format!(
                        "forward {} is not in this instance's configuration",
                        claimed.forward
                    ))),
                    http_status: None,
                    response: None,
                },
            ),
        };
        // The receiver's answer (or silence) moves the forward's breaker: only
        // an event taken closes it; a refusal of one (a 4xx) shows the
        // receiver is there, not that it takes events again. What failed for
        // good without such an answer (the request could not be signed, a
        // redirect) says nothing of the receiver and is not counted.
        let outcome = match (&run.result, run.http_status) {
            (Ok(()), _) => Some(SendOutcome::Taken),
            (Err(HandlerError::Retry(why)), _) => Some(SendOutcome::Failed(why.clone())),
            (Err(_), Some(400..=499)) => Some(SendOutcome::Refused),
            (Err(_), _) => None,
        };
        let status = self.record(&claimed, forward, run).await?;
        if let (Some(forward), Some(outcome)) = (forward, outcome) {
            self.count_send(forward, outcome).await?;
        }
        Ok(status)
    }

    /// Counts a send to `forward` in its breaker, and says so when it opens or
    /// closes (then the lane drains what waited).
    async fn count_send(&self, forward: &Forward, outcome: SendOutcome) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let counted =
            forwards::count_send(&client, &forward.name, outcome, forward.open_after).await;
        match store::give_back(client, counted)? {
            Breaker::Opened => log::warn!(
                "forward {}: {} sends in a row failed; its breaker is open: its events wait, one \
                 is sent each minute as a probe",
                forward.name,
                forward.open_after
            ),
            Breaker::Closed => {
                log::info!(
                    "forward {}: a probe went through; its breaker is closed and what waited \
                     goes in the order it came",
                    forward.name
                );
                self.runner.lane_waker(&forward.name).notify_one();
            }
            Breaker::Unchanged => {}
        }
        Ok(())
    }

    /// Records a run of a leased row in a transaction that settles its event.
    async fn record(
        &self,
        claimed: &ClaimedForward,
        forward: Option<&Forward>,
        run: Run,
    ) -> Result<Option<EventStatus>, StoreError> {
        let id = claimed.event.id;
        let runs = claimed.attempts + 1;
        let policy = self.runner.retry_policy();
        let mut standing = Standing::after(&run.result, runs, policy.max_attempts);
        // Out of attempts is not out of time: a forward goes on for `retry_for`.
        if let (Standing::Dead(_), Err(HandlerError::Retry(why)), Some(forward)) =
            (&standing, &run.result, forward)
        {
            let since = (Utc::now() - claimed.planned_at)
                .to_std()
                .unwrap_or_default();
            if since < forward.retry_for {
                standing = Standing::Again(Some(why.clone()));
            }
        }
        let (state, next_attempt_at) = match &standing {
            Standing::Done => (ForwardState::Delivered, None),
            Standing::Dead(_) => (ForwardState::Dead, None),
            Standing::Again(_) => {
                let delay = ledger::retry_delay(policy.retry_base, policy.retry_cap, runs);
                (ForwardState::Pending, duration::after(Utc::now(), delay))
            }
        };
        let attempt_row = |number| ledger::attempt_record(id, number, &run, Some(&standing));
        let mut client = self.pool.get().await?;
        let recorded = async {
            let tx = store::begin(&mut client).await?;
            let Some((attempts, kind_due)) = events::lock_for_forward(&tx, id).await? else {
                return Ok(None);
            };
            let number = attempts + 1;
            let row = attempt_row(number);
            let outcome = ForwardOutcome {
                state,
                next_attempt_at,
                last_error: row.error.as_deref(),
            };
            if !forwards::record(&tx, id, &claimed.forward, claimed.lease_until, &outcome).await? {
                // Only if the answer outlived the lease: the run that took the
                // row over sends again (at least once), and records what it gets.
                log::warn!(
                    "event {id}: the lease on its forward {} ran out before the answer came; \
                     another run sends it again",
                    claimed.forward
                );
                return Ok(None);
            }
            events::append_attempts(&tx, std::slice::from_ref(&row)).await?;
            let rows = forwards::of_event(&tx, id).await?;
            let kind = kind_standing(&tx, &claimed.event).await?;
            let mut settled = self.runner.settle(kind.as_slice(), &rows, number);
            if kind_due.is_some() {
                // The kind's handler keeps its own retry time.
                settled.next_attempt_at = kind_due;
            }
            events::settle(&tx, id, &settled).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(Some(settled.status))
        }
        .await;
        let status = store::give_back(client, recorded)?;
        if let Some(status) = status {
            self.runner
                .count_status(claimed.event.kind.as_deref(), status);
        }
        Ok(status)
    }

    /// POSTs `claimed` to `forward`, as its run number `attempt` (no transaction
    /// is open: a slow receiver holds nothing in the database).
    async fn send(&self, forward: &Forward, claimed: &ClaimedEvent, attempt: i32) -> Run {
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
            SentOutcome::Delivered
        } else {
            SentOutcome::Failed
        };
        self.runner.metrics().forward(&forward.name, outcome);
        let name = forward.handler_name();
        self.runner
            .ran(name, logged(claimed, attempt), started_at, clock, sent)
    }
}

/// Which run of which event a log line is about.
fn logged(event: &ClaimedEvent, attempt: i32) -> Logged<'_> {
    Logged {
        id: event.id,
        source: &event.source,
        event_id: &event.event_id,
        attempt,
    }
}

/// Where the kind's handler of `event` stands from its runs (none when it had
/// no handler when it was received), for settling the event after a forward.
async fn kind_standing(
    tx: &impl store::sql::Session,
    event: &ClaimedEvent,
) -> Result<Option<HandlerStanding>, StoreError> {
    let Some(kind) = event.kind.as_deref() else {
        return Ok(None);
    };
    let history = events::handler_runs(tx, event.id).await?;
    let Some(runs) = history.iter().find(|h| h.handler == kind) else {
        return Ok(None);
    };
    let status = HandlerStatus::from_outcomes(runs.outcomes.iter().map(String::as_str));
    let reason = || runs.last_error.clone().unwrap_or_else(|| "failed".into());
    let standing = match status {
        HandlerStatus::Processed => Standing::Done,
        HandlerStatus::Dead => Standing::Dead(reason()),
        HandlerStatus::Failed | HandlerStatus::Pending => Standing::Again(runs.last_error.clone()),
    };
    Ok(Some(HandlerStanding {
        name: HandlerName::Kind(kind.to_string()),
        runs: runs.runs,
        standing,
    }))
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

/// One forward as operators see it (`GET /admin/api/forwards`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ForwardView {
    pub name: String,
    /// `closed` (sending), `open` (its breaker: a probe a minute), `paused`,
    /// or `not_configured` (events wait for it, but this instance has no such forward).
    pub state: &'static str,
    /// Paused in the configuration (`paused = true`): only a new one resumes it.
    pub paused_in_configuration: bool,
    pub paused_by: Option<String>,
    pub paused_at: Option<chrono::DateTime<Utc>>,
    pub opened_at: Option<chrono::DateTime<Utc>>,
    pub consecutive_failures: i32,
    /// Its events still to go.
    pub backlog: i64,
    /// The event waiting longest for it.
    pub oldest_waiting: Option<Waiting>,
    pub last_error: Option<String>,
}

/// An event waiting for a forward: its row id and since when.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Waiting {
    pub id: i64,
    pub since: chrono::DateTime<Utc>,
}

/// The value of `hookd_forward_state` for a state.
pub fn state_gauge(state: &str) -> f64 {
    match state {
        "open" => 1.0,
        "paused" => 2.0,
        _ => 0.0,
    }
}

/// What a look at the forwards reads.
#[derive(Debug, Clone, Copy)]
enum Reading {
    /// Their states and the events each has still to go (the desk).
    WithBacklog,
    /// Their states only (a scrape).
    StatesOnly,
}

impl Forwarder {
    /// Every configured forward, and any other that events wait for.
    pub async fn overview(&self) -> Result<Vec<ForwardView>, StoreError> {
        self.views(Reading::WithBacklog).await
    }

    /// Each configured forward's view without its backlog (`backlog` 0): its
    /// state from the few rows of `forward_states`, for a scrape's
    /// `hookd_forward_state`, without counting every event still to go.
    pub async fn states(&self) -> Result<Vec<ForwardView>, StoreError> {
        self.views(Reading::StatesOnly).await
    }

    async fn views(&self, reading: Reading) -> Result<Vec<ForwardView>, StoreError> {
        let settings = self.runner.settings();
        let client = self.pool.get().await?;
        let rows = match reading {
            Reading::WithBacklog => forwards::overview(&client).await,
            Reading::StatesOnly => forwards::states(&client).await,
        };
        let rows = store::give_back(client, rows)?;
        let mut views: Vec<ForwardView> = settings
            .forwards
            .iter()
            .map(|forward| {
                let row = rows.iter().find(|r| r.forward == forward.name);
                view(Some(forward), &forward.name, row)
            })
            .collect();
        views.extend(
            rows.iter()
                .filter(|r| settings.forward(&r.forward).is_none() && r.backlog > 0)
                .map(|r| view(None, &r.forward, Some(r))),
        );
        Ok(views)
    }

    /// Pauses (`pause`) or resumes a configured forward for every instance,
    /// audited as `paused_forward` or `resumed_forward` by `who`; its view after.
    pub async fn set_paused(
        &self,
        name: &str,
        pause: bool,
        who: &str,
    ) -> Result<Option<ForwardView>, StoreError> {
        if self.runner.settings().forward(name).is_none() {
            return Ok(None);
        }
        let mut client = self.pool.get().await?;
        let changed = async {
            let tx = store::begin(&mut client).await?;
            forwards::set_paused(&tx, name, pause.then_some(who)).await?;
            let record = crate::store::audit::Record {
                who,
                action: if pause {
                    "paused_forward"
                } else {
                    "resumed_forward"
                },
                webhook_event_id: None,
                source: None,
                payment_id: None,
                detail: Some(serde_json::json!({"forward": name})),
            };
            crate::store::audit::record(&tx, &record).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(())
        }
        .await;
        store::give_back(client, changed)?;
        log::info!(
            "forward {name}: {} by {who}",
            if pause { "paused" } else { "resumed" }
        );
        if !pause {
            self.runner.lane_waker(name).notify_one();
        }
        let views = self.overview().await?;
        Ok(views.into_iter().find(|v| v.name == name))
    }
}

/// A forward's view from its configuration (none: not configured here) and its row.
fn view(
    forward: Option<&Forward>,
    name: &str,
    row: Option<&forwards::ForwardOverview>,
) -> ForwardView {
    let empty = forwards::ForwardOverview::default();
    let row = row.unwrap_or(&empty);
    let in_configuration = forward.is_some_and(|f| f.paused);
    let state = match forward {
        None => "not_configured",
        Some(_) if in_configuration || row.paused_at.is_some() => "paused",
        Some(_) if row.opened_at.is_some() => "open",
        Some(_) => "closed",
    };
    ForwardView {
        name: name.to_string(),
        state,
        paused_in_configuration: in_configuration,
        paused_by: row.paused_by.clone(),
        paused_at: row.paused_at,
        opened_at: row.opened_at,
        consecutive_failures: row.consecutive_failures,
        backlog: row.backlog,
        oldest_waiting: row.oldest_waiting.map(|(id, since)| Waiting { id, since }),
        last_error: row.last_error.clone(),
    }
}
