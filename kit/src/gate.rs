//! A handler that holds each retry (every run after the first) until the test
//! lets it through — at a gate the test opens, or after a delay — and counts
//! the retries that arrived. A test can so keep a request in flight exactly as
//! long as it needs, without racing a sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hookd::config::Settings;
use hookd::handlers::{Event, Handler, HandlerError, Registry};
use tokio::sync::Semaphore;

use crate::app::{Spawn, TestApp, TestDb, spawn};

/// The event type whose events the gate handles.
pub const GATED_TYPE: &str = "test.gate";
const GATED_KIND: &str = "test_gate";

#[derive(Clone)]
pub struct RetryGate {
    open: Arc<Semaphore>,
    arrived: Arc<AtomicUsize>,
    /// When set, each retry goes through after this long on its own.
    delay: Option<Duration>,
}

impl RetryGate {
    /// Retries wait until `open` lets them through.
    pub fn closed() -> RetryGate {
        RetryGate {
            open: Arc::new(Semaphore::new(0)),
            arrived: Arc::new(AtomicUsize::new(0)),
            delay: None,
        }
    }

    /// Each retry takes `delay`: a slow handler.
    pub fn slow(delay: Duration) -> RetryGate {
        RetryGate {
            delay: Some(delay),
            ..RetryGate::closed()
        }
    }

    /// Lets `retries` held retries through.
    pub fn open(&self, retries: usize) {
        self.open.add_permits(retries);
    }

    /// How many retries have reached the gate.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::SeqCst)
    }

    /// An app (on `db`, or a fresh database) whose `GATED_TYPE` events this gate
    /// handles, with a handler time limit no held retry reaches.
    pub async fn spawn(&self, settings: Settings, db: Option<Arc<TestDb>>) -> TestApp {
        self.spawn_with_limit(settings, db, Duration::from_secs(60))
            .await
    }

    /// As `spawn`, with this handler time limit.
    pub async fn spawn_with_limit(
        &self,
        mut settings: Settings,
        db: Option<Arc<TestDb>>,
        handler_timeout: Duration,
    ) -> TestApp {
        settings.handler_timeout = handler_timeout;
        settings.sources[0]
            .event_types
            .insert(GATED_TYPE.into(), GATED_KIND.into());
        let mut registry = Registry::builtin();
        registry.register(GATED_KIND, Arc::new(self.clone()));
        spawn(Spawn {
            settings,
            registry,
            db,
            ..Spawn::default()
        })
        .await
    }
}

#[async_trait::async_trait]
impl Handler for RetryGate {
    async fn apply(
        &self,
        _tx: &deadpool_postgres::Transaction<'_>,
        event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        if event.attempt > 1 {
            self.arrived.fetch_add(1, Ordering::SeqCst);
            match self.delay {
                Some(delay) => tokio::time::sleep(delay).await,
                None => self.open.acquire().await.expect("gate").forget(),
            }
        }
        Ok(())
    }
}
