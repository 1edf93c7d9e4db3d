//! Sources gone silent. A source with `expect_events_within` is expected to have
//! a delivery accepted at least that often; longer without one makes
//! `hookd_source_silent{source}` 1 — the one gap signal that works for providers
//! with no list of past events. Each instance notes the sources it accepted a
//! delivery for (in memory: no write on a delivery's path) and adds them to the
//! shared `source_activity` every few seconds, so silence is judged across all
//! instances.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;

use crate::config::Settings;
use crate::shutdown::Shutdown;
use crate::store::{self, StoreError, activity};

/// How often an instance adds what it saw to `source_activity`.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// The sources this instance accepted deliveries for since its last flush.
#[derive(Clone, Default)]
pub struct SourceActivity {
    seen: Arc<Mutex<HashMap<String, DateTime<Utc>>>>,
}

impl SourceActivity {
    /// A delivery for `source` was accepted now.
    pub fn accepted(&self, source: &str) {
        let now = Utc::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match seen.get_mut(source) {
            Some(at) => *at = now,
            None => {
                seen.insert(source.to_string(), now);
            }
        }
    }

    /// Adds what was seen since the last flush to `source_activity`, and
    /// starts watching the sources of `settings` that expect events.
    pub async fn flush(&self, pool: &Pool, settings: &Settings) -> Result<(), StoreError> {
        let seen: Vec<(String, DateTime<Utc>)> = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.drain().collect()
        };
        let watched: Vec<&str> = settings
            .sources
            .iter()
            .filter(|s| s.expect_events_within.is_some())
            .map(|s| s.name.as_str())
            .collect();
        let client = pool.get().await?;
        let written = async {
            let pairs: Vec<(&str, DateTime<Utc>)> =
                seen.iter().map(|(s, at)| (s.as_str(), *at)).collect();
            activity::record(&client, &pairs).await?;
            activity::watch(&client, &watched).await
        }
        .await;
        if written.is_err() {
            // Not lost: noted again for the next flush.
            let mut again = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            for (source, at) in seen {
                let kept = again.entry(source).or_insert(at);
                *kept = (*kept).max(at);
            }
        }
        store::give_back(client, written)
    }

    /// Flushes every few seconds until shutdown, and once more at the end.
    pub async fn run_until_stopped(
        self,
        pool: Pool,
        settings: crate::config::LiveSettings,
        mut shutdown: Shutdown,
    ) {
        loop {
            let awake = shutdown.sleep(FLUSH_EVERY).await;
            if let Err(error) = self.flush(&pool, &settings.now()).await {
                log::warn!("noting which sources had deliveries: {error}");
            }
            if !awake {
                break;
            }
        }
    }
}

/// `hookd_source_silent`: for each source of `settings` that expects events,
/// 1 when its last accepted delivery (across instances) is older than it
/// expects, else 0; from `silences` (source, seconds since).
pub fn silent_sources(settings: &Settings, silences: &[(String, f64)]) -> Vec<(String, f64)> {
    settings
        .sources
        .iter()
        .filter_map(|source| {
            let within = source.expect_events_within?.as_secs_f64();
            let since = silences
                .iter()
                .find(|(name, _)| *name == source.name)
                .map_or(0.0, |(_, since)| *since);
            Some((
                source.name.to_string(),
                if since > within { 1.0 } else { 0.0 },
            ))
        })
        .collect()
}
