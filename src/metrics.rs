//! Prometheus counters and histograms, kept in memory per process and rendered in
//! the text exposition format at `GET /metrics`, with gauges read at scrape time
//! (the pool, and the process from `/proc/self`) or, for the database's, at most
//! once a second whatever the scrape rate.

pub mod fresh;
pub mod process;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;

/// Latency buckets of handlers and deliveries, in seconds: 1 ms to 10 s.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(Metric, Labels), u64>>,
    histograms: Mutex<BTreeMap<(Metric, Labels), Histogram>>,
    /// The failed and dead events counted by the last scrape that read them
    /// (`None`: the database could not be reached).
    pub backlog: fresh::Fresh<Option<(i64, i64)>>,
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
    RetryBacklog,
    DeadEvents,
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
}

impl Metric {
    pub const ALL: [Metric; 25] = [
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
        Metric::RetryBacklog,
        Metric::DeadEvents,
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
            Metric::RetryBacklog => "hookd_retry_backlog",
            Metric::DeadEvents => "hookd_dead_events",
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
            Metric::HandlerDuration | Metric::DeliveryDuration => "histogram",
            Metric::Deliveries
            | Metric::SignatureFailures
            | Metric::Duplicates
            | Metric::Events
            | Metric::Forwards
            | Metric::InternalErrors
            | Metric::IngestBatches
            | Metric::IngestBatchedDeliveries
            | Metric::PurgedRows
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
            Metric::RetryBacklog => "Failed events waiting for a retry.",
            Metric::DeadEvents => "Dead events waiting for a person (all instances: one database).",
            Metric::DbPoolSize => "Open connections of this instance's PostgreSQL pool.",
            Metric::DbPoolAvailable => "Open pool connections not in use.",
            Metric::DbPoolMaxSize => "The pool's limit (pool_size).",
            Metric::DbPoolWaiting => "Tasks waiting for a pool connection.",
            Metric::Ready => {
                "1 when /readyz answers 200 (database reachable and migrated), else 0."
            }
            Metric::BuildInfo => "Always 1; the version label names the running build.",
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

impl Metrics {
    pub fn add(&self, name: Metric, labels: &[(&'static str, &str)], value: u64) {
        let key = (name, owned(labels));
        if let Ok(mut counters) = self.counters.lock() {
            *counters.entry(key).or_default() += value;
        }
    }

    pub fn inc(&self, name: Metric, labels: &[(&'static str, &str)]) {
        self.add(name, labels, 1);
    }

    pub fn observe(&self, name: Metric, labels: &[(&'static str, &str)], value: Duration) {
        let seconds = value.as_secs_f64();
        if let Ok(mut histograms) = self.histograms.lock() {
            let h = histograms.entry((name, owned(labels))).or_default();
            for (count, bound) in h.counts.iter_mut().zip(BUCKETS) {
                if seconds <= bound {
                    *count += 1;
                }
            }
            h.sum += seconds;
            h.count += 1;
        }
    }

    /// The text exposition, with gauges (and the process's counter) read by the
    /// caller at scrape time.
    pub fn render(&self, gauges: &[(Metric, f64)]) -> String {
        let mut out = String::new();
        let counters = self.counters.lock().map(|c| c.clone()).unwrap_or_default();
        let histograms = self
            .histograms
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default();
        for metric in Metric::ALL {
            let (name, kind, help) = (metric.name(), metric.kind(), metric.help());
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((_, labels), value) in counters.iter().filter(|((n, _), _)| *n == metric) {
                let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
            }
            for ((_, labels), h) in histograms.iter().filter(|((n, _), _)| *n == metric) {
                for (bound, count) in BUCKETS.iter().zip(h.counts) {
                    let le = format!("{bound}");
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {count}",
                        render_labels(labels, Some(&le))
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    render_labels(labels, Some("+Inf")),
                    h.count
                );
                let _ = writeln!(out, "{name}_sum{} {}", render_labels(labels, None), h.sum);
                let _ = writeln!(
                    out,
                    "{name}_count{} {}",
                    render_labels(labels, None),
                    h.count
                );
            }
            for (_, value) in gauges.iter().filter(|(n, _)| *n == metric) {
                let _ = writeln!(out, "{name} {value}");
            }
            if metric == Metric::BuildInfo {
                let version = [("version", env!("CARGO_PKG_VERSION").to_string())];
                let _ = writeln!(out, "{name}{} 1", render_labels(&version.to_vec(), None));
            }
        }
        out
    }
}

fn owned(labels: &[(&'static str, &str)]) -> Labels {
    labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
