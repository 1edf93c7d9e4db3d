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
//!
//! **Deliveries that only name their event** (Stripe's thin events) never join
//! a batch: the event is read from the provider's API first, with no session
//! held, then stored on its own with its handler run on what was read — so a
//! slow API delays that delivery alone.

/// A batch in one transaction, and its fallbacks.
mod batch;
/// A batch of payment merges folded into one statement.
mod folded;
/// Reads of named events under way, shared by copies.
mod reads;
/// A delivery in a transaction of its own.
mod single;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::sync::{Semaphore, oneshot};
use tracing::{Instrument, Span};

use crate::event::IncomingEvent;
use crate::runner::{Runner, Step, forward_names};
use crate::signature::Verified;
use crate::store::StoreError;
use crate::store::events::{self, EventStatus, FirstWrite, Recorded};

/// Deliveries stored in one transaction at most.
const MAX_BATCH: usize = 64;
/// Deliveries that may wait for a leader; past it, receiving waits.
const QUEUE: usize = 1024;

/// Receives verified deliveries.
#[derive(Clone)]
pub struct Ingester {
    core: Arc<GroupCommit>,
}

/// What the leaders share.
struct GroupCommit {
    pool: Pool,
    runner: Runner,
    /// The deliveries waiting, and the leaders storing the others.
    lanes: Mutex<LeaderQueue<Job>>,
    /// Room in the queue, a permit per waiting delivery.
    room: Semaphore,
    /// A permit per session the deliveries' transactions hold (`max_sessions`),
    /// batches and deliveries stored one by one alike.
    sessions: Semaphore,
    /// The runtime hookd was started on: a leader runs there, not on the HTTP
    /// worker whose delivery started it (a worker that stops would take the
    /// transaction of others' deliveries with it).
    runtime: tokio::runtime::Handle,
    /// The named events being read at receipt.
    reads: reads::Reads,
    /// When a delivery's transaction last committed (ms after `started`):
    /// readiness's sign that a pool busy to the last session is busy with a
    /// database that answers.
    committed_at: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

/// The queue and the leaders at work, changed together under one lock. Generic
/// over what is queued, so its rules are tested on their own.
struct LeaderQueue<J> {
    /// Requests waiting for a leader, in arrival order, each with its events
    /// (which share a batch).
    queue: VecDeque<Vec<J>>,
    /// Transactions storing deliveries now.
    leaders: usize,
    /// Of those, the ones holding the turn (`TurnGuard`): one, or none while every
    /// leader's transaction has run past `LONG_RUN`.
    running: usize,
    /// Transactions at once at most (`max_leaders`).
    max_leaders: usize,
}

impl<J> LeaderQueue<J> {
    fn new(max_leaders: usize) -> Self {
        LeaderQueue {
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
        let core = Arc::new(GroupCommit {
            pool,
            runner,
            lanes: Mutex::new(LeaderQueue::new(max_leaders(pool_size))),
            room: Semaphore::new(QUEUE),
            sessions: Semaphore::new(max_sessions(pool_size)),
            runtime: tokio::runtime::Handle::current(),
            reads: reads::Reads::default(),
            committed_at: std::sync::atomic::AtomicU64::new(0),
            started: std::time::Instant::now(),
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

    /// `ingest_all`, and each event that reused a stored id with another
    /// payload kept beside that event (`event_conflicts`): a request of
    /// several events is acknowledged whole, and a recovered event is never
    /// refused either.
    pub async fn ingest_all_keeping_conflicts(
        &self,
        events: Vec<IncomingEvent>,
        verified: Verified,
    ) -> Result<Vec<Ingested>, StoreError> {
        let outcomes = self.ingest_all(events.clone(), verified).await?;
        let conflicts: Vec<&IncomingEvent> = events
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o.recorded, Recorded::Conflict))
            .map(|(event, _)| event)
            .collect();
        if !conflicts.is_empty() {
            let mut client = self.core.pool.get().await?;
            for event in conflicts {
                crate::store::events::record_conflict(&mut client, event).await?;
            }
        }
        Ok(outcomes)
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
        let runner = &self.core.runner;
        if events
            .iter()
            .any(|event| runner.names_its_event(&event.source, &event.payload))
        {
            let core = self.core.clone();
            let apart = core.ingest_naming(events, verified).in_current_span();
            return self
                .core
                .runtime
                .spawn(apart)
                .await
                .map_err(|_| stopping())?;
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

    /// Whether a delivery's transaction committed within `recently`.
    pub fn committed_within(&self, recently: std::time::Duration) -> bool {
        let at = self.core.committed_at.load(Ordering::Relaxed);
        let now = self.core.started.elapsed().as_millis();
        at > 0 && now.saturating_sub(u128::from(at)) <= recently.as_millis()
    }
}

impl GroupCommit {
    /// A transaction storing deliveries committed (once per transaction, by
    /// its leader: not on each delivery's path).
    fn note_commit(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.committed_at.fetch_max(now, Ordering::Relaxed);
    }

    fn lock_lanes(&self) -> std::sync::MutexGuard<'_, LeaderQueue<Job>> {
        // A panic while holding it cannot leave the lanes half-changed.
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request whose events only name theirs (Stripe's thin events), each
    /// stored on its own: the event it names is read from the source's API
    /// first (when its kind has a handler to run on it), with no session held
    /// and no transaction open, then stored and its handler run on the read
    /// event. Never in a batch, so a slow API holds neither a batch's
    /// deliveries nor its leader, nor a session, nor a lock. A copy of an event
    /// already stored is not read again (it is decided a duplicate or a
    /// conflict without running anything), nor one arriving while its first
    /// copy's read is under way (it shares that read).
    async fn ingest_naming(
        self: Arc<Self>,
        events: Vec<IncomingEvent>,
        verified: Verified,
    ) -> Result<Vec<Ingested>, StoreError> {
        let mut outcomes = Vec::with_capacity(events.len());
        for event in &events {
            let read_first = match self.to_read(event).await? {
                true => {
                    let span = tracing::trace_span!("read_named", hookd.event_id = %event.event_id);
                    self.reads.read(&self.runner, event).instrument(span).await
                }
                false => None,
            };
            let _session = self.sessions.acquire().await;
            let outcome = self
                .ingest_one(event, verified, read_first.as_ref())
                .instrument(batch::batch_span(&Span::current(), 1))
                .await?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Whether the event `event` names is to be read before it is stored: its
    /// kind has a handler here, and no copy of it is stored yet.
    async fn to_read(&self, event: &IncomingEvent) -> Result<bool, StoreError> {
        let settings = self.runner.settings();
        let plan = self.runner.plan(
            &settings,
            &event.source,
            &event.event_type,
            event.kind.as_deref(),
        );
        if !plan.iter().any(|step| matches!(step, Step::Local { .. })) {
            return Ok(false);
        }
        let _session = self.sessions.acquire().await;
        let client = self.pool.get().await?;
        Ok(!events::is_stored(&client, &event.source, &event.event_id).await?)
    }

    /// Starts a leader that `LeaderQueue::claim` counted.
    fn lead(self: &Arc<Self>) {
        self.runtime.spawn(self.clone().lead_on());
    }

    /// Stores batch after batch of what is queued while it holds the turn, or
    /// finds the turn free; a leader starts holding it. A task of its own: a
    /// provider hanging up never cuts a transaction that others share.
    async fn lead_on(self: Arc<Self>) {
        let mut holding = true;
        while let Some(batch) = self.next_batch(holding) {
            let turn = TurnGuard {
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

    /// The leader's next batch (see `LeaderQueue::next_batch`).
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
struct TurnGuard<'c> {
    core: &'c Arc<GroupCommit>,
    held: AtomicBool,
}

/// How long a batch's transaction holds the turn at most (see `TurnGuard`).
const LONG_RUN: std::time::Duration = std::time::Duration::from_millis(2);

impl TurnGuard<'_> {
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

impl Drop for TurnGuard<'_> {
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

/// A new event's row, written as its run at receipt usually ends: `processed`
/// after its handler, or `failed` while forwards are to go, or `ignored`
/// without handlers.
fn first_write_for(plan: &[Step<'_>]) -> FirstWrite {
    let local = plan.iter().any(|s| matches!(s, Step::Local { .. }));
    let status = if !forward_names(plan).is_empty() {
        EventStatus::Failed
    } else if local {
        EventStatus::Processed
    } else {
        EventStatus::Ignored
    };
    FirstWrite {
        status,
        attempts: i32::from(local),
    }
}

#[cfg(test)]
mod tests {
    use super::{LeaderQueue, MAX_BATCH};

    #[test]
    fn one_leader_at_a_time_takes_everything_queued_meanwhile() {
        let mut lanes = LeaderQueue::new(3);
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
        let mut lanes = LeaderQueue::new(2);
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
        let mut lanes = LeaderQueue::new(3);
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
        let mut lanes = LeaderQueue::new(1);
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
