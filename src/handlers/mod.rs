//! Business rules, one handler per event kind. Handlers run inside the transaction
//! (and savepoint) that records their attempt, so their effects commit with the
//! event's status or not at all. They must be idempotent and order-tolerant: the
//! provider resends, reorders and races events.

pub mod payments;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use serde_json::Value;

use crate::event::PaymentShape;
use crate::store::StoreError;

/// The event a handler applies.
#[derive(Debug, Clone, Copy)]
pub struct EventToApply<'a> {
    pub id: i64,
    pub source: &'a str,
    pub event_id: &'a str,
    pub kind: &'a str,
    pub payload: &'a Value,
    /// 1 for the inline run at receipt, then 2, 3, … for retries.
    pub attempt: i32,
    pub shape: PaymentShape,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth trying again later (database hiccup, timeout, dependency down).
    #[error("{0}")]
    Retry(String),
    /// Will never succeed as is (malformed payload): the event goes `dead`.
    #[error("{0}")]
    Permanent(String),
}

impl From<StoreError> for HandlerError {
    fn from(error: StoreError) -> Self {
        HandlerError::Retry(error.to_string())
    }
}

#[async_trait]
pub trait Handler: Send + Sync {
    async fn apply(
        &self,
        tx: &Transaction<'_>,
        event: &EventToApply<'_>,
    ) -> Result<(), HandlerError>;
}

/// Handlers by kind. Kinds without one are stored as `ignored`.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl Registry {
    /// The handlers hookd ships: the payment kinds.
    pub fn builtin() -> Self {
        let mut registry = Self::default();
        for (kind, handler) in payments::handlers() {
            registry.register(kind, handler);
        }
        registry
    }

    pub fn register(&mut self, kind: &str, handler: Arc<dyn Handler>) {
        self.handlers.insert(kind.to_string(), handler);
    }

    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(kind)
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<_> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("Registry").field("kinds", &kinds).finish()
    }
}
