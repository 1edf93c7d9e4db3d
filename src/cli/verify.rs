//! `hookd verify`: checks a delivery's signature the way `POST /webhooks/{source}`
//! would, now, and says which secret signed it or which check failed and why.

use std::path::Path;

use super::CliError;
use super::sign::source;
use crate::config::{Settings, Source};
use crate::signature::{SignatureError, Verified};

/// The headers of a file with one `Name: value` per line (what `hookd sign`
/// prints); blank lines are skipped.
pub fn read_headers(path: &Path) -> Result<Vec<(String, String)>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
    let mut headers = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match line.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => {
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
            _ => {
                return Err(CliError::Other(format!(
                    "{}:{}: not a \"Name: value\" header line",
                    path.display(),
                    n + 1
                )));
            }
        }
    }
    Ok(headers)
}

pub async fn run(
    settings: &Settings,
    source_name: &str,
    headers_file: &Path,
    body_file: &Path,
) -> Result<(), CliError> {
    let source = source(settings, source_name)?;
    let headers = read_headers(headers_file)?;
    let body = std::fs::read(body_file)
        .map_err(|e| CliError::Other(format!("{}: {e}", body_file.display())))?;
    let now = chrono::Utc::now().timestamp();
    // A certificate the request names, neither pinned nor cached, is fetched
    // as on receipt.
    let certificates = crate::outbound::Certificates::new();
    let verified =
        crate::intake::verify::signature(&certificates, source, &headers, &body, now).await;
    say!("{}", verdict(source, &headers, verified)?)?;
    Ok(())
}

/// What a delivery's check says: the line to print, or the failed check
/// explained.
pub fn verdict(
    source: &Source,
    headers: &[(String, String)],
    outcome: Result<Verified, SignatureError>,
) -> Result<String, CliError> {
    let provider = source.scheme.provider();
    let count = source.secrets.len();
    match outcome {
        // Mollie's: an unsigned request naming its event, fetched at receipt.
        Ok(Verified::FROM_PROVIDER_API) => Ok(format!(
            "ok: scheme {:?} signs nothing: its event is what the provider's API answers \
             for the id the request names, fetched with the source's api_key",
            provider.name()
        )),
        Ok(verified) if !provider.takes_secrets() => Ok(match verified.signed_with {
            0 => format!(
                "ok: signed with the certificate {} names, fetched",
                provider.certificate_named_by()
            ),
            n => format!(
                "ok: signed with pinned certificate {n} (certificates[{}])",
                n - 1
            ),
        }),
        Ok(verified) => Ok(format!(
            "ok: signed with secret {} of {count} ({}[{}])",
            verified.signed_with,
            source.secrets_key,
            verified.signed_with - 1
        )),
        Err(error) => {
            let why = match &error {
                SignatureError::Missing(_) => {
                    let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
                    format!(
                        "the headers given are: {}",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    )
                }
                SignatureError::MissingQuery(name) => {
                    format!("the source's requests must carry ?{name}= in their URL")
                }
                SignatureError::Malformed { .. } => format!(
                    "the header is there but not as the {} scheme writes it",
                    source.scheme.name()
                ),
                SignatureError::InBody { .. } => format!(
                    "the {} scheme signs inside the body, and this body does not carry its \
                     signature as the provider writes it",
                    source.scheme.name()
                ),
                SignatureError::Mismatch => format!(
                    "none of source {}'s {count} secret(s) signed this body with these headers; the \
                     body must be byte for byte what was received (not parsed, re-indented or \
                     given a final newline), and the headers those that came with it",
                    source.name
                ),
                SignatureError::Unavailable(detail) => format!(
                    "{detail}: the certificate could not be fetched from the URL the request \
                     names, or is not {}",
                    provider.certificate_owner()
                ),
                SignatureError::Replayed => "this signature was already accepted with another \
                    body"
                    .to_string(),
                SignatureError::TooOld { seconds } => format!(
                    "signed {} ago, beyond the tolerance of {} (the signature itself matches; \
                     a provider signs each retry anew)",
                    approx(*seconds),
                    crate::duration::format(source.tolerance)
                ),
                SignatureError::TooNew { seconds } => format!(
                    "signed {} in the future, beyond the tolerance of {} (the signature itself \
                     matches; is this machine's clock right?)",
                    approx(*seconds),
                    crate::duration::format(source.tolerance)
                ),
            };
            Err(CliError::Other(format!("not verified: {error}: {why}")))
        }
    }
}

/// Seconds as people say them: `2h 3m 10s`.
fn approx(seconds: u64) -> String {
    let mut parts = Vec::new();
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    for (value, unit) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
        if value > 0 || (unit == "s" && parts.is_empty()) {
            parts.push(format!("{value}{unit}"));
        }
    }
    parts.join(" ")
}
