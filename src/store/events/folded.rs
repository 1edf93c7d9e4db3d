//! A batch decided by id, its new events' payment merges and their attempts,
//! in one statement.

use crate::store::sql::{self, Session};

use crate::store::StoreError;
use crate::store::payments::{PaymentColumns, PaymentUpdate};

use super::attempts::AttemptColumns;
use super::batch::{BatchItem, EventColumns, decision, record_batch_sql, record_by_id_sql};
use super::{AttemptRecord, Recorded};

/// A row of the folded statement: a new event's payment merge, run by the
/// built-in handler of its kind, and the attempt that records the run.
pub struct MergeRow<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub update: &'a PaymentUpdate,
    pub attempt: &'a AttemptRecord,
}

/// `RECORD_BATCH`, and in the same statement the payment merges of the events
/// it stores as new and their attempts: `runs`, a row per `MergeRow` of an
/// event stored as new (its source, the payment's columns, its event id, then
/// its attempt's columns). Its parameters are `$?` (`sql::numbered!`), bound in
/// the order they appear: the items' columns, the payments', the event ids,
/// the attempts' (`FoldedStatement::ready`).
const RECORD_FOLDED: &str = sql::numbered!(concat!(
    "WITH recorded AS (",
    record_by_id_sql!(),
    "), runs AS (
         SELECT r.id, u.*
         FROM unnest($?::text[], $?::text[], $?::bool[], $?::bool[], $?::bool[],
                     $?::bigint[], $?::bigint[], $?::text[], $?::text[], $?::text[],
                     $?::int[], $?::text[], $?::timestamptz[], $?::timestamptz[],
                     $?::text[], $?::text[], $?::int[], $?::text[])
              AS u(source, payment_id, succeeded, failed, disputed, amount,
                   amount_refunded, currency, customer_id, event_id, attempt, handler,
                   started_at, finished_at, outcome, error, http_status, response)
         JOIN recorded r ON r.source = u.source AND r.event_id = u.event_id AND r.inserted
     ), merged AS (",
    crate::store::payments::merge_grouped!("runs u"),
    "), attempted AS (
         INSERT INTO webhook_event_attempts
             (webhook_event_id, attempt, handler, started_at, finished_at, outcome, error,
              http_status, response)
         SELECT a.id, a.attempt, a.handler, a.started_at, a.finished_at, a.outcome, a.error,
                a.http_status, a.response
         FROM runs a
     )
     SELECT id, source, event_id, inserted, body_sha256 FROM recorded"
));

/// `items` (every one decided by id) stored, and the payment merges and attempts
/// of those that are new, in one statement, all or nothing: its columns,
/// gathered. The caller (`store::one_statement_transaction`) sends `BEGIN` and
/// `COMMIT` along with it.
pub struct FoldedStatement<'a> {
    items: &'a [BatchItem<'a>],
    columns: EventColumns<'a>,
    payments: PaymentColumns<'a>,
    event_ids: Vec<&'a str>,
    attempts: AttemptColumns<'a>,
}

/// The folded statement with its parameters bound, prepared, ready to send
/// (`FoldedStatement::ready`).
pub struct BoundFoldedStatement<'p> {
    items: &'p [BatchItem<'p>],
    statement: sql::Ready<'p>,
}

impl<'a> FoldedStatement<'a> {
    pub fn from_runs(items: &'a [BatchItem<'a>], runs: &[MergeRow<'a>]) -> Self {
        let all: Vec<&BatchItem<'a>> = items.iter().collect();
        let updates: Vec<(&str, &PaymentUpdate)> =
            runs.iter().map(|r| (r.source, r.update)).collect();
        FoldedStatement {
            items,
            columns: EventColumns::from_items(&all),
            payments: PaymentColumns::from_updates(&updates),
            event_ids: runs.iter().map(|r| r.event_id).collect(),
            attempts: AttemptColumns::from_attempts(runs.iter().map(|r| r.attempt)),
        }
    }

    /// Prepared now (once per connection) when statements are prepared, so that
    /// `BoundFoldedStatement::run` puts it on the wire when first polled: sent along with
    /// a `COMMIT`, the statement is on the wire before it.
    pub async fn ready(
        &self,
        client: &impl Session,
    ) -> Result<BoundFoldedStatement<'_>, StoreError> {
        let mut params = Vec::new();
        params.extend(self.columns.params());
        params.extend(self.payments.params());
        params.push(sql::param(&self.event_ids));
        params.extend(self.attempts.params());
        Ok(BoundFoldedStatement {
            items: self.items,
            statement: sql::ready(client, RECORD_FOLDED, params).await?,
        })
    }
}

impl BoundFoldedStatement<'_> {
    /// Runs the statement: each item's decision, `None` for one the statement
    /// did not take (`decision`'s), to be decided on its own.
    pub async fn run(&self, client: &impl Session) -> Result<Vec<Option<Recorded>>, StoreError> {
        let rows = self.statement.query(client).await?;
        Ok(self
            .items
            .iter()
            .map(|item| decision(item.event, &rows))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::RECORD_FOLDED;

    #[test]
    fn the_folded_statement_numbers_its_parameters_in_the_order_they_are_bound() {
        // The items' 15 columns, the payments' 9, the event ids, the attempts' 8.
        for (number, of) in [(1, "text"), (15, "int"), (16, "text"), (33, "text")] {
            assert!(
                RECORD_FOLDED.contains(&format!("${number}::{of}[]")),
                "${number}"
            );
        }
        assert!(!RECORD_FOLDED.contains("$34") && !RECORD_FOLDED.contains("$?"));
    }
}
