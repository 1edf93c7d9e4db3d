//! A batch whose every new event's whole run is a payment merge of hookd's own
//! (`handlers::PaymentMerge`), folded into the one statement that stores it:
//! the events, their payments and their attempts in one round trip.

use chrono::Utc;
use deadpool_postgres::Object;
use tracing::{Instrument, Span};

use super::batch::{Fallback, Prepared};
use super::{GroupCommit, forward_names};
use crate::config::Settings;
use crate::ledger::{self, HandlerName, Run, Standing};
use crate::runner::Step;
use crate::store::events::{self, AttemptRecord, BatchItem, Recorded};
use crate::store::payments::PaymentUpdate;
use crate::store::{self, StoreError};

/// An item's payment merge and attempt, written by the statement that stores it.
pub(super) struct ItemMerge<'b> {
    /// The item's index in `Prepared::items`.
    at: usize,
    kind: &'b str,
    update: PaymentUpdate,
    attempt: AttemptRecord,
}
impl GroupCommit {
    /// Each item's payment merge and attempt, when every item is decided by id,
    /// has no forward to plan, and its handler (if any) is hookd's own payment
    /// merge with no refund to add (`handlers::PaymentMerge`).
    pub(super) fn fold<'b>(
        &self,
        items: &[BatchItem<'_>],
        plans: &[Vec<Step<'b>>],
    ) -> Option<Vec<ItemMerge<'b>>> {
        let received_at = Utc::now();
        let mut runs = Vec::new();
        for (at, (item, plan)) in items.iter().zip(plans).enumerate() {
            // A kept request is a statement of its own (`events::record_batch`);
            // planned forwards are rows of their own.
            if item.event.body_key.is_some()
                || item.event.request.is_some()
                || !forward_names(plan).is_empty()
            {
                return None;
            }
            let Some(Step::Local { kind, merge, .. }) =
                plan.iter().find(|s| matches!(s, Step::Local { .. }))
            else {
                continue;
            };
            // A handler of the team's own is not a merge hookd can write.
            let merge = (*merge)?;
            // The row's id is the statement's to assign; the merge does not read it.
            let view = self.runner.view_received(item.event, 0, received_at);
            let update = merge.update(&view)?;
            let run = Run {
                handler: HandlerName::Kind((*kind).to_string()),
                started_at: received_at,
                finished_at: received_at,
                result: Ok(()),
                http_status: None,
                response: None,
            };
            let attempt = ledger::attempt_record(0, 1, &run, Some(&Standing::Done));
            runs.push(ItemMerge {
                at,
                kind,
                update,
                attempt,
            });
        }
        Some(runs)
    }

    /// The folded batch in one statement on `client`, in a transaction sent
    /// whole, `BEGIN` and `COMMIT` with it: one round trip. Past
    /// `handler_timeout` the statement is cancelled and the batch stored one by
    /// one; a statement that lost to a concurrent one runs again.
    pub(super) async fn commit_folded(
        &self,
        client: &Object,
        prepared: &Prepared<'_>,
        runs: &[ItemMerge<'_>],
        settings: &Settings,
    ) -> Result<Vec<Option<Recorded>>, Fallback> {
        let folded: Vec<events::MergeRow<'_>> = runs
            .iter()
            .map(|run| events::MergeRow {
                source: &prepared.items[run.at].event.source,
                event_id: &prepared.items[run.at].event.event_id,
                update: &run.update,
                attempt: &run.attempt,
            })
            .collect();
        let merged: Vec<(&str, &str)> = runs
            .iter()
            .map(|run| (run.kind, &*prepared.items[run.at].event.event_id))
            .collect();
        // The statement is the handlers' merge too: it is their span.
        let span = folded_span(&merged);
        let clock = std::time::Instant::now();
        // One time limit for all the runs, as for a handler's batch.
        let deadline = tokio::time::Instant::now() + settings.handler_timeout;
        // Cut at the time limit: the cancel may still be on its way and hit
        // whatever this session runs next, so the session is closed; each event
        // goes on its own, its handler under its own time limit (and one whose
        // batch committed after all is found stored, and answered as such).
        let out_of_time = || {
            let why = "the batch's payment merges ran out of time";
            crate::traces::fail(&span, &why);
            Fallback::Spoiled(why.into())
        };
        let columns = events::FoldedStatement::from_runs(&prepared.items, &folded);
        // Prepared before the transaction is sent, so the `COMMIT` follows it.
        let ready = tokio::time::timeout_at(deadline, columns.ready(client));
        let statement = match ready.instrument(span.clone()).await {
            Ok(Ok(statement)) => statement,
            Ok(Err(error)) => return Err(undone(error, prepared, &span)),
            Err(_) => {
                self.runner.cancel(client.cancel_token()).await;
                return Err(out_of_time());
            }
        };
        let mut runs_so_far = 0;
        let decided = loop {
            runs_so_far += 1;
            let mut cut = false;
            let only = async {
                let run = statement.run(client);
                tokio::pin!(run);
                // A timeout polls its future before its timer, even with the
                // task's budget spent (a `select!` would then poll neither, and
                // the `COMMIT` would overtake the statement): the statement is on
                // the wire first, even when the time is already up.
                match tokio::time::timeout_at(deadline, &mut run).await {
                    Ok(decided) => decided,
                    Err(_) => {
                        cut = true;
                        self.runner.cancel(client.cancel_token()).await;
                        run.await
                    }
                }
            };
            let (decided, committed) =
                store::one_statement_transaction(client, only.instrument(span.clone())).await;
            let error = match (decided, committed, cut) {
                // Committed or not: never acknowledged from here (under
                // synchronous replication a cancelled wait still reports the
                // `COMMIT` done); the events' own transactions decide, and
                // find a kept batch's events stored (a second delivery each).
                (_, _, true) => return Err(out_of_time()),
                (Ok(decided), Ok(()), false) => break decided,
                // The `COMMIT` failed, or the one that ended the failed
                // statement's transaction: nothing was kept. A lost session is
                // closed (`Fallback::store` makes it `Unavailable`); any other
                // is idle again, no transaction open, and goes back to the pool.
                (_, Err(error), false) => return Err(Fallback::store(error)),
                (Err(error), Ok(()), false) => error,
            };
            if error.runs_again(runs_so_far) {
                log::debug!("storing a batch of {} again: {error}", prepared.items.len());
                continue;
            }
            return Err(undone(error, prepared, &span));
        };
        let merged_new: Vec<&ItemMerge<'_>> = runs
            .iter()
            .filter(|run| matches!(decided[run.at], Some(Recorded::New { .. })))
            .collect();
        let per_event = clock.elapsed() / u32::try_from(merged_new.len()).unwrap_or(1).max(1);
        for run in merged_new {
            self.runner.metrics().handler_duration(run.kind, per_event);
        }
        Ok(decided)
    }
}

/// The `handler` span of a folded statement merging the payments of `runs`
/// (`(kind, event id)`): the one a handler's run or batch would have had.
fn folded_span(runs: &[(&str, &str)]) -> Span {
    match runs {
        [] => Span::none(),
        [(kind, event_id)] => tracing::trace_span!(
            "handler",
            hookd.handler = kind,
            hookd.event_id = event_id,
            hookd.attempt = 1,
            otel.status_message = tracing::field::Empty,
        ),
        [(kind, _), ..] => {
            let mut kinds: Vec<&str> = runs.iter().map(|(kind, _)| *kind).collect();
            kinds.sort_unstable();
            kinds.dedup();
            tracing::trace_span!(
                "handler",
                hookd.handler = if kinds.len() == 1 {
                    kind.to_string()
                } else {
                    kinds.join(",")
                },
                hookd.batch.size = runs.len(),
                otel.status_message = tracing::field::Empty,
            )
        }
    }
}
/// What becomes of a folded batch whose statement (or its preparing) failed:
/// nothing of it was kept.
fn undone(error: StoreError, prepared: &Prepared<'_>, span: &Span) -> Fallback {
    crate::traces::fail(span, &error);
    match error {
        // A lone delivery has had its runs: its answer is this one.
        error @ StoreError::Contention(_) if prepared.places.len() == 1 => Fallback::Answer(error),
        // The merges are handlers: their failure (a lock or statement time
        // limit of the database's own, say) is recorded when each event is
        // stored on its own, as in a transaction of handlers, on another
        // session when this one may be spoiled.
        error if error.spoils_connection() => Fallback::Spoiled(error.to_string()),
        error => Fallback::OneByOne(error.to_string()),
    }
}
