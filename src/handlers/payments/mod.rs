//! The payment kinds. Each event states facts about one payment, and the facts are
//! merged rather than a status overwritten, so a late `payment_failed` can never
//! undo a `payment_succeeded`, and a resent refund cannot refund twice:
//!
//! - `payment_succeeded` sets `succeeded`; `payment_failed` sets `failed`;
//! - `payment_refunded` carries the cumulative `amount_refunded` (Stripe), or one
//!   refund (an id and its amount; other providers), or both — or nothing, from a
//!   provider that states no amounts (GoCardless). A refund is a fact
//!   keyed by its id: the largest amount stated for an id stands, and a resent one
//!   counts once. `amount_refunded` is the greatest cumulative amount stated, or
//!   the sum of the payment's refunds if greater;
//! - `dispute_opened` sets `disputed`;
//! - every event may raise `amount` and fill `currency` / `customer_id`.
//!
//! `payments.status` is derived from the facts, highest first: disputed > refunded
//! (amount_refunded ≥ amount > 0) > partially_refunded > succeeded > failed > pending.

pub use crate::providers::shape;

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Transaction;

use self::shape::PaymentShape;
use super::{Event, Handler, HandlerError};
use crate::domain::PaymentKind;
use crate::store::payments::{PaymentUpdate, merge, merge_many};

struct PaymentHandler(PaymentKind);

/// A payment kind's merge, as data beside its handler: a batch of such events
/// is written in the one statement that stores it (one round trip), and the
/// handler runs only when that statement cannot be used.
#[derive(Clone, Copy, Debug)]
pub struct PaymentMerge(PaymentKind);

impl PaymentMerge {
    /// The facts the kind's handler would merge, unless its run would fail
    /// (`apply` records why) or add a refund (its own statement, run after the
    /// payment's row is locked). `event.id` may be 0: the merge does not read it.
    pub fn update(self, event: &Event<'_>) -> Option<PaymentUpdate> {
        update_for(self.0, event)
            .ok()
            .filter(|update| update.facts.refund.is_none())
    }
}

/// Each payment kind's handler and merge.
pub(super) fn handlers() -> Vec<(&'static str, Arc<dyn Handler>, PaymentMerge)> {
    PaymentKind::ALL
        .into_iter()
        .map(|kind| {
            let handler: Arc<dyn Handler> = Arc::new(PaymentHandler(kind));
            (kind.as_str(), handler, PaymentMerge(kind))
        })
        .collect()
}

#[async_trait]
impl Handler for PaymentHandler {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        let update = update_for(self.0, event)?;
        merge(tx, event.source, &update).await?;
        Ok(())
    }

    /// The facts of every event of the batch in one set-based merge: the merge is
    /// commutative and idempotent, so the result is that of merging one by one.
    async fn apply_batch(
        &self,
        tx: &Transaction<'_>,
        events: &[Event<'_>],
    ) -> Result<(), HandlerError> {
        let updates = events
            .iter()
            .map(|event| update_for(self.0, event))
            .collect::<Result<Vec<_>, _>>()?;
        let pairs: Vec<(&str, &PaymentUpdate)> = events
            .iter()
            .zip(&updates)
            .map(|(event, update)| (event.source, update))
            .collect();
        merge_many(tx, &pairs).await?;
        Ok(())
    }
}

/// The facts an event of `kind` merges into its payment.
fn update_for(kind: PaymentKind, event: &Event<'_>) -> Result<PaymentUpdate, HandlerError> {
    // The provider's own reading (Adyen's, Square's and Paddle's differ from their shape's).
    let provider = crate::providers::named(event.scheme);
    let facts = match provider {
        Some(provider) => provider.payment_facts(event.payload),
        None => PaymentShape::NEUTRAL.payment_facts(event.payload),
    }
    .map_err(|e| HandlerError::Permanent(e.to_string()))?;
    // A provider that states no amounts (GoCardless) refunds with none: the
    // refund is the event itself, in the payment's timeline.
    let sends_amounts = provider.is_none_or(|p| p.sends_amounts());
    if kind == PaymentKind::Refunded
        && sends_amounts
        && facts.amount_refunded.is_none()
        && facts.refund.is_none()
    {
        return Err(HandlerError::Permanent(
            "a refund event must carry amount_refunded or a refund (refund_id and refund_amount)"
                .into(),
        ));
    }
    Ok(PaymentUpdate {
        facts,
        succeeded: kind == PaymentKind::Succeeded,
        failed: kind == PaymentKind::Failed,
        disputed: kind == PaymentKind::DisputeOpened,
    })
}
