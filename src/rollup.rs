//! Keeps the per-hour rollups current: folds the changes the database noted with
//! each event, and adds the signatures this instance refused (which leave no
//! event behind). A background pass does both every few seconds; every read of
//! the rollups does it first, so what the desk shows is never behind.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;

use crate::shutdown::Shutdown;
use crate::store::{StoreError, rollups};

/// How often the background pass folds.
pub const FOLD_EVERY: Duration = Duration::from_secs(5);
/// Refused-signature counts are kept this long (the longest chart is 7 days).
const REJECTIONS_KEPT: chrono::Duration = chrono::Duration::days(8);

/// The start of the UTC hour `at` falls in.
pub fn hour_of(at: DateTime<Utc>) -> DateTime<Utc> {
    start_of(at, 3600)
}

/// The start of the UTC day `at` falls in.
pub fn day_of(at: DateTime<Utc>) -> DateTime<Utc> {
    start_of(at, 86_400)
}

/// The start of the UTC span of `width` seconds `at` falls in.
fn start_of(at: DateTime<Utc>, width: i64) -> DateTime<Utc> {
    let seconds = at.timestamp();
    DateTime::from_timestamp(seconds - seconds.rem_euclid(width), 0).unwrap_or(at)
}

/// Refused signatures counted in memory, by UTC hour and source.
type Refusals = BTreeMap<(DateTime<Utc>, String), i64>;

#[derive(Clone)]
pub struct Rollups {
    pool: Pool,
    /// Refused signatures not yet added, by hour and source: a flood of bad
    /// signatures costs memory of one counter per source and hour, not writes.
    rejected: Arc<Mutex<Refusals>>,
}

impl Rollups {
    pub fn new(pool: Pool) -> Self {
        Rollups {
            pool,
            rejected: Arc::default(),
        }
    }

    /// Counts one signature refused just now for `source`.
    pub fn signature_refused(&self, source: &str) {
        let mut rejected = self.rejected.lock().unwrap_or_else(PoisonError::into_inner);
        *rejected
            .entry((hour_of(Utc::now()), source.to_string()))
            .or_default() += 1;
    }

    /// Adds the refused signatures counted so far and folds the noted changes.
    /// Counts that could not be written are kept for the next try.
    pub async fn catch_up(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let pending =
            std::mem::take(&mut *self.rejected.lock().unwrap_or_else(PoisonError::into_inner));
        if !pending.is_empty() {
            let counts: Vec<_> = pending
                .iter()
                .map(|((hour, source), n)| (*hour, source.clone(), *n))
                .collect();
            if let Err(error) = rollups::add_rejections(&client, &counts).await {
                let mut rejected = self.rejected.lock().unwrap_or_else(PoisonError::into_inner);
                for (key, n) in pending {
                    *rejected.entry(key).or_default() += n;
                }
                return Err(error);
            }
        }
        rollups::fold(&client).await
    }

    /// Counts every event again (after a bulk load with triggers off).
    pub async fn recount(&self) -> Result<(), StoreError> {
        rollups::recount(&mut self.pool.get().await?).await
    }

    /// Catches up every `FOLD_EVERY` until shutdown, and once more then.
    pub async fn run_until_stopped(self, mut shutdown: Shutdown) {
        loop {
            let result = async {
                self.catch_up().await?;
                let client = self.pool.get().await?;
                rollups::prune(&client, Utc::now() - REJECTIONS_KEPT).await
            }
            .await;
            if let Err(error) = result {
                log::warn!("rollups: {error}; next pass in {FOLD_EVERY:?}");
            }
            if !shutdown.sleep(FOLD_EVERY).await {
                if let Err(error) = self.catch_up().await {
                    log::warn!("rollups: refused signatures not counted at stop: {error}");
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{day_of, hour_of};
    use chrono::{DateTime, Utc};

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("a time")
    }

    #[test]
    fn hours_and_days_start_on_utc_boundaries() {
        type Start = fn(DateTime<Utc>) -> DateTime<Utc>;
        let cases: [(Start, &str, &str); 4] = [
            (hour_of, "2026-12-02T04:59:59.9Z", "2026-12-02T04:00:00Z"),
            (hour_of, "2026-12-02T05:00:00Z", "2026-12-02T05:00:00Z"),
            (day_of, "2026-12-02T23:59:59Z", "2026-12-02T00:00:00Z"),
            (day_of, "1969-12-31T12:00:00Z", "1969-12-31T00:00:00Z"),
        ];
        for (start, time, expected) in cases {
            assert_eq!(start(at(time)), at(expected), "{time}");
        }
    }
}
