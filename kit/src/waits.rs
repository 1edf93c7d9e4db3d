//! What PostgreSQL's sessions wait for during a run: `pg_stat_activity` sampled
//! every few milliseconds from a session of its own, each client backend counted
//! by its wait event (`IO:WALSync`, `Lock:transactionid`, …), by `CPU` when it
//! runs with none, and by `in transaction, waiting for its client` between a
//! transaction's statements — the share that says the database waits on hookd,
//! not hookd on it. Idle sessions (a pool's spare ones) are counted apart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the sessions are looked at.
const EVERY: Duration = Duration::from_millis(5);

/// One sample per backend and look: its state and wait event, as a word.
const SAMPLE: &str = "SELECT CASE
         WHEN state = 'active' AND wait_event IS NULL THEN 'CPU'
         WHEN state = 'active' THEN wait_event_type || ':' || wait_event
         WHEN state LIKE 'idle in transaction%' THEN 'in transaction, waiting for its client'
         ELSE 'idle'
       END
  FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = $1";

/// A sampler running until [`WaitSampler::finish`].
pub struct WaitSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Waits>,
}

/// Counts per wait, over every sample, and per second of the run (to say what
/// the sessions did in a second whose latencies stand out).
#[derive(Debug, Default, Clone)]
pub struct Waits {
    pub counts: BTreeMap<String, u64>,
    pub looks: u64,
    pub seconds: Vec<Waits>,
}

impl WaitSampler {
    /// Starts sampling the sessions of database `dbname` over `client`.
    pub fn start(client: tokio_postgres::Client, dbname: &str) -> WaitSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dbname) = (stop.clone(), dbname.to_string());
        let task = tokio::spawn(async move {
            let mut waits = Waits::default();
            let started = Instant::now();
            let statement = client
                .prepare(SAMPLE)
                .await
                .expect("the sampling statement");
            while !flag.load(Ordering::Relaxed) {
                if let Ok(rows) = client.query(&statement, &[&dbname]).await {
                    let second = started.elapsed().as_secs() as usize;
                    if waits.seconds.len() <= second {
                        waits.seconds.resize_with(second + 1, Waits::default);
                    }
                    let words: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
                    waits.seconds[second].count(&words);
                    waits.count(&words);
                }
                tokio::time::sleep(EVERY).await;
            }
            waits
        });
        WaitSampler { stop, task }
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
