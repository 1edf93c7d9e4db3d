//! The reads of named events under way at receipt, shared by copies: a copy of
//! a thin event that arrives while its first copy's event is still being read
//! waits for that read instead of asking the provider's API again (providers
//! deliver copies of one event at the same time, and their APIs limit reads).

use std::collections::HashMap;
use std::sync::Mutex;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use serde_json::Value;

use crate::event::IncomingEvent;
use crate::handlers::HandlerError;
use crate::runner::Runner;

/// What a read gave (see `Runner::read_named`).
type Read = Option<Result<Value, HandlerError>>;

/// A copy is the same source and event id, and the same payload but for the
/// fields its source's `fingerprint_ignore` leaves out (as a duplicate is).
type Key = (String, String, [u8; 32]);

#[derive(Default)]
pub(super) struct Reads {
    under_way: Mutex<HashMap<Key, Shared<BoxFuture<'static, Read>>>>,
}

impl Reads {
    fn under_way(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Key, Shared<BoxFuture<'static, Read>>>> {
        // Each change is one insert or one remove: a panic cannot leave it half-made.
        self.under_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The event `event` names, read by `runner` — or, while a copy's read is
    /// under way, what that read gives.
    pub(super) async fn read(&self, runner: &Runner, event: &IncomingEvent) -> Read {
        let key: Key = (
            event.source.to_string(),
            event.event_id.to_string(),
            event.stable_fingerprint,
        );
        let (read, _first) = {
            let mut under_way = self.under_way();
            match under_way.get(&key) {
                Some(read) => {
                    log::debug!(
                        "{} event {:?}: its first copy's read is under way; this copy waits for it",
                        event.source,
                        event.event_id
                    );
                    (read.clone(), None)
                }
                None => {
                    let (runner, source, payload) =
                        (runner.clone(), key.0.clone(), event.payload.clone());
                    let read = async move { runner.read_named(&source, &payload).await }
                        .boxed()
                        .shared();
                    under_way.insert(key.clone(), read.clone());
                    (read, Some(Ended { reads: self, key }))
                }
            }
        };
        read.await
    }
}

/// The first copy's read ended (or its copy was dropped): later copies read
/// again. Copies still waiting keep the read going.
struct Ended<'r> {
    reads: &'r Reads,
    key: Key,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.reads.under_way().remove(&self.key);
    }
}
