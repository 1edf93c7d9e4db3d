//! `/admin`: the support desk as pages for people. Server-rendered (templates in
//! `pages.rs`), no script and no build step: the dashboard, the filtered list,
//! an event's detail (personal data masked; operators may reveal it), a payment with the timeline of its events, a customer's
//! payments, retries one at a time or in bulk, and the audit trail. Sign-in sets
//! the session cookie; every form carries the session's form token.

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use maud::Markup;
use serde::Deserialize;

use super::admin::{ADMIN_BODY_LIMIT, apply_again, to_completion};
use super::auth::{self, Operator, Principal, Surface, Viewer};
use super::error::ApiError;
use super::pages::{self, url_encode};
use super::{AppState, body, request_id};
use crate::filter::ListParams;

/// Customers' payments per page.
const CUSTOMER_PAGE: i64 = 50;
/// Audit entries per page.
const AUDIT_PAGE: i64 = 100;

fn html(status: StatusCode, markup: Markup) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ))
        .insert_header(("X-Frame-Options", "DENY"))
        .insert_header(("Cache-Control", "no-store"))
        .body(markup.into_string())
}

pub(super) fn ok(markup: Markup) -> HttpResponse {
    html(StatusCode::OK, markup)
}

pub(super) fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

/// The failure as a page: only what the API would also say (no database details).
pub(super) fn error_page(error: &ApiError, who: Option<&Principal>) -> HttpResponse {
    error.log_failure();
    let status = actix_web::ResponseError::status_code(error);
    let mut page = html(status, pages::error(&error.public_message(), who));
    if let Some(seconds) = error
        .retry_after()
        .and_then(|s| actix_web::http::header::HeaderValue::from_str(&s).ok())
    {
        page.headers_mut()
            .insert(actix_web::http::header::RETRY_AFTER, seconds);
    }
    page
}

/// No such page: under `/admin` (its API aside) people get a page with a way
/// back; elsewhere, and under `/admin/api`, the JSON answer.
pub async fn not_found(request: HttpRequest) -> HttpResponse {
    let path = request.path();
    let page = (path == "/admin" || path.starts_with("/admin/"))
        && !(path == "/admin/api" || path.starts_with("/admin/api/"));
    if page {
        html(
            StatusCode::NOT_FOUND,
            pages::error("There is no such page.", None),
        )
    } else {
        actix_web::ResponseError::error_response(&ApiError::NotFound)
    }
}

/// The pages: someone not signed in is sent to sign in; a refusal is a page
/// (429, 503 and 403 included).
pub struct Page;

impl Surface for Page {
    async fn sign_in(
        state: &AppState,
        request: &HttpRequest,
    ) -> Result<Principal, actix_web::Error> {
        match auth::authenticate(state, request).await {
            Ok(Some(who)) => Ok(who),
            Ok(None) => Err(instead(redirect("/admin/login"))),
            Err(error) => Err(instead(error_page(&error, None))),
        }
    }

    fn refuse(error: ApiError, who: &Principal) -> actix_web::Error {
        instead(error_page(&error, Some(who)))
    }
}

/// `response` as what an extractor answers instead of running the page.
fn instead(response: HttpResponse) -> actix_web::Error {
    actix_web::error::InternalError::from_response("refused", response).into()
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
        state.app.settings.now().body_timeout,
    )
    .await
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn csrf_field(body: &[u8]) -> String {
    web::Query::<CsrfForm>::from_query(&String::from_utf8_lossy(body))
        .map(|f| f.into_inner().csrf)
        .unwrap_or_default()
}

/// A page POST: same origin (when the browser says) and the session's form token.
fn check_form(
    state: &AppState,
    who: &Principal,
    request: &HttpRequest,
    body: &[u8],
) -> Result<(), ApiError> {
    auth::check_same_origin(state, request).and_then(|()| who.check_csrf(&csrf_field(body)))
}

/// An operator's page POST: its body, once the form is checked (before the
/// role, as for any page POST) and the one posting is an operator.
pub(super) async fn operator_form(
    state: &AppState,
    who: &Principal,
    request: &HttpRequest,
    payload: &mut web::Payload,
) -> Result<Vec<u8>, ApiError> {
    let body = form_body(state, request, payload).await?;
    check_form(state, who, request, &body)?;
    who.check_operator()?;
    Ok(body)
}

pub async fn login_form(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    if let Ok(Some(_)) = auth::authenticate(&state, &request).await {
        return redirect("/admin");
    }
    ok(pages::login(None))
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
    if let Err(error) = auth::check_same_origin(&state, &request) {
        return error_page(&error, None);
    }
    let body = match form_body(&state, &request, &mut payload).await {
        Ok(body) => body,
        Err(error) => return error_page(&error, None),
    };
    let token = presented_token(&request, &body);
    let settings = state.app.settings.now();
    let found = auth::find_token(&settings, &token).filter(|t| auth::usable_here(t, &request));
    let Some(token) = found else {
        // The right token is never refused; a wrong one past the limit is 429.
        if let Err(error) = state.guard.refuse_guess(&request, None) {
            return error_page(&error, None);
        }
        let request_id = request_id::of_request(&request);
        log::warn!(
            request_id = request_id.as_str();
            "admin sign-in refused: unknown token request_id={request_id}"
        );
        return html(
            StatusCode::UNAUTHORIZED,
            pages::login(Some("That token is not valid.")),
        );
    };
    match state
        .guard
        .new_session(&state.app.pool, token, Utc::now())
        .await
    {
        Ok(session) => {
            let request_id = request_id::of_request(&request);
            log::info!(
                token = token.name.as_str(), request_id = request_id.as_str();
                "admin sign-in: {} request_id={request_id}", token.name
            );
            HttpResponse::SeeOther()
                .insert_header((LOCATION, "/admin"))
                .cookie(auth::session_cookie(&settings, &request, session))
                .finish()
        }
        Err(error) => error_page(&error.into(), None),
    }
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
        if let Err(error) = check_form(&state, &who, &request, &body) {
            return error_page(&error, Some(&who));
        }
        // The cookie goes from this browser; the revocation ends it everywhere.
        if let Err(error) = auth::revoke(&state, session).await {
            return error_page(&error, Some(&who));
        }
        let request_id = request_id::of_request(&request);
        log::info!(
            token = who.name.as_str(), request_id = request_id.as_str();
            "admin sign-out: {} request_id={request_id}", who.name
        );
    }
    HttpResponse::SeeOther()
        .insert_header((LOCATION, "/admin/login"))
        .cookie(auth::expired_cookie(&state.app.settings.now(), &request))
        .finish()
}

/// A list's filters as a query string (no limit or cursor); empty when none.
fn filter_query(params: &ListParams) -> String {
    filter_fields(params)
        .iter()
        .map(|(name, value)| format!("{name}={}", url_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The filters that are set, by their query names.
fn filter_fields(params: &ListParams) -> Vec<(&'static str, String)> {
    [
        ("source", &params.source),
        ("kind", &params.kind),
        ("type", &params.event_type),
        ("status", &params.status),
        ("since", &params.since),
        ("until", &params.until),
        ("q", &params.q),
    ]
    .into_iter()
    .filter_map(|(name, value)| {
        value
            .as_deref()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v.to_string()))
    })
    .collect()
}

pub async fn list(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> HttpResponse {
    let result = async {
        let params = ListParams::from_query(request.query_string())?;
        let filter = params.to_filter(Utc::now())?;
        let page = state.app.desk.list(filter).await?;
        let dashboard = state.app.desk.dashboard(Utc::now()).await?;
        let forwards = state.app.dispatcher.forwarder().overview().await?;
        Ok::<_, ApiError>((params, page, dashboard, forwards))
    }
    .await;
    let (params, page, dashboard, forwards) = match result {
        Ok(found) => found,
        Err(error) => return error_page(&error, Some(&who)),
    };
    let filters = filter_query(&params);
    let mut next_query = None;
    if let Some(cursor) = page.next_cursor {
        let mut query = filters.clone();
        if let Some(limit) = params.limit.as_deref().filter(|l| !l.is_empty()) {
            query.push_str(&format!("&limit={}", url_encode(limit)));
        }
        query.push_str(&format!("&cursor={}", url_encode(&cursor)));
        next_query = Some(query.trim_start_matches('&').to_string());
    }
    let settings = state.app.settings.now();
    ok(pages::list(&pages::ListPage {
        who: &who,
        dashboard: &dashboard,
        forwards: &forwards,
        params: &params,
        sources: settings.sources.iter().map(|s| s.name.as_str()).collect(),
        events: &page.events,
        next_query,
        filter_query: filters,
    }))
}

#[derive(Deserialize)]
pub struct DetailQuery {
    retried: Option<String>,
}

pub async fn detail(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<DetailQuery>,
) -> HttpResponse {
    let Ok(id) = path.parse::<i64>() else {
        return error_page(&ApiError::NotFound, Some(&who));
    };
    event_page(&state, &who, id, false, query.retried.as_deref()).await
}

async fn event_page(
    state: &AppState,
    who: &Principal,
    id: i64,
    reveal: bool,
    retried: Option<&str>,
) -> HttpResponse {
    match state.app.desk.event(id, &who.name, reveal).await {
        Ok(Some(view)) => ok(pages::event(who, &view, retried)),
        Ok(None) => error_page(&ApiError::NotFound, Some(who)),
        Err(error) => error_page(&error.into(), Some(who)),
    }
}

/// An operator's form POST about one event (`path`): the form checked before
/// the role, as for any page POST; the event's row id, or the error page.
async fn operator_form_on_event(
    state: &AppState,
    who: &Principal,
    request: &HttpRequest,
    path: &str,
    payload: &mut web::Payload,
) -> Result<i64, HttpResponse> {
    operator_form(state, who, request, payload)
        .await
        .map_err(|error| error_page(&error, Some(who)))?;
    path.parse::<i64>()
        .map_err(|_| error_page(&ApiError::NotFound, Some(who)))
}

/// The event page with its payload unmasked, for operators; audited as
/// `revealed_payload`. A form POST, so a link elsewhere cannot reveal.
pub async fn reveal(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    mut payload: web::Payload,
) -> HttpResponse {
    let id = match operator_form_on_event(&state, &who, &request, &path, &mut payload).await {
        Ok(id) => id,
        Err(page) => return page,
    };
    event_page(&state, &who, id, true, None).await
}

/// Pauses a forward from the dashboard (operators: a form POST with its token).
pub async fn pause_forward(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    forward_form(&state, &who, &request, &path, payload, true).await
}

/// Resumes a paused forward from the dashboard.
pub async fn resume_forward(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    forward_form(&state, &who, &request, &path, payload, false).await
}

async fn forward_form(
    state: &AppState,
    who: &Principal,
    request: &HttpRequest,
    name: &str,
    mut payload: web::Payload,
    pause: bool,
) -> HttpResponse {
    let changed = async {
        operator_form(state, who, request, &mut payload).await?;
        if !pause {
            super::forwards::resumable(state, name)?;
        }
        let forwarder = state.app.dispatcher.forwarder();
        match forwarder.set_paused(name, pause, &who.name).await? {
            Some(_) => Ok(()),
            None => Err(ApiError::NotFound),
        }
    }
    .await;
    match changed {
        Ok(()) => redirect("/admin"),
        Err(error) => error_page(&error, Some(who)),
    }
}

pub async fn retry(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    mut payload: web::Payload,
) -> HttpResponse {
    let id = match operator_form_on_event(&state, &who, &request, &path, &mut payload).await {
        Ok(id) => id,
        Err(page) => return page,
    };
    let retry = apply_again(
        state.app.desk.clone(),
        who.name.clone(),
        request_id::of_request(&request),
        id,
    );
    // A status or an error code, which the page turns into a fixed text.
    let outcome = match to_completion(retry).await {
        Ok(event) => event.status.to_string(),
        Err(error) => {
            error.log_failure();
            let code = error.code();
            let known = pages::retry_note(code).is_some();
            if known { code } else { "internal" }.to_string()
        }
    };
    redirect(&format!(
        "/admin/events/{id}?retried={}",
        url_encode(&outcome)
    ))
}

pub async fn payment(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (source, payment_id) = path.into_inner();
    match state
        .app
        .desk
        .payment(&source, &payment_id, &who.name)
        .await
    {
        Ok(Some(view)) => ok(pages::payment(&who, &view)),
        Ok(None) => error_page(&ApiError::NotFound, Some(&who)),
        Err(error) => error_page(&error.into(), Some(&who)),
    }
}

#[derive(Deserialize)]
pub struct CursorQuery {
    cursor: Option<String>,
}

pub async fn customer(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<CursorQuery>,
) -> HttpResponse {
    let customer = path.into_inner();
    match state
        .app
        .desk
        .customer_payments(&customer, CUSTOMER_PAGE, query.cursor.as_deref())
        .await
    {
        Ok(page) => ok(pages::customer(
            &who,
            &customer,
            &page.payments,
            page.next_cursor.as_deref(),
        )),
        Err(error) => error_page(&error.into(), Some(&who)),
    }
}

/// The bulk retry's preview: how many events the list's filter matches.
pub async fn bulk_form(
    Operator { who, .. }: Operator<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> HttpResponse {
    let result = async {
        let params = ListParams::from_query(request.query_string())?;
        let preview = state
            .app
            .desk
            .bulk_retry(params.to_filter(Utc::now())?, true, &who.name)
            .await?;
        Ok::<_, ApiError>((params, preview))
    }
    .await;
    match result {
        Ok((params, preview)) => ok(pages::bulk_confirm(
            &who,
            &filter_query(&params),
            &filter_fields(&params),
            &preview,
        )),
        Err(error) => error_page(&error, Some(&who)),
    }
}

pub async fn bulk_post(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    mut payload: web::Payload,
) -> HttpResponse {
    let result = async {
        let body = operator_form(&state, &who, &request, &mut payload).await?;
        let params = ListParams::from_query(&String::from_utf8_lossy(&body))?;
        let filter = params.to_filter(Utc::now())?;
        let (desk, name, request_id) = (
            state.app.desk.clone(),
            who.name.clone(),
            request_id::of_request(&request),
        );
        let outcome = to_completion(async move {
            let outcome = desk.bulk_retry(filter, false, &name).await?;
            crate::desk::log_bulk_retry(&name, &request_id, &outcome);
            Ok(outcome)
        })
        .await?;
        Ok::<_, ApiError>((params, outcome))
    }
    .await;
    match result {
        Ok((params, outcome)) => ok(pages::bulk_done(&who, &filter_query(&params), &outcome)),
        Err(error) => error_page(&error, Some(&who)),
    }
}

pub async fn audit(
    Operator { who, .. }: Operator<Page>,
    state: web::Data<AppState>,
    query: web::Query<CursorQuery>,
) -> HttpResponse {
    match state
        .app
        .desk
        .audit(AUDIT_PAGE, query.cursor.as_deref())
        .await
    {
        Ok(page) => ok(pages::audit(
            &who,
            &page.entries,
            page.next_cursor.as_deref(),
        )),
        Err(error) => error_page(&error.into(), Some(&who)),
    }
}
