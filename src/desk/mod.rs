//! The support desk: what the admin API, the page and the terminal show and do —
//! events, payments, the dashboard, retries one at a time or in bulk, the audit
//! trail, and proof of an event's origin — in one place, so the three cannot
//! disagree. Viewing a payload, revealing its personal data, retrying and
//! forgetting a customer are recorded in the audit trail under the name of who
//! did it. Payloads are shown with their source's `mask` applied unless an
//! operator reveals them.

use std::sync::Arc;

use deadpool_postgres::Pool;

use crate::config::LiveSettings;
use crate::dispatch::Dispatcher;
use crate::filter::FilterError;
use crate::rollup::Rollups;
use crate::store::StoreError;

/// The audit trail's pages.
mod audit;
/// The dashboard and its charts.
mod dashboard;
/// One event, and the history's pages.
mod events;
/// Forgetting a customer.
mod forgetting;
/// The API's `Idempotency-Key` records.
mod idempotency;
/// Masking what viewers see of payloads' personal data.
mod masking;
/// Whether a stored event's signature still proves its origin.
mod origin;
/// A payment and a customer's payments.
mod payments;
/// Retries, one at a time or in bulk.
mod retry;

pub use audit::AuditPage;
pub use dashboard::{Dashboard, DayCounts, HourCounts, SecretUse, Series, SourceSecrets};
pub use events::{EventPage, EventView, ProviderTime};
pub use forgetting::{Forgotten, log_forget};
pub use idempotency::{Claim, RENEW_EVERY};
pub use origin::{Covered, Origin, Verdict};
pub use payments::{PaymentPage, PaymentView};
pub use retry::{BULK_RETRY_LIMIT, BulkOutcome, log_bulk_retry, log_retry};

#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Filter(#[from] FilterError),
    #[error(
        "{matched} events match; a bulk retry takes at most {BULK_RETRY_LIMIT}: narrow the filter"
    )]
    TooMany { matched: usize },
    #[error("shutting down")]
    ShuttingDown,
    #[error("no source named {0:?} is configured")]
    UnknownSource(String),
}

/// The support desk of one instance.
#[derive(Clone)]
pub struct Desk {
    pool: Pool,
    dispatcher: Dispatcher,
    settings: LiveSettings,
    /// Retries running at once, wherever they come from: a handler run holds a
    /// pool connection, and deliveries need most of them.
    retry_permits: Arc<tokio::sync::Semaphore>,
    rollups: Rollups,
}

impl Desk {
    pub fn new(
        pool: Pool,
        dispatcher: Dispatcher,
        settings: LiveSettings,
        rollups: Rollups,
    ) -> Self {
        // A quarter of the pool: the rest is the deliveries'.
        let permits = (pool.status().max_size / 4).max(1);
        Desk {
            pool,
            dispatcher,
            settings,
            retry_permits: Arc::new(tokio::sync::Semaphore::new(permits)),
            rollups,
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Waits its turn rather than taking the connections deliveries need.
    async fn retry_permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, DeskError> {
        self.retry_permits
            .acquire()
            .await
            .map_err(|_| DeskError::ShuttingDown)
    }
}

/// PostgreSQL text cannot hold NUL, so no stored source, payment or customer
/// id has one: a key with one names nothing (and must not reach a query, which
/// would fail).
fn storable(key: &str) -> bool {
    !key.contains('\0')
}
