//! Retrying an event's handlers (through [`crate::runner`], which receiving
//! shares; [`crate::ledger`] says what each run means). An event has a *plan*,
//! fixed when it is received: its kind's handler (run in the transaction that
//! records it, inside a savepoint and under `handler_timeout`) and the forwards
//! that matched it, each a row of its own (`store::forwards`) sent by that
//! forward's lane ([`lanes`]). Each run is an attempt row naming its handler; a
//! `processed` attempt, written with the handler's effects, is that handler's
//! completion, so a retry runs only what is not done: a failed forward is
//! retried without applying the payment again, and the other way round.
//!
//! The plan is the event's, not the configuration's: an instance retrying it
//! with another configuration (a rolling deploy, a reload, a second instance
//! started with another file) neither drops a forward it does not know nor
//! declares the event dead for want of it — the forward's rows wait for an
//! instance that has it.
//!
//! The event is `processed` when every handler is done, `failed` while one will
//! run again (or a forward has yet to go), `dead` when what is left failed for
//! good. The retry loop claims events whose kind's handler is due with `FOR
//! UPDATE SKIP LOCKED` (any number of instances can run it); `try_dispatch_due`
//! is one step of it, public so tests and tools drive the queue without
//! sleeping.

pub mod lanes;

use std::time::Duration;

use chrono::Utc;
use deadpool_postgres::{Pool, Transaction};
use tracing::Instrument;

use crate::config::Settings;
use crate::duration;
use crate::handlers::HandlerError;
use crate::ledger::{HandlerName, HandlerStanding, HandlerStatus, Run, Standing};
use crate::providers;
use crate::runner::{Ran, Runner, Step, forward_names};
use crate::shutdown::Shutdown;
use crate::store::audit::{self, Record};
use crate::store::events::{self, ClaimedEvent, EventStatus, HandlerRuns, Settled};
use crate::store::forwards::{self, ClaimedForward, ForwardRow, ForwardState, UNPLANNED};
use crate::store::{self, StoreError};
pub use lanes::Forwarder;

/// How often an idle dispatcher looks for due retries.
const POLL: Duration = Duration::from_millis(500);
/// How long past `handler_timeout` an event whose named event is being read
/// stays postponed (see `try_dispatch_due`).
const READ_SLACK: Duration = Duration::from_secs(30);
/// How long it waits after a database error before trying again.
const BACKOFF_ON_ERROR: Duration = Duration::from_secs(2);
/// How long an event whose kind's handler this instance does not have waits
/// before an instance looks again (one that has it may take it meanwhile).
const NOT_HERE_DELAY: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct Dispatcher {
    pool: Pool,
    runner: Runner,
    forwarder: Forwarder,
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
    /// A lane is sending one of the event's forwards right now (it holds the
    /// lease): nothing ran; retry once it has answered.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStep {
    /// One due event was attempted and now has this status.
    Attempted { id: i64, status: EventStatus },
    /// One due event's named event was read, but another run settled the
    /// event meanwhile: nothing ran (others may be due).
    StoodDown { id: i64 },
    /// Nothing is due.
    Idle,
}

/// How a run of an event's handlers in a transaction ended.
enum Again {
    Done(RunAgain),
    /// Its kind's handler was cut at `handler_timeout`: the cancel sent for
    /// the statement it left running may reach the session late, on whatever
    /// it runs next, so the transaction is given up, the session closed, and
    /// the run recorded on another session (see `Ran::Cut`).
    Cut(Run),
}

/// What an operator's retry ran: the event, its run, its audit row to
/// complete once its forwards answered.
type RetriedRun = (ClaimedEvent, RunAgain, Option<i64>);

/// Why an operator's retry's transaction ran nothing to keep.
enum Retried {
    Refused(RetryOutcome),
    /// Its handler was cut: recorded on another session (see `Again::Cut`).
    Cut(Run),
    /// It names its event, which was not read before the transaction (its
    /// forwards were in flight then, no longer): to be read, with nothing
    /// held, and tried again.
    Unread,
}

/// Where the claim of `try_dispatch_due` left its event.
enum Claimed {
    Ran(EventStatus),
    Cut(Run),
    /// Postponed to this time while what it names is read.
    Postponed(chrono::DateTime<Utc>),
}

/// What a run of an event's handlers left to do.
struct RunAgain {
    settled: Settled,
    /// Forwards an operator's retry leased, to send once it commits.
    sending: Vec<ClaimedForward>,
}

impl Dispatcher {
    /// A dispatcher applying events with `runner` (the one receiving uses).
    pub fn new(pool: Pool, runner: Runner) -> Self {
        Self {
            forwarder: Forwarder::new(pool.clone(), runner.clone()),
            pool,
            runner,
        }
    }

    /// What sends forwards, lane by lane.
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }

    /// The names of an event's handlers: its kind's, then its forwards'.
    pub fn plan_names(
        &self,
        event: &crate::store::history::EventSummary,
        forwards: &[ForwardRow],
    ) -> Vec<HandlerName> {
        let settings = self.runner.settings();
        let mut names: Vec<HandlerName> = self
            .runner
            .plan(
                &settings,
                &event.source,
                &event.event_type,
                event.kind.as_deref(),
            )
            .iter()
            .filter(|step| matches!(step, Step::Local { .. }))
            .map(Step::name)
            .collect();
        names.extend(
            forwards
                .iter()
                .filter(|f| f.forward != UNPLANNED)
                .map(|f| HandlerName::Forward(f.forward.clone())),
        );
        names
    }

    /// Claims the most overdue event whose kind's handler is due, if any, and runs it.
    ///
    /// An event that only names its event (Stripe's thin events) is read from
    /// its source's API outside any transaction: the claim postpones it for
    /// the read's time limit and commits, the read runs holding no session and
    /// no lock, and the run then locks the event again — unless another run
    /// took it meanwhile (its attempts changed), or this instance died (it is
    /// due again once postponed).
    pub async fn try_dispatch_due(&self) -> Result<DispatchStep, StoreError> {
        let settings = self.runner.settings();
        let mut client = self.pool.get().await?;
        let claimed = async {
            let tx = crate::store::begin(&mut client).await?;
            let Some(claimed) = events::claim_due(&tx).await? else {
                return Ok(None);
            };
            let claimed = own_item(&settings, claimed);
            if !self.reads_first(&settings, &claimed) {
                let ran = match self
                    .run_claimed(&tx, &settings, &claimed, None, None)
                    .await?
                {
                    Again::Done(run) => {
                        tx.commit()
                            .instrument(tracing::trace_span!("commit"))
                            .await?;
                        Claimed::Ran(run.settled.status)
                    }
                    Again::Cut(run) => Claimed::Cut(run),
                };
                return Ok(Some((claimed, ran)));
            }
            let hold = settings.handler_timeout + READ_SLACK;
            let until = events::postpone(&tx, claimed.id, hold.as_secs_f64()).await?;
            tx.commit().await?;
            Ok(Some((claimed, Claimed::Postponed(until))))
        }
        .await;
        let claimed = match claimed {
            Ok(Some((claimed, Claimed::Cut(run)))) => {
                store::discard(client);
                Ok(Some((claimed, Claimed::Cut(run))))
            }
            other => store::give_back(client, other),
        };
        let (claimed, status) = match claimed? {
            None => return Ok(DispatchStep::Idle),
            Some((claimed, Claimed::Ran(status))) => (claimed, Some(status)),
            Some((claimed, Claimed::Cut(run))) => {
                let status = self.record_cut(&settings, &claimed, None, run).await?;
                (claimed, status)
            }
            Some((claimed, Claimed::Postponed(until))) => {
                let read = self.read_named(&claimed).await;
                let status = self
                    .run_read(&settings, &claimed, until, read.as_ref())
                    .await?;
                (claimed, status)
            }
        };
        let Some(status) = status else {
            return Ok(DispatchStep::StoodDown { id: claimed.id });
        };
        self.runner.count_status(claimed.kind.as_deref(), status);
        Ok(DispatchStep::Attempted {
            id: claimed.id,
            status,
        })
    }

    /// Whether a claimed event's kind's handler is to run on the event it only
    /// names (it has a payload, then), read before the run's transaction.
    fn reads_first(&self, settings: &Settings, claimed: &ClaimedEvent) -> bool {
        claimed.payload.as_ref().is_some_and(|payload| {
            self.runner.names_its_event(&claimed.source, payload)
                && self.local_step(settings, claimed).is_some()
        })
    }

    /// The run of a claimed event in `tx`, under the dispatch's span; its status.
    async fn run_claimed(
        &self,
        tx: &Transaction<'_>,
        settings: &Settings,
        claimed: &ClaimedEvent,
        read_first: Option<&Result<serde_json::Value, HandlerError>>,
        cut: Option<&Run>,
    ) -> Result<Again, StoreError> {
        let span = tracing::trace_span!(
            "dispatch",
            hookd.row_id = claimed.id,
            hookd.source = claimed.source.as_str(),
            hookd.event_id = claimed.event_id.as_str(),
        );
        self.run_again(tx, settings, claimed, false, read_first, cut)
            .instrument(span)
            .await
    }

    /// Records a run of `claimed`'s kind's handler that was cut at
    /// `handler_timeout`, on a fresh session (the one it ran on is closed), once
    /// the event is locked again — unless another run took it meanwhile (then
    /// `None`). `until`: the time it was postponed to, if it was.
    async fn record_cut(
        &self,
        settings: &Settings,
        claimed: &ClaimedEvent,
        until: Option<chrono::DateTime<Utc>>,
        run: Run,
    ) -> Result<Option<EventStatus>, StoreError> {
        let mut client = self.pool.get().await?;
        let recorded = async {
            let tx = crate::store::begin(&mut client).await?;
            let locked = match until {
                Some(until) => events::lock_postponed(&tx, claimed.id, until).await?,
                None => events::lock_by_id(&tx, claimed.id)
                    .await?
                    .filter(|locked| locked.attempts == claimed.attempts),
            };
            let Some(locked) = locked else {
                return Ok(None);
            };
            let locked = own_item(settings, locked);
            let Again::Done(again) = self
                .run_claimed(&tx, settings, &locked, None, Some(&run))
                .await?
            else {
                return Ok(None);
            };
            tx.commit()
                .instrument(tracing::trace_span!("commit"))
                .await?;
            Ok(Some(again.settled.status))
        }
        .await;
        store::give_back(client, recorded)
    }

    /// The run of an event postponed `until`, on what was `read` for it, once
    /// it is locked again; `None` when another run settled it meanwhile.
    async fn run_read(
        &self,
        settings: &Settings,
        claimed: &ClaimedEvent,
        until: chrono::DateTime<Utc>,
        read: Option<&Result<serde_json::Value, HandlerError>>,
    ) -> Result<Option<EventStatus>, StoreError> {
        let mut client = self.pool.get().await?;
        let ran = async {
            let tx = crate::store::begin(&mut client).await?;
            let Some(locked) = events::lock_postponed(&tx, claimed.id, until).await? else {
                return Ok(Ok(None));
            };
            let locked = own_item(settings, locked);
            match self.run_claimed(&tx, settings, &locked, read, None).await? {
                Again::Done(again) => {
                    tx.commit()
                        .instrument(tracing::trace_span!("commit"))
                        .await?;
                    Ok(Ok(Some(again.settled.status)))
                }
                Again::Cut(run) => Ok(Err(run)),
            }
        }
        .await;
        match ran {
            Ok(Err(run)) => {
                store::discard(client);
                self.record_cut(settings, claimed, Some(until), run).await
            }
            ran => Ok(store::give_back(client, ran)?.unwrap_or(None)),
        }
    }

    /// Runs an event's handlers again now, whatever its status (operators'
    /// retry), including those that failed for good, and sends its forwards that
    /// are not delivered. Handlers already done do not run again, unless every
    /// one is (then all run again). The audit row of `by` is written in the
    /// retry's transaction.
    pub async fn retry_now(&self, id: i64, by: RetryBy<'_>) -> Result<RetryOutcome, StoreError> {
        let span = tracing::trace_span!("dispatch", hookd.row_id = id, hookd.operator = true);
        self.retry_now_in(id, by).instrument(span).await
    }

    async fn retry_now_in(&self, id: i64, by: RetryBy<'_>) -> Result<RetryOutcome, StoreError> {
        let settings = self.runner.settings();
        let mut read = self.read_for_retry(&settings, id, false).await?;
        let mut cut = None;
        let (client, decided) = loop {
            let mut client = self.pool.get().await?;
            let decided = self
                .retry_in_transaction(&mut client, &settings, id, by, read.as_ref(), cut.as_ref())
                .await;
            match decided {
                // Recorded on another session (see `Again::Cut`).
                Ok(Err(Retried::Cut(run))) => {
                    store::discard(client);
                    cut = Some(run);
                }
                Ok(Err(Retried::Unread)) => {
                    drop(client);
                    read = self.read_for_retry(&settings, id, true).await?;
                }
                Ok(Err(Retried::Refused(refused))) => break (client, Ok(Err(refused))),
                Ok(Ok(ran)) => break (client, Ok(Ok(ran))),
                Err(error) => break (client, Err(error)),
            }
        };
        // No connection is held while the forwards are sent.
        let (event, run, audited) = match store::give_back(client, decided)? {
            Ok(run) => run,
            Err(refused) => return Ok(refused),
        };
        let mut status = run.settled.status;
        if !run.sending.is_empty() {
            let sends = run
                .sending
                .into_iter()
                .map(|claimed| self.forwarder.send_leased(&settings, claimed));
            let mut superseded = false;
            for sent in futures_util::future::join_all(sends).await {
                superseded |= sent?.is_none();
            }
            status = self.finish_retry_audit(id, audited, superseded).await?;
        } else {
            self.runner.count_status(event.kind.as_deref(), status);
        }
        Ok(RetryOutcome::Applied(status))
    }

    /// For an operator's retry of an event that only names its event, the
    /// event read from its source's API before the retry's transaction, with
    /// nothing held (as the retry loop reads); `None` for any other event, and,
    /// unless `despite_lease`, for one the retry will refuse whatever is read
    /// (its forwards in flight: the transaction decides again, and asks for
    /// the read with `Retried::Unread` if they no longer are).
    async fn read_for_retry(
        &self,
        settings: &Settings,
        id: i64,
        despite_lease: bool,
    ) -> Result<Option<Result<serde_json::Value, HandlerError>>, StoreError> {
        let event = {
            let client = self.pool.get().await?;
            // Autocommitted: the row is locked only while it is read.
            events::lock_by_id(&client, id).await?
        };
        match event.map(|event| own_item(settings, event)) {
            Some(event)
                if (despite_lease || !event.leased) && self.reads_first(settings, &event) =>
            {
                Ok(self.read_named(&event).await)
            }
            _ => Ok(None),
        }
    }

    /// The event `claimed` only names, read from its source's API (see
    /// `Runner::read_named`), with nothing held.
    async fn read_named(
        &self,
        claimed: &ClaimedEvent,
    ) -> Option<Result<serde_json::Value, HandlerError>> {
        let payload = claimed.payload.as_ref().unwrap_or(&serde_json::Value::Null);
        let span = tracing::trace_span!(
            "read_named",
            hookd.row_id = claimed.id,
            hookd.event_id = claimed.event_id.as_str(),
        );
        self.runner
            .read_named(&claimed.source, payload)
            .instrument(span)
            .await
    }

    /// One try of an operator's retry in a transaction on `client` (see
    /// `retry_now`); `read_first`: what was read for an event that names its
    /// event; `cut`: the run of a try cut at `handler_timeout`, to record
    /// instead of running the handler again.
    async fn retry_in_transaction(
        &self,
        client: &mut deadpool_postgres::Object,
        settings: &Settings,
        id: i64,
        by: RetryBy<'_>,
        read_first: Option<&Result<serde_json::Value, HandlerError>>,
        cut: Option<&Run>,
    ) -> Result<Result<RetriedRun, Retried>, StoreError> {
        let tx = crate::store::begin(client).await?;
        let Some(event) = events::lock_by_id(&tx, id).await? else {
            audit_retry(&tx, by, id, None, RetryOutcome::NotFound.name()).await?;
            tx.commit().await?;
            return Ok(Err(Retried::Refused(RetryOutcome::NotFound)));
        };
        let event = own_item(settings, event);
        // Locked, so no lane claims one of them while the handler runs (the
        // retry then leases them itself), and a claim under way is waited out.
        let rows = forwards::lock_of_event(&tx, id).await?;
        // (These rows, read under the lock, say more than `event.leased`,
        // read before it.)
        let refusal = if rows.iter().any(|f| f.leased) {
            Some(RetryOutcome::InFlight)
        } else if event.payload.is_none() {
            Some(RetryOutcome::Gone)
        } else if self.local_step(settings, &event).is_none()
            && rows.is_empty()
            && self.configured_forwards(settings, &event).is_empty()
        {
            Some(RetryOutcome::NoHandler)
        } else {
            None
        };
        let source = Some(event.source.as_str());
        if let Some(outcome) = refusal {
            audit_retry(&tx, by, id, source, outcome.name()).await?;
            tx.commit().await?;
            return Ok(Err(Retried::Refused(outcome)));
        }
        // Never read inside the transaction, holding the row.
        if read_first.is_none() && self.reads_first(settings, &event) {
            return Ok(Err(Retried::Unread));
        }
        let run = match self
            .run_again(&tx, settings, &event, true, read_first, cut)
            .await?
        {
            Again::Done(run) => run,
            Again::Cut(run) => return Ok(Err(Retried::Cut(run))),
        };
        let audited = if run.sending.is_empty() {
            audit_retry(&tx, by, id, source, run.settled.status.as_str()).await?;
            None
        } else {
            // Completed with the status once the forwards have answered.
            Some(audit_retry(&tx, by, id, source, "sending").await?)
        };
        tx.commit().await?;
        Ok(Ok((event, run, audited)))
    }

    /// Completes an operator retry's audit row once its forwards answered: the
    /// event's status now, or `superseded` when a lease ran out first (another
    /// run sends that forward again); returns the status.
    async fn finish_retry_audit(
        &self,
        id: i64,
        audited: Option<i64>,
        superseded: bool,
    ) -> Result<EventStatus, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = crate::store::begin(&mut client).await?;
        let status = events::status_of(&tx, id)
            .await?
            .unwrap_or(EventStatus::Failed);
        let outcome = if superseded {
            "superseded"
        } else {
            status.as_str()
        };
        if let Some(entry) = audited {
            audit::complete(&tx, entry, &serde_json::json!({"outcome": outcome})).await?;
        }
        tx.commit().await?;
        Ok(status)
    }

    /// Runs due retries until shutdown; a run under way is finished first.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        while !shutdown.is_requested() {
            let pause = match self.try_dispatch_due().await {
                Ok(DispatchStep::Attempted { .. } | DispatchStep::StoodDown { .. }) => continue,
                Ok(DispatchStep::Idle) => POLL,
                Err(error) => {
                    log::warn!("dispatcher: {error}; retrying in {BACKOFF_ON_ERROR:?}");
                    BACKOFF_ON_ERROR
                }
            };
            if !shutdown.sleep(pause).await {
                break;
            }
        }
    }

    /// The kind's handler of `event` in this instance's registry, if it has one.
    fn local_step<'s>(&'s self, settings: &'s Settings, event: &ClaimedEvent) -> Option<Step<'s>> {
        self.runner
            .plan(
                settings,
                &event.source,
                &event.event_type,
                event.kind.as_deref(),
            )
            .into_iter()
            .find(|step| matches!(step, Step::Local { .. }))
    }

    /// The forwards of the configuration in force that match `event`.
    fn configured_forwards<'s>(
        &'s self,
        settings: &'s Settings,
        event: &ClaimedEvent,
    ) -> Vec<&'s str> {
        let plan = self.runner.plan(
            settings,
            &event.source,
            &event.event_type,
            event.kind.as_deref(),
        );
        forward_names(&plan)
    }

    /// The kind's handler of a locked event, run and recorded in `tx` unless it
    /// is done (an operator's retry also runs one that failed for good, and
    /// everything when everything is done), and the event settled with its
    /// forwards' rows. An operator's retry also leases, in `tx`, the forwards
    /// that are not delivered (all of them when everything is done), to send
    /// once `tx` commits.
    async fn run_again(
        &self,
        tx: &Transaction<'_>,
        settings: &Settings,
        claimed: &ClaimedEvent,
        operator: bool,
        read_first: Option<&Result<serde_json::Value, HandlerError>>,
        cut: Option<&Run>,
    ) -> Result<Again, StoreError> {
        let runner = &self.runner;
        let history = events::handler_runs(tx, claimed.id).await?;
        let mut rows = forwards::of_event(tx, claimed.id).await?;
        if rows.iter().any(|f| f.forward == UNPLANNED) {
            rows = self.write_out_plan(tx, settings, claimed, &history).await?;
        }
        let local = self.local_step(settings, claimed);
        let kind_runs = claimed
            .kind
            .as_deref()
            .and_then(|kind| history.iter().find(|h| h.handler == kind));
        let (previous, status) = kind_runs.map_or((0, HandlerStatus::Pending), |h| {
            (
                h.runs,
                HandlerStatus::from_outcomes(h.outcomes.iter().map(String::as_str)),
            )
        });
        let all_done = (local.is_none() || status.is_done())
            && rows.iter().all(|f| f.state == ForwardState::Delivered);
        let mut attempt = claimed.attempts;
        let mut runs = Vec::new();
        let mut standings = Vec::new();
        match local {
            Some(step @ Step::Local { handler, .. }) => {
                let name = step.name();
                let skip = !(operator && all_done)
                    && (status.is_done() || (!operator && status == HandlerStatus::Dead));
                if skip {
                    standings.push(standing(name, previous, Standing::before(status)));
                } else if let Some(payload) = claimed.payload.as_ref() {
                    attempt += 1;
                    let run = match cut {
                        Some(run) => run.clone(),
                        None => {
                            let event = runner.view_claimed(claimed, payload, attempt);
                            let ran = runner
                                .run_step_or_cut(tx, &step, handler, &event, read_first)
                                .await?;
                            match ran {
                                Ran::Ended(run) => run,
                                Ran::Cut(run) => return Ok(Again::Cut(run)),
                            }
                        }
                    };
                    let after = runner.standing_after(&run, previous + 1);
                    standings.push(standing(name, previous + 1, after));
                    runs.push((attempt, run));
                } else {
                    let purged = Standing::Dead("the payload was purged".into());
                    standings.push(standing(name, previous, purged));
                }
            }
            _ => {
                if let Some(kind) = claimed.kind.as_deref().filter(|_| kind_runs.is_some()) {
                    let Some(waiting) = self.not_here(tx, claimed, kind, status, operator).await?
                    else {
                        return Ok(Again::Done(RunAgain {
                            settled: self.deferred(claimed, kind),
                            sending: Vec::new(),
                        }));
                    };
                    standings.push(waiting);
                } else if rows.is_empty() {
                    // Nothing at all applies to it (its plan, written before
                    // plans were kept, matched nothing here either).
                    let why = format!(
                        "no handler applies to kind {} any more",
                        claimed.kind.as_deref().unwrap_or("none")
                    );
                    let name = HandlerName::Kind(claimed.kind.clone().unwrap_or_default());
                    standings.push(standing(name, 0, Standing::Dead(why)));
                }
            }
        }
        let mut sending = Vec::new();
        if operator {
            let lease = lanes::lease_secs(settings);
            let names: Vec<&str> = rows
                .iter()
                .filter(|f| all_done || f.state != ForwardState::Delivered)
                .map(|f| f.forward.as_str())
                .collect();
            if !names.is_empty() {
                sending = forwards::lease_for_retry(tx, claimed.id, &names, lease).await?;
                rows = forwards::of_event(tx, claimed.id).await?;
            }
        }
        let settled = runner.settle(&standings, &rows, attempt);
        runner
            .record(tx, claimed.id, &runs, &standings, &settled)
            .await?;
        Ok(Again::Done(RunAgain { settled, sending }))
    }

    /// Where the kind's handler of an event stands when this instance's
    /// registry has none for `kind` (another binary's may): an operator's retry
    /// settles it as dead; the retry loop leaves it to an instance that has it
    /// (`None`).
    async fn not_here(
        &self,
        tx: &Transaction<'_>,
        claimed: &ClaimedEvent,
        kind: &str,
        status: HandlerStatus,
        operator: bool,
    ) -> Result<Option<HandlerStanding>, StoreError> {
        let name = HandlerName::Kind(kind.to_string());
        if status.is_done() || status == HandlerStatus::Dead {
            return Ok(Some(standing(name, 0, Standing::before(status))));
        }
        if operator {
            let why = format!("no handler applies to kind {kind} here");
            return Ok(Some(standing(name, 0, Standing::Dead(why))));
        }
        let settled = self.deferred(claimed, kind);
        log::warn!(
            "event {} ({}/{:?}): this instance has no handler for kind {kind}; left for one \
             that has (looked at again in {})",
            claimed.id,
            claimed.source,
            claimed.event_id,
            duration::format(NOT_HERE_DELAY)
        );
        events::settle(tx, claimed.id, &settled).await?;
        Ok(None)
    }

    /// The row of an event left for an instance that has its kind's handler.
    fn deferred(&self, claimed: &ClaimedEvent, kind: &str) -> Settled {
        Settled {
            status: EventStatus::Failed,
            attempts: claimed.attempts,
            last_error: Some(format!(
                "waiting for an instance with a handler for kind {kind}"
            )),
            next_attempt_at: duration::after(Utc::now(), NOT_HERE_DELAY),
        }
    }

    /// Writes out the plan of an event stored before plans were kept: the
    /// forwards the configuration matches, as far along as their attempts went.
    async fn write_out_plan(
        &self,
        tx: &Transaction<'_>,
        settings: &Settings,
        claimed: &ClaimedEvent,
        history: &[HandlerRuns],
    ) -> Result<Vec<ForwardRow>, StoreError> {
        let matched = self.configured_forwards(settings, claimed);
        let rows: Vec<(&str, ForwardState, i32)> = matched
            .iter()
            .map(|name| {
                let handler = HandlerName::Forward((*name).to_string());
                let ran = history.iter().find(|h| handler.is(&h.handler));
                let (runs, status) = ran.map_or((0, HandlerStatus::Pending), |h| {
                    (
                        h.runs,
                        HandlerStatus::from_outcomes(h.outcomes.iter().map(String::as_str)),
                    )
                });
                let state = match status {
                    HandlerStatus::Processed => ForwardState::Delivered,
                    HandlerStatus::Dead => ForwardState::Dead,
                    HandlerStatus::Failed | HandlerStatus::Pending => ForwardState::Pending,
                };
                (*name, state, runs)
            })
            .collect();
        forwards::replace_unplanned(tx, claimed.id, &rows).await?;
        forwards::of_event(tx, claimed.id).await
    }
}

fn standing(name: HandlerName, runs: i32, standing: Standing) -> HandlerStanding {
    HandlerStanding {
        name,
        runs,
        standing,
    }
}

/// An event whose provider keeps the whole request with each of its events
/// (GoCardless): its own item of it, which handlers and forwards read.
fn own_item(settings: &Settings, mut claimed: ClaimedEvent) -> ClaimedEvent {
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
