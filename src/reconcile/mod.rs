//! Recovering what a provider never delivered: a pass lists the provider's
//! events of a window through its API (each provider's folder pages its own
//! list API, on the shared client of [`crate::provider_api`]), compares them
//! with what hookd holds, and stores the missing ones through the ingest a
//! delivery goes through (dedupe, conflicts, handlers, forwards), as
//! `origin = 'api'`: no secret signed them, the TLS connection made with the
//! source's key proves them. A later delivery of one is a duplicate of it.
//!
//! `hookd reconcile` runs one pass; `serve` runs one per source with
//! `reconcile = true` every `reconcile_interval` (jittered), one instance at a
//! time per source (a job lease, as the purge has).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::Source;
use crate::event::{IncomingEvent, SourceName};
use crate::instance::Instance;
use crate::provider_api::Api;
pub use crate::provider_api::ApiError;
use crate::providers::api::{RecentIds, Window};
use crate::shutdown::Shutdown;
use crate::signature::Verified;
use crate::store::events::Recorded;
use crate::store::{self, StoreError};
use chrono::{DateTime, Utc};

/// Recovered events stored in one ingest at most.
const INGEST_CHUNK: usize = 64;
/// Missing events' bodies a pass holds at most before it stores them: a
/// window of a busy account can list millions of events.
const HOLD_BYTES: usize = 8 * 1024 * 1024;
/// Listed ids a pass remembers, to count an event listed twice once.
const REMEMBERED: usize = 50_000;
/// How long a reload may take to add a source to the schedule, at most.
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// What a pass found: events listed by the provider, of them those hookd
/// holds, those it stored now, and those whose id it holds with another
/// payload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub listed: u64,
    pub present: u64,
    pub recovered: u64,
    pub conflicts: u64,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} listed, {} present, {} recovered, {} conflicts",
            self.listed, self.present, self.recovered, self.conflicts
        )
    }
}

/// Why a pass failed (messages say the source apart).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The provider's API failed or refused: its answer, never the key.
    #[error("{error}")]
    Api { name: String, error: ApiError },
    #[error("{problem}")]
    Unusable { name: String, problem: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a pass holds its source's lease (a scheduled one; `hookd reconcile`
/// runs without).
struct Lease<'a> {
    job: &'a str,
    holder: &'a [u8],
    term: Duration,
}

impl Lease<'_> {
    /// Held for another term; `false` once another instance took the pass over.
    async fn renew(&self, client: &impl store::sql::Session) -> Result<bool, StoreError> {
        store::purge::lease_job(client, self.job, self.holder, self.term).await
    }
}

const TAKEN_OVER: &str = "the lease ran out and another instance took the pass over; stopped";

/// The name a source's pass is leased under.
fn job_of(source: &str) -> String {
    format!("reconcile:{source}")
}

/// The earliest `since` a source's provider lists events from, as of `now`.
pub fn earliest(source: &Source, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let lister = source.reconcile.lister?;
    crate::duration::before(now, lister.max_window())
}

/// A pass that stopped on an error, and what it had counted (and stored)
/// before: a pass stores as it goes, so a failure late in a long pass comes
/// after events already recovered.
#[derive(Debug)]
pub struct Stopped {
    pub error: ReconcileError,
    pub counts: Counts,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.counts == Counts::default() {
            write!(f, "{}", self.error)
        } else {
            write!(f, "{} (before it stopped: {})", self.error, self.counts)
        }
    }
}

/// One pass over `source`'s events since `since`: stores the missing ones
/// (unless `dry_run`, which only counts them as recovered).
pub async fn pass(
    app: &Instance,
    source: &Source,
    since: DateTime<Utc>,
    dry_run: bool,
) -> Result<Counts, Stopped> {
    pass_leased(app, source, since, dry_run, None).await
}

async fn pass_leased(
    app: &Instance,
    source: &Source,
    since: DateTime<Utc>,
    dry_run: bool,
    lease: Option<&Lease<'_>>,
) -> Result<Counts, Stopped> {
    let mut counts = Counts::default();
    match walk(app, source, since, dry_run, lease, &mut counts).await {
        Ok(()) => Ok(counts),
        Err(error) => Err(Stopped { error, counts }),
    }
}

/// `pass_leased`, counting into `counts` as it goes.
async fn walk(
    app: &Instance,
    source: &Source,
    since: DateTime<Utc>,
    dry_run: bool,
    lease: Option<&Lease<'_>>,
    counts: &mut Counts,
) -> Result<(), ReconcileError> {
    let unusable = |problem: String| ReconcileError::Unusable {
        name: source.name.to_string(),
        problem,
    };
    let lister = source.reconcile.lister.ok_or_else(|| {
        unusable(format!(
            "scheme {:?} has no API listing past events",
            source.scheme.name()
        ))
    })?;
    let credential = source.reconcile.credential.clone().ok_or_else(|| {
        let needs = if lister.takes_client() {
            "client_id and client_secret"
        } else {
            "api_key"
        };
        unusable(format!("set {needs} to ask {}'s API", lister.title()))
    })?;
    let base = source
        .reconcile
        .base()
        .ok_or_else(|| unusable("no api_base".into()))?;
    let api_error = |error| ReconcileError::Api {
        name: source.name.to_string(),
        error,
    };
    let mut api =
        Api::new(base, credential, lister.token_path.unwrap_or_default()).map_err(api_error)?;
    let mut pager = (lister.pager)(&Window {
        since,
        until: Utc::now(),
        exact_types: source.reconcile.types.exact(),
    });
    let mut held = Held::default();
    let mut seen = RecentIds::new(REMEMBERED);
    let no_headers: Vec<(String, String)> = Vec::new();
    loop {
        let items = match pager.next(&mut api).await {
            Ok(Some(items)) => items,
            Ok(None) => break,
            Err(error) => {
                // What was found missing before the provider failed is stored
                // still: the next pass would only find it missing again.
                store_held(app, lease, &mut held, lister.newest_first, counts).await?;
                return Err(api_error(error));
            }
        };
        let mut events = Vec::with_capacity(items.len());
        for item in &items {
            match IncomingEvent::parse(source, &no_headers, item.get().as_bytes()) {
                // A type the provider does not send this source (the account's
                // other events): not this source's to recover.
                Ok(event) if !source.reconcile.types.takes(&event.event_type) => {}
                Ok(event) if seen.insert(&event.event_id) => events.push(event),
                // Listed twice (an event created while paging): counted once.
                Ok(_) => {}
                Err(error) => log::warn!(
                    "reconcile {}: an event the provider listed is not one hookd can \
                     store ({error}); skipped",
                    source.name
                ),
            }
        }
        counts.listed += events.len() as u64;
        let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        let stored = {
            let client = app.pool.get().await.map_err(StoreError::from)?;
            if let Some(lease) = lease
                && !lease.renew(&client).await?
            {
                return Err(unusable(TAKEN_OVER.into()));
            }
            store::reconcile::stored(&client, &source.name, &ids).await?
        };
        for event in events {
            match stored.get(event.event_id.as_str()) {
                None if dry_run => counts.recovered += 1,
                None => held.missing(event),
                Some(row) if same_event(row, &event) => counts.present += 1,
                Some(_) => {
                    log::warn!(
                        "reconcile {}: event {:?} is stored with another payload than the \
                         provider lists",
                        source.name,
                        event.event_id
                    );
                    match dry_run {
                        true => counts.conflicts += 1,
                        false => held.conflicting(event),
                    }
                }
            }
        }
        if held.bytes >= HOLD_BYTES {
            store_held(app, lease, &mut held, lister.newest_first, counts).await?;
        }
    }
    store_held(app, lease, &mut held, lister.newest_first, counts).await
}

/// What a pass found missing and has not stored yet. Bounded by `HOLD_BYTES`:
/// a pass over more than that stores what it holds and goes on listing.
#[derive(Default)]
struct Held {
    missing: Vec<IncomingEvent>,
    /// Stored with another payload: ingested too, so the conflict is recorded
    /// as a delivery's would be (once per payload).
    conflicting: Vec<IncomingEvent>,
    /// Their bodies' size, together (their parsed payloads take about as much again).
    bytes: usize,
}

impl Held {
    fn missing(&mut self, event: IncomingEvent) {
        self.bytes += event.body.len();
        self.missing.push(event);
    }

    fn conflicting(&mut self, event: IncomingEvent) {
        self.bytes += event.body.len();
        self.conflicting.push(event);
    }
}

/// Stores what the pass holds, the missing events in the order they happened
/// (of those it holds), then the conflicting ones, and counts them.
async fn store_held(
    app: &Instance,
    lease: Option<&Lease<'_>>,
    held: &mut Held,
    newest_first: bool,
    counts: &mut Counts,
) -> Result<(), ReconcileError> {
    let mut events = std::mem::take(&mut held.missing);
    if newest_first {
        events.reverse();
    }
    events.append(&mut held.conflicting);
    held.bytes = 0;
    while !events.is_empty() {
        let rest = events.split_off(events.len().min(INGEST_CHUNK));
        let chunk = std::mem::replace(&mut events, rest);
        // A long pass keeps its lease while it stores what it found.
        if let Some(lease) = lease {
            let client = app.pool.get().await.map_err(StoreError::from)?;
            let renewed = lease.renew(&client).await;
            if !store::give_back(client, renewed)? {
                return Err(ReconcileError::Unusable {
                    name: chunk[0].source.to_string(),
                    problem: TAKEN_OVER.into(),
                });
            }
        }
        let outcomes = app
            .ingester
            .ingest_all_keeping_conflicts(chunk, Verified::FROM_PROVIDER_API)
            .await?;
        for outcome in outcomes {
            match outcome.recorded {
                Recorded::New { .. } => counts.recovered += 1,
                // Delivered meanwhile.
                Recorded::Duplicate { .. } => counts.present += 1,
                Recorded::Conflict => counts.conflicts += 1,
            }
        }
    }
    Ok(())
}

/// Whether a stored event is the one listed: the same payload, or the same
/// but for the fields its provider changes between copies of an event.
fn same_event(stored: &store::reconcile::Stored, event: &IncomingEvent) -> bool {
    stored.payload_sha256 == event.fingerprint
        || stored.stable_sha256.as_deref() == Some(&event.stable_fingerprint[..])
}

/// `serve`'s passes: each source with `reconcile = true` every
/// `reconcile_interval`, jittered, under its lease.
#[derive(Clone)]
pub struct Reconciler {
    app: Instance,
    /// This instance's name in the leases: it keeps a lease it holds.
    holder: [u8; 16],
}

impl Reconciler {
    pub fn new(app: Instance) -> Self {
        Reconciler {
            app,
            holder: rand::random(),
        }
    }

    /// Runs the passes as they fall due until shutdown; a reload's sources are
    /// taken up within `IDLE_CHECK`.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        let mut due: HashMap<SourceName, Instant> = HashMap::new();
        loop {
            let settings = self.app.settings.now();
            let now = Instant::now();
            let sources: Vec<&Source> = settings
                .sources
                .iter()
                .filter(|s| s.reconcile.enabled)
                .collect();
            due.retain(|name, _| sources.iter().any(|s| &s.name == name));
            for source in &sources {
                // The first pass soon after start, instances spread apart.
                due.entry(source.name.clone()).or_insert_with(|| {
                    self.app.metrics.reconcile_scheduled(&source.name);
                    now + jittered(source.reconcile.interval / 10)
                });
            }
            for source in &sources {
                if due
                    .get(&source.name)
                    .is_some_and(|at| *at <= Instant::now())
                {
                    tokio::select! {
                        () = self.scheduled(source) => {}
                        () = shutdown.requested() => return,
                    }
                    let interval = source.reconcile.interval;
                    let next = interval.mul_f64(0.9) + jittered(interval / 5);
                    due.insert(source.name.clone(), Instant::now() + next);
                }
            }
            let wait = due
                .values()
                .min()
                .map_or(IDLE_CHECK, |at| {
                    at.saturating_duration_since(Instant::now())
                })
                .min(IDLE_CHECK);
            if !shutdown.sleep(wait).await {
                return;
            }
        }
    }

    /// One scheduled pass over `source`, unless another instance holds its lease.
    async fn scheduled(&self, source: &Source) {
        let job = job_of(&source.name);
        // Held past this pass, for most of the interval: the next pass is
        // this instance's again, or another's once it ran out.
        let term = source.reconcile.interval.mul_f64(0.8);
        let lease = Lease {
            job: &job,
            holder: &self.holder,
            term,
        };
        match self.app.pool.get().await {
            Ok(client) => match store::purge::lease_job(&client, &job, &self.holder, term).await {
                Ok(true) => {}
                Ok(false) => {
                    log::debug!("reconcile {}: another instance holds the pass", source.name);
                    return;
                }
                Err(error) => {
                    self.failed(source, &error.to_string());
                    return;
                }
            },
            Err(error) => {
                self.failed(source, &StoreError::from(error).to_string());
                return;
            }
        }
        let now = Utc::now();
        let since = crate::duration::before(now, source.reconcile.window).unwrap_or(now);
        match pass_leased(&self.app, source, since, false, Some(&lease)).await {
            Ok(counts) => {
                self.app
                    .metrics
                    .reconcile_recovered(&source.name, counts.recovered);
                if counts.recovered > 0 || counts.conflicts > 0 {
                    log::warn!("reconcile {}: {counts}", source.name);
                } else {
                    log::info!("reconcile {}: {counts}", source.name);
                }
                // Counted last: whoever sees the run counted sees all of it.
                self.app.metrics.reconcile_run(&source.name, true);
            }
            Err(stopped) => {
                // What it stored before it stopped was recovered all the same.
                self.app
                    .metrics
                    .reconcile_recovered(&source.name, stopped.counts.recovered);
                self.failed(source, &stopped.to_string());
            }
        }
    }

    fn failed(&self, source: &Source, problem: &str) {
        log::warn!(
            "reconcile {}: {problem}; next pass in about {}",
            source.name,
            crate::duration::format(source.reconcile.interval)
        );
        // Counted last, as a pass that finished.
        self.app.metrics.reconcile_run(&source.name, false);
    }
}

/// A random share of `up_to`.
fn jittered(up_to: Duration) -> Duration {
    up_to.mul_f64(rand::random::<f64>())
}
