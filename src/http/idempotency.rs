//! The gateway's keys at the desk: `/admin/api/idempotency` (the list, newest
//! first, filtered by route, state, and a key or operation; one key with its
//! stored answer, masked for viewers as payloads are; an operator's release of
//! an `unknown` key, audited), and the same as pages, `unknown` keys and long
//! running claims first.

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::admin::{page_limit, reveal_asked};
use super::auth::{Operator, Principal, Viewer};
use super::error::ApiError;
use super::idempotency_pages as pages;
use super::ui::{self, Page};
use crate::filter::cursor;
use crate::mask::{self, Cover, MASKED};
use crate::store::api_idempotency::{self as keys, KeyFilter, KeyState, KeyView, Released};
use crate::store::audit::{self, Record};

/// A claim running longer than this is shown among what needs a person.
const LONG_RUNNING: std::time::Duration = std::time::Duration::from_secs(60);
/// Keys needing a person shown above the list, at most.
const ATTENTION: i64 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    pub route: Option<String>,
    pub state: Option<String>,
    pub q: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

/// A page of keys and the cursor of the next.
#[derive(Debug, Serialize)]
pub struct KeyPage {
    pub keys: Vec<KeyView>,
    pub next_cursor: Option<String>,
}

fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
}

impl ListQuery {
    fn parse(request: &HttpRequest) -> Result<Self, ApiError> {
        web::Query::<ListQuery>::from_query(request.query_string())
            .map(web::Query::into_inner)
            .map_err(|e| ApiError::BadRequest(e.to_string()))
    }

    fn to_filter(&self) -> Result<KeyFilter, ApiError> {
        let state = given(&self.state)
            .map(|s| {
                KeyState::parse(&s).ok_or_else(|| {
                    ApiError::BadRequest(
                        "state must be in_progress, completed, released or unknown".into(),
                    )
                })
            })
            .transpose()?;
        let no_nul = |v: &String| !v.contains('\0');
        let after = given(&self.cursor)
            .map(|c| cursor::decode::<(DateTime<Utc>, i64)>(&c))
            .transpose()?;
        Ok(KeyFilter {
            route: given(&self.route).filter(no_nul),
            state,
            q: given(&self.q).filter(no_nul),
            limit: page_limit(self.limit.as_deref())?,
            after,
        })
    }
}

/// A connection from the pool.
async fn client_of(state: &AppState) -> Result<deadpool_postgres::Object, ApiError> {
    Ok(state
        .app
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?)
}

async fn page_of(state: &AppState, filter: KeyFilter) -> Result<KeyPage, ApiError> {
    let client = client_of(state).await?;
    let limit = filter.limit;
    let mut rows = keys::list(
        &client,
        &KeyFilter {
            limit: limit + 1,
            ..filter
        },
    )
    .await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        rows.last().map(|k| cursor::encode(&(k.created_at, k.id)))
    } else {
        None
    };
    Ok(KeyPage {
        keys: rows.into_iter().map(shown_key).collect(),
        next_cursor,
    })
}

/// A key as a list shows it, to viewers and operators alike: its target's
/// query values masked (`?reveal=true` on the key itself shows them). The
/// fingerprint stays whole: it is a field of the desk's contract.
fn shown_key(key: KeyView) -> KeyView {
    KeyView {
        target: mask::cover_query(&key.target),
        ..key
    }
}

pub async fn list(
    _: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let filter = ListQuery::parse(&request)?.to_filter()?;
    Ok(HttpResponse::Ok().json(page_of(&state, filter).await?))
}

/// One key with its stored answer: `body` is the JSON it was (masked unless
/// revealed), its text, or null when none is kept.
#[derive(Debug, Serialize)]
pub struct KeyDetailView {
    #[serde(flatten)]
    pub key: KeyView,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub masked: bool,
}

fn key_id(path: &str) -> Result<i64, ApiError> {
    path.parse::<i64>().map_err(|_| ApiError::NotFound)
}

/// The stored answer's headers: a route's `replay_headers` may keep a cookie
/// or a token, so unless revealed only those every answer keeps
/// (`idempotency::ALWAYS_KEPT`) are shown as stored (`Location` with its
/// query's values masked, as the request's target), the others masked.
fn shown_headers(headers: Vec<(String, String)>, reveal: bool) -> Vec<(String, String)> {
    if reveal {
        return headers;
    }
    headers
        .into_iter()
        .map(|(name, value)| {
            let plain = crate::idempotency::ALWAYS_KEPT
                .iter()
                .any(|kept| name.eq_ignore_ascii_case(kept));
            match plain {
                // A `Location` may carry a query as the request did.
                true if name.eq_ignore_ascii_case("location") => {
                    let value = mask::cover_query(&value);
                    (name, value)
                }
                true => (name, value),
                false => (name, mask::MASKED.to_string()),
            }
        })
        .collect()
}

/// The stored body as viewers see it: the route's `mask` over its JSON (all
/// of it when the route sets none or is gone), text only when nothing is masked.
fn shown_body(state: &AppState, route: &str, body: Option<Vec<u8>>, reveal: bool) -> Value {
    let Some(body) = body.filter(|b| !b.is_empty()) else {
        return Value::Null;
    };
    let settings = state.app.settings.now();
    let pointers = settings.gateway.route(route).and_then(|r| r.mask.clone());
    match serde_json::from_slice::<Value>(&body) {
        Ok(mut json) => {
            if !reveal {
                match &pointers {
                    Some(pointers) => mask::cover(&mut json, pointers, Cover::Mask),
                    None => mask::cover_all(&mut json, Cover::Mask),
                }
            }
            json
        }
        Err(_) if reveal || pointers.as_ref().is_some_and(Vec::is_empty) => {
            Value::String(String::from_utf8_lossy(&body).into_owned())
        }
        Err(_) => Value::String(MASKED.into()),
    }
}

/// One key, audited as viewed (or revealed, for operators only).
async fn detail_of(
    state: &AppState,
    who: &Principal,
    id: i64,
    reveal: bool,
) -> Result<KeyDetailView, ApiError> {
    if reveal {
        who.check_operator()?;
    }
    let client = client_of(state).await?;
    let detail = keys::get(&client, id).await?.ok_or(ApiError::NotFound)?;
    let action = if reveal {
        "revealed_idempotency_key"
    } else {
        "viewed_idempotency_key"
    };
    audit::record(&client, &audited(&who.name, action, &detail.view)).await?;
    let body = shown_body(state, &detail.view.route, detail.body, reveal);
    let key = match reveal {
        true => detail.view,
        false => shown_key(detail.view),
    };
    Ok(KeyDetailView {
        key,
        headers: shown_headers(detail.headers, reveal),
        body,
        masked: !reveal,
    })
}

fn audited<'a>(who: &'a str, action: &'a str, key: &KeyView) -> Record<'a> {
    Record {
        who,
        action,
        detail: Some(serde_json::json!({
            "idempotency_key_id": key.id,
            "route": key.route,
            "key": key.key,
            "operation": key.operation,
        })),
        ..Record::default()
    }
}

pub async fn show(
    Viewer { who, .. }: Viewer,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = key_id(&path)?;
    let reveal = reveal_asked(&request, &who)?;
    Ok(HttpResponse::Ok().json(detail_of(&state, &who, id, reveal).await?))
}

/// Releases an `unknown` key (or a claim past its lock) once an operator has
/// checked upstream: the next copy reaches upstream again. Audited as
/// `released_idempotency_key`, in the release's transaction.
async fn release_key(state: &AppState, who: &Principal, id: i64) -> Result<KeyView, ApiError> {
    let mut client = client_of(state).await?;
    let tx = crate::store::begin(&mut client)
        .await
        .map_err(crate::store::StoreError::from)?;
    let released = keys::release_unknown(&tx, id).await?;
    let key = match released {
        Released::NotFound => return Err(ApiError::NotFound),
        Released::NotUnknown(state) => {
            return Err(ApiError::Conflict(
                "not_unknown",
                format!(
                    "the key is {}: only an unknown key (or a claim past its lock) is released",
                    state.as_str()
                ),
            ));
        }
        Released::Released(key) => *key,
    };
    audit::record(&tx, &audited(&who.name, "released_idempotency_key", &key)).await?;
    tx.commit().await.map_err(crate::store::StoreError::from)?;
    log::info!(
        "{} released the gateway key {} of route {} ({}): its next copy is sent upstream",
        who.name,
        key.id,
        key.route,
        key.operation
    );
    Ok(shown_key(key))
}

pub async fn release(
    Operator { who, .. }: Operator,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = key_id(&path)?;
    Ok(HttpResponse::Ok().json(release_key(&state, &who, id).await?))
}

/// `/admin/idempotency`: what needs a person first, then the filtered list.
pub async fn list_page(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
) -> HttpResponse {
    let result = async {
        let query = ListQuery::parse(&request)?;
        let page = page_of(&state, query.to_filter()?).await?;
        let client = client_of(&state).await?;
        let attention = keys::needing_attention(&client, LONG_RUNNING, ATTENTION)
            .await?
            .into_iter()
            .map(shown_key)
            .collect::<Vec<_>>();
        Ok::<_, ApiError>((query, page, attention))
    }
    .await;
    match result {
        Ok((query, page, attention)) => {
            let routes: Vec<String> = state
                .app
                .settings
                .now()
                .gateway
                .routes
                .iter()
                .map(|r| r.name().to_string())
                .collect();
            ui::ok(pages::list(&who, &query, &routes, &attention, &page))
        }
        Err(error) => ui::error_page(&error, Some(&who)),
    }
}

pub async fn detail_page(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> HttpResponse {
    let result = async { detail_of(&state, &who, key_id(&path)?, false).await }.await;
    match result {
        Ok(detail) => ui::ok(pages::detail(&who, &detail)),
        Err(error) => ui::error_page(&error, Some(&who)),
    }
}

/// The release form of the detail page (an operator's, with the form token).
pub async fn release_page(
    Viewer { who, .. }: Viewer<Page>,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    mut payload: web::Payload,
) -> HttpResponse {
    let result = async {
        ui::operator_form(&state, &who, &request, &mut payload).await?;
        let id = key_id(&path)?;
        release_key(&state, &who, id).await
    }
    .await;
    match result {
        Ok(key) => ui::redirect(&format!("/admin/idempotency/{}", key.id)),
        Err(error) => ui::error_page(&error, Some(&who)),
    }
}
