//! `/admin/api/forwards`: where each forward stands (its breaker, pause and
//! backlog), and an operator's pause and resume.

use actix_web::{HttpResponse, web};

use super::AppState;
use super::auth::{Operator, Viewer};
use super::error::ApiError;

/// Every forward: `{"forwards":[…]}`.
pub async fn list(_: Viewer, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let forwards = state.app.dispatcher.forwarder().overview().await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "forwards": forwards })))
}

/// Pauses a forward for every instance: its events wait, unsent.
pub async fn pause(
    Operator { who, .. }: Operator,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    set_paused(&state, &path, true, &who.name).await
}

/// Resumes a paused forward: what waited goes in the order it came.
pub async fn resume(
    Operator { who, .. }: Operator,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    resumable(&state, &path)?;
    set_paused(&state, &path, false, &who.name).await
}

/// A forward the configuration pauses (`paused = true`) is resumed there, by
/// the API and the page alike.
pub(super) fn resumable(state: &AppState, name: &str) -> Result<(), ApiError> {
    let paused_in_file = state
        .app
        .settings
        .now()
        .forward(name)
        .is_some_and(|f| f.paused);
    if paused_in_file {
        return Err(ApiError::Conflict(
            "paused_in_configuration",
            "the configuration says paused = true: change it and reload".into(),
        ));
    }
    Ok(())
}

async fn set_paused(
    state: &AppState,
    name: &str,
    pause: bool,
    who: &str,
) -> Result<HttpResponse, ApiError> {
    let forwarder = state.app.dispatcher.forwarder();
    match forwarder.set_paused(name, pause, who).await? {
        Some(view) => Ok(HttpResponse::Ok().json(view)),
        None => Err(ApiError::NotFound),
    }
}
