//! Forgetting a customer: everything hookd keeps that holds their personal
//! data, rewritten in one transaction.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use super::masking::error_cut;
use super::{Desk, DeskError, storable};
use crate::mask::{self, Cover};
use crate::store::StoreError;
use crate::store::audit::{self, Record};
use crate::store::forget::{self, EVENT_TEXTS, StoredEvent};

/// A customer's items, wherever a request kept them.
struct Theirs<'a> {
    customer: &'a str,
    /// Their events' payloads as stored, before they were rewritten.
    payloads: Vec<Value>,
}

impl Theirs<'_> {
    /// Whether an item of a kept request is one of theirs, or names them.
    fn own(&self, item: &Value) -> bool {
        self.payloads.contains(item) || mask::holds(item, self.customer)
    }
}

impl Desk {
    /// Erases a customer's personal data (of one source, when given): the
    /// masked fields, and their id wherever it appears, from their events'
    /// payloads, exact bodies (their items in the requests their batch-mates
    /// keep too) and conflicting items; what their events' errors quote of
    /// them and their receivers' answers whole; their id from their events and
    /// payments; and their id and masked values wherever an audit detail or a
    /// stored Idempotency-Key answer quotes them. Every dedupe key, fingerprint
    /// and payment state stays, so a later delivery of one of those events is
    /// still a duplicate. One transaction, audited as `forgot_customer` with
    /// the counts (not the id, which is what was to be forgotten); a dry run
    /// counts and changes nothing.
    pub async fn forget(
        &self,
        customer: &str,
        source: Option<&str>,
        dry_run: bool,
        who: &str,
    ) -> Result<Forgotten, DeskError> {
        if let Some(name) = source
            && self.settings.now().source(name).is_none()
        {
            return Err(DeskError::UnknownSource(name.into()));
        }
        let mut outcome = Forgotten {
            dry_run,
            events: 0,
            payloads: 0,
            bodies: 0,
            bodies_dropped: 0,
            conflicts: 0,
            payments: 0,
        };
        if !storable(customer) {
            return Ok(outcome);
        }
        let mut client = self.client().await?;
        let tx = crate::store::begin(&mut client)
            .await
            .map_err(StoreError::from)?;
        let events = forget::events_of_customer(&tx, customer, source).await?;
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let mut conflicts = forget::conflicts_of(&tx, &ids).await?;
        // What they look like, read before it goes: their id and the values
        // their sources' masks name (`terms`, searched for everywhere), and for
        // their own events' texts also every value of a source no longer
        // configured (`quoted`), as viewers see them masked.
        let mut terms = BTreeSet::from([customer.to_string()]);
        let mut quoted = BTreeSet::from([customer.to_string()]);
        let kept = events
            .iter()
            .filter_map(|e| Some((&e.source, e.payload.as_ref()?)));
        let offered = conflicts.iter().map(|c| (&c.source, &c.payload));
        for (source, payload) in kept.chain(offered) {
            if let Some(configured) = self.settings.now().source(source) {
                terms.extend(mask::values(payload, &configured.mask));
            }
            quoted.extend(self.quoted_values(source, Some(payload)));
        }
        let theirs = Theirs {
            customer,
            payloads: events.iter().filter_map(|e| e.payload.clone()).collect(),
        };

        for event in &events {
            let payload = event.payload.clone().map(|mut payload| {
                self.cover(&event.source, &mut payload, Cover::Redact);
                mask::cover_text(&mut payload, customer, Cover::Redact);
                payload
            });
            let body = event
                .body
                .as_deref()
                .and_then(|body| self.redact_body(&event.source, body, &theirs));
            outcome.payloads += usize::from(payload.is_some());
            outcome.count_body(event.body.as_deref(), body.as_deref());
            forget::redact_event(&tx, event.id, payload.as_ref(), body.as_deref()).await?;
        }
        outcome.events = events.len();
        // A request kept once beside its events (GoCardless's): their items in
        // it rewritten, their batch-mates' left as they came.
        for request in forget::requests_of(&tx, &ids).await? {
            let body = request
                .body
                .as_deref()
                .and_then(|body| self.redact_body(&request.source, body, &theirs));
            outcome.count_body(request.body.as_deref(), body.as_deref());
            forget::redact_request(&tx, request.id, body.as_deref()).await?;
        }
        for conflict in &mut conflicts {
            self.cover(&conflict.source, &mut conflict.payload, Cover::Redact);
            mask::cover_text(&mut conflict.payload, customer, Cover::Redact);
            forget::redact_conflict(&tx, conflict.id, &conflict.payload).await?;
            outcome.conflicts += 1;
        }
        let quoted: Vec<String> = quoted.into_iter().collect();
        for text in EVENT_TEXTS {
            for was in forget::texts_of(&tx, text, &ids).await? {
                let now = if text.erase {
                    mask::REDACTED.to_string()
                } else {
                    mask::cover_quoted(&was, &quoted, Cover::Redact, error_cut(&was))
                };
                if now != was {
                    forget::rewrite_text(&tx, text, &ids, &was, &now).await?;
                }
            }
        }
        self.redact_batch_mates(&tx, &events, &theirs).await?;
        let terms: Vec<String> = terms.into_iter().collect();
        redact_quotes(&tx, customer, &terms).await?;
        outcome.payments = forget::forget_payments(&tx, customer, source).await?;
        if dry_run {
            tx.rollback().await.map_err(StoreError::from)?;
            return Ok(outcome);
        }
        audit::record(
            &tx,
            &Record {
                who,
                action: "forgot_customer",
                source,
                detail: serde_json::to_value(&outcome).ok(),
                ..Record::default()
            },
        )
        .await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(outcome)
    }

    /// A kept body of `source` without a customer's data: in a request whose
    /// every event keeps it whole, their items rewritten as their payloads are
    /// (the others' stay as they came); otherwise the body rewritten as its
    /// payload; their id wherever else it is. `None` for a body that is not
    /// JSON (a form), which cannot be rewritten field by field.
    fn redact_body(&self, source: &str, body: &[u8], theirs: &Theirs<'_>) -> Option<Vec<u8>> {
        let mut body: Value = serde_json::from_slice(body).ok()?;
        let items = self
            .settings
            .now()
            .source(source)
            .map(|s| s.scheme.provider())
            .filter(|p| p.keeps_request())
            .map(|p| p.request_events());
        match items.and_then(|at| body.pointer_mut(at)?.as_array_mut()) {
            Some(items) => items
                .iter_mut()
                .filter(|item| theirs.own(item))
                .for_each(|item| self.cover(source, item, Cover::Redact)),
            None => self.cover(source, &mut body, Cover::Redact),
        }
        mask::cover_text(&mut body, theirs.customer, Cover::Redact);
        serde_json::to_vec(&body).ok()
    }

    /// Rewrites the bodies other events keep of the requests that carried the
    /// customer's events (a provider's several-event request, kept whole by
    /// each of its events): found by the customer's id or one of their events'
    /// ids, from the first of those events on.
    async fn redact_batch_mates(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        events: &[StoredEvent],
        theirs: &Theirs<'_>,
    ) -> Result<(), StoreError> {
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let settings = self.settings.now();
        let kept_whole = |source: &str| {
            settings
                .source(source)
                .is_some_and(|s| s.scheme.provider().keeps_request())
        };
        let sources: BTreeSet<&str> = events
            .iter()
            .map(|e| e.source.as_str())
            .filter(|s| kept_whole(s))
            .collect();
        for source in sources {
            let of_source = events.iter().filter(|e| e.source == source);
            let Some(since) = of_source.clone().map(|e| e.received_at).min() else {
                continue;
            };
            let needles: Vec<Vec<u8>> = std::iter::once(theirs.customer)
                .chain(of_source.map(|e| e.event_id.as_str()))
                .map(|needle| needle.as_bytes().to_vec())
                .collect();
            for (id, body) in forget::bodies_quoting(tx, source, since, &needles, &ids).await? {
                let Some(rewritten) = self.redact_body(source, &body, theirs) else {
                    continue;
                };
                // Found by an id inside another, or an item of theirs with nothing to
                // erase: left as it came.
                let read = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).ok();
                if read(&rewritten) != read(&body) {
                    forget::redact_body(tx, id, &rewritten).await?;
                }
            }
        }
        Ok(())
    }
}

/// Rewrites what quotes the customer outside their events: audit details (a
/// bulk retry's search) and stored Idempotency-Key answers (a retried event's
/// row).
async fn redact_quotes(
    tx: &deadpool_postgres::Transaction<'_>,
    customer: &str,
    terms: &[String],
) -> Result<(), StoreError> {
    let cover = |value: &mut Value| {
        mask::cover_text(value, customer, Cover::Redact);
        mask::cover_quoted_in(value, terms, Cover::Redact);
    };
    // As JSON writes them: the detail's text and the answers are JSON. The
    // customer's id is searched for whatever its length, as a whole string.
    let written: Vec<String> = terms
        .iter()
        .filter(|t| *t == customer || t.chars().count() >= mask::QUOTED_MIN_CHARS)
        .filter_map(|t| {
            let json = serde_json::to_string(t).ok()?;
            Some(json[1..json.len() - 1].to_string())
        })
        .collect();
    for (id, mut detail) in forget::audit_quoting(tx, &written).await? {
        cover(&mut detail);
        forget::redact_audit(tx, id, &detail).await?;
    }
    let needles: Vec<Vec<u8>> = written.iter().map(|t| t.as_bytes().to_vec()).collect();
    for (token, key, body) in forget::answers_quoting(tx, &needles).await? {
        let body = match serde_json::from_slice::<Value>(&body) {
            Ok(mut answer) => {
                cover(&mut answer);
                serde_json::to_vec(&answer).unwrap_or_default()
            }
            Err(_) => {
                let text = String::from_utf8_lossy(&body);
                mask::cover_quoted(&text, terms, Cover::Redact, false).into_bytes()
            }
        };
        forget::redact_answer(tx, &(token, key, body)).await?;
    }
    Ok(())
}

/// What forgetting a customer did (or, as a dry run, would do).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Forgotten {
    pub dry_run: bool,
    /// Their events, each now marked redacted (purged ones included: they lose
    /// the customer's id).
    pub events: usize,
    /// Stored payloads and exact bodies rewritten without the personal data
    /// (bodies: the events' own, and the requests kept once beside them).
    pub payloads: usize,
    pub bodies: usize,
    /// Exact bodies that are not JSON (a form, XML), which cannot be rewritten
    /// field by field: dropped.
    pub bodies_dropped: usize,
    /// Conflicting items kept beside their events, rewritten.
    pub conflicts: usize,
    /// Payments that no longer name the customer (their state stays).
    pub payments: u64,
}

impl Forgotten {
    /// Counts a kept body (if any) as rewritten, or dropped when `redacted` is none.
    fn count_body(&mut self, kept: Option<&[u8]>, redacted: Option<&[u8]>) {
        self.bodies += usize::from(redacted.is_some());
        self.bodies_dropped += usize::from(kept.is_some() && redacted.is_none());
    }
}

/// The log line of a customer forgotten (a dry run is not logged); the
/// customer's id is left out, as in the audit trail.
pub fn log_forget(who: &str, request_id: &str, outcome: &Forgotten) {
    log::info!(
        token = who, request_id = request_id;
        "admin forget of a customer by {who}: {} events, {} payments request_id={request_id}",
        outcome.events,
        outcome.payments
    );
}
