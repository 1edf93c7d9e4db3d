//! Prometheus counters and histograms, kept in memory per process and rendered in
//! the text exposition format at `GET /metrics`, with gauges read at scrape time
//! (the pool, and the process from `/proc/self`) or, for the database's, at most
//! once a second whatever the scrape rate.

mod family;
pub mod fresh;
pub mod process;

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use crate::config::Settings;
use crate::idempotency::rules::Outcome as GatewayOutcome;
use crate::signature::SignatureError;
use crate::store::events::EventStatus;
use family::{Counter, Family, Histogram, Values, render_labels};

/// Every counter and histogram, each with its own labels.
#[derive(Debug)]
pub struct Metrics {
    deliveries: Family<Counter, 2>,
    delivery_duration: Family<Histogram, 1>,
    signature_failures: Family<Counter, 2>,
    duplicates: Family<Counter, 1>,
    events: Family<Counter, 2>,
    handler_duration: Family<Histogram, 1>,
    forwards: Family<Counter, 2>,
    internal_errors: Family<Counter, 0>,
    ingest_batches: Family<Counter, 0>,
    ingest_batched_deliveries: Family<Counter, 0>,
    purged_rows: Family<Counter, 1>,
    purge_runs: Family<Counter, 1>,
    config_reloads: Family<Counter, 1>,
    gateway_requests: Family<Counter, 2>,
    gateway_upstream: Family<Histogram, 1>,
    reconcile_runs: Family<Counter, 2>,
    reconcile_recovered: Family<Counter, 1>,
    /// The gateway's keys whose outcome is unknown, as the last scrape read them.
    pub gateway_unknown: fresh::Fresh<Option<i64>>,
    /// The failed and dead events counted by the last scrape that read them
    /// (`None`: the database could not be reached).
    pub backlog: fresh::Fresh<Option<(i64, i64)>>,
    /// Each forward's state (`hookd_forward_state`) as the last scrape read it.
    pub forward_states: fresh::Fresh<Option<Vec<(String, f64)>>>,
    /// How long ago each source last had a delivery accepted, in seconds.
    pub silences: fresh::Fresh<Option<Vec<(String, f64)>>>,
}

/// How a forward request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardOutcome {
    Delivered,
    Failed,
}

impl ForwardOutcome {
    const ALL: [ForwardOutcome; 2] = [ForwardOutcome::Delivered, ForwardOutcome::Failed];

    fn as_str(self) -> &'static str {
        match self {
            ForwardOutcome::Delivered => "delivered",
            ForwardOutcome::Failed => "failed",
        }
    }
}

/// What a retention purge removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purged {
    Payload,
    Key,
    IdempotencyKey,
    RevokedSession,
    AuditEntry,
    ApiIdempotencyKey,
}

impl Purged {
    const ALL: [Purged; 6] = [
        Purged::Payload,
        Purged::Key,
        Purged::IdempotencyKey,
        Purged::RevokedSession,
        Purged::AuditEntry,
        Purged::ApiIdempotencyKey,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Purged::Payload => "payload",
            Purged::Key => "key",
            Purged::IdempotencyKey => "idempotency_key",
            Purged::RevokedSession => "revoked_session",
            Purged::AuditEntry => "audit_entry",
            Purged::ApiIdempotencyKey => "api_idempotency_key",
        }
    }
}

/// The results of a configuration reload.
const RELOAD_RESULTS: [&str; 2] = ["ok", "error"];

/// The results of a reconciliation pass.
const RECONCILE_RESULTS: [&str; 2] = ["ok", "error"];

/// The results of a retention purge pass.
const PURGE_RESULTS: [&str; 2] = ["ok", "error"];

/// The open label values known before the first delivery.
#[derive(Debug, Default)]
struct Known<'a> {
    sources: Vec<&'a str>,
    kinds: Vec<&'a str>,
    handlers: Vec<String>,
    forwards: Vec<&'a str>,
    routes: Vec<&'a str>,
}

/// Every metric hookd exposes: its name, type and help text in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    Deliveries,
    DeliveryDuration,
    SignatureFailures,
    Duplicates,
    Events,
    HandlerDuration,
    Forwards,
    InternalErrors,
    IngestBatches,
    IngestBatchedDeliveries,
    PurgedRows,
    PurgeRuns,
    ConfigReloads,
    GatewayRequests,
    GatewayUpstreamSeconds,
    ReconcileRuns,
    ReconcileRecovered,
    RetryBacklog,
    DeadEvents,
    GatewayUnknownKeys,
    DbPoolSize,
    DbPoolAvailable,
    DbPoolMaxSize,
    DbPoolWaiting,
    Ready,
    BuildInfo,
    ProcessCpuSeconds,
    ProcessResidentMemory,
    ProcessVirtualMemory,
    ProcessOpenFds,
    ProcessMaxFds,
    ProcessStartTime,
    ForwardState,
    SourceSilent,
}

impl Metric {
    pub const ALL: [Metric; 34] = [
        Metric::Deliveries,
        Metric::DeliveryDuration,
        Metric::SignatureFailures,
        Metric::Duplicates,
        Metric::Events,
        Metric::HandlerDuration,
        Metric::Forwards,
        Metric::InternalErrors,
        Metric::IngestBatches,
        Metric::IngestBatchedDeliveries,
        Metric::PurgedRows,
        Metric::PurgeRuns,
        Metric::ConfigReloads,
        Metric::GatewayRequests,
        Metric::GatewayUpstreamSeconds,
        Metric::ReconcileRuns,
        Metric::ReconcileRecovered,
        Metric::RetryBacklog,
        Metric::DeadEvents,
        Metric::ForwardState,
        Metric::SourceSilent,
        Metric::GatewayUnknownKeys,
        Metric::DbPoolSize,
        Metric::DbPoolAvailable,
        Metric::DbPoolMaxSize,
        Metric::DbPoolWaiting,
        Metric::Ready,
        Metric::BuildInfo,
        Metric::ProcessCpuSeconds,
        Metric::ProcessResidentMemory,
        Metric::ProcessVirtualMemory,
        Metric::ProcessOpenFds,
        Metric::ProcessMaxFds,
        Metric::ProcessStartTime,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Deliveries => "hookd_deliveries_total",
            Metric::DeliveryDuration => "hookd_delivery_duration_seconds",
            Metric::SignatureFailures => "hookd_signature_failures_total",
            Metric::Duplicates => "hookd_duplicates_total",
            Metric::Events => "hookd_events_total",
            Metric::HandlerDuration => "hookd_handler_duration_seconds",
            Metric::Forwards => "hookd_forwards_total",
            Metric::InternalErrors => "hookd_internal_errors_total",
            Metric::IngestBatches => "hookd_ingest_batches_total",
            Metric::IngestBatchedDeliveries => "hookd_ingest_batched_deliveries_total",
            Metric::PurgedRows => "hookd_purged_rows_total",
            Metric::PurgeRuns => "hookd_purge_runs_total",
            Metric::ConfigReloads => "hookd_config_reloads_total",
            Metric::GatewayRequests => "hookd_gateway_requests_total",
            Metric::GatewayUpstreamSeconds => "hookd_gateway_upstream_seconds",
            Metric::GatewayUnknownKeys => "hookd_gateway_unknown_keys",
            Metric::ReconcileRuns => "hookd_reconcile_runs_total",
            Metric::ReconcileRecovered => "hookd_reconcile_recovered_total",
            Metric::RetryBacklog => "hookd_retry_backlog",
            Metric::DeadEvents => "hookd_dead_events",
            Metric::ForwardState => "hookd_forward_state",
            Metric::SourceSilent => "hookd_source_silent",
            Metric::DbPoolSize => "hookd_db_pool_size",
            Metric::DbPoolAvailable => "hookd_db_pool_available",
            Metric::DbPoolMaxSize => "hookd_db_pool_max_size",
            Metric::DbPoolWaiting => "hookd_db_pool_waiting",
            Metric::Ready => "hookd_ready",
            Metric::BuildInfo => "hookd_build_info",
            Metric::ProcessCpuSeconds => "process_cpu_seconds_total",
            Metric::ProcessResidentMemory => "process_resident_memory_bytes",
            Metric::ProcessVirtualMemory => "process_virtual_memory_bytes",
            Metric::ProcessOpenFds => "process_open_fds",
            Metric::ProcessMaxFds => "process_max_fds",
            Metric::ProcessStartTime => "process_start_time_seconds",
        }
    }

    /// `counter`, `gauge` or `histogram`.
    pub fn kind(self) -> &'static str {
        match self {
            Metric::HandlerDuration | Metric::DeliveryDuration | Metric::GatewayUpstreamSeconds => {
                "histogram"
            }
            Metric::Deliveries
            | Metric::SignatureFailures
            | Metric::Duplicates
            | Metric::Events
            | Metric::Forwards
            | Metric::InternalErrors
            | Metric::IngestBatches
            | Metric::IngestBatchedDeliveries
            | Metric::PurgedRows
            | Metric::PurgeRuns
            | Metric::ConfigReloads
            | Metric::GatewayRequests
            | Metric::ReconcileRuns
            | Metric::ReconcileRecovered
            | Metric::ProcessCpuSeconds => "counter",
            _ => "gauge",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Metric::Deliveries => "Deliveries received, by source and outcome.",
            Metric::DeliveryDuration => {
                "Time from a delivery's arrival to its answer, by source (unknown names: unknown)."
            }
            Metric::SignatureFailures => {
                "Deliveries refused for their signature, by source and reason."
            }
            Metric::Duplicates => "Repeated deliveries answered with the stored answer.",
            Metric::Events => "Events reaching a status, by kind and status.",
            Metric::HandlerDuration => "Handler run time, by handler (the kind, or forward:NAME).",
            Metric::Forwards => "Forward requests, by forward and outcome (delivered or failed).",
            Metric::InternalErrors => {
                "Answers 500: hookd's own failures (a database that cannot serve answers 503)."
            }
            Metric::IngestBatches => {
                "Transactions that stored deliveries (several deliveries share one under load)."
            }
            Metric::IngestBatchedDeliveries => {
                "Deliveries stored by those transactions (divided by the batches: the average batch)."
            }
            Metric::PurgedRows => "Rows removed by retention purges, by what was removed.",
            Metric::PurgeRuns => {
                "Retention purge passes this instance ran, by result: ok (also one cut short by shutdown), or error."
            }
            Metric::ConfigReloads => {
                "Configuration reloads (SIGHUP), by result: ok, or error (the running one kept)."
            }
            Metric::GatewayRequests => {
                "Requests through the Idempotency-Key gateway, by route and outcome."
            }
            Metric::GatewayUpstreamSeconds => {
                "Time upstream took to answer the gateway (or to fail), by route."
            }
            Metric::ReconcileRuns => {
                "Passes asking a provider's API for the events it never delivered, by source and result."
            }
            Metric::ReconcileRecovered => {
                "Events a provider never delivered, recovered from its API, by source."
            }
            Metric::GatewayUnknownKeys => {
                "Gateway keys whose outcome is unknown (unknown, or claimed past their lock), all instances."
            }
            Metric::RetryBacklog => "Failed events waiting for a retry.",
            Metric::DeadEvents => "Dead events waiting for a person (all instances: one database).",
            Metric::ForwardState => {
                "Each forward's state: 0 closed (sending), 1 open (its breaker: a probe a minute), 2 paused."
            }
            Metric::SourceSilent => {
                "1 when a source with expect_events_within had no delivery accepted for that long, else 0."
            }
            Metric::DbPoolSize => "Open connections of this instance's PostgreSQL pool.",
            Metric::DbPoolAvailable => "Open pool connections not in use.",
            Metric::DbPoolMaxSize => "The pool's limit (pool_size).",
            Metric::DbPoolWaiting => "Tasks waiting for a pool connection.",
            Metric::Ready => {
                "1 when /readyz answers 200 (database reachable and migrated), else 0."
            }
            Metric::BuildInfo => {
                "Always 1; the version and revision labels name the running build."
            }
            Metric::ProcessCpuSeconds => "User and system CPU time spent, in seconds.",
            Metric::ProcessResidentMemory => "Resident memory size, in bytes.",
            Metric::ProcessVirtualMemory => "Virtual memory size, in bytes.",
            Metric::ProcessOpenFds => "Open file descriptors.",
            Metric::ProcessMaxFds => "The open file descriptors limit.",
            Metric::ProcessStartTime => {
                "Start time of the process since the Unix epoch, in seconds."
            }
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::knowing(Known::default())
    }
}

impl Metrics {
    /// Metrics with the series of `settings`' sources, kinds, handlers and
    /// forwards ready, so counting them takes neither a lock nor an allocation.
    pub fn new(settings: &Settings) -> Self {
        let kinds: Vec<&str> = settings
            .sources
            .iter()
            .flat_map(|source| source.event_types.values())
            .chain(settings.forwards.iter().flat_map(|f| &f.kinds))
            .map(String::as_str)
            .collect();
        let handlers = kinds
            .iter()
            .map(|kind| kind.to_string())
            .chain(
                settings
                    .forwards
                    .iter()
                    .map(|f| f.handler_name().to_string()),
            )
            .collect();
        Metrics::knowing(Known {
            sources: settings.sources.iter().map(|s| s.name.as_str()).collect(),
            kinds,
            handlers,
            forwards: settings.forwards.iter().map(|f| f.name.as_str()).collect(),
            routes: settings.gateway.routes.iter().map(|r| r.name()).collect(),
        })
    }

    fn knowing(known: Known) -> Self {
        let sources = || Values::new(known.sources.iter().copied().chain(["unknown"]));
        let statuses = || Values::new(EventStatus::ALL.map(EventStatus::as_str));
        let outcomes = ["accepted", "duplicate"]
            .into_iter()
            .chain(EventStatus::ALL.map(EventStatus::as_str));
        let reasons = [
            SignatureError::Missing(String::new()),
            SignatureError::Malformed {
                header: String::new(),
                detail: "",
            },
            SignatureError::Mismatch,
            SignatureError::TooOld { seconds: 0 },
            SignatureError::TooNew { seconds: 0 },
        ];
        let kinds = known.kinds.iter().copied().chain(["none"]);
        let metrics = Metrics {
            deliveries: Family::new(["source", "outcome"], [sources(), Values::new(outcomes)]),
            delivery_duration: Family::new(["source"], [sources()]),
            signature_failures: Family::new(
                ["source", "reason"],
                [
                    sources(),
                    Values::new(reasons.iter().map(SignatureError::label)),
                ],
            ),
            duplicates: Family::new(["source"], [sources()]),
            events: Family::new(["kind", "status"], [Values::new(kinds), statuses()]),
            handler_duration: Family::new(["kind"], [Values::new(&known.handlers)]),
            forwards: Family::new(
                ["forward", "outcome"],
                [
                    Values::new(&known.forwards),
                    Values::new(ForwardOutcome::ALL.map(ForwardOutcome::as_str)),
                ],
            ),
            internal_errors: Family::new([], []),
            ingest_batches: Family::new([], []),
            ingest_batched_deliveries: Family::new([], []),
            purged_rows: Family::new(["what"], [Values::new(Purged::ALL.map(Purged::as_str))]),
            purge_runs: Family::new(["result"], [Values::new(PURGE_RESULTS)]),
            config_reloads: Family::new(["result"], [Values::new(RELOAD_RESULTS)]),
            gateway_requests: Family::new(
                ["route", "outcome"],
                [
                    Values::new(&known.routes),
                    Values::new(GatewayOutcome::ALL.map(GatewayOutcome::as_str)),
                ],
            ),
            gateway_upstream: Family::new(["route"], [Values::new(&known.routes)]),
            reconcile_runs: Family::new(
                ["source", "result"],
                [
                    Values::new(known.sources.iter().copied()),
                    Values::new(RECONCILE_RESULTS),
                ],
            ),
            reconcile_recovered: Family::new(
                ["source"],
                [Values::new(known.sources.iter().copied())],
            ),
            gateway_unknown: Default::default(),
            backlog: Default::default(),
            forward_states: Default::default(),
            silences: Default::default(),
        };
        // Shown from the start, so an alert sees the first one as an increase.
        metrics.internal_errors.with([], |c| c.add(0));
        for result in RELOAD_RESULTS {
            metrics.config_reloads.with([result], |c| c.add(0));
        }
        for result in PURGE_RESULTS {
            metrics.purge_runs.with([result], |c| c.add(0));
        }
        metrics
    }

    /// A delivery answered: `source` is a configured name or `unknown`, `outcome`
    /// the answer in a word (accepted, duplicate, the event's status, an error's code).
    pub fn delivery(&self, source: &str, outcome: &'static str) {
        self.deliveries.with([source, outcome], |c| c.add(1));
    }

    pub fn delivery_duration(&self, source: &str, took: Duration) {
        self.delivery_duration.with([source], |h| h.observe(took));
    }

    pub fn signature_failure(&self, source: &str, reason: &SignatureError) {
        let reason = reason.label();
        self.signature_failures.with([source, reason], |c| c.add(1));
    }

    /// Signatures refused so far, by source (the `unknown` label included).
    pub fn signature_failures_by_source(&self) -> HashMap<Box<str>, u64> {
        self.signature_failures.totals_by_first()
    }

    pub fn duplicate(&self, source: &str) {
        self.duplicates.with([source], |c| c.add(1));
    }

    /// An event of `kind` (`none` without one) reached `status`.
    pub fn event(&self, kind: Option<&str>, status: EventStatus) {
        let kind = kind.unwrap_or("none");
        self.events.with([kind, status.as_str()], |c| c.add(1));
    }

    /// A handler's run time; `handler` is the kind, or `forward:NAME`.
    pub fn handler_duration(&self, handler: &str, took: Duration) {
        self.handler_duration.with([handler], |h| h.observe(took));
    }

    pub fn forward(&self, forward: &str, outcome: ForwardOutcome) {
        self.forwards
            .with([forward, outcome.as_str()], |c| c.add(1));
    }

    /// An answer 500.
    pub fn internal_error(&self) {
        self.internal_errors.with([], |c| c.add(1));
    }

    /// A transaction that stored `deliveries` deliveries.
    pub fn ingest_batch(&self, deliveries: usize) {
        self.ingest_batches.with([], |c| c.add(1));
        let deliveries = u64::try_from(deliveries).unwrap_or(0);
        self.ingest_batched_deliveries
            .with([], |c| c.add(deliveries));
    }

    pub fn purged(&self, what: Purged, rows: u64) {
        self.purged_rows.with([what.as_str()], |c| c.add(rows));
    }

    /// A retention purge pass ended, well (`true`) or not.
    pub fn purge_run(&self, ok: bool) {
        let result = PURGE_RESULTS[usize::from(!ok)];
        self.purge_runs.with([result], |c| c.add(1));
    }

    /// A configuration reload, put in force (`true`) or refused.
    pub fn config_reload(&self, ok: bool) {
        let result = RELOAD_RESULTS[usize::from(!ok)];
        self.config_reloads.with([result], |c| c.add(1));
    }

    /// A request through the gateway's route `route` ended so.
    pub fn gateway_request(&self, route: &str, outcome: GatewayOutcome) {
        self.gateway_requests
            .with([route, outcome.as_str()], |c| c.add(1));
    }

    /// How long upstream took to answer (or fail) a request of `route`.
    pub fn gateway_upstream(&self, route: &str, took: Duration) {
        self.gateway_upstream.with([route], |h| h.observe(took));
    }

    /// A reconciliation pass over `source` ended, well (`true`) or not.
    pub fn reconcile_run(&self, source: &str, ok: bool) {
        let result = RECONCILE_RESULTS[usize::from(!ok)];
        self.reconcile_runs.with([source, result], |c| c.add(1));
    }

    /// `source`'s passes are scheduled: its series are shown from 0, so an
    /// alert sees the first failure or recovery as an increase.
    pub fn reconcile_scheduled(&self, source: &str) {
        for result in RECONCILE_RESULTS {
            self.reconcile_runs.with([source, result], |c| c.add(0));
        }
        self.reconcile_recovered.with([source], |c| c.add(0));
    }

    /// Events of `source` a pass recovered.
    pub fn reconcile_recovered(&self, source: &str, events: u64) {
        self.reconcile_recovered.with([source], |c| c.add(events));
    }

    /// The text exposition, with gauges (and the process's counter) read by the
    /// caller at scrape time.
    pub fn render(&self, gauges: &[(Metric, f64)]) -> String {
        self.render_with(gauges, &[])
    }

    /// `render`, with gauges that carry one label each: (metric, label, its
    /// value, the gauge's value).
    pub fn render_with(
        &self,
        gauges: &[(Metric, f64)],
        labeled: &[(Metric, &str, &str, f64)],
    ) -> String {
        let mut out = String::new();
        for metric in Metric::ALL {
            let (name, kind, help) = (metric.name(), metric.kind(), metric.help());
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            match metric {
                Metric::Deliveries => self.deliveries.render(name, &mut out),
                Metric::DeliveryDuration => self.delivery_duration.render(name, &mut out),
                Metric::SignatureFailures => self.signature_failures.render(name, &mut out),
                Metric::Duplicates => self.duplicates.render(name, &mut out),
                Metric::Events => self.events.render(name, &mut out),
                Metric::HandlerDuration => self.handler_duration.render(name, &mut out),
                Metric::Forwards => self.forwards.render(name, &mut out),
                Metric::InternalErrors => self.internal_errors.render(name, &mut out),
                Metric::IngestBatches => self.ingest_batches.render(name, &mut out),
                Metric::IngestBatchedDeliveries => {
                    self.ingest_batched_deliveries.render(name, &mut out)
                }
                Metric::PurgedRows => self.purged_rows.render(name, &mut out),
                Metric::PurgeRuns => self.purge_runs.render(name, &mut out),
                Metric::ConfigReloads => self.config_reloads.render(name, &mut out),
                Metric::GatewayRequests => self.gateway_requests.render(name, &mut out),
                Metric::GatewayUpstreamSeconds => self.gateway_upstream.render(name, &mut out),
                Metric::ReconcileRuns => self.reconcile_runs.render(name, &mut out),
                Metric::ReconcileRecovered => self.reconcile_recovered.render(name, &mut out),
                _ => {}
            }
            for (_, value) in gauges.iter().filter(|(n, _)| *n == metric) {
                let _ = writeln!(out, "{name} {value}");
            }
            for (_, label, text, value) in labeled.iter().filter(|(n, ..)| *n == metric) {
                let _ = writeln!(
                    out,
                    "{name}{} {value}",
                    render_labels(&[(*label, *text)], None)
                );
            }
            if metric == Metric::BuildInfo {
                let build = [
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("revision", crate::version::REVISION),
                ];
                let _ = writeln!(out, "{name}{} 1", render_labels(&build, None));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
