//! A batch of deliveries in one transaction: copies of one event decided
//! together, one dedupe statement, each handler once for its new events, the
//! attempts in one statement, one commit — and then every delivery's answer.
//! What fails sends the batch to the deliveries' own transactions (`single`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::Utc;
use deadpool_postgres::Object;
use tracing::{Instrument, Span};

use super::folded::ItemMerge;
use super::{GroupCommit, Ingested, Job, first_write_for, forward_names};
use crate::config::Settings;
use crate::event::IncomingEvent;
use crate::handlers::{Event, Handler};
use crate::ledger::{self, HandlerName, Run, Standing};
use crate::runner::Step;
use crate::store::events::{self, AttemptRecord, BatchItem, Recorded};
use crate::store::{self, StoreError};

/// What makes two deliveries of a source one event: the id, or for a source
/// that dedupes on the body, the body's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key<'a> {
    Id(&'a str),
    Body(&'a [u8; 32]),
}

impl<'a> Key<'a> {
    fn of_event(event: &'a IncomingEvent) -> (&'a str, Self) {
        let key = match &event.body_key {
            Some(body) => Key::Body(body),
            None => Key::Id(&event.event_id),
        };
        (&event.source, key)
    }
}

/// A delivery's place in its batch: how it relates to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchPlace {
    /// The first delivery of its event in the batch: it goes into the statement.
    First(usize),
    /// A later copy of item `0`, with a matching fingerprint (or body key).
    CopyOf(usize),
    /// A later delivery of an earlier one's event id with another payload:
    /// decided alone.
    Apart,
}

/// A batch sorted out before its statements: each delivery's place, the events
/// that go into the dedupe statement, each one's plan, and, when every new
/// event's whole run is a payment merge of hookd's own, those merges.
pub(super) struct Prepared<'b> {
    pub(super) places: Vec<BatchPlace>,
    pub(super) items: Vec<BatchItem<'b>>,
    plans: Vec<Vec<Step<'b>>>,
    /// `Some` when the batch folds into one statement: the merges of the items
    /// with a payment handler, in order.
    folded: Option<Vec<ItemMerge<'b>>>,
}

impl GroupCommit {
    /// Stores a batch and answers every delivery in it.
    pub(super) async fn commit(&self, batch: Vec<Job>) {
        let metrics = self.runner.metrics();
        metrics.ingest_batch(batch.len());
        let settings = self.runner.settings();
        let prepared = self.prepare(&settings, &batch);
        // A lone delivery runs its handler in a savepoint: if the handler
        // fails, its failure is recorded at once, the handler run only once.
        // One whose whole run is a payment merge folds into one statement; one
        // with nothing to run is one autocommitted statement on its own.
        if batch.len() == 1 && prepared.folded.as_ref().is_none_or(Vec::is_empty) {
            drop(prepared);
            return self.one_by_one(batch).await;
        }
        // One transaction, one span: under the first delivery's, linked to the others'.
        let span = batch_span(&batch[0].span, batch.len());
        if !span.is_disabled() {
            for job in &batch[1..] {
                span.follows_from(&job.span);
            }
        }
        let session = self.sessions.acquire().await;
        let batched = match self.pool.get().await {
            Ok(mut client) => {
                let decided = match &prepared.folded {
                    Some(runs) => {
                        self.commit_folded(&client, &prepared, runs, &settings)
                            .instrument(span.clone())
                            .await
                    }
                    None => self
                        .commit_batch(&mut client, &prepared)
                        .instrument(span.clone())
                        .await
                        .map(|decided| decided.into_iter().map(Some).collect()),
                };
                if matches!(
                    decided,
                    Err(Fallback::Unavailable(_) | Fallback::Spoiled(_))
                ) {
                    store::discard(client);
                }
                decided.map(|decided| self.answers(&prepared, &decided))
            }
            Err(error) => Err(Fallback::store(error)),
        };
        drop(session);
        drop(prepared);
        match batched {
            Ok(results) => {
                self.note_commit();
                let mut apart = Vec::new();
                for (job, result) in batch.into_iter().zip(results) {
                    match result {
                        Some(result) => {
                            let _ = job.reply.send(result);
                        }
                        None => apart.push(job),
                    }
                }
                self.one_by_one(apart).await;
            }
            Err(Fallback::Unavailable(error)) => {
                crate::traces::fail(&span, &error);
                for job in batch {
                    let _ = job.reply.send(Err(StoreError::Unavailable(error.clone())));
                }
            }
            Err(Fallback::Answer(error)) => {
                crate::traces::fail(&span, &error);
                let mut error = Some(error);
                for job in batch {
                    let answer = error
                        .take()
                        .unwrap_or_else(|| StoreError::Unavailable("hookd is stopping".into()));
                    let _ = job.reply.send(Err(answer));
                }
            }
            Err(Fallback::OneByOne(why) | Fallback::Spoiled(why)) => {
                log::debug!("batch of {} stored one by one: {why}", batch.len());
                crate::traces::fail(&span, &why);
                self.one_by_one(batch).await;
            }
        }
    }

    /// Sorts out `batch`: copies of one event are carried by the first, and
    /// whether its statements fold into one.
    fn prepare<'b>(&'b self, settings: &'b Settings, batch: &'b [Job]) -> Prepared<'b> {
        let runner = &self.runner;
        // Copies of one event in the batch: the first carries them all.
        let mut first_of: HashMap<(&str, Key<'_>), usize> = HashMap::new();
        // The ids of the firsts keyed by body: one statement cannot store an id
        // twice.
        let mut body_keyed_ids: HashSet<(&str, &str)> = HashSet::new();
        let mut places = Vec::with_capacity(batch.len());
        let mut items: Vec<BatchItem<'_>> = Vec::new();
        let mut plans = Vec::new();
        for job in batch {
            let event = &job.event;
            let key = Key::of_event(event);
            if let Some(&at) = first_of.get(&key) {
                let first: &IncomingEvent = items[at].event;
                let same = matches!(key.1, Key::Body(_))
                    || first.fingerprint == event.fingerprint
                    || first.stable_fingerprint == event.stable_fingerprint;
                if same {
                    items[at].deliveries += 1;
                    places.push(BatchPlace::CopyOf(at));
                } else {
                    places.push(BatchPlace::Apart);
                }
                continue;
            }
            if event.body_key.is_some()
                && !body_keyed_ids.insert((event.source.as_str(), event.event_id.as_str()))
            {
                places.push(BatchPlace::Apart);
                continue;
            }
            let plan = runner.plan(
                settings,
                &event.source,
                &event.event_type,
                event.kind.as_deref(),
            );
            let expected = first_write_for(&plan);
            first_of.insert(key, items.len());
            places.push(BatchPlace::First(items.len()));
            items.push(BatchItem {
                event,
                signed_with: job.verified.signed_with,
                expected,
                deliveries: 1,
            });
            plans.push(plan);
        }
        let folded = self.fold(&items, &plans);
        Prepared {
            places,
            items,
            plans,
            folded,
        }
    }

    /// The batch in one transaction on `client`, each handler once for its new
    /// events; each item's decision. `Err` says the transaction was undone (one
    /// that lost to a concurrent one too: its deliveries are then stored one by one).
    async fn commit_batch(
        &self,
        client: &mut Object,
        prepared: &Prepared<'_>,
    ) -> Result<Vec<Recorded>, Fallback> {
        let runner = &self.runner;
        let (items, plans) = (&prepared.items, &prepared.plans);
        let tx = crate::store::begin(client).await.map_err(Fallback::store)?;
        let decided = events::record_batch(&tx, items)
            .await
            .map_err(Fallback::store)?;

        // Each handler once, for its new events of the batch.
        let mut by_handler: Vec<(&Arc<dyn Handler>, String, Vec<usize>)> = Vec::new();
        for (at, recorded) in decided.iter().enumerate() {
            let Recorded::New { .. } = recorded else {
                continue;
            };
            let Some(Step::Local { kind, handler, .. }) =
                plans[at].iter().find(|s| matches!(s, Step::Local { .. }))
            else {
                continue;
            };
            match by_handler.iter_mut().find(|(_, k, _)| k == kind) {
                Some((_, _, ats)) => ats.push(at),
                None => by_handler.push((handler, (*kind).to_string(), vec![at])),
            }
        }
        let received_at = Utc::now();
        let groups: Vec<(&Arc<dyn Handler>, &String, Vec<Event<'_>>)> = by_handler
            .iter()
            .map(|(handler, kind, ats)| {
                let views = ats
                    .iter()
                    .filter_map(|&at| match decided[at] {
                        Recorded::New { id } => {
                            Some(runner.view_received(items[at].event, id, received_at))
                        }
                        _ => None,
                    })
                    .collect();
                (*handler, kind, views)
            })
            .collect();
        // A batch's runs share its time: each attempt says when the batch's
        // handlers ran. They are written alongside (pipelined on the connection):
        // if a handler fails, the transaction and its attempts are undone together.
        let attempts: Vec<AttemptRecord> = groups
            .iter()
            .flat_map(|(_, kind, views)| {
                views.iter().map(|view| {
                    let run = Run {
                        handler: HandlerName::Kind((*kind).clone()),
                        started_at: received_at,
                        finished_at: Utc::now(),
                        result: Ok(()),
                        http_status: None,
                        response: None,
                    };
                    ledger::attempt_record(view.id, 1, &run, Some(&Standing::Done))
                })
            })
            .collect();
        let run_handlers = async {
            for (handler, kind, views) in &groups {
                let clock = std::time::Instant::now();
                runner
                    .apply_batch(&tx, kind, handler, views)
                    .await
                    .map_err(|failed| match failed.cut {
                        // A cancel may be on its way: the session is closed.
                        true => Fallback::Spoiled(failed.why),
                        false => Fallback::OneByOne(failed.why),
                    })?;
                let per_event = clock.elapsed() / u32::try_from(views.len()).unwrap_or(1).max(1);
                for _ in views {
                    runner.metrics().handler_duration(kind, per_event);
                }
            }
            Ok::<(), Fallback>(())
        };
        // The new events' forwards, planned in the same transaction.
        let planned: Vec<(i64, &str)> = decided
            .iter()
            .zip(plans)
            .filter_map(|(recorded, plan)| match recorded {
                Recorded::New { id } => Some(forward_names(plan).into_iter().map(|f| (*id, f))),
                _ => None,
            })
            .flatten()
            .collect();
        let (ran, written, planned) = tokio::join!(
            run_handlers,
            events::append_attempts(&tx, &attempts),
            store::forwards::plan(&tx, &planned)
        );
        ran?;
        written.map_err(Fallback::store)?;
        planned.map_err(Fallback::store)?;
        tx.commit()
            .instrument(tracing::trace_span!("commit"))
            .await
            .map_err(Fallback::store)?;
        Ok(decided)
    }

    /// Each delivery's outcome from the items' decisions (`None`: to be stored
    /// apart), once they have committed; counts the new events and wakes the
    /// dispatcher for their forwards.
    fn answers(
        &self,
        prepared: &Prepared<'_>,
        decided: &[Option<Recorded>],
    ) -> Vec<Option<Result<Ingested, StoreError>>> {
        let runner = &self.runner;
        let items = &prepared.items;
        for (at, recorded) in decided.iter().enumerate() {
            if matches!(recorded, Some(Recorded::New { .. })) {
                runner.count_status(items[at].event.kind.as_deref(), items[at].expected.status);
                runner.wake_forwards(&prepared.plans[at]);
            }
        }
        let outcome =
            |recorded: &Recorded, at: usize, copy: bool| -> Result<Ingested, StoreError> {
                let recorded = match recorded {
                    Recorded::New { id } if copy => Recorded::Duplicate {
                        id: *id,
                        event_id: items[at].event.event_id.clone(),
                    },
                    other => other.clone(),
                };
                let status = match recorded {
                    Recorded::New { .. } => Some(items[at].expected.status),
                    _ => None,
                };
                Ok(Ingested { recorded, status })
            };
        prepared
            .places
            .iter()
            .map(|place| match *place {
                BatchPlace::First(at) => Some(outcome(decided[at].as_ref()?, at, false)),
                // The first's id conflicts, which says nothing of a copy under
                // another id: it is decided on its own.
                BatchPlace::CopyOf(at) => match decided[at].as_ref()? {
                    Recorded::Conflict => None,
                    recorded => Some(outcome(recorded, at, true)),
                },
                BatchPlace::Apart => None,
            })
            .collect()
    }
}

/// The span of a transaction storing `size` deliveries, under `delivery`'s.
pub(super) fn batch_span(delivery: &Span, size: usize) -> Span {
    tracing::trace_span!(parent: delivery, "batch", hookd.batch.size = size)
}
/// Why a batch's transaction was undone.
pub(super) enum Fallback {
    /// The database is unreachable: every delivery of the batch gets 503.
    Unavailable(String),
    /// Something of the batch failed: store each delivery on its own.
    OneByOne(String),
    /// As `OneByOne`, and the batch's session is closed, not pooled: it may be
    /// spoiled (a server that can no longer serve hookd, a cancel on its way).
    Spoiled(String),
    /// A lone delivery's final answer.
    Answer(StoreError),
}

impl Fallback {
    pub(super) fn store(error: impl Into<StoreError>) -> Self {
        let error: StoreError = error.into();
        match error {
            StoreError::Unavailable(why) => Fallback::Unavailable(why),
            other => Fallback::OneByOne(other.to_string()),
        }
    }
}
