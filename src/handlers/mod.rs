//! Business rules. A handler applies one kind of event (`invoice_paid`,
//! `payment_succeeded`, …) inside the transaction (and savepoint) that records its
//! attempt, so its effects commit with the record of its completion or not at all.
//! Providers resend, reorder and race events, so handlers must be idempotent and
//! order-tolerant: applying any set of events, any number of times, in any order,
//! must leave the same state.
//!
//! hookd ships the payment handlers; a team registers its own in a [`Registry`]
//! (see [`crate::Hookd`]), and `[[forwards]]` send events to handlers in any other
//! stack.

pub mod forward;
pub mod payments;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::payments::PaymentMerge;
use crate::store::StoreError;

/// An event as a handler sees it: the provider's payload and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// `webhook_events.id`: hookd's row id.
    pub id: i64,
    /// The configured source it arrived at (`stripe`, `shop`, …).
    pub source: &'a str,
    /// That source's signature scheme (`stripe`, `standard`, `github`, `hmac`).
    pub scheme: &'a str,
    /// The provider's event id.
    pub event_id: &'a str,
    /// The provider's event type (`invoice.paid`).
    pub event_type: &'a str,
    /// hookd's kind for that type (`invoice_paid`), if its source maps the type.
    pub kind: Option<&'a str>,
    /// The body as the provider sent it, parsed; for a delivery that only
    /// names its event (Stripe's thin events), the event read from the
    /// provider's API just before this run.
    pub payload: &'a Value,
    /// The body exactly as received.
    pub body: &'a [u8],
    /// 1 for the run at receipt, then 2, 3, … for retries.
    pub attempt: i32,
    /// When hookd first received the event.
    pub received_at: DateTime<Utc>,
}

impl Event<'_> {
    /// The value at a JSON pointer (`/data/object/id`), or a permanent error that
    /// names what is missing.
    pub fn value(&self, pointer: &str) -> Result<&Value, HandlerError> {
        self.payload
            .pointer(pointer)
            .filter(|v| !v.is_null())
            .ok_or_else(|| HandlerError::Permanent(format!("the event has no {pointer}")))
    }

    /// The text at a JSON pointer; a permanent error when it is missing or not text.
    pub fn text(&self, pointer: &str) -> Result<&str, HandlerError> {
        self.value(pointer)?
            .as_str()
            .ok_or_else(|| HandlerError::Permanent(format!("{pointer} is not text")))
    }

    /// The integer at a JSON pointer; a permanent error when it is missing or not one.
    pub fn integer(&self, pointer: &str) -> Result<i64, HandlerError> {
        self.value(pointer)?
            .as_i64()
            .ok_or_else(|| HandlerError::Permanent(format!("{pointer} is not an integer")))
    }

    /// The payload, or a part of it (`""` for the whole), as a type of the
    /// handler's own; a permanent error says which field did not fit.
    pub fn parse<T: DeserializeOwned>(&self, pointer: &str) -> Result<T, HandlerError> {
        let value = if pointer.is_empty() {
            self.payload
        } else {
            self.value(pointer)?
        };
        serde_path_to_error::deserialize(value).map_err(|e| {
            HandlerError::Permanent(format!(
                "{pointer}{} does not fit: {}",
                match e.path().to_string().as_str() {
                    "." => String::new(),
                    path => format!(" at {path}"),
                },
                e.inner()
            ))
        })
    }

    /// When the provider says the event happened: a Unix-seconds `created` field at
    /// the top (Stripe, Standard Webhooks, the neutral shape). Handlers use it to
    /// keep an older event from overwriting newer state.
    pub fn created(&self) -> Option<DateTime<Utc>> {
        self.payload
            .get("created")
            .and_then(Value::as_i64)
            .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth trying again later (database hiccup, timeout, dependency down): the
    /// event is retried with backoff, up to `max_attempts`.
    #[error("{0}")]
    Retry(String),
    /// Will never succeed as is (malformed payload): the event goes `dead` and
    /// waits for a person.
    #[error("{0}")]
    Permanent(String),
}

impl From<StoreError> for HandlerError {
    fn from(error: StoreError) -> Self {
        HandlerError::Retry(error.to_string())
    }
}

impl From<tokio_postgres::Error> for HandlerError {
    fn from(error: tokio_postgres::Error) -> Self {
        StoreError::from(error).into()
    }
}

/// Applies one kind of event to the business data.
#[async_trait]
pub trait Handler: Send + Sync {
    /// Applies `event` in `tx`. Return `Retry` for a failure worth trying again,
    /// `Permanent` for one that never will; either rolls back what this run did.
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError>;

    /// Applies several events of this handler's kind that arrived together, in
    /// `tx`, all or nothing. Under load hookd stores a batch of deliveries in one
    /// transaction and calls this once for the batch; any error (or the time
    /// limit) undoes the whole batch, which is then applied event by event with
    /// `apply`, each in a savepoint of its own. The default applies them in turn;
    /// a handler whose effects combine (like the payment merge) can do it in one
    /// statement.
    async fn apply_batch(
        &self,
        tx: &Transaction<'_>,
        events: &[Event<'_>],
    ) -> Result<(), HandlerError> {
        for event in events {
            self.apply(tx, event).await?;
        }
        Ok(())
    }
}

/// Handlers by kind. Events of a kind without one (and without a forward) are
/// stored as `ignored`.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: HashMap<String, Registered>,
}

/// A kind's handler, and the payment merge it is, when it is hookd's own.
#[derive(Clone)]
struct Registered {
    handler: Arc<dyn Handler>,
    merge: Option<PaymentMerge>,
}

/// A kind's entry in the registry, as a plan reads it.
pub(crate) struct Entry<'a> {
    /// The kind as registered.
    pub kind: &'a str,
    pub handler: &'a Arc<dyn Handler>,
    /// Hookd's payment merge, when the kind's handler is hookd's own: the
    /// ingester can then write its effect into the statement that stores the
    /// event (a handler registered by a team never has one).
    pub merge: Option<PaymentMerge>,
}

impl Registry {
    /// No handlers at all.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The handlers hookd ships: the payment kinds.
    pub fn builtin() -> Self {
        let mut registry = Self::default();
        for (kind, handler, merge) in payments::handlers() {
            let merge = Some(merge);
            registry
                .handlers
                .insert(kind.to_string(), Registered { handler, merge });
        }
        registry
    }

    /// Makes `handler` apply the events of `kind` (replacing any handler it had).
    pub fn register(&mut self, kind: &str, handler: Arc<dyn Handler>) {
        let merge = None;
        self.handlers
            .insert(kind.to_string(), Registered { handler, merge });
    }

    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers
            .get(kind)
            .map(|registered| &registered.handler)
    }

    /// The kind as registered, with its handler.
    pub(crate) fn entry(&self, kind: &str) -> Option<Entry<'_>> {
        self.handlers
            .get_key_value(kind)
            .map(|(kind, registered)| Entry {
                kind,
                handler: &registered.handler,
                merge: registered.merge,
            })
    }

    /// The kinds with a handler, sorted.
    pub fn kinds(&self) -> Vec<&str> {
        let mut kinds: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
        kinds.sort_unstable();
        kinds
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .finish()
    }
}
