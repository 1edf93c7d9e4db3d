//! Group commit of the gateway's key writes. Committed one by one, a gateway's
//! sessions spend most of their time waiting for the WAL flush of their own
//! commit (`LWLock:WALWrite`, `IO:WALSync` in `pg_stat_activity`), two per
//! request. Here the claims and the stored answers of concurrent requests share
//! a transaction and its one commit: a write that finds fewer than
//! `max_leaders` transactions at work starts one at once (so a lone request
//! waits for nothing); the writes that arrive meanwhile queue, and a finishing
//! leader takes them all (up to `MAX_BATCH`) into the next. A batch of one is
//! its statement alone, autocommitted.
//!
//! Each write is the statement it would be on its own (`CLAIM_KEY`,
//! `COMPLETE_KEY`), and answers follow the commit, so a claim is committed
//! before its request goes upstream, as ever. A batch takes its rows in one
//! order (route, scope, key), so two batches — of this instance or another —
//! never wait on each other in a circle; if a batch fails anyway (a deadlock
//! with a purge, a lost connection), each of its writes runs on its own.

use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::sync::oneshot;

use crate::store::api_idempotency::{
    self as keys, ClaimAttempt, KeyWrite, KeyWriteDone, StoredAnswer, Taken,
};
use crate::store::{self, StoreError};

/// Transactions storing key writes at once, at most (fewer with a small pool:
/// `max_leaders`).
const MAX_LEADERS: usize = 8;

/// Leaders at once with a pool of `pool_size`: a quarter of it, so that
/// however many callers the gateway has (a caller need not be authenticated
/// to make hookd write a claim), its batches hold no more of the pool than
/// that, beside the deliveries' half (`ingest`).
fn max_leaders(pool_size: usize) -> usize {
    (pool_size / 4).clamp(1, MAX_LEADERS)
}
/// Writes in one transaction, at most.
const MAX_BATCH: usize = 64;

/// The key writes of this instance's gateway requests.
#[derive(Clone)]
pub struct KeyWrites {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    /// Transactions at once at most (`max_leaders`).
    max_leaders: usize,
    queue: Mutex<Queue>,
    /// The runtime hookd was started on: a leader runs there, not on the HTTP
    /// worker whose request started it.
    runtime: tokio::runtime::Handle,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Write>,
    leaders: usize,
}

/// Where a write takes its row lock: a batch takes them in this order.
type LockOrder = (String, Vec<u8>, String);

enum Write {
    Claim {
        attempt: ClaimAttempt,
        reply: oneshot::Sender<Result<Option<Taken>, StoreError>>,
    },
    Complete {
        order: LockOrder,
        row_id: i64,
        claim_id: Vec<u8>,
        answer: Arc<StoredAnswer>,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
}

impl Write {
    /// Its statement's values.
    fn values(&self) -> KeyWrite<'_> {
        match self {
            Write::Claim { attempt, .. } => KeyWrite::claim(attempt),
            Write::Complete {
                row_id,
                claim_id,
                answer,
                ..
            } => KeyWrite::complete(*row_id, claim_id, answer),
        }
    }

    fn order(&self) -> (&str, &[u8], &str) {
        match self {
            Write::Claim { attempt: a, .. } => (&a.route, &a.scope, &a.key),
            Write::Complete { order: o, .. } => (&o.0, &o.1, &o.2),
        }
    }
}

impl KeyWrites {
    /// Ready to store key writes; leaders run on the current Tokio runtime.
    pub fn new(pool: Pool) -> Self {
        KeyWrites {
            shared: Arc::new(Shared {
                max_leaders: max_leaders(pool.status().max_size),
                pool,
                queue: Mutex::new(Queue::default()),
                runtime: tokio::runtime::Handle::current(),
            }),
        }
    }

    /// `attempt`'s claim statement, committed: the key claimed, or nothing.
    pub async fn try_claim(&self, attempt: ClaimAttempt) -> Result<Option<Taken>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.submit(Write::Claim { attempt, reply });
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// The answer stored while `claim_id` still owns row `row_id` (the key
    /// `order` names), committed: whether it did.
    pub async fn complete(
        &self,
        order: LockOrder,
        row_id: i64,
        claim_id: Vec<u8>,
        answer: Arc<StoredAnswer>,
    ) -> Result<bool, StoreError> {
        let (reply, done) = oneshot::channel();
        self.submit(Write::Complete {
            order,
            row_id,
            claim_id,
            answer,
            reply,
        });
        match done.await {
            Ok(result) => result,
            Err(_) => Err(stopped()),
        }
    }

    fn submit(&self, write: Write) {
        let lead = {
            let mut queue = self.shared.lock();
            queue.waiting.push(write);
            let due = queue.leaders < self.shared.max_leaders;
            queue.leaders += usize::from(due);
            due
        };
        if lead {
            self.shared.runtime.spawn(self.shared.clone().lead());
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("a batch of key writes stopped".into())
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores batch after batch of what is queued, until nothing is.
    async fn lead(self: Arc<Self>) {
        loop {
            let batch = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.leaders -= 1;
                    return;
                }
                let n = queue.waiting.len().min(MAX_BATCH);
                queue.waiting.drain(..n).collect::<Vec<_>>()
            };
            // A panic must not take the leader's slot with it: its requests get
            // 503 (their replies are dropped) and the leader goes on.
            let stored = std::panic::AssertUnwindSafe(self.store(batch));
            if futures_util::FutureExt::catch_unwind(stored).await.is_err() {
                log::error!("a batch of gateway key writes panicked; its requests got 503");
            }
        }
    }

    /// One transaction for `batch`, or each write on its own if it fails.
    async fn store(&self, mut batch: Vec<Write>) {
        batch.sort_by(|a, b| a.order().cmp(&b.order()));
        let together = async {
            let mut client = self.pool.get().await?;
            let done = in_one_transaction(&mut client, &batch).await;
            store::give_back(client, done)
        }
        .await;
        match together {
            Ok(done) => {
                for (write, done) in batch.into_iter().zip(done) {
                    reply(write, Ok(done));
                }
            }
            Err(error) => {
                log::debug!(
                    "gateway: a batch of {} key writes failed ({error}); each runs on its own",
                    batch.len()
                );
                for write in batch {
                    let done = self.alone(&write).await;
                    reply(write, done);
                }
            }
        }
    }

    async fn alone(&self, write: &Write) -> Result<Done, StoreError> {
        let client = self.pool.get().await?;
        let done = run(&client, write).await;
        store::give_back(client, done)
    }
}

async fn in_one_transaction(
    client: &mut deadpool_postgres::Object,
    batch: &[Write],
) -> Result<Vec<Done>, StoreError> {
    if let [write] = batch {
        // Alone: autocommitted, without a BEGIN and a COMMIT to wait for.
        return Ok(vec![run(&*client, write).await?]);
    }
    // Prepared first (once per connection), so that `BEGIN`, every write in
    // the batch's order and `COMMIT` go together: one round trip, one flush.
    let values: Vec<KeyWrite<'_>> = batch.iter().map(Write::values).collect();
    let mut ready = Vec::with_capacity(values.len());
    for write in &values {
        ready.push(write.ready(&*client).await?);
    }
    let session: &deadpool_postgres::Client = client;
    let writes = futures_util::future::try_join_all(ready.iter().map(|w| w.run(session)));
    let (done, committed) = store::one_statement_transaction(session, writes).await;
    let done = done?;
    committed?;
    Ok(done)
}

async fn run(client: &impl store::sql::Session, write: &Write) -> Result<Done, StoreError> {
    Ok(match write {
        Write::Claim { attempt, .. } => Done::Claimed(keys::try_claim(client, attempt).await?),
        Write::Complete {
            row_id,
            claim_id,
            answer,
            ..
        } => Done::Completed(keys::complete(client, *row_id, claim_id, answer).await?),
    })
}

fn reply(write: Write, done: Result<Done, StoreError>) {
    match write {
        Write::Claim { reply, .. } => {
            let _ = reply.send(done.and_then(Done::claimed));
        }
        Write::Complete { reply, .. } => {
            let _ = reply.send(done.and_then(Done::completed));
        }
    }
}

/// What a write did.
type Done = KeyWriteDone;
