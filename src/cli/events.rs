//! `hookd events list|show|retry`: the history from a terminal, as a table or as
//! the same JSON the admin API returns.

use chrono::Utc;
use serde_json::json;

use super::CliError;
use crate::app::App;
use crate::dispatch::RetryOutcome;
use crate::query::{ListParams, page};
use crate::store::history::{self, EventDetail, EventSummary, HandlerState};

impl From<crate::query::FilterError> for CliError {
    fn from(error: crate::query::FilterError) -> Self {
        CliError::Other(error.0)
    }
}

pub async fn list(app: &App, params: &ListParams, as_json: bool) -> Result<(), CliError> {
    let filter = params.to_filter(Utc::now())?;
    let client = app
        .pool
        .get()
        .await
        .map_err(crate::store::StoreError::from)?;
    let (events, next_cursor) = page(&client, filter).await?;
    if as_json {
        println!("{}", json!({"events": events, "next_cursor": next_cursor}));
        return Ok(());
    }
    print_table(&events);
    if let Some(cursor) = next_cursor {
        println!("more: --cursor {cursor}");
    }
    Ok(())
}

fn print_table(events: &[EventSummary]) {
    let header = [
        "ID", "RECEIVED", "SOURCE", "EVENT ID", "TYPE", "STATUS", "ATT", "DEL", "PAYMENT",
    ];
    let rows: Vec<[String; 9]> = events
        .iter()
        .map(|e| {
            [
                e.id.to_string(),
                e.received_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                e.source.clone(),
                e.event_id.clone(),
                e.event_type.clone(),
                e.status.to_string(),
                e.attempts.to_string(),
                e.deliveries.to_string(),
                e.payment_id.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    if rows.is_empty() {
        println!("(no events match)");
    }
}

pub async fn show(app: &App, id: i64, as_json: bool) -> Result<(), CliError> {
    let event = history::load_event(&app.pool, id)
        .await?
        .ok_or_else(|| CliError::Other(format!("no event with id {id}")))?;
    let handlers = event.handler_states(&app.dispatcher.plan_names(&event.summary));
    if as_json {
        println!("{}", event.to_json(&handlers));
    } else {
        print_detail(&event, &handlers);
    }
    Ok(())
}

fn print_detail(event: &EventDetail, handlers: &[HandlerState]) {
    let e = &event.summary;
    let time = |t: Option<chrono::DateTime<Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    let fields = [
        ("id", e.id.to_string()),
        ("source", e.source.clone()),
        ("event_id", e.event_id.clone()),
        ("event_type", e.event_type.clone()),
        ("kind", e.kind.clone().unwrap_or_default()),
        ("status", e.status.to_string()),
        ("last_error", e.last_error.clone().unwrap_or_default()),
        ("payment_id", e.payment_id.clone().unwrap_or_default()),
        ("customer_id", e.customer_id.clone().unwrap_or_default()),
        ("deliveries", e.deliveries.to_string()),
        ("attempts", e.attempts.to_string()),
        ("signed_with", e.signed_with.to_string()),
        ("received_at", time(Some(e.received_at))),
        ("last_delivery_at", time(Some(e.last_delivery_at))),
        ("processed_at", time(e.processed_at)),
        ("next_attempt_at", time(e.next_attempt_at)),
        ("purged_at", time(e.purged_at)),
    ];
    for (name, value) in fields {
        println!("{name:17} {value}");
    }
    println!("\npayload:");
    match &event.payload {
        Some(payload) => println!(
            "{}",
            serde_json::to_string_pretty(payload).unwrap_or_default()
        ),
        None => println!("(purged)"),
    }
    println!("\nhandlers:");
    for h in handlers {
        println!(
            "  {:24} {:9} {} run(s){}{}",
            h.handler,
            h.status,
            h.attempts,
            h.http_status
                .map(|s| format!("  HTTP {s}"))
                .unwrap_or_default(),
            h.last_error
                .as_deref()
                .map(|e| format!("  {e}"))
                .unwrap_or_default()
        );
    }
    println!("\nattempts:");
    for a in &event.attempts {
        println!(
            "  #{} {} {:24} {:>8.1} ms  {}{}  {}",
            a.attempt,
            a.started_at.to_rfc3339(),
            a.handler,
            a.duration_ms,
            a.outcome,
            a.http_status.map(|s| format!(" ({s})")).unwrap_or_default(),
            a.error.as_deref().unwrap_or("")
        );
    }
    if event.attempts.is_empty() {
        println!("  (none)");
    }
}

pub async fn retry(app: &App, id: i64, as_json: bool) -> Result<(), CliError> {
    let outcome = app.dispatcher.retry_now(id).await?;
    let problem = match outcome {
        RetryOutcome::Applied(_) => None,
        RetryOutcome::NotFound => Some(format!("no event with id {id}")),
        RetryOutcome::Gone => Some(format!(
            "event {id}: the payload was purged; it cannot be applied"
        )),
        RetryOutcome::NoHandler => Some(format!("event {id}: no handler applies to its kind")),
    };
    if let Some(problem) = problem {
        return Err(CliError::Other(problem));
    }
    let event = history::load_event(&app.pool, id)
        .await?
        .ok_or_else(|| CliError::Other(format!("no event with id {id}")))?;
    if as_json {
        println!(
            "{}",
            serde_json::to_value(&event.summary).unwrap_or_default()
        );
    } else {
        println!(
            "event {id}: {} after attempt {}{}",
            event.summary.status,
            event.summary.attempts,
            event
                .summary
                .last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
