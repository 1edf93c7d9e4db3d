//! The top of the desk: the last day's counts, what waits for a person, which
//! secrets still sign, and the charts.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Desk;
use crate::rollup::{day_of, hour_of};
use crate::store::history::{self, Stats};
use crate::store::{StoreError, events::EventStatus, rollups};

/// The dashboard's windows.
const DASHBOARD_WINDOW: chrono::Duration = chrono::Duration::hours(24);
const SECRETS_WINDOW: chrono::Duration = chrono::Duration::days(7);
/// The charts: hours of the last day, days of the last week (the current ones
/// included, last).
const SERIES_HOURS: i64 = 24;
const SERIES_DAYS: i64 = 7;

/// The top of the page.
#[derive(Debug, Clone, Serialize)]
pub struct Dashboard {
    /// Events received in the last 24 hours, by status, kind and source.
    pub last_24h: history::Stats,
    /// All events waiting for a person, and those waiting for a retry.
    pub dead: i64,
    pub failed: i64,
    /// Failed events waiting for a retry (the same as `failed`).
    pub retry_backlog: i64,
    /// Per source, which secret positions signed events in the last 7 days.
    pub secrets: Vec<SourceSecrets>,
    /// Events recovered from the providers' APIs in the last 7 days (never
    /// delivered: `hookd reconcile`).
    pub recovered_7_days: i64,
    /// The charts' counts.
    pub series: Series,
}

/// Events per hour of the last 24 (by where they stand now) with the signatures
/// refused in each, and failed and dead events per day of the last 7, oldest
/// first; the current hour and day last.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Series {
    pub hours: Vec<HourCounts>,
    pub days: Vec<DayCounts>,
}

/// The events received in one UTC hour, by their status now.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HourCounts {
    pub start: DateTime<Utc>,
    pub processed: i64,
    pub ignored: i64,
    pub failed: i64,
    pub dead: i64,
    pub rejected_signatures: i64,
}

/// The events received in one UTC day that are failed or dead now.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DayCounts {
    pub start: DateTime<Utc>,
    pub failed: i64,
    pub dead: i64,
}

impl Series {
    /// The series ending in `now`'s hour and day, from per-hour counts.
    fn from_hourly(
        now: DateTime<Utc>,
        by_status: &[(DateTime<Utc>, String, i64)],
        rejected: &[(DateTime<Utc>, i64)],
    ) -> Series {
        let hour = chrono::Duration::hours(1);
        let first_hour = hour_of(now) - hour * i32::try_from(SERIES_HOURS - 1).unwrap_or(0);
        let first_day = day_of(now) - chrono::Duration::days(SERIES_DAYS - 1);
        let mut hours: Vec<HourCounts> = (0..SERIES_HOURS)
            .map(|i| HourCounts {
                start: first_hour + hour * i32::try_from(i).unwrap_or(0),
                ..HourCounts::default()
            })
            .collect();
        let mut days: Vec<DayCounts> = (0..SERIES_DAYS)
            .map(|i| DayCounts {
                start: first_day + chrono::Duration::days(i),
                ..DayCounts::default()
            })
            .collect();
        let slot = |start: DateTime<Utc>, first: DateTime<Utc>, width: chrono::Duration| {
            let i = (start - first)
                .num_seconds()
                .div_euclid(width.num_seconds());
            usize::try_from(i).ok()
        };
        for (at, status, n) in by_status {
            if let Some(h) = slot(*at, first_hour, hour).and_then(|i| hours.get_mut(i)) {
                match status.as_str() {
                    "processed" => h.processed += n,
                    "ignored" => h.ignored += n,
                    "failed" => h.failed += n,
                    "dead" => h.dead += n,
                    _ => {}
                }
            }
            if let Some(d) =
                slot(*at, first_day, chrono::Duration::days(1)).and_then(|i| days.get_mut(i))
            {
                match status.as_str() {
                    "failed" => d.failed += n,
                    "dead" => d.dead += n,
                    _ => {}
                }
            }
        }
        for (at, n) in rejected {
            if let Some(h) = slot(*at, first_hour, hour).and_then(|i| hours.get_mut(i)) {
                h.rejected_signatures += n;
            }
        }
        Series { hours, days }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceSecrets {
    pub source: String,
    pub positions: Vec<SecretUse>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SecretUse {
    /// 1-based, as `signed_with` counts.
    pub position: i32,
    pub last_used: Option<DateTime<Utc>>,
    /// Used in the last 7 days; a position unused that long can be retired.
    pub used_in_7_days: bool,
}

impl Desk {
    /// Events received from the start of `since`'s hour on, by status, kind and
    /// source (the rollups count whole hours).
    pub async fn stats(&self, since: DateTime<Utc>) -> Result<Stats, StoreError> {
        self.rollups.catch_up().await?;
        rollups::stats(&self.client().await?, hour_of(since)).await
    }

    /// The charts' counts, up to `now`.
    pub async fn series(&self, now: DateTime<Utc>) -> Result<Series, StoreError> {
        self.rollups.catch_up().await?;
        self.series_with(&self.client().await?, now).await
    }

    async fn series_with(
        &self,
        client: &deadpool_postgres::Object,
        now: DateTime<Utc>,
    ) -> Result<Series, StoreError> {
        // The week's first day starts before the day's first hour.
        let since = day_of(now) - chrono::Duration::days(SERIES_DAYS - 1);
        let by_status = rollups::hourly_by_status(client, since).await?;
        let rejected = rollups::hourly_rejections(client, since).await?;
        Ok(Series::from_hourly(now, &by_status, &rejected))
    }

    pub async fn dashboard(&self, now: DateTime<Utc>) -> Result<Dashboard, StoreError> {
        self.rollups.catch_up().await?;
        let client = self.client().await?;
        let last_24h = rollups::stats(&client, hour_of(now - DASHBOARD_WINDOW)).await?;
        let series = self.series_with(&client, now).await?;
        let counts = rollups::totals(
            &client,
            &[EventStatus::Dead.as_str(), EventStatus::Failed.as_str()],
        )
        .await?;
        let count = |s: EventStatus| counts.get(s.as_str()).copied().unwrap_or(0);
        let mut secrets = Vec::new();
        for source in &self.settings.now().sources {
            let mut positions = Vec::new();
            for position in 1..=i32::try_from(source.secrets.len()).unwrap_or(i32::MAX) {
                let last_used = history::secret_last_used(&client, &source.name, position).await?;
                positions.push(SecretUse {
                    position,
                    last_used,
                    used_in_7_days: last_used.is_some_and(|t| t >= now - SECRETS_WINDOW),
                });
            }
            secrets.push(SourceSecrets {
                source: source.name.to_string(),
                positions,
            });
        }
        let recovered_7_days =
            crate::store::reconcile::recovered_since(&client, now - SECRETS_WINDOW).await?;
        Ok(Dashboard {
            recovered_7_days,
            last_24h,
            dead: count(EventStatus::Dead),
            failed: count(EventStatus::Failed),
            retry_backlog: count(EventStatus::Failed),
            secrets,
            series,
        })
    }
}
