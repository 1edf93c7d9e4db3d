//! The `payments` business table. Every write is a merge whose operations (OR on
//! booleans, GREATEST on amounts and on non-null text) are commutative, associative
//! and idempotent: applying any set of events, any number of times, in any order,
//! leaves the same row. `status` is a generated column derived from those facts.

use deadpool_postgres::GenericClient;

use super::StoreError;
use crate::handlers::payments::shape::PaymentFacts;

/// The facts one event adds to a payment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentUpdate {
    pub facts: PaymentFacts,
    pub succeeded: bool,
    pub failed: bool,
    pub disputed: bool,
}

pub async fn merge(
    client: &impl GenericClient,
    source: &str,
    update: &PaymentUpdate,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO payments AS p
                 (source, payment_id, succeeded, failed, disputed, amount, amount_refunded,
                  currency, customer_id)
             VALUES ($1, $2, $3, $4, $5, COALESCE($6::bigint, 0), COALESCE($7::bigint, 0), $8, $9)
             ON CONFLICT (source, payment_id) DO UPDATE SET
                 succeeded       = p.succeeded OR EXCLUDED.succeeded,
                 failed          = p.failed OR EXCLUDED.failed,
                 disputed        = p.disputed OR EXCLUDED.disputed,
                 amount          = GREATEST(p.amount, EXCLUDED.amount),
                 amount_refunded = GREATEST(p.amount_refunded, EXCLUDED.amount_refunded),
                 currency        = GREATEST(p.currency, EXCLUDED.currency),
                 customer_id     = GREATEST(p.customer_id, EXCLUDED.customer_id),
                 updated_at      = now()",
        )
        .await?;
    let facts = &update.facts;
    client
        .execute(
            &statement,
            &[
                &source,
                &facts.payment_id,
                &update.succeeded,
                &update.failed,
                &update.disputed,
                &facts.amount,
                &facts.amount_refunded,
                &facts.currency,
                &facts.customer_id,
            ],
        )
        .await?;
    Ok(())
}
