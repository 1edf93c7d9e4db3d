//! What PostgreSQL's sessions wait for during a run: `pg_stat_activity` sampled
//! every few milliseconds from a session of its own, each client backend counted
//! by its wait event (`IO:WALSync`, `Lock:transactionid`, …), by `CPU` when it
//! runs with none, and by `in transaction, waiting for its client` between a
//! transaction's statements — the share that says the database waits on hookd,
//! not hookd on it. Idle sessions (a pool's spare ones) are counted apart.
//! Each look is kept too (`Look`), with the session in its statement the
//! longest and the background processes at work, for `stall::trace`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the sessions are looked at.
const EVERY: Duration = Duration::from_millis(5);

/// One sample per backend and look: whether it is one of the database's
/// client sessions (`false`, not NULL, for one still connecting), its kind,
/// its state and wait event as a word (a background process in its main loop
/// or in a throttling sleep — a checkpoint's write delay, a vacuum's cost
/// delay — is `idle`), for how long its statement (or, between statements,
/// its transaction's wait) has lasted, and what an autovacuum worker works
/// on. Other databases' sessions are left out.
const SAMPLE: &str = "SELECT coalesce(backend_type = 'client backend' AND datname = $1, false),
       backend_type,
       CASE
         WHEN backend_type <> 'client backend' AND wait_event_type IN ('Activity', 'Timeout')
           THEN 'idle'
         WHEN state = 'active' AND wait_event IS NULL THEN 'CPU'
         WHEN state = 'active' THEN wait_event_type || ':' || wait_event
         WHEN state LIKE 'idle in transaction%' THEN 'in transaction, waiting for its client'
         WHEN state IS NULL AND wait_event IS NULL THEN 'CPU'
         WHEN state IS NULL THEN wait_event_type || ':' || wait_event
         ELSE 'idle'
       END,
       (extract(epoch FROM clock_timestamp()
          - CASE WHEN state = 'active' THEN query_start ELSE state_change END) * 1e6)::float8,
       CASE WHEN backend_type = 'autovacuum worker' THEN nullif(left(query, 60), '') END
  FROM pg_stat_activity
 WHERE pid <> pg_backend_pid() AND (backend_type <> 'client backend' OR datname = $1)";

/// A sampler running until [`WaitSampler::finish`].
pub struct WaitSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Waits>,
    started: Instant,
    started_wall: std::time::SystemTime,
}

/// One look at the cluster's backends.
#[derive(Debug, Clone)]
pub struct Look {
    /// When, from the sampler's start.
    pub at: Duration,
    /// The database's client sessions not idle.
    pub busy: u32,
    /// The client session in its statement (or idle in its transaction) the
    /// longest: for how long, and its word.
    pub longest: Option<(Duration, String)>,
    /// Background processes at work, each with its word.
    pub background: Vec<Background>,
}

/// A background process at work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Background {
    /// Its kind, and for an autovacuum worker what it works on:
    /// `autovacuum worker (autovacuum: VACUUM public.webhook_events)`.
    pub process: String,
    /// `CPU` or its wait event.
    pub word: String,
}

/// Counts per wait, over every sample, and per second of the run (to say what
/// the sessions did in a second whose latencies stand out).
#[derive(Debug, Default, Clone)]
pub struct Waits {
    pub counts: BTreeMap<String, u64>,
    pub looks: u64,
    pub seconds: Vec<Waits>,
    /// Every look, in order (a run's own: `add` leaves them out).
    pub timeline: Vec<Look>,
}

impl WaitSampler {
    /// Starts sampling the sessions of database `dbname` over `client`.
    pub fn start(client: tokio_postgres::Client, dbname: &str) -> WaitSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dbname) = (stop.clone(), dbname.to_string());
        let (started, started_wall) = (Instant::now(), std::time::SystemTime::now());
        let task = tokio::spawn(async move {
            let mut waits = Waits::default();
            let statement = client
                .prepare(SAMPLE)
                .await
                .expect("the sampling statement");
            while !flag.load(Ordering::Relaxed) {
                // Stamped as it is asked: an answer that comes back late (a
                // starved sampler) still lands in the moment it describes.
                let at = started.elapsed();
                if let Ok(rows) = client.query(&statement, &[&dbname]).await {
                    let second = at.as_secs() as usize;
                    if waits.seconds.len() <= second {
                        waits.seconds.resize_with(second + 1, Waits::default);
                    }
                    let mut look = Look {
                        at,
                        busy: 0,
                        longest: None,
                        background: Vec::new(),
                    };
                    let mut words = Vec::new();
                    for row in &rows {
                        let word: String = row.get(2);
                        if !row.get::<_, bool>(0) {
                            if word != "idle" {
                                let kind: String = row.get(1);
                                let what: Option<String> = row.get(4);
                                look.background.push(Background {
                                    process: match what {
                                        Some(what) => format!("{kind} ({what})"),
                                        None => kind,
                                    },
                                    word,
                                });
                            }
                            continue;
                        }
                        if word != "idle" {
                            look.busy += 1;
                            let lasted = row.get::<_, Option<f64>>(3).unwrap_or(0.0).max(0.0);
                            let lasted = Duration::from_micros(lasted as u64);
                            if look.longest.as_ref().is_none_or(|(l, _)| lasted > *l) {
                                look.longest = Some((lasted, word.clone()));
                            }
                        }
                        words.push(word);
                    }
                    waits.seconds[second].count(&words);
                    waits.count(&words);
                    waits.timeline.push(look);
                }
                tokio::time::sleep(EVERY).await;
            }
            waits
        });
        WaitSampler {
            stop,
            task,
            started,
            started_wall,
        }
    }

    /// When sampling began (looks are counted from it).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The same moment on the wall clock (pgbench stamps its transactions so).
    pub fn started_wall(&self) -> std::time::SystemTime {
        self.started_wall
    }

    pub async fn finish(self) -> Waits {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the sampler")
    }
}

impl Waits {
    /// One look at the sessions, a word each.
    fn count(&mut self, words: &[String]) {
        self.looks += 1;
        for word in words {
            *self.counts.entry(word.clone()).or_default() += 1;
        }
    }

    /// Adds another run's samples (to the totals: its seconds are its own).
    pub fn add(&mut self, other: Waits) {
        self.looks += other.looks;
        for (wait, n) in other.counts {
            *self.counts.entry(wait).or_default() += n;
        }
    }

    /// Sessions busy and idle on average, then the busy ones' waits by share,
    /// largest first, those under 1 % left out:
    /// `4.1 busy, 11.9 idle: IO:WALSync 41%, CPU 22%, …`.
    pub fn line(&self) -> String {
        let looks = self.looks.max(1) as f64;
        let idle = self.counts.get("idle").copied().unwrap_or(0);
        let mut busy: Vec<(&String, u64)> = self
            .counts
            .iter()
            .filter(|(k, _)| k.as_str() != "idle")
            .map(|(k, v)| (k, *v))
            .collect();
        let total: u64 = busy.iter().map(|(_, n)| n).sum();
        busy.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let listed: Vec<String> = busy
            .into_iter()
            .filter(|(_, n)| *n * 100 >= total)
            .map(|(k, n)| format!("{k} {:.0}%", n as f64 * 100.0 / total.max(1) as f64))
            .collect();
        format!(
            "{:.1} busy, {:.1} idle sessions on average: {}",
            total as f64 / looks,
            idle as f64 / looks,
            listed.join(", ")
        )
    }
}
