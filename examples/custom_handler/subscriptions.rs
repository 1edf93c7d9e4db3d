//! Stripe subscriptions, applied exactly once and in any order:
//!
//! - `subscription_updated` (`customer.subscription.created`/`.updated`/`.deleted`)
//!   writes the subscription's state, but only when its event is newer than the
//!   one that wrote the row last (Stripe's `created`, then the event id): an older
//!   event arriving late never overwrites newer state, and a resend changes nothing.
//! - `invoice_paid` (`invoice.paid`) records the invoice once (its id is the key).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use hookd::{Event, Handler, HandlerError, Migration};
use serde::Deserialize;

/// The example's own schema, applied after hookd's.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_subscriptions.sql",
    sql: include_str!("sql/0001_subscriptions.sql"),
}];

/// The parts of a Stripe Subscription object this example keeps.
#[derive(Debug, Deserialize)]
struct Subscription {
    id: String,
    customer: Option<String>,
    status: String,
    current_period_end: Option<i64>,
    plan: Option<Plan>,
}

#[derive(Debug, Deserialize)]
struct Plan {
    id: String,
}

pub struct SubscriptionUpdated;

#[async_trait]
impl Handler for SubscriptionUpdated {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        let subscription: Subscription = event.parse("/data/object")?;
        let created = event
            .created()
            .ok_or_else(|| HandlerError::Permanent("the event has no created time".into()))?;
        let period_end: Option<DateTime<Utc>> = subscription
            .current_period_end
            .and_then(|s| DateTime::from_timestamp(s, 0));
        // The WHERE is the guard: only a newer event (created, then id) writes.
        tx.execute(
            "INSERT INTO subscriptions AS s
                 (source, subscription_id, customer_id, status, plan, current_period_end,
                  event_created, event_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (source, subscription_id) DO UPDATE SET
                 customer_id = EXCLUDED.customer_id,
                 status = EXCLUDED.status,
                 plan = EXCLUDED.plan,
                 current_period_end = EXCLUDED.current_period_end,
                 event_created = EXCLUDED.event_created,
                 event_id = EXCLUDED.event_id
             WHERE (s.event_created, s.event_id) < (EXCLUDED.event_created, EXCLUDED.event_id)",
            &[
                &event.source,
                &subscription.id,
                &subscription.customer,
                &subscription.status,
                &subscription.plan.map(|p| p.id),
                &period_end,
                &created,
                &event.event_id,
            ],
        )
        .await?;
        Ok(())
    }
}

/// The parts of a Stripe Invoice object this example keeps.
#[derive(Debug, Deserialize)]
struct Invoice {
    id: String,
    subscription: String,
    amount_paid: i64,
    currency: String,
}

pub struct InvoicePaid;

#[async_trait]
impl Handler for InvoicePaid {
    async fn apply(&self, tx: &Transaction<'_>, event: &Event<'_>) -> Result<(), HandlerError> {
        let invoice: Invoice = event.parse("/data/object")?;
        tx.execute(
            "INSERT INTO subscription_invoices
                 (source, invoice_id, subscription_id, amount_paid, currency)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (source, invoice_id) DO NOTHING",
            &[
                &event.source,
                &invoice.id,
                &invoice.subscription,
                &invoice.amount_paid,
                &invoice.currency,
            ],
        )
        .await?;
        Ok(())
    }
}
