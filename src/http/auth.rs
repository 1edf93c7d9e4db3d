//! Who is asking: a bearer token, or the web page's session cookie.
//!
//! A session cookie is `name.expiry.nonce.MAC`. The MAC is keyed with a key derived
//! from the server secret (kept in the database, shared by every instance) and the
//! token, so a stolen cookie reveals nothing that helps guess the token, and
//! rotating either ends the token's sessions. Signing out records the nonce as
//! revoked until the session would have expired. Failed sign-ins and unknown
//! tokens are limited per client; a right token or a valid session is checked
//! first and never refused. Cookie-authenticated requests that change state
//! must name this host in `Origin`/`Referer` or carry the session's form token.

use std::fmt;
use std::marker::PhantomData;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::http::header::{AUTHORIZATION, ORIGIN, REFERER};
use actix_web::{FromRequest, HttpRequest, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use chrono::{DateTime, Utc};
use futures_util::future::LocalBoxFuture;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::OnceCell;

use super::AppState;
use super::client;
use super::error::ApiError;
use super::limiter::FailureLimiter;
use crate::config::{AdminToken, Cidr, Role, Settings, is_development_credential};
use crate::signature::{Secret, hmac_sha256};
use crate::store::{self, StoreError};

pub const SESSION_COOKIE: &str = "hookd_session";
const SESSION_HOURS: i64 = 12;
/// The header a script using the session cookie sends the form token in.
pub const CSRF_HEADER: &str = "X-CSRF-Token";

/// Authentication state an instance keeps: the failure limiter, the proxies
/// believed about their clients, and the server secret, loaded from the database
/// on first use.
#[derive(Debug)]
pub struct Guard {
    limiter: FailureLimiter,
    trusted_proxies: Vec<Cidr>,
    server_secret: OnceCell<Key>,
}

/// 32 secret bytes whose `Debug` never shows them.
#[derive(Clone)]
struct Key([u8; 32]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key([redacted])")
    }
}

/// A verified session cookie.
#[derive(Debug, Clone)]
pub struct Session {
    pub nonce: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// Set when the request authenticated with the session cookie.
    pub session: Option<Session>,
    /// Keys the form token; derived from the server secret and the token.
    session_key: Option<Key>,
}

impl Principal {
    pub fn can_retry(&self) -> bool {
        self.role == Role::Operator
    }

    /// 403 unless an operator.
    pub fn check_operator(&self) -> Result<(), ApiError> {
        if self.can_retry() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("the operator role is needed".into()))
        }
    }

    pub fn role_name(&self) -> &'static str {
        match self.role {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    /// The form token that proves a page action came from a page we served.
    pub fn csrf_token(&self) -> String {
        match (&self.session_key, &self.session) {
            (Some(key), Some(session)) => {
                hex::encode(hmac_sha256(&key.0, &[b"csrf:", session.nonce.as_bytes()]))
            }
            _ => String::new(),
        }
    }

    pub fn check_csrf(&self, presented: &str) -> Result<(), ApiError> {
        let expected = self.csrf_token();
        if !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(presented.as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
                "the form is stale or came from another site".into(),
            ))
        }
    }
}

/// Whether the request's `Authorization: Bearer` is `expected`, compared in
/// constant time.
pub fn bearer_is(request: &HttpRequest, expected: &Secret) -> bool {
    let presented = bearer(request).unwrap_or_default();
    let presented = Sha256::digest(presented.as_bytes());
    bool::from(Sha256::digest(expected.expose().as_bytes()).ct_eq(&presented))
}

/// The token of an `Authorization: Bearer` header (the scheme name is
/// case-insensitive, RFC 7235); `None` without one, or with another scheme.
fn bearer(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// The configured token equal to `presented`, compared in constant time.
pub fn find_token<'s>(settings: &'s Settings, presented: &str) -> Option<&'s AdminToken> {
    let presented = Sha256::digest(presented.as_bytes());
    settings.admin_tokens.iter().find(|t| {
        let known = Sha256::digest(t.token.expose().as_bytes());
        bool::from(known.ct_eq(&presented))
    })
}

impl Guard {
    pub fn new(trusted_proxies: Vec<Cidr>) -> Self {
        Guard {
            limiter: FailureLimiter::default(),
            trusted_proxies,
            server_secret: OnceCell::new(),
        }
    }

    /// Refuses a client over its failure limit for `token` — the token a session
    /// cookie names, `None` for a presented one (429). Only for what is not a
    /// right token or a valid session: those are never refused.
    pub fn check_client(&self, request: &HttpRequest, token: Option<&str>) -> Result<(), ApiError> {
        self.limiter
            .check(self.client(request), token)
            .map_err(ApiError::TooManyRequests)
    }

    /// A wrong token or a forged session: 429 while the client is over its
    /// limit for `token`, else counted (the caller answers it as not signed in).
    pub fn refuse_guess(&self, request: &HttpRequest, token: Option<&str>) -> Result<(), ApiError> {
        self.check_client(request, token)?;
        self.limiter.record_failure(self.client(request), token);
        Ok(())
    }

    fn client(&self, request: &HttpRequest) -> std::net::IpAddr {
        client::address(request, &self.trusted_proxies)
    }

    /// The host the client asked for (behind a trusted proxy, the one it names).
    fn requested_host<'r>(&self, request: &'r HttpRequest) -> &'r str {
        client::requested_host(request, &self.trusted_proxies)
    }

    async fn server_secret(&self, pool: &deadpool_postgres::Pool) -> Result<&Key, StoreError> {
        self.server_secret
            .get_or_try_init(|| async {
                let client = pool.get().await?;
                let stored = store::sessions::server_secret(&client, &rand::random()).await?;
                let bytes: [u8; 32] = stored
                    .try_into()
                    .map_err(|_| StoreError::Schema("the server secret is not 32 bytes".into()))?;
                Ok(Key(bytes))
            })
            .await
    }

    async fn session_key(
        &self,
        pool: &deadpool_postgres::Pool,
        token: &AdminToken,
    ) -> Result<Key, StoreError> {
        let secret = self.server_secret(pool).await?;
        let derived = hmac_sha256(
            &secret.0,
            &[b"hookd-session:", token.token.expose().as_bytes()],
        );
        let mut key = [0u8; 32];
        key.copy_from_slice(&derived);
        Ok(Key(key))
    }

    /// A new session for `token`: the cookie's value and the session.
    pub async fn new_session(
        &self,
        pool: &deadpool_postgres::Pool,
        token: &AdminToken,
        now: DateTime<Utc>,
    ) -> Result<String, StoreError> {
        let key = self.session_key(pool, token).await?;
        let expires = now.timestamp() + SESSION_HOURS * 3600;
        let name = B64.encode(token.name.as_bytes());
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let mac = session_mac(&key, &name, expires, &nonce);
        Ok(format!("{name}.{expires}.{nonce}.{mac}"))
    }
}

fn session_mac(key: &Key, name: &str, expires: i64, nonce: &str) -> String {
    let message = format!("session:{name}.{expires}.{nonce}");
    hex::encode(hmac_sha256(&key.0, &[message.as_bytes()]))
}

fn principal(token: &AdminToken, session: Option<Session>, key: Option<Key>) -> Principal {
    Principal {
        name: token.name.clone(),
        role: token.role,
        session,
        session_key: key,
    }
}

/// The shipped development tokens are public: a request a proxy forwarded (from
/// beyond this machine) may not use them, whatever address hookd listens on.
pub fn usable_here(token: &AdminToken, request: &HttpRequest) -> bool {
    let public = is_development_credential(token.token.expose());
    if public && client::is_forwarded(request) {
        log::warn!(
            "refused the shipped development token {:?} on a forwarded request",
            token.name
        );
        return false;
    }
    true
}

/// The bearer token or a valid session cookie; `Ok(None)` means not signed in.
/// A right token or a valid session is never refused; a client over its failure
/// limit gets 429 for anything else.
pub async fn authenticate(
    state: &AppState,
    request: &HttpRequest,
) -> Result<Option<Principal>, ApiError> {
    let guard = &state.guard;
    // Only a Bearer header is hookd's; any other, e.g. a proxy's Basic auth,
    // leaves the cookie to decide.
    if let Some(presented) = bearer(request) {
        let settings = state.app.settings.now();
        let found = find_token(&settings, presented).filter(|token| usable_here(token, request));
        if found.is_none() {
            guard.refuse_guess(request, None)?;
        }
        return Ok(found.map(|t| principal(t, None, None)));
    }
    let Some(cookie) = request.cookie(SESSION_COOKIE) else {
        guard.check_client(request, None)?;
        return Ok(None);
    };
    verify_session(state, request, cookie.value(), Utc::now()).await
}

async fn verify_session(
    state: &AppState,
    request: &HttpRequest,
    value: &str,
    now: DateTime<Utc>,
) -> Result<Option<Principal>, ApiError> {
    let mut parts = value.split('.');
    let (Some(name_b64), Some(expires), Some(nonce), Some(mac), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Ok(None);
    };
    let Some(expires_at) = expires
        .parse::<i64>()
        .ok()
        .and_then(|e| DateTime::from_timestamp(e, 0))
    else {
        return Ok(None);
    };
    if expires_at < now {
        return Ok(None);
    }
    // A token removed or changed by a reload is gone from these: its sessions end.
    let settings = state.app.settings.now();
    let token = B64
        .decode(name_b64)
        .ok()
        .and_then(|n| String::from_utf8(n).ok())
        .and_then(|name| settings.admin_tokens.iter().find(|t| t.name == name));
    // Counted per token the cookie names, so guessing from an address does not
    // hold back the sessions of staff who share it.
    let named = token.map(|t| t.name.as_str());
    let Some(token) = token.filter(|token| usable_here(token, request)) else {
        state.guard.refuse_guess(request, named)?;
        return Ok(None);
    };
    let key = state.guard.session_key(&state.app.pool, token).await?;
    let expected = session_mac(&key, name_b64, expires_at.timestamp(), nonce);
    if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) {
        state.guard.refuse_guess(request, named)?;
        return Ok(None);
    }
    let client = state.app.pool.get().await.map_err(StoreError::from)?;
    if store::sessions::is_revoked(&client, nonce).await? {
        return Ok(None);
    }
    let session = Session {
        nonce: nonce.to_string(),
        expires_at,
    };
    Ok(Some(principal(token, Some(session), Some(key))))
}

/// Ends a session everywhere: its nonce is refused until it would have expired.
pub async fn revoke(state: &AppState, session: &Session) -> Result<(), ApiError> {
    let client = state.app.pool.get().await.map_err(StoreError::from)?;
    store::sessions::revoke(&client, &session.nonce, session.expires_at).await?;
    Ok(())
}

/// For the JSON API: signed in (401 otherwise); a state-changing request made with
/// the cookie must name this host in `Origin`/`Referer`, or carry the form token
/// in `X-CSRF-Token` (403 otherwise).
async fn require(state: &AppState, request: &HttpRequest) -> Result<Principal, ApiError> {
    let principal = authenticate(state, request)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    if principal.session.is_some() && !request.method().is_safe() {
        match same_origin(state, request) {
            Some(true) => {}
            Some(false) => return Err(cross_site()),
            None => {
                let presented = request
                    .headers()
                    .get(CSRF_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                principal.check_csrf(presented)?;
            }
        }
    }
    Ok(principal)
}

/// Where a request is answered, and so how a refusal looks: the JSON API
/// (`Api`) or the pages for people (`ui::Page`).
pub trait Surface: 'static {
    /// Who made the request, or the answer to give instead.
    fn sign_in(
        state: &AppState,
        request: &HttpRequest,
    ) -> impl Future<Output = Result<Principal, actix_web::Error>>;

    /// The answer to someone signed in whom the request is refused to.
    fn refuse(error: ApiError, who: &Principal) -> actix_web::Error;
}

/// The JSON API: 401, 403 or 429 as JSON (see `require`).
pub struct Api;

impl Surface for Api {
    async fn sign_in(
        state: &AppState,
        request: &HttpRequest,
    ) -> Result<Principal, actix_web::Error> {
        Ok(require(state, request).await?)
    }

    fn refuse(error: ApiError, _who: &Principal) -> actix_web::Error {
        error.into()
    }
}

/// A signed-in viewer or operator, extracted before the handler runs; others
/// get `S`'s refusal.
pub struct Viewer<S: Surface = Api> {
    pub who: Principal,
    surface: PhantomData<S>,
}

/// A signed-in operator; a viewer gets 403.
pub struct Operator<S: Surface = Api> {
    pub who: Principal,
    surface: PhantomData<S>,
}

async fn sign_in<S: Surface>(request: &HttpRequest) -> Result<Principal, actix_web::Error> {
    let state = request
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Internal("the admin routes have no state".into()))?;
    S::sign_in(state, request).await
}

impl<S: Surface> FromRequest for Viewer<S> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let request = request.clone();
        Box::pin(async move {
            let who = sign_in::<S>(&request).await?;
            Ok(Viewer {
                who,
                surface: PhantomData,
            })
        })
    }
}

impl<S: Surface> FromRequest for Operator<S> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    /// A viewer who is also an operator.
    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let viewer = Viewer::<S>::from_request(request, payload);
        Box::pin(async move {
            let Viewer { who, .. } = viewer.await?;
            match who.check_operator() {
                Ok(()) => Ok(Operator {
                    who,
                    surface: PhantomData,
                }),
                Err(error) => Err(S::refuse(error, &who)),
            }
        })
    }
}

fn cross_site() -> ApiError {
    ApiError::Forbidden("cross-site request refused".into())
}

/// Whether `Origin` and `Referer` (those the request carries) both name this
/// host: any that names another is refused; `None` when the request carries
/// neither.
fn same_origin(state: &AppState, request: &HttpRequest) -> Option<bool> {
    let host = state.guard.requested_host(request);
    let names_this_host = |claimed: &actix_web::http::header::HeaderValue| {
        let claimed_host = claimed
            .to_str()
            .ok()
            .and_then(|c| c.split_once("://"))
            .map(|(_, rest)| rest.split('/').next().unwrap_or_default())
            .unwrap_or_default();
        !host.is_empty() && claimed_host.eq_ignore_ascii_case(host)
    };
    let claimed: Vec<_> = [ORIGIN, REFERER]
        .into_iter()
        .filter_map(|name| request.headers().get(name))
        .collect();
    (!claimed.is_empty()).then(|| claimed.into_iter().all(names_this_host))
}

/// For page forms, which also carry the form token: an `Origin`/`Referer` that
/// names another host is refused.
pub fn check_same_origin(state: &AppState, request: &HttpRequest) -> Result<(), ApiError> {
    match same_origin(state, request) {
        Some(false) => Err(cross_site()),
        _ => Ok(()),
    }
}

/// `Secure` unless `cookie_secure` says otherwise, `development = true` with the
/// admin pages on a loopback address, or a trusted proxy says its client spoke
/// plain HTTP.
pub fn cookie_is_secure(settings: &Settings, request: &HttpRequest) -> bool {
    settings.cookie_secure.unwrap_or_else(|| {
        let developing = settings.development && settings.admin_address().ip().is_loopback();
        !developing && !client::proxy_says_plain_http(request, &settings.trusted_proxies)
    })
}

pub fn session_cookie(
    settings: &Settings,
    request: &HttpRequest,
    value: String,
) -> Cookie<'static> {
    Cookie::build(SESSION_COOKIE, value)
        .path("/admin")
        .http_only(true)
        .secure(cookie_is_secure(settings, request))
        .same_site(SameSite::Strict)
        .max_age(actix_web::cookie::time::Duration::hours(SESSION_HOURS))
        .finish()
}

pub fn expired_cookie(settings: &Settings, request: &HttpRequest) -> Cookie<'static> {
    let mut cookie = session_cookie(settings, request, String::new());
    cookie.make_removal();
    cookie
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_drops_secure_only_for_admin_pages_on_loopback() {
        let shipped = include_str!("../../hookd.toml");
        let request = actix_web::test::TestRequest::default().to_http_request();
        let on = |listen: &str| {
            let text = shipped.replace(
                "listen = \"127.0.0.1:8080\"",
                &format!("listen = \"{listen}\""),
            );
            let settings = Settings::from_toml("hookd.toml", &text, &Default::default())
                .expect("valid settings");
            cookie_is_secure(&settings, &request)
        };
        assert!(!on("127.0.0.1:8080"), "plain HTTP while developing");
        assert!(
            on("0.0.0.0:8080"),
            "development on a public listener still sets Secure"
        );
    }

    #[test]
    fn a_principal_prints_no_key_material() {
        let who = Principal {
            name: "alice".into(),
            role: Role::Operator,
            session: Some(Session {
                nonce: "n".into(),
                expires_at: Utc::now(),
            }),
            session_key: Some(Key([0xab; 32])),
        };
        let printed = format!("{who:?}");
        assert!(
            printed.contains("alice") && printed.contains("redacted"),
            "{printed}"
        );
        // 0xab is 171: as decimals or hex, a run of them is the key (a lone
        // "171" may be the time's).
        assert!(
            !printed.contains("171, 171") && !printed.contains("ab, ab"),
            "{printed}"
        );
    }
}
