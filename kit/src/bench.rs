//! What the benchmarks share: a private, durable cluster with hookd running
//! in-process on it (as in production), CPU accounting by who spent it, and bulk
//! fills.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hookd::app::{Instance, Parts, Running};
use hookd::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use hookd::handlers::Registry;
use hookd::store;
use tokio::time::Instant;

use crate::load::{MAX_REQUESTS, Report, Sender, closed_loop};
use crate::settings::shipped_settings;

/// Pool size hookd uses in production (`store::DEFAULT_POOL_SIZE`).
pub const POOL_SIZE: usize = store::DEFAULT_POOL_SIZE;

/// A private cluster for one benchmark run, under the target folder, with the
/// production settings of hookd's embedded cluster (fsync and synchronous commit on).
/// A watcher process stops it and deletes its folder when this process exits.
pub struct BenchCluster {
    pg: EmbeddedPostgres,
}

impl BenchCluster {
    pub fn start(name: &str) -> Self {
        let dir = crate::cluster::tmp_root().join(format!("bench-{name}-{}", std::process::id()));
        let pg = crate::cluster::throwaway(&dir, ClusterOptions { durable: true });
        BenchCluster { pg }
    }

    /// A `DATABASE_URL` for hookd's database on this cluster.
    pub fn connection_string(&self) -> String {
        self.pg.connection_string(embedded_pg::DATABASE)
    }

    /// The checkpoints the cluster's log says ran after `since`: when each started (in
    /// seconds after `since`) and why (`wal`: max_wal_size reached; `time`:
    /// checkpoint_timeout), when it completed and how long its write and sync phases
    /// took; and how often PostgreSQL complained they came too often.
    pub fn checkpoints_since(&self, since: chrono::DateTime<chrono::Utc>) -> String {
        let log = self.socket_dir().join("postgres.log");
        let Ok(text) = std::fs::read_to_string(&log) else {
            return format!("({} unreadable)", log.display());
        };
        let offset = |line: &str| -> Option<f64> {
            let mut words = line.split_whitespace();
            let stamp = format!("{} {}", words.next()?, words.next()?);
            if !matches!(words.next()?, "UTC" | "GMT") {
                return None;
            }
            let at = chrono::NaiveDateTime::parse_from_str(&stamp, "%Y-%m-%d %H:%M:%S%.3f")
                .ok()?
                .and_utc();
            let seconds = (at - since).as_seconds_f64();
            (seconds >= 0.0).then_some(seconds)
        };
        let field = |line: &str, name: &str| -> String {
            line.split_once(name)
                .and_then(|(_, rest)| rest.split([',', ';']).next())
                .unwrap_or("?")
                .trim()
                .to_string()
        };
        let mut entries: Vec<String> = Vec::new();
        let mut too_often = 0;
        for line in text.lines() {
            let Some(at) = offset(line) else { continue };
            if let Some((_, reason)) = line.split_once("checkpoint starting: ") {
                entries.push(format!("{at:.1} {}", reason.trim()));
            } else if line.contains("checkpoint complete: ") {
                let done = format!(
                    " → {at:.1} (write {}, sync {})",
                    field(line, "write="),
                    field(line, "sync=")
                );
                match entries.last_mut() {
                    Some(last) if !last.contains('→') => last.push_str(&done),
                    _ => entries.push(format!("?{done}")),
                }
            } else if line.contains("checkpoints are occurring too frequently") {
                too_often += 1;
            }
        }
        if entries.is_empty() {
            return "none".into();
        }
        format!(
            "{}; \"checkpoints are occurring too frequently\" logged {too_often} times",
            entries.join(", ")
        )
    }

    /// The folder holding the cluster's Unix socket (`-h` for libpq tools).
    pub fn socket_dir(&self) -> &Path {
        self.pg.dir()
    }

    pub fn config(&self, dbname: &str) -> tokio_postgres::Config {
        self.pg.pg_config(dbname)
    }

    pub fn database(&self) -> &'static str {
        embedded_pg::DATABASE
    }

    pub fn postgres(&self) -> &EmbeddedPostgres {
        &self.pg
    }

    pub fn user(&self) -> &'static str {
        embedded_pg::USER
    }

    /// A plain connection to hookd's database (for filling and checking).
    pub async fn connect(&self) -> tokio_postgres::Client {
        crate::cluster::connect(self.config(embedded_pg::DATABASE)).await
    }
}

/// hookd running in this process against the bench cluster: HTTP only (no
/// dispatcher, no purge loop), `http_workers` at its default as in production.
pub struct Hookd {
    pub app: Instance,
    pub addr: SocketAddr,
    running: Option<Running>,
    /// hookd's own Tokio runtime (threads `hookd-rt`), apart from the load
    /// generator's, as in `hookd serve`: its committers and loops never wait
    /// behind senders, and its CPU is counted as hookd's.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Hookd {
    /// Creates and migrates the database, then starts the server.
    pub async fn start(cluster: &BenchCluster) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hookd-rt")
            .enable_all()
            .build()
            .expect("hookd's runtime");
        let admin = cluster.config("postgres");
        let (database, config) = (cluster.database(), cluster.config(cluster.database()));
        // The pool is made on hookd's runtime, as `hookd serve` makes it: its
        // connections' tasks run where they are made.
        let (app, running) = runtime
            .spawn(async move {
                store::create_database_if_missing(&admin, database)
                    .await
                    .expect("create the benchmark database");
                let pool = store::pool(config, store::DbConnector::Plain, POOL_SIZE);
                store::migrate(&pool).await.expect("migrations");
                let app = Instance::new(
                    shipped_settings(),
                    pool,
                    store::DbConnector::Plain,
                    Registry::builtin(),
                );
                let running = app
                    .start(Parts {
                        dispatcher: false,
                        purge: false,
                        activity: true,
                    })
                    .expect("start hookd");
                (app, running)
            })
            .await
            .expect("hookd started");
        Hookd {
            app,
            addr: running.addr,
            running: Some(running),
            runtime: Some(runtime),
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs the real `hookd serve` binary (release) on the same cluster, loads it
    /// with `concurrency` senders for `duration`, and reports its peak resident
    /// memory (VmHWM, in KiB) with the load's report.
    pub async fn serve_peak_rss(
        &self,
        binary: &Path,
        cluster: &BenchCluster,
        concurrency: usize,
        duration: Duration,
    ) -> (u64, Report) {
        let serve = Serve::start(binary, cluster, &cluster.connection_string(), "serve").await;
        let sender = Arc::new(self.sender_to(&serve.base, "stripe"));
        let report = closed_loop(sender, concurrency, duration, MAX_REQUESTS).await;
        (serve.peak_rss(), report)
    }

    /// A load generator for one of hookd's configured sources, sending to `base`.
    pub fn sender_to(&self, base: &str, source: &str) -> Sender {
        let source = self
            .app
            .settings
            .now()
            .source(source)
            .unwrap_or_else(|| panic!("no source {source:?} in hookd.toml"))
            .clone();
        Sender::new(base, source).expect("sender")
    }

    /// A load generator for one of hookd's configured sources.
    pub fn sender(&self, source: &str) -> Sender {
        self.sender_to(&self.base_url(), source)
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
        self.app.pool.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Hookd {
    fn drop(&mut self) {
        // A runtime may not be dropped (blocking) inside the benchmark's own.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The real `hookd serve` binary with the shipped `hookd.toml` on a free port
/// (and, with `start_with`, more TOML after it), against `database_url`; killed
/// when dropped.
pub struct Serve {
    pub base: String,
    child: tokio::process::Child,
    config: std::path::PathBuf,
}

impl Serve {
    pub async fn start(
        binary: &Path,
        cluster: &BenchCluster,
        database_url: &str,
        name: &str,
    ) -> Serve {
        Serve::start_with(binary, cluster, database_url, name, "").await
    }

    /// As `start`, with `extra_toml` appended to the configuration (a
    /// `[gateway]` section, say).
    pub async fn start_with(
        binary: &Path,
        cluster: &BenchCluster,
        database_url: &str,
        name: &str,
        extra_toml: &str,
    ) -> Serve {
        let port = crate::pooler::free_port();
        let config = cluster.socket_dir().with_extension(format!("{name}.toml"));
        let text = format!(
            "{}\n{extra_toml}",
            crate::settings::shipped_toml_on_port(port)
        );
        std::fs::write(&config, text).expect("config");
        let child = tokio::process::Command::new(binary)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("DATABASE_URL", database_url)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .expect("hookd serve");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(http.get(format!("{base}/readyz")).send().await, Ok(r) if r.status() == 200)
        {
            assert!(
                Instant::now() < deadline,
                "hookd serve did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Serve {
            base,
            child,
            config,
        }
    }

    /// CPU seconds `hookd serve` has spent so far (all its threads).
    pub fn cpu_seconds(&self) -> f64 {
        let pid = self.child.id().expect("pid");
        proc_stat(&PathBuf::from(format!("/proc/{pid}/stat")))
            .map_or(0.0, |(_, fields)| own_and_children(&fields).0)
    }

    /// Peak resident memory so far (VmHWM, in KiB).
    pub fn peak_rss(&self) -> u64 {
        let pid = self.child.id().expect("pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// What every benchmark starts with: its cluster, hookd on it, a Stripe sender,
/// a database connection and the server's version.
pub struct Setup {
    pub cluster: BenchCluster,
    pub hookd: Hookd,
    pub sender: std::sync::Arc<Sender>,
    pub db: tokio_postgres::Client,
    pub server_version: String,
    /// When the benchmark started.
    pub started: chrono::DateTime<chrono::Utc>,
}

/// Starts what every benchmark needs and prints the header every benchmark
/// opens with: `hookd {title} benchmark`, the time, the machine and PostgreSQL.
pub async fn setup(name: &'static str, title: &str) -> Setup {
    let started = chrono::Utc::now();
    let cluster = tokio::task::spawn_blocking(move || BenchCluster::start(name))
        .await
        .expect("cluster thread");
    let hookd = Hookd::start(&cluster).await;
    let sender = std::sync::Arc::new(hookd.sender("stripe"));
    let db = cluster.connect().await;
    let server_version: String = db
        .query_one("SHOW server_version", &[])
        .await
        .expect("server version")
        .get(0);
    println!(
        "hookd {title} benchmark, {}",
        started.format("%Y-%m-%d %H:%M UTC")
    );
    println!(
        "machine: {}; PostgreSQL {server_version} (durable: fsync and synchronous_commit on)",
        machine()
    );
    Setup {
        cluster,
        hookd,
        sender,
        db,
        server_version,
        started,
    }
}

impl Setup {
    /// The cluster, hookd, the Stripe sender, the connection and the start time.
    pub fn into_parts(
        self,
    ) -> (
        BenchCluster,
        Hookd,
        Arc<Sender>,
        tokio_postgres::Client,
        chrono::DateTime<chrono::Utc>,
    ) {
        (self.cluster, self.hookd, self.sender, self.db, self.started)
    }
}

/// A benchmark's `main`: its runtime and setup (see `setup`), then `run`.
pub fn main<F, Fut>(name: &'static str, title: &'static str, run: F)
where
    F: FnOnce(Setup) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    runtime().block_on(async move { run(setup(name, title).await).await });
}

/// A multi-threaded runtime for a benchmark's `main`. Two worker threads: hookd's
/// HTTP workers and PostgreSQL share the same two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A short description of the machine for the printed header.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu})")
}

// ---------------------------------------------------------------------------
// CPU accounting

/// Linux reports CPU time in clock ticks of 1/100 s (USER_HZ) on every platform
/// hookd runs on.
const TICKS_PER_SECOND: f64 = 100.0;

/// Cumulative CPU seconds, by who spent them. On a shared machine the CPU a
/// delivery costs is steadier than the rate of deliveries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// hookd's HTTP worker threads (request handling, signature, JSON, the
    /// PostgreSQL client protocol of its pool).
    pub hookd: f64,
    /// The rest of this process: the load generator and the main runtime.
    pub rest: f64,
    /// Child processes that have been waited for (pgbench).
    pub children: f64,
    /// The benchmark cluster: postmaster, its backends and background workers.
    pub postgres: f64,
}

impl Cpu {
    /// Everything measured, together.
    pub fn total(&self) -> f64 {
        self.hookd + self.rest + self.children + self.postgres
    }
}

/// The cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `cpu_seconds` over `seconds` of the whole machine, in percent.
pub fn busy(cpu_seconds: f64, seconds: f64) -> f64 {
    100.0 * cpu_seconds / (seconds * cores() as f64).max(1e-9)
}

impl std::ops::Add for Cpu {
    type Output = Cpu;
    fn add(self, o: Cpu) -> Cpu {
        Cpu {
            hookd: self.hookd + o.hookd,
            rest: self.rest + o.rest,
            children: self.children + o.children,
            postgres: self.postgres + o.postgres,
        }
    }
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            hookd: self.hookd - o.hookd,
            rest: self.rest - o.rest,
            children: self.children - o.children,
            postgres: self.postgres - o.postgres,
        }
    }
}

/// `(comm, fields after the comm)` of a `/proc/.../stat` file.
fn proc_stat(path: &Path) -> Option<(String, Vec<u64>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // Fields from the 3rd (state) on; the state itself is not a number.
    let fields = text
        .get(close + 1..)?
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    Some((comm, fields))
}

/// utime + stime (own), cutime + cstime (waited-for children), in seconds. Indexes
/// are `man 5 proc` field numbers minus 4.
fn own_and_children(fields: &[u64]) -> (f64, f64) {
    let at = |i: usize| fields.get(i).copied().unwrap_or(0) as f64 / TICKS_PER_SECOND;
    (at(10) + at(11), at(12) + at(13))
}

impl BenchCluster {
    /// CPU seconds spent so far by this process (split by thread name) and by the
    /// cluster.
    pub fn cpu(&self) -> Cpu {
        let mut cpu = Cpu::default();
        if let Some((_, fields)) = proc_stat(Path::new("/proc/self/stat")) {
            let (own, children) = own_and_children(&fields);
            cpu.rest = own;
            cpu.children = children;
        }
        for task in std::fs::read_dir("/proc/self/task").into_iter().flatten() {
            let Ok(task) = task else { continue };
            if let Some((comm, fields)) = proc_stat(&task.path().join("stat"))
                && (comm.starts_with("actix") || comm.starts_with("hookd-rt"))
            {
                cpu.hookd += own_and_children(&fields).0;
            }
        }
        cpu.rest -= cpu.hookd;
        let pid_file = self.pg.dir().join("data/postmaster.pid");
        let postmaster: Option<u64> = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()));
        if let Some(postmaster) = postmaster {
            if let Some((_, fields)) = proc_stat(&PathBuf::from(format!("/proc/{postmaster}/stat")))
            {
                let (own, children) = own_and_children(&fields);
                cpu.postgres += own + children;
            }
            for entry in std::fs::read_dir("/proc").into_iter().flatten() {
                let Ok(entry) = entry else { continue };
                if let Some((_, fields)) = proc_stat(&entry.path().join("stat"))
                    && fields.first() == Some(&postmaster)
                {
                    cpu.postgres += own_and_children(&fields).0;
                }
            }
        }
        cpu
    }

    /// Names of this process's threads, for checking what `Cpu::hookd` counts.
    pub fn thread_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .filter_map(|t| proc_stat(&t.ok()?.path().join("stat")).map(|(comm, _)| comm))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

// ---------------------------------------------------------------------------
// Bulk fills

/// The secondary indexes of `tables` (name, definition), dropped: bulk loading as
/// PostgreSQL's manual advises. `rebuild_indexes` puts them back from their own
/// definitions, the migrations'.
pub async fn drop_secondary_indexes(
    db: &tokio_postgres::Client,
    tables: &[&str],
) -> Vec<(String, String)> {
    let tables: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
    let indexes: Vec<(String, String)> = db
        .query(
            "SELECT indexname, indexdef FROM pg_indexes \
             WHERE schemaname = 'public' AND tablename = ANY($1) \
               AND indexname NOT IN (SELECT conname FROM pg_constraint)",
            &[&tables],
        )
        .await
        .expect("list indexes")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (name, _) in &indexes {
        db.batch_execute(&format!(
            "DROP INDEX {}",
            hookd::store::quote_identifier(name)
        ))
        .await
        .expect("drop index for the fill");
    }
    indexes
}

/// Recreates the indexes `drop_secondary_indexes` dropped; says how long it took.
pub async fn rebuild_indexes(db: &tokio_postgres::Client, indexes: &[(String, String)]) -> String {
    let started = Instant::now();
    db.batch_execute("SET maintenance_work_mem = '256MB'")
        .await
        .expect("maintenance_work_mem");
    for (_, definition) in indexes {
        db.batch_execute(definition)
            .await
            .unwrap_or_else(|e| panic!("{definition}: {e}"));
    }
    format!(
        "{} indexes rebuilt {:.1} s",
        indexes.len(),
        started.elapsed().as_secs_f64()
    )
}

/// VACUUM ANALYZE and a checkpoint, so measurements start from a settled cluster;
/// says how long each took.
pub async fn settle(db: &tokio_postgres::Client) -> String {
    let mut stages = Vec::new();
    for command in ["VACUUM ANALYZE", "CHECKPOINT"] {
        let started = Instant::now();
        db.batch_execute(command)
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"));
        stages.push(format!(
            "{command} {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    stages.join(", ")
}

/// Runs `fill` over rows `1..=total` in `chunks` parallel ranges (one connection
/// each), for set-based fills that keep both cores busy.
pub async fn fill_in_chunks<F, Fut>(cluster: &BenchCluster, total: i64, chunks: i64, fill: F)
where
    F: Fn(tokio_postgres::Client, i64, i64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let chunk = total / chunks;
    let mut tasks = Vec::new();
    for i in 0..chunks {
        let first = i * chunk + 1;
        let last = if i + 1 == chunks {
            total
        } else {
            first + chunk - 1
        };
        tasks.push(tokio::spawn(fill(cluster.connect().await, first, last)));
    }
    for task in tasks {
        task.await.expect("fill task");
    }
}

/// Runs a fill statement whose rows are consistent by construction, without the
/// per-row foreign-key checks of the attempts (each one locks its event row).
pub async fn execute_fill(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) {
    client
        .batch_execute("SET session_replication_role = replica")
        .await
        .expect("session_replication_role");
    client
        .execute(sql, params)
        .await
        .unwrap_or_else(|e| panic!("fill: {e}"));
}
