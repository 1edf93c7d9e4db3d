//! Receiving an event into the store: one `INSERT … ON CONFLICT` decides new,
//! duplicate or conflict, and a new event's own handler runs at once, in the same
//! transaction, so the event, its status and its effects commit together (and the
//! provider's 200 follows that commit). Forwards run after the commit: the
//! transaction plans them (a row each, `store::forwards`), and their lanes are woken.
//!
//! **Group commit.** One batch runs at a time: a delivery that finds none
//! running leads its own at once; the deliveries that arrive while one runs
//! queue, and when it ends its leader takes whatever is queued (up to
//! `MAX_BATCH`) into the next. A transaction that runs past `LONG_RUN` (a slow
//! handler, a lock wait, a slow disk's flush) lets the next batch start beside
//! it, up to `max_leaders` at once. A batch is stored in one transaction: one
//! multi-row dedupe statement (two, sent together, when sources that dedupe on
//! the body are among it), each handler once for its events of the batch
//! (`Handler::apply_batch`, the payments one set-based merge), the attempts in
//! one statement, one commit — and only then every answer. Copies of one event inside
//! a batch are decided together (one row, one effect, one answer for all). If
//! anything of the batch fails (a handler's error, its time limit), the whole
//! transaction is undone and each delivery is stored on its own, concurrently,
//! with its handler in a savepoint: one event's failure never fails its
//! batch-mates, and delays them by at most `handler_timeout`. Batches and those
//! transactions together hold half the pool at most (`max_sessions`). A session
//! whose handler was cut at `handler_timeout` is closed, never pooled: the
//! cancel sent for its statement may arrive late, on whatever it runs next.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use deadpool_postgres::{Object, Pool};
use tokio::sync::{Semaphore, oneshot};
use tracing::{Instrument, Span};

use crate::config::Settings;
use crate::event::IncomingEvent;
use crate::handlers::{Event, Handler};
use crate::ledger::{self, HandlerName, Run, Standing};
use crate::runner::{Ran, Runner, Step};
use crate::signature::Verified;
use crate::store::events::{self, AttemptRecord, BatchItem, EventStatus, Expected, Recorded};
use crate::store::payments::PaymentUpdate;
use crate::store::{self, StoreError};

/// Deliveries stored in one transaction at most.
const MAX_BATCH: usize = 64;
/// Deliveries that may wait for a leader; past it, receiving waits.
const QUEUE: usize = 1024;

/// Receives verified deliveries.
#[derive(Clone)]
pub struct Ingester {
    core: Arc<Core>,
}

/// What the leaders share.
struct Core {
    pool: Pool,
    runner: Runner,
    /// The deliveries waiting, and the leaders storing the others.
    lanes: Mutex<Lanes<Job>>,
    /// Room in the queue, a permit per waiting delivery.
    room: Semaphore,
    /// A permit per session the deliveries' transactions hold (`max_sessions`),
    /// batches and deliveries stored one by one alike.
    sessions: Semaphore,
    /// The runtime hookd was started on: a leader runs there, not on the HTTP
    /// worker whose delivery started it (a worker that stops would take the
    /// transaction of others' deliveries with it).
    runtime: tokio::runtime::Handle,
}

/// The queue and the leaders at work, changed together under one lock. Generic
/// over what is queued, so its rules are tested on their own.
struct Lanes<J> {
    /// Requests waiting for a leader, in arrival order, each with its events
    /// (which share a batch).
    queue: VecDeque<Vec<J>>,
    /// Transactions storing deliveries now.
    leaders: usize,
    /// Of those, the ones holding the turn (`Turn`): one, or none while every
    /// leader's transaction has run past `LONG_RUN`.
    running: usize,
    /// Transactions at once at most (`max_leaders`).
    max_leaders: usize,
}

impl<J> Lanes<J> {
    fn new(max_leaders: usize) -> Self {
        Lanes {
            queue: VecDeque::new(),
            leaders: 0,
            running: 0,
            max_leaders,
        }
    }

    /// Queues a request's events; whether a new leader is due for them.
    fn push(&mut self, request: Vec<J>) -> bool {
        self.queue.push_back(request);
        self.claim()
    }

    /// Whether what is queued is due a new leader (counted, holding the turn,
    /// when it is): only while nobody holds the turn. Two transactions at once
    /// only make both smaller and slower where the database shares the
    /// machine's cores: they share those cores, the tables' last pages and the
    /// WAL flush, and pay for two statements and two commits where one batch
    /// would pay once.
    fn claim(&mut self) -> bool {
        let due = !self.queue.is_empty() && self.running == 0 && self.leaders < self.max_leaders;
        if due {
            self.leaders += 1;
            self.running += 1;
        }
        due
    }

    /// A transaction gave up the turn: whether a new leader is due.
    fn give_up(&mut self) -> bool {
        self.running -= 1;
        self.claim()
    }

    /// The queued requests of a leader's next batch, whole, up to `MAX_BATCH`
    /// events (more when the first request alone carries more), and the room
    /// that frees in the queue, if the leader holds the turn or takes it now;
    /// else `None`, and it is no longer counted.
    fn next_batch(&mut self, holding: bool) -> Option<(Vec<J>, usize)> {
        if self.queue.is_empty() || !(holding || self.running == 0) {
            self.running -= usize::from(holding);
            self.leaders -= 1;
            return None;
        }
        self.running += usize::from(!holding);
        let mut batch = Vec::new();
        let mut room = 0;
        while let Some(request) = self.queue.front() {
            if !batch.is_empty() && batch.len() + request.len() > MAX_BATCH {
                break;
            }
            let Some(request) = self.queue.pop_front() else {
                break;
            };
            room += request.len().min(QUEUE);
            batch.extend(request);
        }
        Some((batch, room))
    }
}

/// One event waiting for its transaction, and where its outcome goes. The
/// events of one request queue together, so they share a batch.
struct Job {
    event: IncomingEvent,
    verified: Verified,
    reply: oneshot::Sender<Result<Ingested, StoreError>>,
    /// The delivery's span, the parent of the batch's (none when traces are off).
    span: Span,
}

/// The outcome of receiving one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingested {
    pub recorded: Recorded,
    /// The event's status after its run at receipt (new events only).
    pub status: Option<EventStatus>,
}

impl Ingester {
    /// Ready to store deliveries; leaders run on the current Tokio runtime.
    pub fn new(pool: Pool, runner: Runner) -> Self {
        let pool_size = pool.status().max_size;
        let core = Arc::new(Core {
            pool,
            runner,
            lanes: Mutex::new(Lanes::new(max_leaders(pool_size))),
            room: Semaphore::new(QUEUE),
            sessions: Semaphore::new(max_sessions(pool_size)),
            runtime: tokio::runtime::Handle::current(),
        });
        Ingester { core }
    }

    /// Stores a verified delivery once and, when it is new, runs its own handler;
    /// returns after the commit that stored it (shared with the deliveries that
    /// arrived meanwhile).
    pub async fn ingest(
        &self,
        event: IncomingEvent,
        verified: Verified,
    ) -> Result<Ingested, StoreError> {
        let mut all = self.ingest_all(vec![event], verified).await?;
        all.pop()
            .ok_or_else(|| StoreError::Unavailable("hookd is stopping".into()))
    }

    /// Stores the events of one request, each once, and runs each new one's own
    /// handler; returns each event's outcome, in order, after the commit that
    /// stored them all (one transaction, unless it had to be undone: then each
    /// is stored on its own, and this returns when all are).
    pub async fn ingest_all(
        &self,
        events: Vec<IncomingEvent>,
        verified: Verified,
    ) -> Result<Vec<Ingested>, StoreError> {
        let stopping = || StoreError::Unavailable("hookd is stopping".into());
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let span = Span::current();
        let count = u32::try_from(events.len()).map_err(|_| stopping())?;
        // A request larger than the queue waits for all of its room at once.
        let room = self
            .core
            .room
            .acquire_many(count.min(QUEUE as u32))
            .await
            .map_err(|_| stopping())?;
        room.forget();
        let (jobs, answers): (Vec<Job>, Vec<_>) = events
            .into_iter()
            .map(|event| {
                let (reply, answer) = oneshot::channel();
                let job = Job {
                    event,
                    verified,
                    reply,
                    span: span.clone(),
                };
                (job, answer)
            })
            .unzip();
        let due = self.core.lock_lanes().push(jobs);
        if due {
            self.core.lead();
        }
        let mut outcomes = Vec::with_capacity(answers.len());
        for answer in answers {
            outcomes.push(answer.await.unwrap_or_else(|_| Err(stopping()))?);
        }
        Ok(outcomes)
    }
}

impl Core {
    fn lock_lanes(&self) -> std::sync::MutexGuard<'_, Lanes<Job>> {
        // A panic while holding it cannot leave the lanes half-changed.
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a leader that `Lanes::claim` counted.
    fn lead(self: &Arc<Self>) {
        self.runtime.spawn(self.clone().lead_on());
    }

    /// Stores batch after batch of what is queued while it holds the turn, or
    /// finds the turn free; a leader starts holding it. A task of its own: a
    /// provider hanging up never cuts a transaction that others share.
    async fn lead_on(self: Arc<Self>) {
        let mut holding = true;
        while let Some(batch) = self.next_batch(holding) {
            let turn = Turn {
                core: &self,
                held: AtomicBool::new(true),
            };
            // A panic in one batch must not take its leader's slot with it: its
            // deliveries get 503 (their replies are dropped) and the leader goes on.
            let committed = std::panic::AssertUnwindSafe(turn.hold(self.commit(batch)));
            if futures_util::FutureExt::catch_unwind(committed)
                .await
                .is_err()
            {
                log::error!("a batch of deliveries panicked; they were answered 503");
            }
            holding = turn.keep();
        }
    }

    /// The leader's next batch (see `Lanes::next_batch`).
    fn next_batch(&self, holding: bool) -> Option<Vec<Job>> {
        let (batch, room) = self.lock_lanes().next_batch(holding)?;
        self.room.add_permits(room);
        Some(batch)
    }
}

/// A batch's turn. While one batch's transaction holds it, the deliveries that
/// arrive queue for the next batch instead of starting transactions of their
/// own, and its leader takes them when it ends. A transaction that runs past
/// `LONG_RUN` (2–3 ms: Tokio's timer counts whole milliseconds) gives it up, so
/// a slow handler, a lock wait or a slow flush holds back the next batch only
/// that long, while fewer than `max_leaders` transactions are at work.
struct Turn<'c> {
    core: &'c Arc<Core>,
    held: AtomicBool,
}

/// How long a batch's transaction holds the turn at most (see `Turn`).
const LONG_RUN: std::time::Duration = std::time::Duration::from_millis(2);

impl Turn<'_> {
    /// Gives up the turn (once), and starts a leader for what queued meanwhile.
    fn give_up(&self) {
        if !self.held.swap(false, Ordering::AcqRel) {
            return;
        }
        let due = self.core.lock_lanes().give_up();
        if due {
            self.core.lead();
        }
    }

    /// `work`, giving up the turn if it runs past `LONG_RUN`.
    async fn hold<T>(&self, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        tokio::select! {
            biased;
            done = &mut work => return done,
            () = tokio::time::sleep(LONG_RUN) => self.give_up(),
        }
        work.await
    }

    /// The batch is done: whether the turn is still held, for the leader's next.
    fn keep(self) -> bool {
        self.held.swap(false, Ordering::AcqRel)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// How many transactions may store deliveries at once with a pool of
/// `pool_size` (when they run past `LONG_RUN`): one per core and one more, and
/// half the pool at most, so retries, the desk and purge always find a
/// connection.
pub fn max_leaders(pool_size: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores + 1).min(pool_size / 2).max(1)
}

/// How many sessions the deliveries' transactions hold at once at most with a
/// pool of `pool_size`: half of it, so retries, the desk and purge always find
/// a connection, however many deliveries of a batch fall back to one by one.
fn max_sessions(pool_size: usize) -> usize {
    (pool_size / 2).max(1)
}

/// What makes two deliveries of a source one event: the id, or for a source
/// that dedupes on the body, the body's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key<'a> {
    Id(&'a str),
    Body(&'a [u8; 32]),
}

impl<'a> Key<'a> {
    fn of(event: &'a IncomingEvent) -> (&'a str, Self) {
        let key = match &event.body_key {
            Some(body) => Key::Body(body),
            None => Key::Id(&event.event_id),
        };
        (&event.source, key)
    }
}

/// How a delivery of a batch relates to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The first delivery of its event in the batch: it goes into the statement.
    First(usize),
    /// A later copy of item `0`, with a matching fingerprint (or body key).
    CopyOf(usize),
    /// A later delivery of an earlier one's event id with another payload:
    /// decided alone.
    Apart,
}

/// A batch sorted out before its statements: each delivery's role, the events
/// that go into the dedupe statement, each one's plan, and, when every new
/// event's whole run is a payment merge of hookd's own, those merges.
struct Prepared<'b> {
    roles: Vec<Role>,
    items: Vec<BatchItem<'b>>,
    plans: Vec<Vec<Step<'b>>>,
    /// `Some` when the batch folds into one statement: the merges of the items
    /// with a payment handler, in order.
    folded: Option<Vec<FoldedMerge<'b>>>,
}

/// An item's payment merge and attempt, written by the statement that stores it.
struct FoldedMerge<'b> {
    /// The item's index in `Prepared::items`.
    at: usize,
    kind: &'b str,
    update: PaymentUpdate,
    attempt: AttemptRecord,
}

impl Core {
    /// Stores a batch and answers every delivery in it.
    async fn commit(&self, batch: Vec<Job>) {
        let metrics = self.runner.metrics();
        metrics.ingest_batch(batch.len());
        let settings = self.runner.settings();
        let prepared = self.prepare(&settings, &batch);
        // A lone delivery runs its handler in a savepoint: if the handler
        // fails, its failure is recorded at once, the handler run only once.
        // One whose whole run is a payment merge folds into one statement; one
        // with nothing to run is one autocommitted statement on its own.
        if batch.len() == 1 && prepared.folded.as_ref().is_none_or(Vec::is_empty) {
            drop(prepared);
            return self.one_by_one(batch).await;
        }
        // One transaction, one span: under the first delivery's, linked to the others'.
        let span = batch_span(&batch[0].span, batch.len());
        if !span.is_disabled() {
            for job in &batch[1..] {
                span.follows_from(&job.span);
            }
        }
        let session = self.sessions.acquire().await;
        let batched = match self.pool.get().await {
            Ok(mut client) => {
                let decided = match &prepared.folded {
                    Some(runs) => {
                        self.commit_folded(&client, &prepared, runs, &settings)
                            .instrument(span.clone())
                            .await
                    }
                    None => self
                        .commit_batch(&mut client, &prepared)
                        .instrument(span.clone())
                        .await
                        .map(|decided| decided.into_iter().map(Some).collect()),
                };
                if matches!(
                    decided,
                    Err(Fallback::Unavailable(_) | Fallback::Spoiled(_))
                ) {
                    store::discard(client);
                }
                decided.map(|decided| self.answers(&prepared, &decided))
            }
            Err(error) => Err(Fallback::store(error)),
        };
        drop(session);
        drop(prepared);
        match batched {
            Ok(results) => {
                let mut apart = Vec::new();
                for (job, result) in batch.into_iter().zip(results) {
                    match result {
                        Some(result) => {
                            let _ = job.reply.send(result);
                        }
                        None => apart.push(job),
                    }
                }
                self.one_by_one(apart).await;
            }
            Err(Fallback::Unavailable(error)) => {
                crate::traces::fail(&span, &error);
                for job in batch {
                    let _ = job.reply.send(Err(StoreError::Unavailable(error.clone())));
                }
            }
            Err(Fallback::Answer(error)) => {
                crate::traces::fail(&span, &error);
                let mut error = Some(error);
                for job in batch {
                    let answer = error
                        .take()
                        .unwrap_or_else(|| StoreError::Unavailable("hookd is stopping".into()));
                    let _ = job.reply.send(Err(answer));
                }
            }
            Err(Fallback::OneByOne(why) | Fallback::Spoiled(why)) => {
                log::debug!("batch of {} stored one by one: {why}", batch.len());
                crate::traces::fail(&span, &why);
                self.one_by_one(batch).await;
            }
        }
    }

    /// Each delivery in a transaction of its own, at once as far as
    /// `max_sessions` allows.
    async fn one_by_one(&self, jobs: Vec<Job>) {
        let stores = jobs.into_iter().map(|job| async move {
            let _session = self.sessions.acquire().await;
            let result = self
                .ingest_one(&job.event, job.verified)
                .instrument(batch_span(&job.span, 1))
                .await;
            let _ = job.reply.send(result);
        });
        futures_util::future::join_all(stores).await;
    }

    /// Sorts out `batch`: copies of one event are carried by the first, and
    /// whether its statements fold into one.
    fn prepare<'b>(&'b self, settings: &'b Settings, batch: &'b [Job]) -> Prepared<'b> {
        let runner = &self.runner;
        // Copies of one event in the batch: the first carries them all.
        let mut first_of: HashMap<(&str, Key<'_>), usize> = HashMap::new();
        // The ids of the firsts keyed by body: one statement cannot store an id
        // twice.
        let mut body_keyed_ids: HashSet<(&str, &str)> = HashSet::new();
        let mut roles = Vec::with_capacity(batch.len());
        let mut items: Vec<BatchItem<'_>> = Vec::new();
        let mut plans = Vec::new();
        for job in batch {
            let event = &job.event;
            let key = Key::of(event);
            if let Some(&at) = first_of.get(&key) {
                let first: &IncomingEvent = items[at].event;
                let same = matches!(key.1, Key::Body(_))
                    || first.fingerprint == event.fingerprint
                    || first.stable_fingerprint == event.stable_fingerprint;
                if same {
                    items[at].deliveries += 1;
                    roles.push(Role::CopyOf(at));
                } else {
                    roles.push(Role::Apart);
                }
                continue;
            }
            if event.body_key.is_some()
                && !body_keyed_ids.insert((event.source.as_str(), event.event_id.as_str()))
            {
                roles.push(Role::Apart);
                continue;
            }
            let plan = runner.plan(
                settings,
                &event.source,
                &event.event_type,
                event.kind.as_deref(),
            );
            let expected = expected_for(&plan);
            first_of.insert(key, items.len());
            roles.push(Role::First(items.len()));
            items.push(BatchItem {
                event,
                signed_with: job.verified.signed_with,
                expected,
                deliveries: 1,
            });
            plans.push(plan);
        }
        let folded = self.fold(&items, &plans);
        Prepared {
            roles,
            items,
            plans,
            folded,
        }
    }

    /// Each item's payment merge and attempt, when every item is decided by id,
    /// has no forward to plan, and its handler (if any) is hookd's own payment
    /// merge with no refund to add (`Handler::folded_merge`).
    fn fold<'b>(
        &self,
        items: &[BatchItem<'_>],
        plans: &[Vec<Step<'b>>],
    ) -> Option<Vec<FoldedMerge<'b>>> {
        let received_at = Utc::now();
        let mut runs = Vec::new();
        for (at, (item, plan)) in items.iter().zip(plans).enumerate() {
            // A kept request is a statement of its own (`events::record_batch`);
            // planned forwards are rows of their own.
            if item.event.body_key.is_some()
                || item.event.request.is_some()
                || !forward_names(plan).is_empty()
            {
                return None;
            }
            let Some(Step::Local { kind, handler }) =
                plan.iter().find(|s| matches!(s, Step::Local { .. }))
            else {
                continue;
            };
            // The row's id is the statement's to assign; the merge does not read it.
            let view = self.runner.view_received(item.event, 0, received_at);
            let update = handler.folded_merge(&view)?;
            let run = Run {
                handler: HandlerName::Kind((*kind).to_string()),
                started_at: received_at,
                finished_at: received_at,
                result: Ok(()),
                http_status: None,
                response: None,
            };
            let attempt = ledger::attempt_record(0, 1, &run, Some(&Standing::Done));
            runs.push(FoldedMerge {
                at,
                kind,
                update,
                attempt,
            });
        }
        Some(runs)
    }

    /// The folded batch in one statement on `client`, in a transaction sent
    /// whole, `BEGIN` and `COMMIT` with it: one round trip. Past
    /// `handler_timeout` the statement is cancelled and the batch stored one by
    /// one; a statement that lost to a concurrent one runs again.
    async fn commit_folded(
        &self,
        client: &Object,
        prepared: &Prepared<'_>,
        runs: &[FoldedMerge<'_>],
        settings: &Settings,
    ) -> Result<Vec<Option<Recorded>>, Fallback> {
        let folded: Vec<events::FoldedRun<'_>> = runs
            .iter()
            .map(|run| events::FoldedRun {
                source: &prepared.items[run.at].event.source,
                event_id: &prepared.items[run.at].event.event_id,
                update: &run.update,
                attempt: &run.attempt,
            })
            .collect();
        let merged: Vec<(&str, &str)> = runs
            .iter()
            .map(|run| (run.kind, &*prepared.items[run.at].event.event_id))
            .collect();
        // The statement is the handlers' merge too: it is their span.
        let span = folded_span(&merged);
        let clock = std::time::Instant::now();
        // One time limit for all the runs, as for a handler's batch.
        let deadline = tokio::time::Instant::now() + settings.handler_timeout;
        // Cut at the time limit: the cancel may still be on its way and hit
        // whatever this session runs next, so the session is closed; each event
        // goes on its own, its handler under its own time limit (and one whose
        // batch committed after all is found stored, and answered as such).
        let out_of_time = || {
            let why = "the batch's payment merges ran out of time";
            crate::traces::fail(&span, &why);
            Fallback::Spoiled(why.into())
        };
        let columns = events::Folded::of(&prepared.items, &folded);
        // Prepared before the transaction is sent, so the `COMMIT` follows it.
        let ready = tokio::time::timeout_at(deadline, columns.ready(client));
        let statement = match ready.instrument(span.clone()).await {
            Ok(Ok(statement)) => statement,
            Ok(Err(error)) => return Err(undone(error, prepared, &span)),
            Err(_) => {
                self.runner.cancel(client.cancel_token()).await;
                return Err(out_of_time());
            }
        };
        let mut runs_so_far = 0;
        let decided = loop {
            runs_so_far += 1;
            let mut cut = false;
            let only = async {
                let run = statement.run(client);
                tokio::pin!(run);
                // A timeout polls its future before its timer, even with the
                // task's budget spent (a `select!` would then poll neither, and
                // the `COMMIT` would overtake the statement): the statement is on
                // the wire first, even when the time is already up.
                match tokio::time::timeout_at(deadline, &mut run).await {
                    Ok(decided) => decided,
                    Err(_) => {
                        cut = true;
                        self.runner.cancel(client.cancel_token()).await;
                        run.await
                    }
                }
            };
            let (decided, committed) =
                store::one_statement_transaction(client, only.instrument(span.clone())).await;
            let error = match (decided, committed, cut) {
                // Committed or not: never acknowledged from here (under
                // synchronous replication a cancelled wait still reports the
                // `COMMIT` done); the events' own transactions decide, and
                // find a kept batch's events stored (a second delivery each).
                (_, _, true) => return Err(out_of_time()),
                (Ok(decided), Ok(()), false) => break decided,
                // The `COMMIT` failed, or the one that ended the failed
                // statement's transaction: nothing was kept. A lost session is
                // closed (`Fallback::store` makes it `Unavailable`); any other
                // is idle again, no transaction open, and goes back to the pool.
                (_, Err(error), false) => return Err(Fallback::store(error)),
                (Err(error), Ok(()), false) => error,
            };
            if error.runs_again(runs_so_far) {
                log::debug!("storing a batch of {} again: {error}", prepared.items.len());
                continue;
            }
            return Err(undone(error, prepared, &span));
        };
        let merged_new: Vec<&FoldedMerge<'_>> = runs
            .iter()
            .filter(|run| matches!(decided[run.at], Some(Recorded::New { .. })))
            .collect();
        let per_event = clock.elapsed() / u32::try_from(merged_new.len()).unwrap_or(1).max(1);
        for run in merged_new {
            self.runner.metrics().handler_duration(run.kind, per_event);
        }
        Ok(decided)
    }

    /// The batch in one transaction on `client`, each handler once for its new
    /// events; each item's decision. `Err` says the transaction was undone (one
    /// that lost to a concurrent one too: its deliveries are then stored one by one).
    async fn commit_batch(
        &self,
        client: &mut Object,
        prepared: &Prepared<'_>,
    ) -> Result<Vec<Recorded>, Fallback> {
        let runner = &self.runner;
        let (items, plans) = (&prepared.items, &prepared.plans);
        let tx = crate::store::begin(client).await.map_err(Fallback::store)?;
        let decided = events::record_batch(&tx, items)
            .await
            .map_err(Fallback::store)?;

        // Each handler once, for its new events of the batch.
        let mut by_handler: Vec<(&Arc<dyn Handler>, String, Vec<usize>)> = Vec::new();
        for (at, recorded) in decided.iter().enumerate() {
            let Recorded::New { .. } = recorded else {
                continue;
            };
            let Some(Step::Local { kind, handler }) =
                plans[at].iter().find(|s| matches!(s, Step::Local { .. }))
            else {
                continue;
            };
            match by_handler.iter_mut().find(|(_, k, _)| k == kind) {
                Some((_, _, ats)) => ats.push(at),
                None => by_handler.push((handler, (*kind).to_string(), vec![at])),
            }
        }
        let received_at = Utc::now();
        let groups: Vec<(&Arc<dyn Handler>, &String, Vec<Event<'_>>)> = by_handler
            .iter()
            .map(|(handler, kind, ats)| {
                let views = ats
                    .iter()
                    .filter_map(|&at| match decided[at] {
                        Recorded::New { id } => {
                            Some(runner.view_received(items[at].event, id, received_at))
                        }
                        _ => None,
                    })
                    .collect();
                (*handler, kind, views)
            })
            .collect();
        // A batch's runs share its time: each attempt says when the batch's
        // handlers ran. They are written alongside (pipelined on the connection):
        // if a handler fails, the transaction and its attempts are undone together.
        let attempts: Vec<AttemptRecord> = groups
            .iter()
            .flat_map(|(_, kind, views)| {
                views.iter().map(|view| {
                    let run = Run {
                        handler: HandlerName::Kind((*kind).clone()),
                        started_at: received_at,
                        finished_at: Utc::now(),
                        result: Ok(()),
                        http_status: None,
                        response: None,
                    };
                    ledger::attempt_record(view.id, 1, &run, Some(&Standing::Done))
                })
            })
            .collect();
        let run_handlers = async {
            for (handler, kind, views) in &groups {
                let clock = std::time::Instant::now();
                runner
                    .apply_batch(&tx, kind, handler, views)
                    .await
                    .map_err(|failed| match failed.cut {
                        // A cancel may be on its way: the session is closed.
                        true => Fallback::Spoiled(failed.why),
                        false => Fallback::OneByOne(failed.why),
                    })?;
                let per_event = clock.elapsed() / u32::try_from(views.len()).unwrap_or(1).max(1);
                for _ in views {
                    runner.metrics().handler_duration(kind, per_event);
                }
            }
            Ok::<(), Fallback>(())
        };
        // The new events' forwards, planned in the same transaction.
        let planned: Vec<(i64, &str)> = decided
            .iter()
            .zip(plans)
            .filter_map(|(recorded, plan)| match recorded {
                Recorded::New { id } => Some(forward_names(plan).into_iter().map(|f| (*id, f))),
                _ => None,
            })
            .flatten()
            .collect();
        let (ran, written, planned) = tokio::join!(
            run_handlers,
            events::append_attempts(&tx, &attempts),
            store::forwards::plan(&tx, &planned)
        );
        ran?;
        written.map_err(Fallback::store)?;
        planned.map_err(Fallback::store)?;
        tx.commit()
            .instrument(tracing::trace_span!("commit"))
            .await
            .map_err(Fallback::store)?;
        Ok(decided)
    }

    /// Each delivery's outcome from the items' decisions (`None`: to be stored
    /// apart), once they have committed; counts the new events and wakes the
    /// dispatcher for their forwards.
    fn answers(
        &self,
        prepared: &Prepared<'_>,
        decided: &[Option<Recorded>],
    ) -> Vec<Option<Result<Ingested, StoreError>>> {
        let runner = &self.runner;
        let items = &prepared.items;
        for (at, recorded) in decided.iter().enumerate() {
            if matches!(recorded, Some(Recorded::New { .. })) {
                runner.count_status(items[at].event.kind.as_deref(), items[at].expected.status);
                runner.wake_forwards(&prepared.plans[at]);
            }
        }
        let outcome =
            |recorded: &Recorded, at: usize, copy: bool| -> Result<Ingested, StoreError> {
                let recorded = match recorded {
                    Recorded::New { id } if copy => Recorded::Duplicate {
                        id: *id,
                        event_id: items[at].event.event_id.clone(),
                    },
                    other => other.clone(),
                };
                let status = match recorded {
                    Recorded::New { .. } => Some(items[at].expected.status),
                    _ => None,
                };
                Ok(Ingested { recorded, status })
            };
        prepared
            .roles
            .iter()
            .map(|role| match *role {
                Role::First(at) => Some(outcome(decided[at].as_ref()?, at, false)),
                // The first's id conflicts, which says nothing of a copy under
                // another id: it is decided on its own.
                Role::CopyOf(at) => match decided[at].as_ref()? {
                    Recorded::Conflict => None,
                    recorded => Some(outcome(recorded, at, true)),
                },
                Role::Apart => None,
            })
            .collect()
    }

    /// Stores a verified delivery once and, when it is new, runs its own handler in
    /// a savepoint — one transaction, committed before this returns (run again
    /// if it lost to a concurrent one).
    async fn ingest_one(
        &self,
        event: &IncomingEvent,
        verified: Verified,
    ) -> Result<Ingested, StoreError> {
        // A body-keyed delivery that met a concurrent one of its id under another
        // body is decided again once that one has committed (a few times at most:
        // each time, another delivery committed).
        let mut races = 0;
        loop {
            match self.ingest_once(event, verified).await {
                Err(error) if events::lost_id_race(&error) && races < 3 => races += 1,
                result => return result,
            }
        }
    }

    async fn ingest_once(
        &self,
        event: &IncomingEvent,
        verified: Verified,
    ) -> Result<Ingested, StoreError> {
        let runner = &self.runner;
        let settings = runner.settings();
        let plan = runner.plan(
            &settings,
            &event.source,
            &event.event_type,
            event.kind.as_deref(),
        );
        let mut client = self.pool.get().await?;
        let mut runs = 0;
        let mut cut = None;
        let outcome = loop {
            runs += 1;
            let outcome = self
                .store_one(&mut client, event, verified, &plan, cut.as_ref())
                .await;
            match outcome {
                // Cut at `handler_timeout`: the cancel sent for its statement
                // may land late on whatever the session runs next, so the
                // session is closed (its transaction with it) and the delivery
                // stored on another, with the run as it ended.
                Ok(Stored::Cut(run)) => {
                    store::discard(client);
                    client = self.pool.get().await?;
                    cut = Some(run);
                    runs -= 1;
                }
                Ok(Stored::Done(ingested)) => break Ok(ingested),
                Err(error) if error.runs_again(runs) => {
                    log::debug!("storing {:?} again: {error}", event.event_id);
                }
                Err(error) => break Err(error),
            }
        };
        let ingested = store::give_back(client, outcome)?;
        if let Some(status) = ingested.status {
            runner.count_status(event.kind.as_deref(), status);
            runner.wake_forwards(&plan);
        }
        Ok(ingested)
    }

    /// One run of `ingest_one`'s transaction on `client`; a new event's handler
    /// runs in it, unless its run was `cut` already (then that run is recorded).
    async fn store_one(
        &self,
        client: &mut Object,
        event: &IncomingEvent,
        verified: Verified,
        plan: &[Step<'_>],
        cut: Option<&Run>,
    ) -> Result<Stored, StoreError> {
        let runner = &self.runner;
        if plan.is_empty() && event.request.is_none() {
            // Nothing to apply: the one statement is the whole transaction.
            let ignored = Expected {
                status: EventStatus::Ignored,
                attempts: 0,
            };
            let recorded =
                events::record_delivery(&*client, event, verified.signed_with, ignored).await?;
            let status = matches!(recorded, Recorded::New { .. }).then_some(EventStatus::Ignored);
            return Ok(Stored::Done(Ingested { recorded, status }));
        }
        let local = plan.iter().find(|s| matches!(s, Step::Local { .. }));
        let forwards = forward_names(plan);
        let expected = expected_for(plan);
        let tx = crate::store::begin(client).await?;
        let recorded = events::record_delivery(&tx, event, verified.signed_with, expected).await?;
        let status = match recorded {
            Recorded::New { id } => {
                let planned: Vec<(i64, &str)> = forwards.iter().map(|name| (id, *name)).collect();
                store::forwards::plan(&tx, &planned).await?;
                match local {
                    Some(step @ Step::Local { handler, .. }) => {
                        let run = match cut {
                            Some(run) => run.clone(),
                            None => {
                                let view = runner.view_received(event, id, Utc::now());
                                match runner.run_step_or_cut(&tx, step, handler, &view).await? {
                                    Ran::Ended(run) => run,
                                    Ran::Cut(run) => return Ok(Stored::Cut(run)),
                                }
                            }
                        };
                        Some(
                            runner
                                .record_first(&tx, id, run, &forwards, expected.status)
                                .await?,
                        )
                    }
                    _ => Some(expected.status),
                }
            }
            Recorded::Duplicate { .. } | Recorded::Conflict => None,
        };
        tx.commit()
            .instrument(tracing::trace_span!("commit"))
            .await?;
        Ok(Stored::Done(Ingested { recorded, status }))
    }
}

/// The `handler` span of a folded statement merging the payments of `runs`
/// (`(kind, event id)`): the one a handler's run or batch would have had.
fn folded_span(runs: &[(&str, &str)]) -> Span {
    match runs {
        [] => Span::none(),
        [(kind, event_id)] => tracing::trace_span!(
            "handler",
            hookd.handler = kind,
            hookd.event_id = event_id,
            hookd.attempt = 1,
            otel.status_message = tracing::field::Empty,
        ),
        [(kind, _), ..] => {
            let mut kinds: Vec<&str> = runs.iter().map(|(kind, _)| *kind).collect();
            kinds.sort_unstable();
            kinds.dedup();
            tracing::trace_span!(
                "handler",
                hookd.handler = if kinds.len() == 1 {
                    kind.to_string()
                } else {
                    kinds.join(",")
                },
                hookd.batch.size = runs.len(),
                otel.status_message = tracing::field::Empty,
            )
        }
    }
}

/// The span of a transaction storing `size` deliveries, under `delivery`'s.
fn batch_span(delivery: &Span, size: usize) -> Span {
    tracing::trace_span!(parent: delivery, "batch", hookd.batch.size = size)
}

/// How a transaction of `store_one` ended.
enum Stored {
    Done(Ingested),
    /// Its handler was cut at `handler_timeout`: nothing of it is to be kept,
    /// and its session is to be closed (see `Ran::Cut`).
    Cut(Run),
}

/// Why a batch's transaction was undone.
enum Fallback {
    /// The database is unreachable: every delivery of the batch gets 503.
    Unavailable(String),
    /// Something of the batch failed: store each delivery on its own.
    OneByOne(String),
    /// As `OneByOne`, and the batch's session is closed, not pooled: it may be
    /// spoiled (a server that can no longer serve hookd, a cancel on its way).
    Spoiled(String),
    /// A lone delivery's final answer.
    Answer(StoreError),
}

/// What becomes of a folded batch whose statement (or its preparing) failed:
/// nothing of it was kept.
fn undone(error: StoreError, prepared: &Prepared<'_>, span: &Span) -> Fallback {
    crate::traces::fail(span, &error);
    match error {
        // A lone delivery has had its runs: its answer is this one.
        error @ StoreError::Contention(_) if prepared.roles.len() == 1 => Fallback::Answer(error),
        // The merges are handlers: their failure (a lock or statement time
        // limit of the database's own, say) is recorded when each event is
        // stored on its own, as in a transaction of handlers, on another
        // session when this one may be spoiled.
        error if error.spoils_connection() => Fallback::Spoiled(error.to_string()),
        error => Fallback::OneByOne(error.to_string()),
    }
}

impl Fallback {
    fn store(error: impl Into<StoreError>) -> Self {
        let error: StoreError = error.into();
        match error {
            StoreError::Unavailable(why) => Fallback::Unavailable(why),
            other => Fallback::OneByOne(other.to_string()),
        }
    }
}

/// A new event's row, written as its run at receipt usually ends: `processed`
/// after its handler, or `failed` while forwards are to go, or `ignored`
/// without handlers.
fn expected_for(plan: &[Step<'_>]) -> Expected {
    let local = plan.iter().any(|s| matches!(s, Step::Local { .. }));
    let status = if !forward_names(plan).is_empty() {
        EventStatus::Failed
    } else if local {
        EventStatus::Processed
    } else {
        EventStatus::Ignored
    };
    Expected {
        status,
        attempts: i32::from(local),
    }
}

/// The names of the forwards of `plan`.
fn forward_names<'p>(plan: &'p [Step<'_>]) -> Vec<&'p str> {
    plan.iter()
        .filter_map(|step| match step {
            Step::Forward(forward) => Some(forward.name.as_str()),
            Step::Local { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Lanes, MAX_BATCH};

    #[test]
    fn one_leader_at_a_time_takes_everything_queued_meanwhile() {
        let mut lanes = Lanes::new(3);
        assert!(lanes.push(vec![1]), "the first delivery leads at once");
        let (batch, room) = lanes.next_batch(true).expect("its batch");
        assert_eq!((batch, room), (vec![1], 1));
        // While it runs, the others queue: nobody else leads.
        for n in 2..=5 {
            assert!(!lanes.push(vec![n]));
        }
        assert_eq!(lanes.leaders, 1);
        // Its leader takes them all into its next batch, in order.
        let (batch, _) = lanes.next_batch(true).expect("the next batch");
        assert_eq!(batch, vec![2, 3, 4, 5]);
        // Nothing left: the leader stops, and the next delivery leads again.
        assert!(lanes.next_batch(true).is_none());
        assert_eq!((lanes.leaders, lanes.running), (0, 0));
        assert!(lanes.push(vec![6]));
    }

    #[test]
    fn a_transaction_past_its_time_lets_the_next_start_beside_it_up_to_the_most() {
        let mut lanes = Lanes::new(2);
        assert!(lanes.push(vec!["slow"]));
        lanes.next_batch(true).expect("slow");
        assert!(!lanes.push(vec!["a"]));
        // The slow one gives up the turn: the queued delivery gets a leader.
        assert!(lanes.give_up());
        assert_eq!(lanes.next_batch(true).expect("a").0, vec!["a"]);
        // a's transaction runs past its time too, and the most are already at
        // work: the next delivery waits for either to end.
        assert!(!lanes.give_up());
        assert!(!lanes.push(vec!["b"]));
        assert_eq!((lanes.leaders, lanes.running), (2, 0));
        // The first to end takes the turn back for it; the other then stops.
        assert_eq!(lanes.next_batch(false).expect("b").0, vec!["b"]);
        assert!(lanes.next_batch(false).is_none());
        assert_eq!((lanes.leaders, lanes.running), (1, 1));
    }

    #[test]
    fn a_leader_without_the_turn_stops_while_another_holds_it() {
        let mut lanes = Lanes::new(3);
        assert!(lanes.push(vec!["slow"]));
        lanes.next_batch(true).expect("slow");
        assert!(!lanes.push(vec!["a"]));
        assert!(lanes.give_up(), "a new leader for a");
        lanes.next_batch(true).expect("a");
        assert!(!lanes.push(vec!["b"]));
        // The slow one ends while a's leader holds the turn: it leaves b to it.
        assert!(lanes.next_batch(false).is_none());
        assert_eq!(lanes.next_batch(true).expect("b").0, vec!["b"]);
        assert_eq!((lanes.leaders, lanes.running), (1, 1));
    }

    #[test]
    fn batches_hold_whole_requests_up_to_the_limit() {
        let mut lanes = Lanes::new(1);
        assert!(lanes.push(vec![0; MAX_BATCH - 2]));
        assert!(!lanes.push(vec![1, 1]));
        assert!(!lanes.push(vec![2]));
        assert!(!lanes.push(vec![3; MAX_BATCH + 5]));
        // Filled to the limit exactly; the next request does not fit.
        let (first, room) = lanes.next_batch(true).expect("first");
        assert_eq!((first.len(), room), (MAX_BATCH, MAX_BATCH));
        assert_eq!(lanes.next_batch(true).expect("second").0, vec![2]);
        // A request larger than the limit is one batch of its own.
        assert_eq!(
            lanes.next_batch(true).expect("third").0.len(),
            MAX_BATCH + 5
        );
    }
}
