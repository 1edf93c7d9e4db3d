//! `hookd reconcile --source NAME`: one pass over the provider's list of
//! events (see `reconcile`), printed as one line (or a JSON object).

use chrono::{SecondsFormat, Utc};

use super::CliError;
use crate::instance::Instance;

pub async fn run(
    app: &Instance,
    source: &str,
    since: Option<&str>,
    dry_run: bool,
    json: bool,
) -> Result<(), CliError> {
    let settings = app.settings.now();
    let source = settings
        .source(source)
        .ok_or_else(|| CliError::Other(format!("no source named {source:?}")))?;
    let now = Utc::now();
    let since = match since {
        Some(text) => crate::filter::parse_moment("--since", text, now)
            .map_err(|e| CliError::Other(e.to_string()))?,
        None => crate::duration::before(now, source.reconcile.window).unwrap_or(now),
    };
    if let (Some(earliest), Some(lister)) = (
        crate::reconcile::earliest(source, now),
        source.reconcile.lister,
    ) && since < earliest
    {
        return Err(CliError::Other(format!(
            "--since: {} lists the events of the last {} only",
            lister.title(),
            crate::duration::format(lister.max_window())
        )));
    }
    let reach = crate::config::keys_reach(settings.key_retention);
    if let Some(kept) = crate::duration::before(now, reach)
        && since < kept
    {
        return Err(CliError::Other(format!(
            "--since: events before {} ago may have had their keys purged (key_retention {}); \
             recovering them would apply them again",
            crate::duration::format(reach),
            crate::duration::format(settings.key_retention)
        )));
    }
    let passed = crate::reconcile::pass(app, source, since, dry_run).await;
    let (counts, error) = match passed {
        Ok(counts) => (counts, None),
        Err(stopped) => (stopped.counts, Some(stopped.to_string())),
    };
    if json {
        // A pass that stopped half-way still says what it stored (in JSON too,
        // for a script), with the error beside the counts.
        let mut value = serde_json::json!({
            "source": source.name,
            "since": since.to_rfc3339_opts(SecondsFormat::Secs, true),
            "listed": counts.listed,
            "present": counts.present,
            "recovered": counts.recovered,
            "conflicts": counts.conflicts,
        });
        if let Some(error) = &error {
            value["error"] = serde_json::Value::String(error.clone());
        }
        // A failed pass exits 1, read or not.
        say!("{value}").or_else(super::unheard)?;
    } else if error.is_none() {
        say!("{counts}")?;
    }
    match error {
        Some(error) => Err(CliError::Other(format!(
            "reconcile {}: {error}",
            source.name
        ))),
        None => Ok(()),
    }
}
