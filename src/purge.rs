//! The retention pass: under a lease (one instance at a time), in batches
//! of `purge_batch` rows per transaction so ingestion never waits on it, first the
//! keys older than `key_retention`, then the payloads older than `retention`, then
//! expired admin Idempotency-Key records. `run_once` is one pass; the loop in
//! `serve` runs it every `purge_interval` and stops between batches on shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;

use crate::config::{LiveSettings, Settings};
use crate::duration;
use crate::metrics::{Metrics, Purged};
use crate::shutdown::Shutdown;
use crate::store::StoreError;
use crate::store::purge::{self, ByStatus, Expiring, Preview};

/// How long a pass's lease lasts unless renewed; it is renewed before each
/// batch, and a batch (30 s at most) and its rest take far less.
const LEASE_TERM: Duration = Duration::from_secs(300);

/// Rest between batches, as a multiple of the time the batch took.
const PAUSE_PER_BUSY: f64 = 2.0;

/// How long an admin Idempotency-Key answer is kept for repeats.
pub const IDEMPOTENCY_KEY_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeOutcome {
    /// Another instance held the purge lock; nothing was done.
    pub skipped: bool,
    pub payloads_dropped: ByStatus,
    pub keys_deleted: ByStatus,
    pub idempotency_keys_deleted: u64,
    /// Signed-out sessions past the time they would have expired anyway.
    pub revoked_sessions_deleted: u64,
    /// Audit entries older than `retention`, gone with the event records.
    pub audit_entries_deleted: u64,
    /// Conflicting items older than `retention`, gone with the payloads.
    pub conflicts_deleted: u64,
    /// Requests kept once beside their events (GoCardless's) whose body went
    /// with their events' payloads (their rows go with the events' keys).
    pub requests_dropped: u64,
    /// The gateway's finished keys past their route's `retention`.
    pub api_idempotency_keys_deleted: u64,
    /// Shutdown arrived mid-pass; the rest waits for the next pass.
    pub interrupted: bool,
}

impl PurgeOutcome {
    pub fn total(counts: &ByStatus) -> u64 {
        counts.values().sum()
    }
}

/// The three cut-off times of a pass starting at `now`.
#[derive(Debug, Clone, Copy)]
pub struct Cutoffs {
    pub payloads: DateTime<Utc>,
    pub keys: DateTime<Utc>,
    pub idempotency_keys: DateTime<Utc>,
    pub revoked_sessions: DateTime<Utc>,
    /// The pass's start: rows that carry their own expiry are compared with it.
    pub now: DateTime<Utc>,
}

impl Cutoffs {
    pub fn at(now: DateTime<Utc>, settings: &Settings) -> Self {
        // Durations are bounded at parse time; the floor only guards the calendar's edge.
        let ago = |d: Duration| duration::before(now, d).unwrap_or(DateTime::<Utc>::MIN_UTC);
        Cutoffs {
            payloads: ago(settings.retention),
            keys: ago(settings.key_retention),
            idempotency_keys: ago(IDEMPOTENCY_KEY_TTL),
            revoked_sessions: now,
            now,
        }
    }
}

#[derive(Clone)]
pub struct Purger {
    pool: Pool,
    settings: LiveSettings,
    metrics: Arc<Metrics>,
}

impl Purger {
    pub fn new(pool: Pool, settings: LiveSettings, metrics: Arc<Metrics>) -> Self {
        Self {
            pool,
            settings,
            metrics,
        }
    }

    /// What a pass now would remove.
    pub async fn preview(&self) -> Result<Preview, StoreError> {
        let cutoffs = Cutoffs::at(Utc::now(), &self.settings.now());
        let client = self.pool.get().await?;
        purge::preview(
            &client,
            cutoffs.payloads,
            cutoffs.keys,
            cutoffs.idempotency_keys,
            cutoffs.now,
        )
        .await
    }

    /// One pass; `shutdown` (if any) is checked between batches.
    pub async fn run_once(&self, shutdown: Option<&Shutdown>) -> Result<PurgeOutcome, StoreError> {
        let started = Instant::now();
        // What a pass removed before it failed is reported too: those rows are gone.
        let mut outcome = PurgeOutcome::default();
        let ended = self.pass(shutdown, &mut outcome).await;
        if !outcome.skipped {
            self.report(&outcome, started.elapsed(), ended.as_ref().err());
            self.metrics.purge_run(ended.is_ok());
        }
        ended.map(|()| outcome)
    }

    /// The pass under the purge lease (`outcome.skipped` when another
    /// instance holds it).
    async fn pass(
        &self,
        shutdown: Option<&Shutdown>,
        outcome: &mut PurgeOutcome,
    ) -> Result<(), StoreError> {
        let cutoffs = Cutoffs::at(Utc::now(), &self.settings.now());
        let mut client = self.pool.get().await?;
        let holder: [u8; 16] = rand::random();
        if !purge::lease(&client, &holder, LEASE_TERM).await? {
            log::info!("purge: another instance is purging; skipped");
            outcome.skipped = true;
            return Ok(());
        }
        let result = self
            .batches(&mut client, &holder, cutoffs, shutdown, outcome)
            .await;
        let released = purge::release(&client, &holder).await;
        result.and(released)
    }

    async fn batches(
        &self,
        client: &mut deadpool_postgres::Object,
        holder: &[u8],
        cutoffs: Cutoffs,
        shutdown: Option<&Shutdown>,
        outcome: &mut PurgeOutcome,
    ) -> Result<(), StoreError> {
        let limit = self.settings.now().purge_batch;
        for step in [
            Step::Keys,
            Step::Pending,
            Step::Payloads,
            Step::IdempotencyKeys,
            Step::RevokedSessions,
            Step::Audit,
            Step::Conflicts,
            Step::Requests,
            Step::ApiIdempotencyKeys,
        ] {
            loop {
                // A pass that stalled past its lease may have been taken over.
                if !purge::lease(&*client, holder, LEASE_TERM).await? {
                    log::warn!("purge: the lease ran out and another instance took it; stopped");
                    outcome.interrupted = true;
                    return Ok(());
                }
                let started = Instant::now();
                // Each batch is a transaction of its own: row locks are brief.
                let done = match step {
                    Step::Keys => {
                        let deleted = &mut outcome.keys_deleted;
                        purge::delete_keys_batch(client, cutoffs.keys, limit, deleted).await?
                    }
                    Step::Pending => {
                        let dropped = &mut outcome.payloads_dropped;
                        purge::settle_pending_batch(client, limit, dropped).await?
                    }
                    Step::Payloads => {
                        let dropped = &mut outcome.payloads_dropped;
                        purge::walk_payloads_batch(client, cutoffs.payloads, limit, dropped).await?
                    }
                    Step::IdempotencyKeys => {
                        let (what, before) = (Expiring::IdempotencyKeys, cutoffs.idempotency_keys);
                        let n = purge::delete_expired_batch(client, what, before, limit).await?;
                        outcome.idempotency_keys_deleted += n;
                        n
                    }
                    Step::Audit => {
                        let (what, before) = (Expiring::AuditEntries, cutoffs.payloads);
                        let n = purge::delete_expired_batch(client, what, before, limit).await?;
                        outcome.audit_entries_deleted += n;
                        n
                    }
                    Step::Conflicts => {
                        let (what, before) = (Expiring::Conflicts, cutoffs.payloads);
                        let n = purge::delete_expired_batch(client, what, before, limit).await?;
                        outcome.conflicts_deleted += n;
                        n
                    }
                    Step::Requests => {
                        let before = cutoffs.payloads;
                        let (dropped, deleted) =
                            purge::drop_requests_batch(client, before, limit).await?;
                        outcome.requests_dropped += dropped;
                        dropped.max(deleted)
                    }
                    Step::ApiIdempotencyKeys => {
                        // Each key carries its own expiry (its route's retention).
                        let (what, before) = (Expiring::ApiIdempotencyKeys, cutoffs.now);
                        let n = purge::delete_expired_batch(client, what, before, limit).await?;
                        outcome.api_idempotency_keys_deleted += n;
                        n
                    }
                    Step::RevokedSessions => {
                        let (what, before) = (Expiring::RevokedSessions, cutoffs.revoked_sessions);
                        let n = purge::delete_expired_batch(client, what, before, limit).await?;
                        outcome.revoked_sessions_deleted += n;
                        n
                    }
                };
                if done < limit.unsigned_abs() {
                    break;
                }
                if !breathe(started.elapsed(), shutdown).await {
                    outcome.interrupted = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Counts and logs what a pass removed; a pass that failed (`error`) is
    /// logged as a warning, with what it had removed before.
    fn report(&self, outcome: &PurgeOutcome, took: Duration, error: Option<&StoreError>) {
        let payloads = PurgeOutcome::total(&outcome.payloads_dropped);
        let keys = PurgeOutcome::total(&outcome.keys_deleted);
        for (what, n) in [
            (Purged::Payload, payloads),
            (Purged::Key, keys),
            (Purged::IdempotencyKey, outcome.idempotency_keys_deleted),
            (Purged::RevokedSession, outcome.revoked_sessions_deleted),
            (Purged::AuditEntry, outcome.audit_entries_deleted),
            (
                Purged::ApiIdempotencyKey,
                outcome.api_idempotency_keys_deleted,
            ),
        ] {
            self.metrics.purged(what, n);
        }
        let removed = format!(
            "dropped {payloads} payloads ({}), deleted {keys} keys ({}) and {} idempotency keys in {:.1} s{}",
            describe(&outcome.payloads_dropped),
            describe(&outcome.keys_deleted),
            outcome.idempotency_keys_deleted,
            took.as_secs_f64(),
            match outcome.api_idempotency_keys_deleted {
                0 => String::new(),
                n => format!("; {n} expired gateway keys"),
            },
        );
        match error {
            Some(error) => log::warn!("purge: failed: {error}; before it, {removed}"),
            None if outcome.interrupted => log::info!("purge: {removed}; interrupted by shutdown"),
            None => log::info!("purge: {removed}"),
        }
    }

    /// A pass at start, then one every `purge_interval`, until shutdown.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        loop {
            let result = self.run_once(Some(&shutdown)).await;
            let interval = self.settings.now().purge_interval;
            if result.is_err() {
                log::info!("purge: next pass in {}", crate::duration::format(interval));
            }
            if !shutdown.sleep(interval).await {
                return;
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Keys,
    Pending,
    Payloads,
    IdempotencyKeys,
    RevokedSessions,
    Audit,
    Conflicts,
    Requests,
    ApiIdempotencyKeys,
}

/// After a batch that took `busy`, the pass rests `PAUSE_PER_BUSY` times as long:
/// a large backlog is written out at a fraction of the disk's pace, so deliveries
/// keep their latency while it goes (see benches/README.md). Returns `false` if
/// shutdown came during the rest.
async fn breathe(busy: Duration, shutdown: Option<&Shutdown>) -> bool {
    let rest = busy.mul_f64(PAUSE_PER_BUSY);
    match shutdown {
        Some(shutdown) => shutdown.clone().sleep(rest).await,
        None => {
            tokio::time::sleep(rest).await;
            true
        }
    }
}

/// `processed 3, dead 1`, or `none`.
pub fn describe(counts: &ByStatus) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
