//! `/admin`: the history as an HTML page for people. Server-rendered, no script and
//! no build step: a filter form, the list, an event's detail with its pretty-printed
//! payload and attempts, and a retry button. Sign-in sets the session cookie.

use std::fmt::Write;

use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::admin::{ADMIN_BODY_LIMIT, apply_again, page};
use super::auth::{self, Principal};
use super::error::ApiError;
use super::{AppState, body};
use crate::query::ListParams;
use crate::store::events::EventStatus;
use crate::store::history::{self, EventSummary};

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn opt(value: &Option<String>) -> String {
    value.as_deref().map(escape).unwrap_or_default()
}

fn time(value: &Option<DateTime<Utc>>) -> String {
    value
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5rem;color:#222}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .5rem;\
border-bottom:1px solid #ddd;vertical-align:top}th{background:#f4f4f4}\
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;margin:1rem 0}input,select,button{font:inherit}\
pre{background:#f7f7f7;padding:1rem;overflow:auto}.status-dead,.status-failed{color:#b00}\
.status-processed{color:#070}.status-ignored{color:#777}header{display:flex;\
justify-content:space-between;align-items:center}.note{background:#eef;padding:.5rem}";

fn html(
    status: actix_web::http::StatusCode,
    title: &str,
    who: Option<&Principal>,
    body: &str,
) -> HttpResponse {
    let mut page = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{} · hookd</title>\
         <meta name=viewport content=\"width=device-width\"><style>{STYLE}</style></head><body><header>\
         <h1><a href=\"/admin\">hookd</a> · {}</h1>",
        escape(title),
        escape(title)
    );
    if let Some(who) = who {
        let _ = write!(
            page,
            "<form method=post action=\"/admin/logout\">{} ({}) \
             <input type=hidden name=csrf value=\"{}\"><button>Sign out</button></form>",
            escape(&who.name),
            who.role_name(),
            who.csrf_token()
        );
    }
    let _ = write!(page, "</header>{body}</body></html>");
    HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ))
        .insert_header(("X-Frame-Options", "DENY"))
        .insert_header(("Cache-Control", "no-store"))
        .body(page)
}

fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

fn to_sign_in() -> HttpResponse {
    redirect("/admin/login")
}

/// The failure as a page: only what the API would also say (no database details).
fn error_page(error: &ApiError, who: Option<&Principal>) -> HttpResponse {
    let status = actix_web::ResponseError::status_code(error);
    let body = format!(
        "<p class=note>{}</p><p><a href=\"/admin\">Back to the list</a></p>",
        escape(&error.public_message())
    );
    error.log_failure();
    let mut page = html(status, "Error", who, &body);
    if let Some(seconds) = error
        .retry_after()
        .and_then(|s| actix_web::http::header::HeaderValue::from_str(&s).ok())
    {
        page.headers_mut()
            .insert(actix_web::http::header::RETRY_AFTER, seconds);
    }
    page
}

/// The signed-in person, or the response to send instead (sign-in, 429, 503).
async fn signed_in(state: &AppState, request: &HttpRequest) -> Result<Principal, HttpResponse> {
    match auth::authenticate(state, request).await {
        Ok(Some(who)) => Ok(who),
        Ok(None) => Err(to_sign_in()),
        Err(error) => Err(error_page(&error, None)),
    }
}

/// A page form's body (small, and within the body deadline).
async fn form_body(
    state: &AppState,
    request: &HttpRequest,
    payload: &mut web::Payload,
) -> Result<Vec<u8>, ApiError> {
    body::read(
        payload,
        request,
        ADMIN_BODY_LIMIT,
        state.settings.body_timeout,
    )
    .await
}

fn csrf_field(body: &[u8]) -> String {
    web::Query::<CsrfForm>::from_query(&String::from_utf8_lossy(body))
        .map(|f| f.into_inner().csrf)
        .unwrap_or_default()
}

pub async fn login_form(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    if let Ok(Some(_)) = auth::authenticate(&state, &request).await {
        return redirect("/admin");
    }
    login_page(actix_web::http::StatusCode::OK, "")
}

fn login_page(status: actix_web::http::StatusCode, message: &str) -> HttpResponse {
    let body = format!(
        "{message}<form method=post action=\"/admin/login\"><p><label>Admin token \
         <input type=password name=token autocomplete=current-password required autofocus></label> \
         <button>Sign in</button></p></form>"
    );
    html(status, "Sign in", None, &body)
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
}

/// The sign-in form's token; a JSON body `{"token": …}` is accepted too, for scripts.
fn presented_token(request: &HttpRequest, body: &[u8]) -> String {
    let is_json = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let form: Option<LoginForm> = if is_json {
        serde_json::from_slice(body).ok()
    } else {
        web::Query::<LoginForm>::from_query(&String::from_utf8_lossy(body))
            .ok()
            .map(web::Query::into_inner)
    };
    form.map(|f| f.token.trim().to_string()).unwrap_or_default()
}

pub async fn login(
    state: web::Data<AppState>,
    request: HttpRequest,
    mut payload: web::Payload,
) -> HttpResponse {
    let checked =
        auth::check_same_origin(&request).and_then(|()| state.guard.check_client(&request));
    if let Err(error) = checked {
        return error_page(&error, None);
    }
    let body = match form_body(&state, &request, &mut payload).await {
        Ok(body) => body,
        Err(error) => return error_page(&error, None),
    };
    let token = presented_token(&request, &body);
    let found =
        auth::find_token(&state.settings, &token).filter(|t| auth::usable_here(t, &request));
    let Some(token) = found else {
        state.guard.record_failure(&request);
        log::warn!("admin sign-in refused: unknown token");
        return login_page(
            actix_web::http::StatusCode::UNAUTHORIZED,
            "<p class=note>That token is not valid.</p>",
        );
    };
    match state
        .guard
        .new_session(&state.pool, token, Utc::now())
        .await
    {
        Ok(session) => {
            log::info!("admin sign-in: {}", token.name);
            HttpResponse::SeeOther()
                .insert_header((LOCATION, "/admin"))
                .cookie(auth::session_cookie(&state.settings, session))
                .finish()
        }
        Err(error) => error_page(&error.into(), None),
    }
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

pub async fn logout(
    state: web::Data<AppState>,
    request: HttpRequest,
    mut payload: web::Payload,
) -> HttpResponse {
    let body = match form_body(&state, &request, &mut payload).await {
        Ok(body) => body,
        Err(error) => return error_page(&error, None),
    };
    let signed_in = match auth::authenticate(&state, &request).await {
        Ok(who) => who,
        // Clearing the cookie without revoking would leave copies of it valid.
        Err(error) => return error_page(&error, None),
    };
    if let Some(who) = signed_in
        && let Some(session) = &who.session
    {
        let checked =
            auth::check_same_origin(&request).and_then(|()| who.check_csrf(&csrf_field(&body)));
        if let Err(error) = checked {
            return error_page(&error, Some(&who));
        }
        // The cookie goes from this browser; the revocation ends it everywhere.
        if let Err(error) = auth::revoke(&state, session).await {
            return error_page(&error, Some(&who));
        }
        log::info!("admin sign-out: {}", who.name);
    }
    HttpResponse::SeeOther()
        .insert_header((LOCATION, "/admin/login"))
        .cookie(auth::expired_cookie(&state.settings))
        .finish()
}

pub async fn list(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    let who = match signed_in(&state, &request).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let params = match ListParams::from_query(request.query_string()) {
        Ok(params) => params,
        Err(error) => return error_page(&error.into(), Some(&who)),
    };
    let result = match params.to_filter(Utc::now()) {
        Ok(filter) => page(&state, filter).await,
        Err(error) => Err(error.into()),
    };
    let (events, next) = match result {
        Ok(found) => found,
        Err(error) => return error_page(&error, Some(&who)),
    };
    let mut body = filter_form(&state, &params);
    body.push_str(
        "<table><tr><th>Received</th><th>Source</th><th>Event id</th><th>Type</th><th>Kind</th>\
         <th>Status</th><th>Attempts</th><th>Deliveries</th><th>Payment</th><th>Customer</th></tr>",
    );
    for event in &events {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td><a href=\"/admin/events/{}\">{}</a></td><td>{}</td><td>{}</td>\
             <td class=\"status-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            time(&Some(event.received_at)),
            escape(&event.source),
            event.id,
            escape(&event.event_id),
            escape(&event.event_type),
            opt(&event.kind),
            event.status,
            event.status,
            event.attempts,
            event.deliveries,
            opt(&event.payment_id),
            opt(&event.customer_id),
        );
    }
    body.push_str("</table>");
    if events.is_empty() {
        body.push_str("<p>No events match.</p>");
    }
    if let Some(cursor) = next {
        let query = next_page_query(&params, &cursor);
        let _ = write!(
            body,
            "<p><a href=\"/admin?{}\">Older events →</a></p>",
            escape(&query)
        );
    }
    html(actix_web::http::StatusCode::OK, "Events", Some(&who), &body)
}

fn next_page_query(params: &ListParams, cursor: &str) -> String {
    let fields = [
        ("source", &params.source),
        ("kind", &params.kind),
        ("type", &params.event_type),
        ("status", &params.status),
        ("since", &params.since),
        ("until", &params.until),
        ("q", &params.q),
        ("limit", &params.limit),
    ];
    let mut parts: Vec<String> = fields
        .iter()
        .filter_map(|(name, value)| {
            value
                .as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| format!("{name}={}", url_encode(v)))
        })
        .collect();
    parts.push(format!("cursor={}", url_encode(cursor)));
    parts.join("&")
}

fn filter_form(state: &AppState, params: &ListParams) -> String {
    let select = |name: &str, current: &Option<String>, options: Vec<&str>| {
        let mut html = format!("<select name={name}><option value=\"\">any {name}</option>");
        for option in options {
            let selected = if current.as_deref() == Some(option) {
                " selected"
            } else {
                ""
            };
            let _ = write!(html, "<option{selected}>{}</option>", escape(option));
        }
        html.push_str("</select>");
        html
    };
    let input = |name: &str, current: &Option<String>, hint: &str| {
        format!(
            "<input name={name} value=\"{}\" placeholder=\"{}\">",
            opt(current),
            escape(hint)
        )
    };
    let sources = state
        .settings
        .sources
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let statuses = EventStatus::ALL.iter().map(|s| s.as_str()).collect();
    format!(
        "<form class=filters method=get action=\"/admin\">{}{}{}{}{}{}{}<button>Filter</button> \
         <a href=\"/admin\">clear</a></form>",
        input("q", &params.q, "event, payment or customer id"),
        select("source", &params.source, sources),
        select("status", &params.status, statuses),
        input("kind", &params.kind, "kind"),
        input("type", &params.event_type, "provider type"),
        input("since", &params.since, "since (24h or RFC 3339)"),
        input("until", &params.until, "until"),
    )
}

#[derive(Deserialize)]
pub struct DetailQuery {
    retried: Option<String>,
}

pub async fn detail(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    query: web::Query<DetailQuery>,
) -> HttpResponse {
    let who = match signed_in(&state, &request).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let Ok(id) = path.parse::<i64>() else {
        return error_page(&ApiError::NotFound, Some(&who));
    };
    let event = match history::load_event(&state.pool, id).await {
        Ok(Some(event)) => event,
        Ok(None) => return error_page(&ApiError::NotFound, Some(&who)),
        Err(error) => return error_page(&error.into(), Some(&who)),
    };
    let mut body = String::new();
    if let Some(outcome) = &query.retried {
        let _ = write!(body, "<p class=note>Retried: {}</p>", escape(outcome));
    }
    body.push_str(&summary_table(&event.summary));
    if who.can_retry() && event.payload.is_some() {
        let _ = write!(
            body,
            "<form method=post action=\"/admin/events/{id}/retry\"><input type=hidden name=csrf value=\"{}\">\
             <button>Apply this event again</button></form>",
            who.csrf_token()
        );
    }
    body.push_str("<h2>Payload</h2>");
    match &event.payload {
        Some(payload) => {
            let pretty = serde_json::to_string_pretty(payload).unwrap_or_default();
            let _ = write!(body, "<pre>{}</pre>", escape(&pretty));
        }
        None => body.push_str("<p>Purged by the retention policy; the dedupe key remains.</p>"),
    }
    body.push_str(
        "<h2>Handlers</h2><table><tr><th>Handler</th><th>Status</th><th>Runs</th><th>HTTP</th><th>Last error</th></tr>",
    );
    for state in event.handler_states(&state.dispatcher.plan_names(&event.summary)) {
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"status-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&state.handler),
            escape(&state.status),
            escape(&state.status),
            state.attempts,
            state.http_status.map(|s| s.to_string()).unwrap_or_default(),
            opt(&state.last_error)
        );
    }
    body.push_str(
        "</table><h2>Attempts</h2><table><tr><th>#</th><th>Handler</th><th>Started</th><th>Duration</th><th>Outcome</th><th>HTTP</th><th>Error</th></tr>",
    );
    for attempt in &event.attempts {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1} ms</td><td class=\"status-{}\">{}</td><td>{}</td><td>{}</td></tr>",
            attempt.attempt,
            escape(&attempt.handler),
            time(&Some(attempt.started_at)),
            attempt.duration_ms,
            escape(&attempt.outcome),
            escape(&attempt.outcome),
            attempt
                .http_status
                .map(|s| s.to_string())
                .unwrap_or_default(),
            opt(&attempt.error)
        );
    }
    body.push_str("</table>");
    html(
        actix_web::http::StatusCode::OK,
        &format!("Event {id}"),
        Some(&who),
        &body,
    )
}

fn summary_table(event: &EventSummary) -> String {
    let rows = [
        ("Source", escape(&event.source)),
        ("Event id", escape(&event.event_id)),
        ("Type", escape(&event.event_type)),
        ("Kind", opt(&event.kind)),
        (
            "Status",
            format!("<span class=\"status-{0}\">{0}</span>", event.status),
        ),
        ("Last error", opt(&event.last_error)),
        ("Payment", opt(&event.payment_id)),
        ("Customer", opt(&event.customer_id)),
        ("Deliveries", event.deliveries.to_string()),
        ("Attempts", event.attempts.to_string()),
        ("Signed with secret", format!("#{}", event.signed_with)),
        ("Received", time(&Some(event.received_at))),
        ("Last delivery", time(&Some(event.last_delivery_at))),
        ("Processed", time(&event.processed_at)),
        ("Next attempt", time(&event.next_attempt_at)),
        ("Purged", time(&event.purged_at)),
    ];
    let mut html = String::from("<table>");
    for (label, value) in rows {
        let _ = write!(html, "<tr><th>{label}</th><td>{value}</td></tr>");
    }
    html.push_str("</table>");
    html
}

pub async fn retry(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    mut payload: web::Payload,
) -> HttpResponse {
    let who = match signed_in(&state, &request).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let body = match form_body(&state, &request, &mut payload).await {
        Ok(body) => body,
        Err(error) => return error_page(&error, Some(&who)),
    };
    let checked = auth::check_same_origin(&request)
        .and_then(|()| who.check_csrf(&csrf_field(&body)))
        .and_then(|()| {
            if who.can_retry() {
                Ok(())
            } else {
                Err(ApiError::Forbidden("the operator role is needed".into()))
            }
        });
    if let Err(error) = checked {
        return error_page(&error, Some(&who));
    }
    let Ok(id) = path.parse::<i64>() else {
        return error_page(&ApiError::NotFound, Some(&who));
    };
    let outcome = match apply_again(&state, &who, id).await {
        Ok(event) => event.status.to_string(),
        Err(error) => error.public_message(),
    };
    redirect(&format!(
        "/admin/events/{id}?retried={}",
        url_encode(&outcome)
    ))
}
