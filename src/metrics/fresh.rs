//! A value that costs a database query to read, shared for a while: callers within
//! `max_age` of the last read get that read, and when it is stale one caller reads
//! again while the others wait for its result. However many ask at once, it costs
//! one read per `max_age` at most.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Fresh<T> {
    last: tokio::sync::Mutex<Option<(Instant, T)>>,
    reads: AtomicU64,
}

impl<T: Clone> Fresh<T> {
    /// The last value read, or — when it is older than `max_age` — `read`'s.
    pub async fn get<F>(&self, max_age: Duration, read: impl FnOnce() -> F) -> T
    where
        F: Future<Output = T>,
    {
        // Held across the read: callers arriving meanwhile wait for its result.
        let mut last = self.last.lock().await;
        if let Some((at, value)) = last.as_ref()
            && at.elapsed() < max_age
        {
            return value.clone();
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let value = read().await;
        *last = Some((Instant::now(), value.clone()));
        value
    }

    /// How many times it was read (what it cost the database).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_callers_at_once_share_one_read() {
        let fresh = Arc::new(Fresh::<u64>::default());
        let callers = (0..500).map(|_| {
            let fresh = fresh.clone();
            tokio::spawn(async move {
                fresh
                    .get(Duration::from_secs(60), || async {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        7
                    })
                    .await
            })
        });
        for value in futures_util::future::join_all(callers).await {
            assert_eq!(value.expect("caller"), 7);
        }
        assert_eq!(fresh.reads(), 1);
        // Stale: read again.
        assert_eq!(fresh.get(Duration::ZERO, || async { 8 }).await, 8);
        assert_eq!(fresh.reads(), 2);
    }
}
