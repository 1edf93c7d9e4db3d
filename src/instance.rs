//! One instance's parts, built once and shared: the HTTP layer serves them, `app`
//! starts them, the terminal commands use them (no part of it knows HTTP).

use std::sync::Arc;

use deadpool_postgres::Pool;

use crate::config::{LiveSettings, Settings};
use crate::desk::Desk;
use crate::dispatch::Dispatcher;
use crate::handlers::Registry;
use crate::ingest::Ingester;
use crate::metrics::Metrics;
use crate::outbound::Certificates;
use crate::purge::Purger;
use crate::rollup::Rollups;
use crate::runner::Runner;
use crate::silence::SourceActivity;
use crate::store;

/// Everything one instance shares between its parts.
#[derive(Clone)]
pub struct Instance {
    /// The configuration in force (a reload replaces it).
    pub settings: LiveSettings,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub dispatcher: Dispatcher,
    pub ingester: Ingester,
    pub purger: Purger,
    pub desk: Desk,
    /// The per-hour counts the desk reads.
    pub rollups: Rollups,
    /// The sources this instance accepted deliveries for, noted for silence.
    pub activity: SourceActivity,
    /// The application's own migrations (readiness checks them too).
    pub migrations: &'static [crate::store::Migration],
    /// The signing certificates deliveries name, fetched for them (PayPal's).
    pub certificates: Arc<Certificates>,
    /// The gateway's key writes, committed in batches.
    pub key_writes: crate::gateway::KeyWrites,
    /// Room for the API fetches unsigned deliveries ask for at receipt
    /// (Mollie's), a permit each (see `intake::RECEIPT_FETCHES`).
    pub receipt_fetches: Arc<tokio::sync::Semaphore>,
}

impl Instance {
    /// What takes a delivery in.
    pub fn intake(&self) -> crate::intake::Intake<'_> {
        crate::intake::Intake {
            pool: &self.pool,
            certificates: &self.certificates,
            ingester: &self.ingester,
            receipt_fetches: &self.receipt_fetches,
        }
    }

    /// An instance on `pool`, whose connections `connector` made.
    pub fn new(
        settings: Settings,
        pool: Pool,
        connector: store::DbConnector,
        registry: Registry,
    ) -> Self {
        let metrics = Arc::new(Metrics::new(&settings));
        let settings = LiveSettings::new(settings);
        // One runner of handlers for receiving and for retries.
        let runner = Runner::new(
            connector,
            Arc::new(registry),
            settings.clone(),
            metrics.clone(),
        );
        let dispatcher = Dispatcher::new(pool.clone(), runner.clone());
        let purger = Purger::new(pool.clone(), settings.clone(), metrics.clone());
        let ingester = Ingester::new(pool.clone(), runner);
        let key_writes = crate::gateway::KeyWrites::new(pool.clone());
        let rollups = Rollups::new(pool.clone(), metrics.clone());
        let desk = Desk::new(
            pool.clone(),
            dispatcher.clone(),
            settings.clone(),
            rollups.clone(),
        );
        Instance {
            settings,
            pool,
            metrics,
            dispatcher,
            ingester,
            purger,
            desk,
            rollups,
            activity: SourceActivity::default(),
            migrations: &[],
            certificates: Arc::new(Certificates::new()),
            key_writes,
            receipt_fetches: Arc::new(tokio::sync::Semaphore::new(crate::intake::RECEIPT_FETCHES)),
        }
    }

    /// Readiness also waits for these migrations of the application's.
    pub fn with_migrations(mut self, migrations: &'static [crate::store::Migration]) -> Self {
        self.migrations = migrations;
        self
    }

    /// Fetches signing certificates with these (a stand-in for PayPal, in tests).
    pub fn with_certificates(mut self, certificates: Certificates) -> Self {
        self.certificates = Arc::new(certificates);
        self
    }
}
