//! `hookd sign`: the headers a provider would send with a body, one per line, for
//! curl (the signing itself is `simulate::sign_delivery`).

use std::path::Path;

use super::CliError;
use crate::config::{Settings, Source};
use crate::simulate::{Hints, sign_delivery};

/// The GitHub event name for a fixture file: its stem (`push.json` → `push`).
pub fn event_name_from_path(path: &Path) -> Option<String> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .map(|s| s.split('.').next().unwrap_or(s).to_string())
}

pub fn source<'s>(settings: &'s Settings, name: &str) -> Result<&'s Source, CliError> {
    settings.source(name).ok_or_else(|| {
        let known: Vec<_> = settings.sources.iter().map(|s| s.name.as_str()).collect();
        CliError::Other(format!(
            "no source named {name:?} in the configuration (known: {})",
            known.join(", ")
        ))
    })
}

/// `hookd sign --source NAME FILE`: one header per line, ready for `curl -H @file`;
/// for a provider that signs inside the body, the signed body instead.
pub fn run(settings: &Settings, source_name: &str, file: &Path) -> Result<(), CliError> {
    let source = source(settings, source_name)?;
    let body =
        std::fs::read(file).map_err(|e| CliError::Other(format!("{}: {e}", file.display())))?;
    let name = event_name_from_path(file);
    let hints = Hints {
        event_type: if source.scheme.provider().names_events_by_file() {
            name.as_deref()
        } else {
            None
        },
        event_id: None,
    };
    let signed = sign_delivery(source, &body, hints, chrono::Utc::now().timestamp())
        .map_err(|e| CliError::Other(format!("{}: {e}", file.display())))?;
    if let Some(query) = source.scheme.provider().delivery_query() {
        // The source takes calls only at a URL carrying its token (Mollie's);
        // the token itself is not printed (terminals and CI logs keep it).
        let name = query
            .split_once('=')
            .map_or(query.as_str(), |(name, _)| name);
        eprintln!(
            "send to /webhooks/{}?{name}=<one of the source's url_tokens>",
            source.name
        );
    }
    if signed.body != body {
        // The provider signs inside the body (Adyen): the signed body is what to
        // send, and the headers go beside it.
        for (name, value) in &signed.headers {
            eprintln!("send with the header {name}: {value}");
        }
        std::io::Write::write_all(&mut std::io::stdout(), &signed.body)
            .map_err(|e| CliError::Other(format!("writing the signed body: {e}")))?;
        return Ok(());
    }
    for (name, value) in signed.headers {
        say!("{name}: {value}")?;
    }
    Ok(())
}
