//! The payment kinds. Each event states facts about one payment, and the facts are
//! merged rather than a status overwritten, so a late `payment_failed` can never
//! undo a `payment_succeeded`, and a resent refund cannot refund twice:
//!
//! - `payment_succeeded` sets `succeeded`; `payment_failed` sets `failed`;
//! - `payment_refunded` raises `amount_refunded` to the cumulative amount it carries;
//! - `dispute_opened` sets `disputed`;
//! - every event may raise `amount` and fill `currency` / `customer_id`.
//!
//! `payments.status` is derived from the facts, highest first: disputed > refunded
//! (amount_refunded ≥ amount > 0) > partially_refunded > succeeded > failed > pending.

pub mod shape;

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Transaction;

use self::shape::PaymentShape;
use super::{Event, Handler, HandlerError};
use crate::store::payments::{PaymentUpdate, merge};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fact {
    Succeeded,
    Failed,
    Refunded,
    Disputed,
}

struct PaymentHandler(Fact);

pub(super) fn handlers() -> Vec<(&'static str, Arc<dyn Handler>)> {
    vec![
        (
            "payment_succeeded",
            Arc::new(PaymentHandler(Fact::Succeeded)),
        ),
        ("payment_failed", Arc::new(PaymentHandler(Fact::Failed))),
        ("payment_refunded", Arc::new(PaymentHandler(Fact::Refunded))),
        ("dispute_opened", Arc::new(PaymentHandler(Fact::Disputed))),
    ]
}

#[async_trait]
impl Handler for PaymentHandler {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        let update = self.update_for(event)?;
        merge(tx, event.source, &update).await?;
        Ok(())
    }
}

impl PaymentHandler {
    fn update_for(&self, event: &Event<'_>) -> Result<PaymentUpdate, HandlerError> {
        let facts = PaymentShape::of_scheme(event.scheme)
            .payment_facts(event.payload)
            .map_err(HandlerError::Permanent)?;
        if self.0 == Fact::Refunded && facts.amount_refunded.is_none() {
            return Err(HandlerError::Permanent(
                "a refund event must carry amount_refunded".into(),
            ));
        }
        Ok(PaymentUpdate {
            facts,
            succeeded: self.0 == Fact::Succeeded,
            failed: self.0 == Fact::Failed,
            disputed: self.0 == Fact::Disputed,
        })
    }
}
