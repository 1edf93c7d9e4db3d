//! Keeps the per-hour rollups current: folds the changes the database noted with
//! each event, and adds the signatures this instance refused (which leave no
//! event behind; its metrics count them). A background pass does both every few seconds; every read of
//! the rollups does it first, so what the desk shows is never behind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;

use crate::metrics::Metrics;
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

#[derive(Clone)]
pub struct Rollups {
    pool: Pool,
    /// Where refused signatures are counted as they happen (the
    /// `hookd_signature_failures_total` counters): a flood of bad signatures
    /// costs an atomic add each, no lock and no write.
    metrics: Arc<Metrics>,
    /// Each source's count already added to the rollups; held while adding, so
    /// two passes at once never add the same refusals twice.
    added: Arc<tokio::sync::Mutex<HashMap<Box<str>, u64>>>,
}

impl Rollups {
    pub fn new(pool: Pool, metrics: Arc<Metrics>) -> Self {
        Rollups {
            pool,
            metrics,
            added: Arc::default(),
        }
    }

    /// Adds the signatures refused since the last pass (to the hour of this
    /// one: a pass runs every few seconds) and folds the noted changes. Counts
    /// that could not be written are added by the next pass.
    pub async fn catch_up(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let mut added = self.added.lock().await;
        let now = hour_of(Utc::now());
        let totals = self.metrics.signature_failures_by_source();
        let counts: Vec<(DateTime<Utc>, String, i64)> = totals
            .iter()
            // Unconfigured names are counted under `unknown`: no source of the charts.
            .filter(|(source, _)| &***source != "unknown")
            .filter_map(|(source, &total)| {
                let new = total.saturating_sub(added.get(source).copied().unwrap_or(0));
                (new > 0).then(|| {
                    (
                        now,
                        source.to_string(),
                        i64::try_from(new).unwrap_or(i64::MAX),
                    )
                })
            })
            .collect();
        if !counts.is_empty() {
            rollups::add_rejections(&client, &counts).await?;
            *added = totals;
        }
        drop(added);
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
