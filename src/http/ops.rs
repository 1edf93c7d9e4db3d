//! Health, readiness and metrics for operators and orchestrators.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde_json::json;

use super::AppState;
use super::auth;
use super::error::ApiError;
use crate::dispatch::lanes;
use crate::metrics::Metric;
use crate::store;

pub async fn not_found() -> HttpResponse {
    ApiError::NotFound.error_response()
}

pub async fn method_not_allowed() -> HttpResponse {
    ApiError::MethodNotAllowed.error_response()
}

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness, and the gauges read from the database, answer from a read at most
/// this old, so probes and scrapes (or floods of them) cost the database one
/// query a second.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The readiness check's time limit (probes default to a 1–3 s timeout).
const READY_WITHIN: Duration = Duration::from_secs(2);
/// A pool busy to its last session is a busy database, not a silent one, while
/// deliveries committed this recently.
const PROGRESS_WITHIN: Duration = Duration::from_secs(10);

/// Why this instance is not ready, if it is not.
async fn readiness(state: &AppState) -> Option<&'static str> {
    if state.stopping.load(std::sync::atomic::Ordering::Relaxed) {
        return Some("shutting down");
    }
    state
        .readiness
        .get(FRESH_FOR, || async {
            let progressing = state.app.ingester.committed_within(PROGRESS_WITHIN);
            let check = store::is_ready(&state.app.pool, state.app.migrations, progressing);
            // A server that stopped answering (no reset) must not hold every
            // probe and scrape waiting behind this check.
            let Ok(ready) = tokio::time::timeout(READY_WITHIN, check).await else {
                log::warn!(
                    "not ready: the database gave no answer within {}",
                    crate::duration::format(READY_WITHIN)
                );
                return Some("database unreachable");
            };
            match ready {
                Ok(()) => None,
                Err(error) => {
                    log::warn!("not ready: {error}");
                    Some(match error {
                        store::NotReady::Store(store::StoreError::Schema(_)) => {
                            "database not migrated"
                        }
                        store::NotReady::ReadOnly => "database read-only",
                        store::NotReady::Store(_) => "database unreachable",
                    })
                }
            }
        })
        .await
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let problem = readiness(&state).await;
    match problem {
        None => HttpResponse::Ok().json(json!({"status": "ready"})),
        Some(reason) => HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "5"))
            .json(json!({"status": "unavailable", "reason": reason})),
    }
}

/// `read`, or `None` once `deadline` has passed.
async fn within<T>(
    deadline: tokio::time::Instant,
    read: impl std::future::Future<Output = Option<T>>,
) -> Option<T> {
    tokio::time::timeout_at(deadline, read).await.ok().flatten()
}

/// The scrape. With `metrics_token` set, it wants `Authorization: Bearer` with
/// that token (401 otherwise, before anything is read).
pub async fn metrics(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    if let Some(expected) = &state.app.settings.now().metrics_token
        && !auth::bearer_is(&request, expected)
    {
        return ApiError::Unauthorized.error_response();
    }
    // The pool as it is before a refresh takes a connection of it.
    let pool = state.app.pool.status();
    let mut gauges = vec![
        (Metric::DbPoolSize, pool.size as f64),
        (Metric::DbPoolAvailable, pool.available as f64),
        (Metric::DbPoolMaxSize, pool.max_size as f64),
        (Metric::DbPoolWaiting, pool.waiting as f64),
    ];
    let ready = readiness(&state).await.is_none();
    gauges.push((Metric::Ready, if ready { 1.0 } else { 0.0 }));
    // The gauges read from the database share one time limit, read side by
    // side so a slow one does not spend the others' time: a server that
    // stopped answering leaves them out rather than hold the scrape.
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    let metrics = &state.app.metrics;
    let backlog = metrics.backlog.get(FRESH_FOR, || {
        within(deadline, async {
            let client = state.app.pool.get().await.ok()?;
            store::events::backlog(&client).await.ok()
        })
    });
    let unknown = async {
        if state.app.settings.now().gateway.routes.is_empty() {
            return None;
        }
        metrics
            .gateway_unknown
            .get(FRESH_FOR, || {
                within(deadline, async {
                    let client = state.app.pool.get().await.ok()?;
                    store::api_idempotency::unknown_count(&client).await.ok()
                })
            })
            .await
    };
    let forwards = metrics.forward_states.get(FRESH_FOR, || {
        within(deadline, async {
            let views = state.app.dispatcher.forwarder().states().await.ok()?;
            Some(
                views
                    .into_iter()
                    .map(|v| (v.name, lanes::state_gauge(v.state)))
                    .collect(),
            )
        })
    });
    let silences = metrics.silences.get(FRESH_FOR, || {
        within(deadline, async {
            let client = state.app.pool.get().await.ok()?;
            store::activity::silences(&client).await.ok()
        })
    });
    let (backlog, unknown, forwards, silences) = tokio::join!(backlog, unknown, forwards, silences);
    if let Some((failed, dead)) = backlog {
        gauges.push((Metric::RetryBacklog, failed as f64));
        gauges.push((Metric::DeadEvents, dead as f64));
    }
    if let Some(unknown) = unknown {
        gauges.push((Metric::GatewayUnknownKeys, unknown as f64));
    }
    gauges.extend(crate::metrics::process::read());
    let forwards: Vec<(String, f64)> = forwards.unwrap_or_default();
    let silent = silences
        .map(|since| crate::silence::silent_sources(&state.app.settings.now(), &since))
        .unwrap_or_default();
    let labeled: Vec<(Metric, &str, &str, f64)> = forwards
        .iter()
        .map(|(name, value)| (Metric::ForwardState, "forward", name.as_str(), *value))
        .chain(
            silent
                .iter()
                .map(|(name, value)| (Metric::SourceSilent, "source", name.as_str(), *value)),
        )
        .collect();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.app.metrics.render_with(&gauges, &labeled))
}
