//! `hookd events list|show|retry|verify`, `hookd payments show` and `hookd
//! forget`: the support desk from a terminal, as tables or as the same JSON the
//! admin API returns. What is viewed, revealed, retried or forgotten here is
//! audited as `cli:USER`.

use chrono::Utc;

use super::CliError;
use crate::app::Instance;
use crate::desk::{Covered, DeskError, EventView, Origin, PaymentView, Verdict};
use crate::dispatch::RetryOutcome;
use crate::filter::ListParams;
use crate::store::history::EventSummary;

impl From<DeskError> for CliError {
    fn from(error: DeskError) -> Self {
        match error {
            DeskError::Store(error) => CliError::Store(error),
            other => CliError::Other(other.to_string()),
        }
    }
}

/// Who acts from a terminal, for the audit trail: the real user's name (or uid),
/// never `$USER`, which anyone can set to anything.
fn who() -> String {
    let uid = nix::unistd::Uid::current();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name);
    format!("cli:{user}")
}

/// What `--json` prints: the admin API's answer, on one line.
fn json_of(answer: &impl serde::Serialize) -> String {
    serde_json::to_string(answer).unwrap_or_default()
}

impl From<crate::filter::FilterError> for CliError {
    fn from(error: crate::filter::FilterError) -> Self {
        CliError::Other(error.0)
    }
}

pub async fn list(app: &Instance, params: &ListParams, as_json: bool) -> Result<(), CliError> {
    let filter = params.to_filter(Utc::now())?;
    let page = app.desk.list(filter).await?;
    if as_json {
        say!("{}", json_of(&page))?;
        return Ok(());
    }
    print_table(&page.events)?;
    if let Some(cursor) = page.next_cursor {
        say!("more: --cursor {cursor}")?;
    }
    Ok(())
}

fn print_table(events: &[EventSummary]) -> Result<(), CliError> {
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
        say!("{}", padded.join("  ").trim_end())
    };
    line(header.to_vec())?;
    for row in &rows {
        line(row.iter().map(String::as_str).collect())?;
    }
    if rows.is_empty() {
        say!("(no events match)")?;
    }
    Ok(())
}

pub async fn show(app: &Instance, id: i64, reveal: bool, as_json: bool) -> Result<(), CliError> {
    let view = app
        .desk
        .event(id, &who(), reveal)
        .await?
        .ok_or_else(|| CliError::Other(format!("no event with id {id}")))?;
    if as_json {
        say!("{}", json_of(&view))?;
    } else {
        print_detail(&view)?;
    }
    Ok(())
}

fn origin_line(origin: &Origin) -> String {
    let verdict = match &origin.verdict {
        Verdict::Verified { secret } => {
            format!("verified with secret {secret} (the current secrets, as of its received time)")
        }
        Verdict::Unverified { reason } => format!("not verified: {reason}"),
        Verdict::Unavailable { reason } => format!("cannot be checked: {reason}"),
        Verdict::Redacted { reason } => format!("redacted: {reason}"),
        Verdict::ProviderApi { proof } => proof.clone(),
    };
    match origin.covers.and_then(Covered::caveat) {
        Some(caveat) => format!("{verdict}; {caveat}"),
        None => verdict,
    }
}

fn print_detail(view: &EventView) -> Result<(), CliError> {
    let (event, handlers) = (&view.detail, &view.handlers);
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
        ("signature", origin_line(&view.origin)),
        ("received_at", time(Some(e.received_at))),
        ("last_delivery_at", time(Some(e.last_delivery_at))),
        ("processed_at", time(e.processed_at)),
        ("next_attempt_at", time(e.next_attempt_at)),
        ("purged_at", time(e.purged_at)),
    ];
    for (name, value) in fields {
        say!("{name:17} {value}")?;
    }
    say!(
        "\npayload{}:",
        if view.masked {
            " (personal data masked; --reveal shows it)"
        } else {
            " (revealed)"
        }
    )?;
    match &event.payload {
        Some(payload) => say!(
            "{}",
            serde_json::to_string_pretty(payload).unwrap_or_default()
        )?,
        None => say!("(purged)")?,
    }
    say!("\nhandlers:")?;
    for h in handlers {
        say!(
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
        )?;
    }
    say!("\nattempts:")?;
    for a in &event.attempts {
        say!(
            "  #{} {} {:24} {:>8.1} ms  {}{}  {}",
            a.attempt,
            a.started_at.to_rfc3339(),
            a.handler,
            a.duration_ms,
            a.outcome,
            a.http_status.map(|s| format!(" ({s})")).unwrap_or_default(),
            a.error.as_deref().unwrap_or("")
        )?;
    }
    if event.attempts.is_empty() {
        say!("  (none)")?;
    }
    Ok(())
}

pub async fn retry(app: &Instance, id: i64, as_json: bool) -> Result<(), CliError> {
    let who = who();
    let outcome = app.desk.retry(id, &who).await?;
    crate::desk::log_retry(&who, "-", id, &outcome);
    let problem = match outcome {
        RetryOutcome::Applied(_) => None,
        RetryOutcome::NotFound => Some(format!("no event with id {id}")),
        RetryOutcome::Gone => Some(format!(
            "event {id}: the payload was purged; it cannot be applied"
        )),
        RetryOutcome::NoHandler => Some(format!("event {id}: no handler applies to its kind")),
        RetryOutcome::InFlight => Some(format!(
            "event {id}: its forwards are being sent right now; retry once they have answered"
        )),
    };
    if let Some(problem) = problem {
        return Err(CliError::Other(problem));
    }
    let event = app
        .desk
        .summary(id)
        .await?
        .ok_or_else(|| CliError::Other(format!("no event with id {id}")))?;
    if as_json {
        say!("{}", json_of(&event))?;
    } else {
        say!(
            "event {id}: {} after attempt {}{}",
            event.status,
            event.attempts,
            event
                .last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Retries every event the filters match (or with `dry_run`, counts them).
pub async fn bulk_retry(
    app: &Instance,
    params: &ListParams,
    dry_run: bool,
    as_json: bool,
) -> Result<(), CliError> {
    let filter = params.to_filter(Utc::now())?;
    let who = who();
    let outcome = app.desk.bulk_retry(filter, dry_run, &who).await?;
    if !dry_run {
        crate::desk::log_bulk_retry(&who, "-", &outcome);
    }
    if as_json {
        say!("{}", json_of(&outcome))?;
    } else if dry_run {
        say!("{} events match; none retried (dry run)", outcome.matched)?;
    } else {
        let outcomes: Vec<String> = outcome
            .outcomes
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        say!(
            "{} events matched, {} retried: {}",
            outcome.matched,
            outcome.retried,
            if outcomes.is_empty() {
                "nothing to do".to_string()
            } else {
                outcomes.join(", ")
            }
        )?;
    }
    Ok(())
}

/// Forgets a customer (or, with `dry_run`, prints what would be erased).
pub async fn forget(
    app: &Instance,
    customer: &str,
    source: Option<&str>,
    dry_run: bool,
    as_json: bool,
) -> Result<(), CliError> {
    let who = who();
    let outcome = app.desk.forget(customer, source, dry_run, &who).await?;
    if !dry_run {
        crate::desk::log_forget(&who, "-", &outcome);
    }
    if as_json {
        say!("{}", json_of(&outcome))?;
        return Ok(());
    }
    let verb = if dry_run { "would erase" } else { "erased" };
    say!(
        "{verb} the customer's personal data from {} events ({} payloads, {} bodies rewritten, \
         {} bodies that are not JSON dropped, {} conflicting items) and their id from {} payments",
        outcome.events,
        outcome.payloads,
        outcome.bodies,
        outcome.bodies_dropped,
        outcome.conflicts,
        outcome.payments
    )?;
    Ok(())
}

/// Checks a stored event's signature again; fails unless it verifies.
pub async fn verify(app: &Instance, id: i64, as_json: bool) -> Result<(), CliError> {
    if app.desk.summary(id).await?.is_none() {
        return Err(CliError::Other(format!("no event with id {id}")));
    }
    let origin = app.desk.verify_origin(id).await?;
    // The verdict is the exit code, read or not.
    if as_json {
        say!("{}", json_of(&origin)).or_else(super::unheard)?;
    } else {
        say!("event {id}: {}", origin_line(&origin)).or_else(super::unheard)?;
    }
    match origin.verdict {
        Verdict::Verified { .. } | Verdict::ProviderApi { .. } => Ok(()),
        _ => Err(CliError::Other(format!(
            "event {id}: its origin is not proven"
        ))),
    }
}

pub async fn payment(
    app: &Instance,
    source: &str,
    payment_id: &str,
    as_json: bool,
) -> Result<(), CliError> {
    let view = app
        .desk
        .payment(source, payment_id, &who())
        .await?
        .ok_or_else(|| CliError::Other(format!("no payment {payment_id} from {source}")))?;
    if as_json {
        say!("{}", json_of(&view))?;
    } else {
        print_payment(&view)?;
    }
    Ok(())
}

fn print_payment(view: &PaymentView) -> Result<(), CliError> {
    let p = &view.payment;
    let fields = [
        ("source", p.source.clone()),
        ("payment_id", p.payment_id.clone()),
        ("status", p.status.clone()),
        (
            "amount",
            format!("{} {}", p.amount, p.currency.as_deref().unwrap_or_default()),
        ),
        ("amount_refunded", p.amount_refunded.to_string()),
        (
            "facts",
            format!(
                "succeeded {}, failed {}, disputed {}",
                p.succeeded, p.failed, p.disputed
            ),
        ),
        ("customer_id", p.customer_id.clone().unwrap_or_default()),
        ("created_at", p.created_at.to_rfc3339()),
        ("updated_at", p.updated_at.to_rfc3339()),
    ];
    for (name, value) in fields {
        say!("{name:16} {value}")?;
    }
    say!("\nevents, oldest first:")?;
    for (event, runs) in &view.events {
        say!(
            "  #{} {} {} {} {} ({} deliveries)",
            event.id,
            event.received_at.to_rfc3339(),
            event.event_type,
            event.event_id,
            event.status,
            event.deliveries
        )?;
        for a in runs {
            say!(
                "      run {} {} {}{}",
                a.attempt,
                a.handler,
                a.outcome,
                a.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )?;
        }
    }
    if view.events.is_empty() {
        say!("  (none kept)")?;
    }
    Ok(())
}
