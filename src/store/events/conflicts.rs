//! Conflicting items: an item of a several-event request that reused a stored
//! event's id with another payload, kept beside that event.

use crate::store::sql::{self, params};

use crate::event::IncomingEvent;
use crate::store::StoreError;

use super::record::stored_payload;

/// Conflicting items kept per event at most; past them a conflicting item is
/// counted on the event (`conflicts_not_kept`), not kept. Adyen signs 8 fields
/// of an item, so one genuine item resent with another unsigned field each time
/// would otherwise keep a new record, whole, for every copy.
pub const CONFLICTS_KEPT: i64 = 10;

/// Given the event's row id (`$1`) and fingerprint (`$2`), the offered item's
/// fingerprint (`$3`) and payload (`$4`): a known item counts a delivery on its
/// record; a new one is kept while the event has fewer than `$5` records, else
/// counted on the event. The caller holds the event's row lock, so concurrent
/// records of one event are decided one after the other.
const RECORD_CONFLICT: &str = "WITH known AS (
         UPDATE event_conflicts SET deliveries = deliveries + 1, last_delivery_at = now()
          WHERE webhook_event_id = $1 AND offered_sha256 = $3
         RETURNING 1),
     kept AS (
         INSERT INTO event_conflicts
                 (webhook_event_id, stored_sha256, offered_sha256, offered_payload)
         SELECT $1, $2, $3, $4
          WHERE NOT EXISTS (SELECT 1 FROM known)
            AND (SELECT count(*) FROM event_conflicts WHERE webhook_event_id = $1) < $5
         RETURNING 1)
     UPDATE webhook_events SET conflicts_not_kept = conflicts_not_kept + 1
      WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM known) AND NOT EXISTS (SELECT 1 FROM kept)";

/// Keeps an item of a several-event request that reused a stored event's id
/// with another payload, beside that event (the request itself is acknowledged);
/// the same item again counts a delivery on its record. Past `CONFLICTS_KEPT`
/// records a new item is only counted on the event.
pub async fn record_conflict(
    client: &mut deadpool_postgres::Object,
    event: &IncomingEvent,
) -> Result<(), StoreError> {
    let tx = crate::store::begin(client).await?;
    // Its row lock orders the records of one event (the count must not race).
    let stored = sql::query_opt(
        &tx,
        "SELECT id, payload_sha256 FROM webhook_events
          WHERE source = $1 AND event_id = $2
          FOR NO KEY UPDATE",
        params![&event.source, &event.event_id],
    )
    .await?;
    if let Some(stored) = stored {
        let (id, stored_sha256): (i64, Vec<u8>) = (stored.get(0), stored.get(1));
        sql::execute(
            &tx,
            RECORD_CONFLICT,
            params![
                &id,
                &stored_sha256,
                &event.fingerprint.as_slice(),
                &stored_payload(event),
                &CONFLICTS_KEPT,
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
