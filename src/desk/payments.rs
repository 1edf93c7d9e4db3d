//! A payment with the events that made it, and a customer's payments.

use serde::Serialize;

use super::events::EventRuns;
use super::{Desk, DeskError, storable};
use crate::filter;
use crate::store::StoreError;
use crate::store::audit::{self, Record};
use crate::store::history::{self, Attempt, EventSummary};
use crate::store::payments::{self, Payment};

/// Events a payment view shows at most.
const PAYMENT_EVENTS: i64 = 500;

/// A page of a customer's payments, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentPage {
    pub payments: Vec<Payment>,
    pub next_cursor: Option<String>,
}

/// A payment with the events that made it, oldest first, each with its runs.
#[derive(Debug, Clone)]
pub struct PaymentView {
    pub payment: Payment,
    /// Whether the source's provider states amounts: GoCardless's does not, so
    /// the row's amounts say nothing and a refund leaves its status as it was.
    pub amounts_sent: bool,
    pub events: Vec<(EventSummary, Vec<Attempt>)>,
}

/// `payment`, `amounts_sent`, and its `events`, each with its runs as in the
/// event detail.
#[derive(Serialize)]
struct PaymentJson<'a> {
    payment: &'a Payment,
    amounts_sent: bool,
    events: Vec<EventRuns<'a>>,
}

impl Serialize for PaymentView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let events = self
            .events
            .iter()
            .map(|(summary, attempts)| EventRuns { summary, attempts })
            .collect();
        PaymentJson {
            payment: &self.payment,
            amounts_sent: self.amounts_sent,
            events,
        }
        .serialize(serializer)
    }
}

impl Desk {
    /// A payment and its events; viewing it is audited.
    pub async fn payment(
        &self,
        source: &str,
        payment_id: &str,
        who: &str,
    ) -> Result<Option<PaymentView>, StoreError> {
        if !storable(source) || !storable(payment_id) {
            return Ok(None);
        }
        let client = self.client().await?;
        let Some(payment) = payments::get(&client, source, payment_id).await? else {
            return Ok(None);
        };
        let events =
            history::events_of_payment(&client, source, payment_id, PAYMENT_EVENTS).await?;
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let mut attempts = history::attempts_of(&client, &ids).await?;
        let mut events: Vec<(EventSummary, Vec<Attempt>)> = events
            .into_iter()
            .map(|event| {
                let runs = attempts.remove(&event.id).unwrap_or_default();
                (event, runs)
            })
            .collect();
        let texts = events.iter_mut().map(|(e, runs)| (e, &mut runs[..]));
        self.mask_texts_of(&client, texts.collect()).await?;
        audit::record(
            &client,
            &Record {
                who,
                action: "viewed_payment",
                source: Some(source),
                payment_id: Some(payment_id),
                ..Record::default()
            },
        )
        .await?;
        let amounts_sent = self
            .settings
            .now()
            .source(source)
            .is_none_or(|s| s.scheme.provider().sends_amounts());
        Ok(Some(PaymentView {
            payment,
            amounts_sent,
            events,
        }))
    }

    /// A customer's payments, newest first, and the cursor of the next page.
    pub async fn customer_payments(
        &self,
        customer: &str,
        limit: i64,
        cursor: Option<&str>,
    ) -> Result<PaymentPage, DeskError> {
        let after = cursor.map(filter::cursor::decode).transpose()?;
        if !storable(customer) {
            return Ok(PaymentPage {
                payments: Vec::new(),
                next_cursor: None,
            });
        }
        let mut found =
            payments::of_customer(&self.client().await?, customer, limit + 1, after.as_ref())
                .await?;
        let next = if found.len() as i64 > limit {
            found.truncate(usize::try_from(limit).unwrap_or(0));
            found.last().map(|p| {
                filter::cursor::encode(&(p.created_at, p.source.clone(), p.payment_id.clone()))
            })
        } else {
            None
        };
        Ok(PaymentPage {
            payments: found,
            next_cursor: next,
        })
    }
}
