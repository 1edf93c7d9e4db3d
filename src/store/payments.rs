//! The `payments` business table. Every write is a merge whose operations (OR on
//! booleans, GREATEST on amounts and on non-null text) are commutative, associative
//! and idempotent: applying any set of events, any number of times, in any order,
//! leaves the same row. `status` is a generated column derived from those facts.
//!
//! Refunds stated one at a time are facts of their own in `payment_refunds`, keyed
//! by `(source, refund_id)`: the largest amount stated for an id stands, so a resent
//! refund counts once, and `amount_refunded` is the greatest of the cumulative
//! totals stated and the sum of the payment's refunds.

use super::sql::{self, Session, params};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::StoreError;
use crate::domain::PaymentFacts;

/// The facts one event adds to a payment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentUpdate {
    pub facts: PaymentFacts,
    pub succeeded: bool,
    pub failed: bool,
    pub disputed: bool,
}

/// How a payment's row takes in new facts, whichever order they come in: a fact
/// once true stays true, amounts only grow, and the same text always wins.
macro_rules! merge_facts {
    () => {
        "ON CONFLICT (source, payment_id) DO UPDATE SET
        succeeded       = p.succeeded OR EXCLUDED.succeeded,
        failed          = p.failed OR EXCLUDED.failed,
        disputed        = p.disputed OR EXCLUDED.disputed,
        amount          = GREATEST(p.amount, EXCLUDED.amount),
        amount_refunded = GREATEST(p.amount_refunded, EXCLUDED.amount_refunded),
        currency        = GREATEST(p.currency, EXCLUDED.currency),
        customer_id     = GREATEST(p.customer_id, EXCLUDED.customer_id),
        updated_at      = now()"
    };
}
pub(crate) use merge_facts;

/// Many payments' facts merged into their rows, the facts of one payment combined
/// first (the same `OR` and `GREATEST`/`max`, under the same collation): `$from`
/// yields them as `u(source, payment_id, succeeded, failed, disputed, amount,
/// amount_refunded, currency, customer_id)`.
macro_rules! merge_grouped {
    ($from:literal) => {
        concat!(
            "INSERT INTO payments AS p
                 (source, payment_id, succeeded, failed, disputed, amount, amount_refunded,
                  currency, customer_id)
             SELECT u.source, u.payment_id, bool_or(u.succeeded), bool_or(u.failed),
                    bool_or(u.disputed), COALESCE(max(u.amount), 0),
                    COALESCE(max(u.amount_refunded), 0), max(u.currency), max(u.customer_id)
             FROM ",
            $from,
            "
             GROUP BY u.source, u.payment_id
             ",
            $crate::store::payments::merge_facts!()
        )
    };
}
pub(crate) use merge_grouped;

/// One payment's facts merged into its row (also the pgbench baseline's).
pub const MERGE_PAYMENT: &str = concat!(
    "INSERT INTO payments AS p
        (source, payment_id, succeeded, failed, disputed, amount, amount_refunded,
         currency, customer_id)
    VALUES ($1, $2, $3, $4, $5, COALESCE($6::bigint, 0), COALESCE($7::bigint, 0), $8, $9)
    ",
    merge_facts!()
);

/// The refunds of a batch (`$1` sources, `$2` payment ids, `$3` refund ids,
/// `$4` amounts) added, each id once, the largest amount stated for it standing
/// (whatever the order the statements came in);
/// then each payment's `amount_refunded` raised to the sum of its refunds (capped
/// at the largest bigint). It runs after the payments' merge in the same
/// transaction, which locked their rows: so the refunds any other transaction
/// added to them have committed and are in this statement's snapshot, and those
/// it adds (not yet visible to the snapshot) are counted from `added`.
const ADD_REFUNDS: &str = "
    WITH stated AS (
        SELECT DISTINCT ON (source, refund_id) source, refund_id, payment_id, amount
        FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
             AS u(source, payment_id, refund_id, amount)
        ORDER BY source, refund_id, amount DESC, payment_id
    ), added AS (
        INSERT INTO payment_refunds AS r (source, refund_id, payment_id, amount)
        SELECT source, refund_id, payment_id, amount FROM stated ORDER BY source, refund_id
        ON CONFLICT (source, refund_id) DO UPDATE SET amount = EXCLUDED.amount
            WHERE EXCLUDED.amount > r.amount
        RETURNING r.source, r.refund_id, r.payment_id, r.amount
    ), refunded AS (
        SELECT source, payment_id, sum(amount) AS amount
        FROM (SELECT r.source, r.payment_id, r.amount FROM payment_refunds r
              WHERE (r.source, r.payment_id) IN (SELECT source, payment_id FROM stated)
                AND NOT EXISTS (SELECT 1 FROM added a
                                WHERE a.source = r.source AND a.refund_id = r.refund_id)
              UNION ALL
              SELECT source, payment_id, amount FROM added) AS t
        GROUP BY source, payment_id
    )
    UPDATE payments p
    SET amount_refunded = GREATEST(p.amount_refunded,
                                   LEAST(refunded.amount, 9223372036854775807))
    FROM refunded
    WHERE p.source = refunded.source AND p.payment_id = refunded.payment_id";

pub async fn merge(
    client: &impl Session,
    source: &str,
    update: &PaymentUpdate,
) -> Result<(), StoreError> {
    let facts = &update.facts;
    let params = params![
        &source,
        &facts.payment_id,
        &update.succeeded,
        &update.failed,
        &update.disputed,
        &facts.amount,
        &facts.amount_refunded,
        &facts.currency,
        &facts.customer_id,
    ];
    let merged = sql::ready(client, MERGE_PAYMENT, params).await?;
    match &facts.refund {
        None => merged.execute(client).await?,
        Some(_) => then_add_refunds(client, &merged, &[(source, update)]).await?,
    };
    Ok(())
}

/// Runs `merged` (the payments' merge, which locks their rows), then adds the
/// refunds of `updates` — sent together, in that order, in one round trip. Both
/// are ready before either is sent: had the second been prepared already and
/// the first not, the second would run first, its snapshot taken before the
/// merge waited for the rows' locks, missing refunds committed meanwhile.
async fn then_add_refunds(
    client: &impl Session,
    merged: &sql::Ready<'_>,
    updates: &[(&str, &PaymentUpdate)],
) -> Result<u64, StoreError> {
    let with_refund = || {
        updates.iter().filter_map(|(source, u)| {
            Some((*source, &u.facts.payment_id, u.facts.refund.as_ref()?))
        })
    };
    let sources: Vec<&str> = with_refund().map(|(s, _, _)| s).collect();
    let payments: Vec<&str> = with_refund().map(|(_, p, _)| p.as_str()).collect();
    let ids: Vec<&str> = with_refund().map(|(_, _, r)| r.id.as_str()).collect();
    let amounts: Vec<i64> = with_refund().map(|(_, _, r)| r.amount).collect();
    let params = params![&sources, &payments, &ids, &amounts];
    let add = sql::ready(client, ADD_REFUNDS, params).await?;
    // `join!` polls `merged` first, so its statement is sent first.
    let (merged, added) = tokio::join!(merged.execute(client), add.execute(client));
    merged?;
    added
}

/// `merge` for many updates in one statement (and one more, sent with it, when
/// refunds are among them): the updates of one payment are combined by the
/// database first (the same `OR` and `GREATEST`/`max`, under the same collation,
/// and each refund id's largest amount), so the row ends as it would after
/// merging them one by one.
pub async fn merge_many(
    client: &impl Session,
    updates: &[(&str, &PaymentUpdate)],
) -> Result<(), StoreError> {
    let columns = PaymentColumns::from_updates(updates);
    let params = columns.params();
    let merged = sql::ready(
        client,
        merge_grouped!(
            "unnest($1::text[], $2::text[], $3::bool[], $4::bool[], $5::bool[],
                    $6::bigint[], $7::bigint[], $8::text[], $9::text[])
                 AS u(source, payment_id, succeeded, failed, disputed, amount,
                      amount_refunded, currency, customer_id)"
        ),
        &params,
    )
    .await?;
    if updates.iter().any(|(_, u)| u.facts.refund.is_some()) {
        then_add_refunds(client, &merged, updates).await?;
    } else {
        merged.execute(client).await?;
    }
    Ok(())
}

/// The columns of many updates as `merge_grouped!` reads them.
pub(super) struct PaymentColumns<'a> {
    sources: Vec<&'a str>,
    ids: Vec<&'a str>,
    succeeded: Vec<bool>,
    failed: Vec<bool>,
    disputed: Vec<bool>,
    amounts: Vec<Option<i64>>,
    refunded: Vec<Option<i64>>,
    currencies: Vec<Option<&'a str>>,
    customers: Vec<Option<&'a str>>,
}

impl<'a> PaymentColumns<'a> {
    pub(super) fn from_updates(updates: &[(&'a str, &'a PaymentUpdate)]) -> Self {
        PaymentColumns {
            sources: updates.iter().map(|(s, _)| *s).collect(),
            ids: updates
                .iter()
                .map(|(_, u)| u.facts.payment_id.as_str())
                .collect(),
            succeeded: updates.iter().map(|(_, u)| u.succeeded).collect(),
            failed: updates.iter().map(|(_, u)| u.failed).collect(),
            disputed: updates.iter().map(|(_, u)| u.disputed).collect(),
            amounts: updates.iter().map(|(_, u)| u.facts.amount).collect(),
            refunded: updates
                .iter()
                .map(|(_, u)| u.facts.amount_refunded)
                .collect(),
            currencies: updates
                .iter()
                .map(|(_, u)| u.facts.currency.as_deref())
                .collect(),
            customers: updates
                .iter()
                .map(|(_, u)| u.facts.customer_id.as_deref())
                .collect(),
        }
    }

    /// `$1`..`$9` of `merge_grouped!`'s `unnest`, or nine in a row of a larger statement.
    pub(super) fn params(&self) -> [sql::Param<'_>; 9] {
        [
            sql::param(&self.sources),
            sql::param(&self.ids),
            sql::param(&self.succeeded),
            sql::param(&self.failed),
            sql::param(&self.disputed),
            sql::param(&self.amounts),
            sql::param(&self.refunded),
            sql::param(&self.currencies),
            sql::param(&self.customers),
        ]
    }
}

/// A `payments` row, with its column names.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Payment {
    pub source: String,
    pub payment_id: String,
    pub status: String,
    pub succeeded: bool,
    pub failed: bool,
    pub disputed: bool,
    pub amount: i64,
    pub amount_refunded: i64,
    pub currency: Option<String>,
    pub customer_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const PAYMENT_COLUMNS: &str = "source, payment_id, status, succeeded, failed, disputed, amount, \
     amount_refunded, currency, customer_id, created_at, updated_at";

fn payment(row: &tokio_postgres::Row) -> Payment {
    Payment {
        source: row.get(0),
        payment_id: row.get(1),
        status: row.get(2),
        succeeded: row.get(3),
        failed: row.get(4),
        disputed: row.get(5),
        amount: row.get(6),
        amount_refunded: row.get(7),
        currency: row.get(8),
        customer_id: row.get(9),
        created_at: row.get(10),
        updated_at: row.get(11),
    }
}

pub async fn get(
    client: &impl Session,
    source: &str,
    payment_id: &str,
) -> Result<Option<Payment>, StoreError> {
    let row = sql::query_opt(
        client,
        &format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE source = $1 AND payment_id = $2"),
        params![&source, &payment_id],
    )
    .await?;
    Ok(row.as_ref().map(payment))
}

/// A customer's payments, newest first; at most `limit`, after `after` (the
/// `(created_at, source, payment_id)` of the previous page's last).
pub async fn of_customer(
    client: &impl Session,
    customer: &str,
    limit: i64,
    after: Option<&(DateTime<Utc>, String, String)>,
) -> Result<Vec<Payment>, StoreError> {
    let (at, source, id) = match after {
        Some((at, source, id)) => (Some(*at), Some(source.as_str()), Some(id.as_str())),
        None => (None, None, None),
    };
    let rows = sql::query(
        client,
        &format!(
            "SELECT {PAYMENT_COLUMNS} FROM payments
             WHERE customer_id = $1
               AND ($3::timestamptz IS NULL
                    OR (created_at, source, payment_id) < ($3, $4::text, $5::text))
             ORDER BY created_at DESC, source DESC, payment_id DESC
             LIMIT $2"
        ),
        params![&customer, &limit, &at, &source, &id],
    )
    .await?;
    Ok(rows.iter().map(payment).collect())
}
