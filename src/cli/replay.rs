//! `hookd replay`: sends fixture files to a running hookd, signed as the provider
//! signs them, once, several times in a row, several copies at once, or as new
//! events. One line per delivery, a summary, and a non-zero exit if any delivery
//! was not answered with a 2xx.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::CliError;
use super::sign::{event_name_from_path, source};
use crate::config::{Settings, Source};
use crate::simulate::{Hints, SignError, sign_delivery, with_new_id};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub paths: Vec<PathBuf>,
    /// `None`: the source named like the first path's folder.
    pub source: Option<String>,
    pub url: Option<String>,
    pub times: usize,
    pub parallel: usize,
    pub new_ids: bool,
}

/// The source a folder of fixtures is named after (`fixtures/stripe`, or the
/// folder of a file in it).
fn source_of_folder<'s>(settings: &'s Settings, paths: &[PathBuf]) -> Result<&'s Source, CliError> {
    let first = paths.first();
    let folder = first.and_then(|p| {
        if p.is_dir() {
            Some(p.as_path())
        } else {
            p.parent()
        }
    });
    let name = folder
        .and_then(|f| f.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    settings.source(name).ok_or_else(|| {
        CliError::Other(format!(
            "name the source with --source: no configured source is named after the folder {name:?}"
        ))
    })
}

/// Why a file was not sent, or its delivery got no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Unreadable(String),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error(transparent)]
    Sign(#[from] SignError),
    /// `cause`: what TLS said, when the handshake failed.
    #[error("cannot connect to {url}{}", in_parentheses(.cause))]
    Connect { url: String, cause: Option<String> },
    #[error("no answer from {url} within 30 s")]
    Timeout { url: String },
    #[error("{0}")]
    Send(String),
}

/// ` (cause)`, or nothing.
fn in_parentheses(cause: &Option<String>) -> String {
    cause
        .as_ref()
        .map_or_else(String::new, |cause| format!(" ({cause})"))
}

/// What became of one delivery.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub file: String,
    pub event_id: String,
    pub result: Result<Answer, ReplayError>,
    pub latency: Duration,
}

#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The answer's `status` or `error` field.
    pub summary: String,
    pub replayed: bool,
}

impl Delivery {
    pub fn succeeded(&self) -> bool {
        matches!(&self.result, Ok(a) if (200..300).contains(&a.status))
    }

    fn line(&self) -> String {
        let ms = self.latency.as_secs_f64() * 1000.0;
        match &self.result {
            Ok(a) => format!(
                "{}  {}  {} {}  {}  {ms:.1} ms",
                self.file,
                self.event_id,
                a.status,
                a.summary,
                if a.replayed { "replayed" } else { "new" },
            ),
            Err(error) => format!(
                "{}  {}  error: {error}  {ms:.1} ms",
                self.file, self.event_id
            ),
        }
    }
}

/// Runs the replay and prints as it goes; the error says why it failed overall.
pub async fn run(settings: &Settings, options: &ReplayOptions) -> Result<(), CliError> {
    let source = match &options.source {
        Some(name) => source(settings, name)?,
        None => source_of_folder(settings, &options.paths)?,
    };
    let base = options
        .url
        .clone()
        .unwrap_or_else(|| default_base(settings));
    let mut url = format!("{}/webhooks/{}", base.trim_end_matches('/'), source.name);
    if let Some(query) = source.scheme.provider().delivery_query() {
        url = format!("{url}?{query}");
    }
    let files = collect_files(&options.paths)?;
    if files.is_empty() {
        return Err(CliError::Other("no .json files in the given paths".into()));
    }
    let http = crate::outbound::client(Duration::from_secs(30))
        .map_err(|e| CliError::Other(e.to_string()))?;
    let mut deliveries = Vec::new();
    let mut unreadable = 0;
    for (at, file) in files.iter().enumerate() {
        let name = display_name(file);
        let prepared = match prepare(source, file, options.new_ids) {
            Ok(prepared) => prepared,
            Err(error) => {
                say!("{name}  error: {error}").or_else(super::unheard)?;
                unreadable += 1;
                continue;
            }
        };
        for _ in 0..options.times.max(1) {
            let copies =
                (0..options.parallel.max(1)).map(|_| send(&http, &url, source, &name, &prepared));
            let sent = futures_util::future::join_all(copies).await;
            let unreachable = sent.iter().find_map(|d| match &d.result {
                Err(error @ ReplayError::Connect { .. }) => Some(error.to_string()),
                _ => None,
            });
            for delivery in sent {
                say!("{}", delivery.line()).or_else(super::unheard)?;
                deliveries.push(delivery);
            }
            // No connection could be made (refused, no such host, a TLS
            // handshake refused): every other file would say the same.
            if let Some(unreachable) = unreachable {
                say!("{}", summary(&deliveries, unreadable)).or_else(super::unheard)?;
                let left = files.len() - at - 1;
                return Err(CliError::Other(if left == 0 {
                    unreachable
                } else {
                    format!("{unreachable}; the {left} other file(s) were not sent")
                }));
            }
        }
    }
    let failed = deliveries.iter().filter(|d| !d.succeeded()).count() + unreadable;
    say!("{}", summary(&deliveries, unreadable)).or_else(super::unheard)?;
    if failed > 0 {
        return Err(CliError::Other(format!(
            "{failed} of {} deliveries were not accepted",
            deliveries.len() + unreadable
        )));
    }
    Ok(())
}

fn default_base(settings: &Settings) -> String {
    let mut addr = settings.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}")
}

/// Files as given, folders as their `.json` files in name order.
fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A file ready to send: its bytes, and what the signer cannot read from them.
struct Prepared {
    body: Vec<u8>,
    event_type: Option<String>,
    event_id: Option<String>,
}

fn prepare(source: &Source, file: &Path, new_ids: bool) -> Result<Prepared, ReplayError> {
    let body = std::fs::read(file).map_err(|e| ReplayError::Unreadable(e.to_string()))?;
    serde_json::from_slice::<Value>(&body).map_err(|e| ReplayError::NotJson(e.to_string()))?;
    let event_type = if source.scheme.provider().names_events_by_file() {
        event_name_from_path(file)
    } else {
        None
    };
    if new_ids {
        let (body, event_id) = with_new_id(source, &body)?;
        return Ok(Prepared {
            body,
            event_type,
            event_id,
        });
    }
    Ok(Prepared {
        body,
        event_type,
        event_id: None,
    })
}

/// The URL as messages show it: without its query, which may carry a
/// source's token (Mollie's `?token=`).
fn shown(url: &str) -> String {
    match url.split_once('?') {
        Some((path, _)) => format!("{path}?…"),
        None => url.to_string(),
    }
}

async fn send(
    http: &reqwest::Client,
    url: &str,
    source: &Source,
    file: &str,
    prepared: &Prepared,
) -> Delivery {
    let hints = Hints {
        event_type: prepared.event_type.as_deref(),
        event_id: prepared.event_id.as_deref(),
    };
    let started = Instant::now();
    let signed = match sign_delivery(
        source,
        &prepared.body,
        hints,
        chrono::Utc::now().timestamp(),
    ) {
        Ok(signed) => signed,
        Err(error) => {
            return Delivery {
                file: file.to_string(),
                event_id: "-".into(),
                result: Err(error.into()),
                latency: started.elapsed(),
            };
        }
    };
    let mut request = http.post(url).body(signed.body);
    for (name, value) in &signed.headers {
        request = request.header(name, value);
    }
    let result = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let replayed = response
                .headers()
                .get("Idempotent-Replayed")
                .is_some_and(|v| v == "true");
            let text = response.text().await.unwrap_or_default();
            // hookd's JSON answer, or the fixed one a provider expects (`[accepted]`).
            let summary = match serde_json::from_str::<Value>(&text) {
                Ok(body) => [&body["status"], &body["error"]]
                    .into_iter()
                    .find_map(Value::as_str)
                    .unwrap_or("-")
                    .to_string(),
                Err(_) if !text.trim().is_empty() && text.len() <= 64 => text.trim().to_string(),
                Err(_) => "-".to_string(),
            };
            Ok(Answer {
                status,
                summary,
                replayed,
            })
        }
        Err(error) if error.is_connect() => Err(ReplayError::Connect {
            url: shown(url),
            cause: tls_cause(&error),
        }),
        Err(error) if error.is_timeout() => Err(ReplayError::Timeout { url: shown(url) }),
        Err(error) => Err(ReplayError::Send(error.without_url().to_string())),
    };
    Delivery {
        file: file.to_string(),
        event_id: signed.event_id,
        result,
        latency: started.elapsed(),
    }
}

fn summary(deliveries: &[Delivery], unreadable: usize) -> String {
    let count = |f: &dyn Fn(&Delivery) -> bool| deliveries.iter().filter(|d| f(d)).count();
    let new = count(&|d| d.succeeded() && matches!(&d.result, Ok(a) if !a.replayed));
    let replayed = count(&|d| d.succeeded() && matches!(&d.result, Ok(a) if a.replayed));
    let refused = count(&|d| matches!(&d.result, Ok(a) if !(200..300).contains(&a.status)));
    let errors = count(&|d| d.result.is_err());
    let mut latencies: Vec<Duration> = deliveries.iter().map(|d| d.latency).collect();
    latencies.sort();
    let at = |q: f64| {
        let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies
            .get(index)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    format!(
        "{} deliveries: {new} new, {replayed} replayed, {refused} refused, {errors} errors, \
         {unreadable} unreadable files; latency p50 {:.1} ms, max {:.1} ms",
        deliveries.len(),
        at(0.5),
        at(1.0)
    )
}

/// What TLS said, when a connection failed in its handshake (an untrusted or
/// mismatched certificate): the innermost cause that names a certificate.
fn tls_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = error.source();
    let mut found = None;
    while let Some(current) = cause {
        let text = current.to_string();
        if text.contains("certificate") {
            found = Some(text);
        }
        cause = current.source();
    }
    found
}
