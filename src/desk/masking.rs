//! What viewers see of personal data: payloads covered by their source's
//! `mask`, and free texts (errors, receivers' answers) masked where they quote it.

use serde_json::Value;

use super::Desk;
use crate::mask::{self, Cover};
use crate::store::StoreError;
use crate::store::history::{self, Attempt, EventSummary};

impl Desk {
    /// The values a free text beside `payload` (of an event of `source`) may
    /// quote: those its source's `mask` names; every one when the source is not
    /// configured any more; none once the payload is purged.
    pub(super) fn quoted_values(&self, source: &str, payload: Option<&Value>) -> Vec<String> {
        let Some(payload) = payload else {
            return Vec::new();
        };
        match self.settings.now().source(source) {
            Some(source) => mask::values(payload, &source.mask),
            None => mask::values(payload, &[String::new()]),
        }
    }

    /// Masks, for viewers, the free texts of `events` (each with its runs, if
    /// shown) as their payloads are masked.
    pub(super) async fn mask_texts_of(
        &self,
        client: &deadpool_postgres::Object,
        events: Vec<(&mut EventSummary, &mut [Attempt])>,
    ) -> Result<(), StoreError> {
        let quoting = |(summary, runs): &(&mut EventSummary, &mut [Attempt])| {
            summary.last_error.is_some()
                || runs
                    .iter()
                    .any(|a| a.error.is_some() || a.response.is_some())
        };
        let ids: Vec<i64> = events
            .iter()
            .filter(|e| quoting(e))
            .map(|(s, _)| s.id)
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let payloads = history::payloads_of(client, &ids).await?;
        for (summary, runs) in events {
            let values = self.quoted_values(&summary.source, payloads.get(&summary.id));
            mask_free_texts(&values, &mut summary.last_error, runs);
        }
        Ok(())
    }

    /// Covers a payload's personal data as its source's `mask` says; all of it
    /// when the source is not configured any more (its fields are unknown).
    pub(super) fn cover(&self, source: &str, payload: &mut Value, how: Cover) {
        match self.settings.now().source(source) {
            Some(source) => mask::cover(payload, &source.mask, how),
            None => mask::cover_all(payload, how),
        }
    }
}

/// Masks an event's free texts — its last error, its runs' errors and
/// receivers' answers — where they quote `values` or an e-mail address.
pub(super) fn mask_free_texts(
    values: &[String],
    last_error: &mut Option<String>,
    runs: &mut [Attempt],
) {
    let cover = |text: &mut Option<String>, cut: fn(&str) -> bool| {
        if let Some(text) = text {
            *text = mask::cover_quoted(text, values, Cover::Mask, cut(text));
        }
    };
    cover(last_error, error_cut);
    for run in runs {
        cover(&mut run.error, error_cut);
        cover(&mut run.response, answer_cut);
    }
}

/// A stored error cut short ends in `…`.
pub(super) fn error_cut(error: &str) -> bool {
    error.ends_with('…')
}

/// A receiver's answer is kept up to `RESPONSE_EXCERPT` bytes (a character cut
/// in two may leave it up to three short).
fn answer_cut(answer: &str) -> bool {
    answer.len() + 3 >= crate::handlers::forward::RESPONSE_EXCERPT
}
