//! A provider's API as hookd speaks to it (a reconcile pass, a fetch of the
//! event a delivery only names): hookd's own HTTP client (the
//! system's roots, `SSL_CERT_FILE`/`SSL_CERT_DIR` when set; no redirect
//! followed), the source's key on every request, an answer read up to
//! `MAX_ANSWER_BYTES`, and 429 (or 503 with `Retry-After`) waited out as the
//! provider asks, a few times. A failure is one line naming the provider's
//! answer, never the key.

use std::sync::LazyLock;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::config::Credential;
use crate::providers::api::Client;

/// The most one answer (a page of events) may weigh.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP client for every call to a provider's API: the system's roots are
/// read once (not on each Mollie delivery or thin event's run), and
/// connections to an API are reused from one fetch to the next.
static CLIENT: LazyLock<Result<reqwest::Client, crate::outbound::ClientError>> =
    LazyLock::new(|| crate::outbound::client(TIMEOUT));
/// Answers asking to wait (429) taken before giving up.
const MAX_WAITS: u32 = 5;
/// The longest `Retry-After` honoured: past it the pass gives up, and the next
/// one asks again.
const LONGEST_WAIT: Duration = Duration::from_secs(120);
/// How much of the provider's answer an error quotes.
const QUOTED_CHARS: usize = 300;

pub use crate::providers::api::{ApiError, Call};

/// The provider's API with the source's credential.
pub struct Api {
    /// Whether a 429 is waited out (a pass) or is a failure at once (a fetch
    /// before handlers, retried with the handlers' backoff).
    patient: bool,
    client: reqwest::Client,
    base: Url,
    credential: Credential,
    /// Where client credentials are exchanged for a token (the provider's
    /// [`Lister`](crate::providers::api::Lister) says).
    token_path: &'static str,
    /// The status of the last refusal (a 404 says the API does not know what
    /// was asked for).
    refused: Option<StatusCode>,
    /// The access token, once the client credentials were exchanged.
    token: Option<crate::signature::Secret>,
}

impl Api {
    pub fn new(
        base: Url,
        credential: Credential,
        token_path: &'static str,
    ) -> Result<Self, ApiError> {
        let client = CLIENT.clone().map_err(|e| ApiError(e.to_string()))?;
        Ok(Api {
            patient: true,
            client,
            base,
            credential,
            token_path,
            refused: None,
            token: None,
        })
    }

    /// The API of `source`'s provider with its key, a 429 a failure at once:
    /// for a fetch in a handler's run, which its backoff retries. The error
    /// says what the source lacks.
    pub fn for_fetch(source: &crate::config::Source) -> Result<Self, ApiError> {
        let provider = source.scheme.provider();
        let credential = source.reconcile.credential.clone().ok_or_else(|| {
            ApiError(format!(
                "source {:?} has no api_key to fetch the event from {}'s API",
                source.name,
                provider.lister().map_or(provider.name(), |l| l.title())
            ))
        })?;
        let base = source
            .reconcile
            .base()
            .ok_or_else(|| ApiError(format!("source {:?} has no api_base", source.name)))?;
        let token_path = provider
            .lister()
            .ok()
            .and_then(|l| l.token_path)
            .unwrap_or_default();
        let mut api = Api::new(base, credential, token_path)?;
        api.patient = false;
        Ok(api)
    }

    /// The URL of `path` under the base (whose own path is kept).
    fn url(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        let joined = format!("{}{path}", self.base.path().trim_end_matches('/'));
        url.set_path(&joined);
        url
    }

    /// The answer's body to `call`, a 2xx; waits out 429s.
    async fn answer(&mut self, call: &Call<'_>) -> Result<Vec<u8>, ApiError> {
        let mut url = self.url(call.path);
        if !call.query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(call.query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let bearer = self.bearer().await?;
        let mut waits = 0;
        loop {
            let mut request = self
                .client
                .request(call.method.clone(), url.clone())
                .header(AUTHORIZATION, format!("Bearer {}", bearer.expose()))
                .header("Accept", "application/json");
            for (name, value) in call.headers {
                request = request.header(*name, *value);
            }
            if let Some(json) = &call.json {
                request = request.json(json);
            }
            let response = request
                .send()
                .await
                .map_err(|e| self.unreachable(&url, &e))?;
            let status = response.status();
            let wait = retry_after(response.headers());
            let body = read_bounded(response)
                .await
                .map_err(|e| self.scrub(format!("{}: {e}", shown(&url))))?;
            if status.is_success() {
                return Ok(body);
            }
            let asks_to_wait = status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && wait.is_some());
            if asks_to_wait && self.patient && waits < MAX_WAITS {
                let wait = wait.unwrap_or(Duration::from_secs(1 << waits));
                if wait <= LONGEST_WAIT {
                    waits += 1;
                    log::info!(
                        "reconcile: {} answered {status}; asking again in {}",
                        shown(&url),
                        crate::duration::format(wait)
                    );
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            self.refused = Some(status);
            return Err(self.refused(&url, status, &body));
        }
    }

    /// Whether the last request was answered 404: the API knows no such thing.
    pub fn said_not_found(&self) -> bool {
        self.refused == Some(StatusCode::NOT_FOUND)
    }

    /// The bearer token: the key, or the access token of client credentials.
    async fn bearer(&mut self) -> Result<crate::signature::Secret, ApiError> {
        match &self.credential {
            Credential::Bearer(key) => Ok(key.clone()),
            Credential::Client { id, secret } => {
                if let Some(token) = &self.token {
                    return Ok(token.clone());
                }
                let url = self.url(self.token_path);
                let response = self
                    .client
                    .post(url.clone())
                    .basic_auth(id, Some(secret.expose()))
                    .header("Accept", "application/json")
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body("grant_type=client_credentials")
                    .send()
                    .await
                    .map_err(|e| self.unreachable(&url, &e))?;
                let status = response.status();
                let body = read_bounded(response)
                    .await
                    .map_err(|e| self.scrub(format!("{}: {e}", shown(&url))))?;
                if !status.is_success() {
                    return Err(self.refused(&url, status, &body));
                }
                let token = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("access_token")?.as_str().map(String::from))
                    .ok_or_else(|| {
                        ApiError(format!("{}: the answer holds no access_token", shown(&url)))
                    })?;
                let token = crate::signature::Secret::new(token);
                self.token = Some(token.clone());
                Ok(token)
            }
        }
    }

    fn unreachable(&self, url: &Url, error: &reqwest::Error) -> ApiError {
        let mut text = format!("cannot reach {}", shown(url));
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(error);
        let mut last = String::new();
        while let Some(cause) = source {
            last = cause.to_string();
            source = cause.source();
        }
        if error.is_timeout() {
            text.push_str(": timed out");
        } else if !last.is_empty() {
            text.push_str(&format!(": {last}"));
        }
        self.scrub(text)
    }

    fn refused(&self, url: &Url, status: StatusCode, body: &[u8]) -> ApiError {
        let said = provider_message(body);
        let redirect = if status.is_redirection() {
            " (redirects are not followed)"
        } else {
            ""
        };
        let text = match said {
            Some(said) => format!("{} answered {status}{redirect}: {said}", shown(url)),
            None => format!("{} answered {status}{redirect}", shown(url)),
        };
        self.scrub(text)
    }

    /// `text` on one line, without any credential in it.
    fn scrub(&self, text: String) -> ApiError {
        let mut text = text.replace(['\r', '\n'], " ");
        let mut secrets = vec![];
        match &self.credential {
            Credential::Bearer(key) => secrets.push(key.expose().to_string()),
            Credential::Client { secret, .. } => secrets.push(secret.expose().to_string()),
        }
        if let Some(token) = &self.token {
            secrets.push(token.expose().to_string());
        }
        for secret in secrets.iter().filter(|s| s.len() >= 4) {
            text = text.replace(secret.as_str(), "[redacted]");
        }
        ApiError(text)
    }
}

#[async_trait::async_trait]
impl Client for Api {
    async fn send(&mut self, call: &Call<'_>) -> Result<Vec<u8>, ApiError> {
        self.answer(call).await
    }

    fn malformed(&self, path: &str, problem: &dyn std::fmt::Display) -> ApiError {
        self.scrub(format!(
            "{}: the answer is not the list expected: {problem}",
            shown(&self.url(path))
        ))
    }
}

/// `scheme://host:port/path` of a URL, without its query.
fn shown(url: &Url) -> String {
    crate::config::shown_url(url)
}

/// How long `Retry-After` (seconds, or an HTTP date) asks to wait.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or_default())
}

/// Why an answer's body could not be had.
#[derive(Debug, thiserror::Error)]
enum AnswerError {
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("reading the answer: {0}")]
    Read(reqwest::Error),
}

/// The body, refused past `MAX_ANSWER_BYTES`.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, AnswerError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(AnswerError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(AnswerError::Read)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(AnswerError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What the provider said in an error answer: the message field each of them
/// uses, else the start of the body.
fn provider_message(body: &[u8]) -> Option<String> {
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => [
            "/error/message",
            "/error/detail",
            "/errors/0/detail",
            "/error_description",
            "/message",
            "/error",
        ]
        .iter()
        .find_map(|p| value.pointer(p)?.as_str().map(String::from))
        .unwrap_or_else(|| value.to_string()),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut quoted: String = text.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    Some(quoted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_messages_are_found_where_each_puts_it() {
        let said = |body: &str| provider_message(body.as_bytes());
        assert_eq!(
            said(
                r#"{"error":{"message":"Invalid API Key provided","type":"invalid_request_error"}}"#
            ),
            Some("Invalid API Key provided".into())
        );
        assert_eq!(
            said(
                r#"{"error":{"type":"request_error","code":"authentication_malformed","detail":"Bad token"}}"#
            ),
            Some("Bad token".into())
        );
        assert_eq!(
            said(
                r#"{"errors":[{"category":"AUTHENTICATION_ERROR","detail":"This request could not be authorized."}]}"#
            ),
            Some("This request could not be authorized.".into())
        );
        assert_eq!(said("plain words"), Some("plain words".into()));
        assert_eq!(said(""), None);
    }

    #[test]
    fn retry_after_takes_seconds() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "2".parse().expect("value"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
