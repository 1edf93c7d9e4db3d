//! Who is asking: a bearer token, or the web page's session cookie. Sessions are
//! stateless — `name.expiry.MAC`, keyed with the token itself — so they work across
//! instances and end when the token is rotated. Cookie-authenticated requests that
//! change state must come from this origin, and the page's forms also carry a
//! token bound to the session.

use actix_web::HttpRequest;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::header::{AUTHORIZATION, HOST, ORIGIN, REFERER};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::{AdminToken, Role, Settings};
use crate::signature::hmac_sha256;

pub const SESSION_COOKIE: &str = "hookd_session";
const SESSION_HOURS: i64 = 12;

#[derive(Debug, Clone)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The session cookie value, when that is how the request authenticated.
    pub session: Option<String>,
    token: String,
}

impl Principal {
    pub fn can_retry(&self) -> bool {
        self.role == Role::Operator
    }

    pub fn role_name(&self) -> &'static str {
        match self.role {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    /// The form token that proves a page action came from a page we served.
    pub fn csrf_token(&self) -> String {
        let session = self.session.as_deref().unwrap_or_default();
        hex::encode(hmac_sha256(
            self.token.as_bytes(),
            &[b"csrf:", session.as_bytes()],
        ))
    }

    pub fn check_csrf(&self, presented: &str) -> Result<(), ApiError> {
        let expected = self.csrf_token();
        if bool::from(expected.as_bytes().ct_eq(presented.as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
                "the form is stale or came from another site".into(),
            ))
        }
    }
}

fn principal(token: &AdminToken, session: Option<String>) -> Principal {
    Principal {
        name: token.name.clone(),
        role: token.role,
        session,
        token: token.token.expose().to_string(),
    }
}

/// The configured token equal to `presented`, compared in constant time.
pub fn find_token<'s>(settings: &'s Settings, presented: &str) -> Option<&'s AdminToken> {
    let presented = Sha256::digest(presented.as_bytes());
    settings.admin_tokens.iter().find(|t| {
        let known = Sha256::digest(t.token.expose().as_bytes());
        bool::from(known.ct_eq(&presented))
    })
}

/// The bearer token or a valid session cookie; `None` means 401.
pub fn authenticate(settings: &Settings, request: &HttpRequest) -> Option<Principal> {
    if let Some(value) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let token = value.strip_prefix("Bearer ").map(str::trim)?;
        return find_token(settings, token).map(|t| principal(t, None));
    }
    let cookie = request.cookie(SESSION_COOKIE)?;
    verify_session(settings, cookie.value(), chrono::Utc::now().timestamp())
}

/// Like `authenticate`, and for state-changing requests made with the cookie,
/// refuses those another site's page sent.
pub fn require(settings: &Settings, request: &HttpRequest) -> Result<Principal, ApiError> {
    let principal = authenticate(settings, request).ok_or(ApiError::Unauthorized)?;
    if principal.session.is_some() && !request.method().is_safe() {
        check_same_origin(request)?;
    }
    Ok(principal)
}

pub fn require_operator(settings: &Settings, request: &HttpRequest) -> Result<Principal, ApiError> {
    let principal = require(settings, request)?;
    if principal.can_retry() {
        Ok(principal)
    } else {
        Err(ApiError::Forbidden("the operator role is needed".into()))
    }
}

/// Browsers always send `Origin` (or at least `Referer`) with a cross-site POST;
/// when either is present it must name this host.
pub fn check_same_origin(request: &HttpRequest) -> Result<(), ApiError> {
    let host = request
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let claimed = [ORIGIN, REFERER]
        .into_iter()
        .find_map(|name| request.headers().get(name).and_then(|v| v.to_str().ok()));
    let Some(claimed) = claimed else {
        return Ok(());
    };
    let claimed_host = claimed
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or_default())
        .unwrap_or_default();
    if !host.is_empty() && claimed_host.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err(ApiError::Forbidden("cross-site request refused".into()))
    }
}

pub fn new_session(token: &AdminToken, now: i64) -> String {
    let expires = now + SESSION_HOURS * 3600;
    let name = B64.encode(token.name.as_bytes());
    let mac = session_mac(token, &name, expires);
    format!("{name}.{expires}.{mac}")
}

fn session_mac(token: &AdminToken, name: &str, expires: i64) -> String {
    let message = format!("session:{name}.{expires}");
    hex::encode(hmac_sha256(
        token.token.expose().as_bytes(),
        &[message.as_bytes()],
    ))
}

pub fn verify_session(settings: &Settings, value: &str, now: i64) -> Option<Principal> {
    let mut parts = value.split('.');
    let (name_b64, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
    let expires: i64 = expires.parse().ok()?;
    if expires < now || parts.next().is_some() {
        return None;
    }
    let name = String::from_utf8(B64.decode(name_b64).ok()?).ok()?;
    let token = settings.admin_tokens.iter().find(|t| t.name == name)?;
    let expected = session_mac(token, name_b64, expires);
    bool::from(expected.as_bytes().ct_eq(mac.as_bytes()))
        .then(|| principal(token, Some(value.to_string())))
}

pub fn session_cookie(value: String) -> Cookie<'static> {
    Cookie::build(SESSION_COOKIE, value)
        .path("/admin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(actix_web::cookie::time::Duration::hours(SESSION_HOURS))
        .finish()
}

pub fn expired_cookie() -> Cookie<'static> {
    let mut cookie = session_cookie(String::new());
    cookie.make_removal();
    cookie
}
