//! The benchmarks' pgbench baselines, made from the store's own statements with
//! pgbench expressions in place of their parameters — so a baseline runs what
//! hookd runs and cannot drift:
//!
//! - `Script`: the ingest benchmark's per-event transaction (the dedupe INSERT, a
//!   savepoint, the payment merge, the attempt row);
//! - `KeyScript`: the gateway's claim and completion of an Idempotency-Key (and
//!   a copy's claim and read);
//!
//! and `Pgbench`, which runs them on a benchmark cluster and reads each
//! transaction's latency from pgbench's logs.

use std::path::PathBuf;
use std::time::Duration;

use hookd::store::api_idempotency::{CLAIM_KEY, COMPLETE_KEY, READ_KEY};
use hookd::store::events::{APPEND_ATTEMPTS, RECORD_DELIVERY};
use hookd::store::payments::MERGE_PAYMENT;

use crate::bench::BenchCluster;
use crate::load::{self, ms, percentile};

/// A unique id per transaction: the run, the pgbench client and its counter.
const EVENT_ID: &str = "('evt_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text)";
const PAYMENT_ID: &str = "('pi_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text)";
const CUSTOMER_ID: &str = "'cus_QhT4nW8xY2kLpR'";
/// A Stripe-Signature header as hookd keeps it: a timestamp and one HMAC.
const SIGNATURE_HEADERS: &str = "'{\"stripe-signature\": \"t=1726050000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd\"}'::jsonb";

/// What a transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// The dedupe INSERT alone.
    Insert,
    /// The whole per-event transaction of a new `payment_succeeded` event.
    Full,
}

impl Script {
    pub fn name(self) -> &'static str {
        match self {
            Script::Insert => "insert",
            Script::Full => "full",
        }
    }

    /// The script, reading the variables `run`, `n` (counter, start at 0),
    /// `payload` (the body with `@EVT@` and `@PI@` for the ids) and `sha` (hex).
    pub fn text(self) -> String {
        let body =
            format!("replace(replace(:payload::text, '@EVT@', {EVENT_ID}), '@PI@', {PAYMENT_ID})");
        let record = with_values(
            RECORD_DELIVERY,
            &[
                "'stripe'",
                EVENT_ID,
                "'payment_intent.succeeded'",
                "'payment_succeeded'",
                "'processed'",
                &format!("{body}::jsonb"),
                "decode(:sha::text, 'hex')",
                "1",
                PAYMENT_ID,
                CUSTOMER_ID,
                "1",
                &format!("convert_to({body}, 'UTF8')"),
                SIGNATURE_HEADERS,
                "decode(:sha::text, 'hex')",
            ],
        );
        match self {
            Script::Insert => format!("\\set n :n + 1\n{record};\n"),
            Script::Full => {
                let merge = with_values(
                    MERGE_PAYMENT,
                    &[
                        "'stripe'",
                        PAYMENT_ID,
                        "true",
                        "false",
                        "false",
                        "2000",
                        "NULL",
                        "'usd'",
                        CUSTOMER_ID,
                    ],
                );
                let attempt = with_values(
                    APPEND_ATTEMPTS,
                    &[
                        "ARRAY[:id::bigint]",
                        "ARRAY[1]",
                        "ARRAY['payment_succeeded']",
                        "ARRAY[now()]",
                        "ARRAY[now()]",
                        "ARRAY['processed']",
                        "ARRAY[NULL::text]",
                        "ARRAY[NULL::int]",
                        "ARRAY[NULL::text]",
                    ],
                );
                format!(
                    "\\set n :n + 1\nBEGIN;\n{record} \\gset\nSAVEPOINT handler;\n{merge};\n\
                     RELEASE SAVEPOINT handler;\n{attempt};\nCOMMIT;\n"
                )
            }
        }
    }
}

/// The gateway's statements for a key (`hookd::store::api_idempotency`), each
/// autocommitted as the gateway runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyScript {
    /// A new key: the claim (`CLAIM_KEY`, which returns the row's id), then the
    /// answer stored (`COMPLETE_KEY`).
    New,
    /// Every other transaction a copy of the key before it: its claim, which
    /// takes nothing, then the read of the stored answer (`READ_KEY`).
    HalfCopies,
}

/// The route of the gateway benchmark, as the pgbench baseline names it.
pub const KEY_ROUTE: &str = "payments";
/// The caller's credential; its SHA-256 is the keys' scope.
pub const KEY_CALLER: &str = "Bearer sk_bench_gateway";

impl KeyScript {
    pub fn name(self) -> &'static str {
        match self {
            KeyScript::New => "keys-new",
            KeyScript::HalfCopies => "keys-half-copies",
        }
    }

    /// The script, reading the variables `run` and `n` (counter, start at 0).
    /// Key `n` is unique per run and client; its fingerprint, claim id and
    /// operation id are made from it.
    pub fn text(self) -> String {
        let key = |n: &str| {
            format!("('key_pgb_' || :run::text || '_' || :client_id::text || '_' || {n})")
        };
        let claim = |key: &str| {
            with_values(
                CLAIM_KEY,
                &[
                    &format!("'{KEY_ROUTE}'"),
                    &format!("sha256(convert_to('{KEY_CALLER}', 'UTF8'))"),
                    key,
                    &format!("sha256(convert_to({key}, 'UTF8'))"),
                    &format!("('op_' || md5({key}))"),
                    &format!("decode(md5({key}), 'hex')"),
                    "'POST'",
                    "'/payments'",
                    // The default route: a 30 s timeout plus the 30 s before takeover.
                    "60000",
                    // The default retention: 24 h.
                    "86400000",
                    "true",
                ],
            )
        };
        let new = key(":n::text");
        let complete = with_values(
            COMPLETE_KEY,
            &[
                ":id::bigint",
                &format!("decode(md5({new}), 'hex')"),
                "201",
                "'[[\"content-type\", \"application/json\"]]'::jsonb",
                "convert_to('{\"id\":\"pay\"}', 'UTF8')",
                "false",
            ],
        );
        let new_key = format!("{} \\gset\n{complete};\n", claim(&new));
        match self {
            KeyScript::New => format!("\\set n :n + 1\n{new_key}"),
            KeyScript::HalfCopies => {
                let copy = key("(:n::bigint - 1)::text");
                let read = with_values(
                    READ_KEY,
                    &[
                        &format!("'{KEY_ROUTE}'"),
                        &format!("sha256(convert_to('{KEY_CALLER}', 'UTF8'))"),
                        &copy,
                    ],
                );
                format!(
                    "\\set n :n + 1\n\\if :n % 2 = 1\n{new_key}\\else\n{};\n{read};\n\\endif\n",
                    claim(&copy)
                )
            }
        }
    }
}

/// `sql` with `$1`, `$2`, … replaced by `values[0]`, `values[1]`, …; panics
/// unless every parameter has a value and every value a parameter.
pub fn with_values(sql: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(sql.len() * 2);
    let mut used = vec![false; values.len()];
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let n: usize = digits
            .parse()
            .unwrap_or_else(|_| panic!("a `$` that is not a parameter in {sql}"));
        let value = values
            .get(n - 1)
            .unwrap_or_else(|| panic!("${n} has no value: the statement changed"));
        used[n - 1] = true;
        out.push_str(value);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    if let Some(unused) = used.iter().position(|u| !u) {
        panic!(
            "value {} has no ${}: the statement changed",
            unused + 1,
            unused + 1
        );
    }
    out
}

/// What one or more pgbench runs measured.
#[derive(Debug, Clone, Default)]
pub struct PgbenchResult {
    pub transactions: u64,
    pub failed: u64,
    /// Seconds of measurement (transactions / tps, connection time excluded).
    pub seconds: f64,
    /// Per transaction: when it was due (since the Unix epoch) and its latency
    /// from then. Closed loop, it was due when it started.
    pub transactions_at: Vec<(Duration, Duration)>,
}

impl PgbenchResult {
    pub fn tps(&self) -> f64 {
        self.transactions as f64 / self.seconds.max(1e-9)
    }

    pub fn add(&mut self, other: PgbenchResult) {
        self.transactions += other.transactions;
        self.failed += other.failed;
        self.seconds += other.seconds;
        self.transactions_at.extend(other.transactions_at);
    }

    pub fn line(&self) -> String {
        let sorted = self.sorted_latencies();
        format!(
            "{} transactions ({} failed) in {:.1} s, {:.0} tps; latency p50 {} p99 {} max {}",
            self.transactions,
            self.failed,
            self.seconds,
            self.tps(),
            ms(percentile(&sorted, 0.50)),
            ms(percentile(&sorted, 0.99)),
            ms(sorted.last().copied().unwrap_or_default())
        )
    }

    pub fn sorted_latencies(&self) -> Vec<Duration> {
        let mut sorted: Vec<Duration> = self.transactions_at.iter().map(|&(_, l)| l).collect();
        sorted.sort();
        sorted
    }

    /// Only the transactions due `skip` or more after the first one, as if the
    /// run had started then.
    pub fn after(&self, skip: Duration) -> PgbenchResult {
        let first = self.transactions_at.iter().map(|&(due, _)| due).min();
        let transactions_at: Vec<(Duration, Duration)> = self
            .transactions_at
            .iter()
            .filter(|&&(due, _)| first.is_some_and(|first| due >= first + skip))
            .copied()
            .collect();
        PgbenchResult {
            transactions: transactions_at.len() as u64,
            failed: self.failed,
            seconds: (self.seconds - skip.as_secs_f64()).max(0.0),
            transactions_at,
        }
    }

    /// p99 per `step`, by when each transaction was due.
    pub fn p99_timeline(&self, step: Duration) -> String {
        let first = self.transactions_at.iter().map(|&(due, _)| due).min();
        let points: Vec<(Duration, Duration)> = self
            .transactions_at
            .iter()
            .map(|&(due, latency)| (due - first.unwrap_or(due), latency))
            .collect();
        load::p99_timeline(&points, step)
    }
}

/// pgbench against a benchmark cluster's Unix socket, with a benchmark's
/// scripts: `-M prepared`, per-transaction logs, `n` (a per-client counter)
/// starting at 0 and `run` unique per run.
pub struct Pgbench<'a> {
    bin: PathBuf,
    cluster: &'a BenchCluster,
    /// Scripts and per-transaction logs; deleted by `remove`.
    work: PathBuf,
    /// More `-D` variables the scripts read.
    defines: Vec<(String, String)>,
    runs: usize,
}

impl<'a> Pgbench<'a> {
    /// Writes `scripts` (name, text) for the benchmark `name`.
    pub fn new(
        cluster: &'a BenchCluster,
        name: &str,
        scripts: &[(&str, String)],
        defines: Vec<(String, String)>,
    ) -> Self {
        let work = cluster
            .socket_dir()
            .with_file_name(format!("bench-{name}-pgbench-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("pgbench work folder");
        for (script, text) in scripts {
            std::fs::write(work.join(format!("{script}.sql")), text).expect("write pgbench script");
        }
        Pgbench {
            bin: crate::cluster::postgres_bin("pgbench"),
            cluster,
            work,
            defines,
            runs: 0,
        }
    }

    pub async fn version(&self) -> String {
        let out = tokio::process::Command::new(&self.bin)
            .arg("--version")
            .output()
            .await
            .expect("pgbench --version");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A closed loop of `clients` running `script`, or an open loop at `rate`
    /// transactions per second spread over them.
    pub async fn run(
        &mut self,
        script: &str,
        clients: usize,
        duration: Duration,
        rate: Option<f64>,
    ) -> PgbenchResult {
        self.runs += 1;
        let prefix = format!("log{}", self.runs);
        let mut command = tokio::process::Command::new(&self.bin);
        if let Some(rate) = rate {
            command.arg(format!("--rate={rate:.0}"));
        }
        command
            .current_dir(&self.work)
            .env_remove("PGSERVICE")
            .args(["-n", "-M", "prepared", "--no-vacuum"])
            .arg("-h")
            .arg(self.cluster.socket_dir())
            .args(["-p", "5432", "-U", self.cluster.user()])
            .arg(format!("--client={clients}"))
            .arg(format!("--jobs={}", clients.min(2)))
            .arg(format!("--time={}", duration.as_secs().max(1)))
            .arg(format!("--file={script}.sql"))
            .arg("--log")
            .arg(format!("--log-prefix={prefix}"))
            .arg("-D")
            .arg("n=0")
            .arg("-D")
            .arg(format!("run=r{}{}", std::process::id(), self.runs));
        for (name, value) in &self.defines {
            command.arg("-D").arg(format!("{name}={value}"));
        }
        let out = command
            .arg(self.cluster.database())
            .output()
            .await
            .expect("run pgbench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "pgbench {script} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        let value = |label: &str| -> Option<String> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(label))
                .map(|rest| rest.trim().to_string())
        };
        let first_number = |text: String| -> Option<f64> {
            text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .find(|s| !s.is_empty())
                .and_then(|s| s.parse().ok())
        };
        let tps = value("tps = ")
            .and_then(first_number)
            .unwrap_or_else(|| panic!("no tps in pgbench output:\n{stdout}"));
        let transactions = value("number of transactions actually processed: ")
            .and_then(first_number)
            .unwrap_or_default() as u64;
        PgbenchResult {
            transactions,
            failed: value("number of failed transactions: ")
                .and_then(first_number)
                .unwrap_or_default() as u64,
            seconds: transactions as f64 / tps.max(1e-9),
            transactions_at: self.logged_transactions(&prefix),
        }
    }

    /// Each transaction's due time and latency from pgbench's `--log` files:
    /// `client transaction time script epoch_s epoch_us [schedule_lag]`, times in
    /// µs, the epoch when it ended. The latency counts from when it was due:
    /// under `--rate` pgbench's `time` already counts from the scheduled start
    /// (`schedule_lag` is the part of it spent waiting to start), so it is
    /// taken as it is. Before 2026-12-05 13:45 UTC the lag was added again.
    fn logged_transactions(&self, prefix: &str) -> Vec<(Duration, Duration)> {
        let mut transactions = Vec::new();
        for entry in std::fs::read_dir(&self.work).expect("pgbench logs") {
            let path = entry.expect("pgbench log").path();
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{prefix}.")));
            if !is_log {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read pgbench log");
            transactions.extend(text.lines().filter_map(|line| {
                let fields: Vec<u64> = line
                    .split_whitespace()
                    .map(|f| f.parse().ok())
                    .collect::<Option<_>>()?;
                let (time, epoch_s, epoch_us) = (*fields.get(2)?, *fields.get(4)?, *fields.get(5)?);
                let latency = Duration::from_micros(time);
                let ended = Duration::from_secs(epoch_s) + Duration::from_micros(epoch_us);
                Some((ended.checked_sub(latency)?, latency))
            }));
            std::fs::remove_file(&path).expect("remove pgbench log");
        }
        transactions
    }

    pub fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}
