//! The admin page's markup, with maud: every value is escaped unless a template
//! says otherwise (none does), so markup is escaped by construction. Pure: each
//! function turns what the support desk returned into HTML.

use crate::dispatch::lanes::ForwardView;
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::auth::Principal;
use crate::desk::{
    BulkOutcome, Covered, Dashboard, EventView, Origin, PaymentView, ProviderTime, Verdict,
};
use crate::filter::ListParams;
use crate::store::audit::AuditEntry;
use crate::store::history::EventSummary;
use crate::store::payments::Payment;

/// Fits a 1280-pixel window. The events list keeps every cell on one line (ids
/// cut with an ellipsis, whole in the title and in a copy); other tables wrap
/// long values.
const STYLE: &str = "*{box-sizing:border-box}\
body{font:14px system-ui,sans-serif;margin:0 auto;padding:1rem 1.5rem;max-width:1280px;color:#222}\
table{border-collapse:collapse;width:100%;table-layout:fixed;margin:.5rem 0 1rem}\
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #ddd;vertical-align:top;\
overflow-wrap:anywhere}th{background:#f4f4f4}\
table.events th,table.events td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;\
overflow-wrap:normal}\
.id,code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}\
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;margin:1rem 0}\
input,select,button{font:inherit;max-width:100%}\
pre{background:#f7f7f7;padding:1rem;white-space:pre-wrap;overflow-wrap:anywhere}\
.status-dead,.status-failed,.status-unverified{color:#b00}\
.status-processed,.status-verified,.status-succeeded{color:#070}\
.status-ignored,.status-pending{color:#777}\
.label{display:inline-block;padding:0 .45em;border-radius:.6em;font-size:12px;line-height:1.6;\
white-space:nowrap;background:#eee;color:#444}\
.label.status-processed,.label.status-succeeded{background:#e3f4e3;color:#0a5a0a}\
.label.status-failed{background:#fff1d6;color:#8a5300}\
.label.status-dead{background:#fde2e2;color:#a00}\
.label.status-ignored,.label.status-pending{background:#eee;color:#555}\
header{display:flex;flex-wrap:wrap;justify-content:space-between;align-items:center;gap:1rem}\
header nav a{margin-right:1rem}.note{background:#eef;padding:.5rem}\
.cards{display:flex;flex-wrap:wrap;gap:1rem}.card{border:1px solid #ddd;padding:.5rem 1rem;\
min-width:12rem;flex:1}.card h3{margin:.2rem 0}.big{font-size:1.6rem}\
.charts{display:flex;flex-wrap:wrap;gap:1.5rem;margin:1rem 0}.chart{flex:1;min-width:20rem}\
.chart svg{width:100%;height:auto;display:block}.chart h3{margin:.2rem 0}\
.legend span{margin-right:1rem;white-space:nowrap}\
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:-.05em}\
.chart details{margin-top:.3rem}.chart table{font-size:12px}";

/// Times as people read them in the page (UTC).
pub fn time(value: Option<DateTime<Utc>>) -> String {
    value
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// A value as a URL path segment or query value.
pub fn url_encode(value: &str) -> String {
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

pub fn payment_href(source: &str, payment_id: &str) -> String {
    format!(
        "/admin/payments/{}/{}",
        url_encode(source),
        url_encode(payment_id)
    )
}

pub fn customer_href(customer: &str) -> String {
    format!("/admin/customers/{}", url_encode(customer))
}

/// The whole page around `body`.
pub fn layout(title: &str, who: Option<&Principal>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { (title) " · hookd" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { a href="/admin" { "hookd" } " · " (title) }
                    @if let Some(who) = who {
                        nav {
                            a href="/admin" { "Events" }
                            a href="/admin/idempotency" { "Keys" }
                            @if who.can_retry() { a href="/admin/audit" { "Audit" } }
                        }
                        form method="post" action="/admin/logout" {
                            (who.name) " (" (who.role_name()) ") "
                            input type="hidden" name="csrf" value=(who.csrf_token());
                            button { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

pub fn login(message: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            @if let Some(message) = message { p.note { (message) } }
            form method="post" action="/admin/login" {
                p {
                    label { "Admin token "
                        input type="password" name="token" autocomplete="current-password" required autofocus;
                    }
                    " " button { "Sign in" }
                }
            }
        },
    )
}

pub fn error(message: &str, who: Option<&Principal>) -> Markup {
    layout(
        "Error",
        who,
        html! {
            p.note { (message) }
            p { a href="/admin" { "Back to the list" } }
        },
    )
}

/// A status as a coloured label.
fn status(text: &str) -> Markup {
    html! { span class=(format!("label status-{text}")) { (text) } }
}

/// An id in the monospace face; the list cuts it, the title holds it whole.
fn id(text: &str) -> Markup {
    html! { span.id title=(text) { (text) } }
}

/// A kind, or a dash for an event without one.
fn kind(kind: Option<&str>) -> &str {
    kind.unwrap_or("—")
}

fn id_links(event: &EventSummary) -> (Markup, Markup) {
    let payment = html! {
        @if let Some(payment) = &event.payment_id {
            a href=(payment_href(&event.source, payment)) { (id(payment)) }
        }
    };
    let customer = html! {
        @if let Some(customer) = &event.customer_id {
            a href=(customer_href(customer)) { (id(customer)) }
        }
    };
    (payment, customer)
}

/// The dashboard, the filter form, the list, and (for operators, on a filtered
/// list) the way to retry what the filter matches.
pub struct ListPage<'a> {
    pub who: &'a Principal,
    pub dashboard: &'a Dashboard,
    /// Each forward's state, backlog and last error.
    pub forwards: &'a [ForwardView],
    pub params: &'a ListParams,
    pub sources: Vec<&'a str>,
    pub events: &'a [EventSummary],
    pub next_query: Option<String>,
    pub filter_query: String,
}

pub fn list(page: &ListPage<'_>) -> Markup {
    let params = page.params;
    let filtered = !page.filter_query.is_empty();
    layout(
        "Events",
        Some(page.who),
        html! {
            (dashboard(page.dashboard))
            (forwards(page.who, page.forwards))
            h2 { "Events" }
            form.filters method="get" action="/admin" {
                input name="q" value=(params.q.as_deref().unwrap_or_default()) placeholder="event, payment or customer id";
                select name="source" {
                    option value="" { "any source" }
                    @for source in &page.sources {
                        option selected[params.source.as_deref() == Some(*source)] { (source) }
                    }
                }
                select name="status" {
                    option value="" { "any status" }
                    @for s in ["processed", "ignored", "failed", "dead"] {
                        option selected[params.status.as_deref() == Some(s)] { (s) }
                    }
                }
                input name="kind" value=(params.kind.as_deref().unwrap_or_default()) placeholder="kind";
                input name="type" value=(params.event_type.as_deref().unwrap_or_default()) placeholder="provider type";
                input name="since" value=(params.since.as_deref().unwrap_or_default()) placeholder="since (24h or RFC 3339)";
                input name="until" value=(params.until.as_deref().unwrap_or_default()) placeholder="until";
                button { "Filter" }
                " " a href="/admin" { "clear" }
            }
            @if filtered && page.who.can_retry() {
                p { a href=(format!("/admin/retry?{}", page.filter_query)) { "Retry every event this filter matches…" } }
            }
            table.events {
                colgroup { col style="width:12%"; col style="width:7%"; col style="width:17%"; col style="width:14%";
                    col style="width:11%"; col style="width:8%"; col style="width:4%"; col style="width:4%";
                    col style="width:12%"; col style="width:11%"; }
                tr { th { "Received" } th { "Source" } th { "Event id" } th { "Type" } th { "Kind" }
                     th { "Status" } th { "Att." } th { "Del." } th { "Payment" } th { "Customer" } }
                @for event in page.events {
                    @let (payment, customer) = id_links(event);
                    tr {
                        td { (time(Some(event.received_at))) }
                        td title=(event.source) { (event.source) }
                        td { a href=(format!("/admin/events/{}", event.id)) { (id(&event.event_id)) } }
                        td title=(event.event_type) { (event.event_type) }
                        td title=(kind(event.kind.as_deref())) { (kind(event.kind.as_deref())) }
                        td { (status(event.status.as_str())) }
                        td { (event.attempts) }
                        td { (event.deliveries) }
                        td { (payment) }
                        td { (customer) }
                    }
                }
            }
            @if page.events.is_empty() { p { "No events match." } }
            @if let Some(query) = &page.next_query {
                p { a href=(format!("/admin?{query}")) { "Older events →" } }
            }
        },
    )
}

fn dashboard(board: &Dashboard) -> Markup {
    let counts = |title: &str, map: &std::collections::BTreeMap<String, i64>| {
        html! {
            div.card {
                h3 { (title) }
                @if map.is_empty() { p { "none" } }
                @for (name, n) in map { div { (name) ": " strong { (n) } } }
            }
        }
    };
    html! {
        section.dashboard {
            h2 { "Last 24 hours: " (board.last_24h.total) " events" }
            div.cards {
                div.card {
                    h3 { "Waiting for a person" }
                    div.big { a href="/admin?status=dead" { (board.dead) " dead" } }
                    div { a href="/admin?status=failed" { (board.failed) " failed" } }
                    div { "retry backlog: " strong { (board.retry_backlog) } }
                }
                div.card {
                    h3 { "Recovered from the provider's API (last 7 days)" }
                    div.big { (board.recovered_7_days) " events" }
                    div { "never delivered; found by hookd reconcile" }
                }
                (counts("By status", &board.last_24h.by_status))
                (counts("By kind", &board.last_24h.by_kind))
                (counts("By source", &board.last_24h.by_source))
            }
            (super::charts::charts(&board.series))
            h3 { "Secrets in use (last 7 days)" }
            table {
                tr { th { "Source" } th { "Secret" } th { "Last used" } th { "In the last 7 days" } }
                @for source in &board.secrets {
                    @for position in &source.positions {
                        tr {
                            td { (source.source) }
                            td { "#" (position.position) }
                            td { (time(position.last_used)) }
                            td {
                                @if position.used_in_7_days { "yes" }
                                @else { span.status-pending { "no — can be retired" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The forwards: where each stands, what waits for it, and (for operators) a
/// button that pauses or resumes it.
fn forwards(who: &Principal, forwards: &[ForwardView]) -> Markup {
    html! {
        @if !forwards.is_empty() {
            h3 { "Forwards" }
            table {
                tr { th { "Forward" } th { "State" } th { "Waiting" } th { "Oldest waiting since" }
                     th { "Last error" } @if who.can_retry() { th {} } }
                @for forward in forwards {
                    tr {
                        td { (forward.name) }
                        td { (status(forward.state)) }
                        td { (forward.backlog) }
                        td {
                            @if let Some(oldest) = &forward.oldest_waiting {
                                a href=(format!("/admin/events/{}", oldest.id)) { (time(Some(oldest.since))) }
                            }
                        }
                        td { (forward.last_error.as_deref().unwrap_or_default()) }
                        @if who.can_retry() {
                            td {
                                @let action = if forward.state == "paused" { "resume" } else { "pause" };
                                @if forward.state != "not_configured" && !forward.paused_in_configuration {
                                    form style="display:inline" method="post"
                                        action=(format!("/admin/forwards/{}/{action}", url_encode(&forward.name))) {
                                        input type="hidden" name="csrf" value=(who.csrf_token());
                                        button { (action) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn origin(origin: &Origin) -> Markup {
    let verdict = match &origin.verdict {
        Verdict::Verified { secret } => html! {
            span.status-verified { "verified" } " with secret #" (secret)
            " (current secrets, as of its received time)"
        },
        Verdict::Unverified { reason } => {
            html! { span.status-unverified { "not verified" } ": " (reason) }
        }
        Verdict::Unavailable { reason } => {
            html! { span.status-pending { "cannot be checked" } ": " (reason) }
        }
        Verdict::Redacted { reason } => {
            html! { span.status-pending { "redacted" } ": " (reason) }
        }
        Verdict::ProviderApi { proof } => {
            html! { span.status-verified { "from the provider's API" } ": " (proof) }
        }
    };
    let caveat = origin.covers.and_then(Covered::caveat);
    html! {
        (verdict)
        @if let Some(caveat) = caveat {
            br; span.status-pending { (caveat) }
        }
    }
}

/// The note a retry leaves on the event page, by the outcome the redirect names
/// (a status, or an error code); any other value shows nothing, so the page never
/// repeats text from its address.
pub fn retry_note(outcome: &str) -> Option<&'static str> {
    Some(match outcome {
        "processed" => "Retried: processed",
        "ignored" => "Retried: ignored",
        "failed" => "Retried: failed again (the attempts below say why)",
        "dead" => "Retried: dead (the attempts below say why)",
        "gone" => "Not applied: the payload was purged.",
        "no_handler" => "Not applied: no handler applies to this event's kind.",
        "not_found" => "Not applied: there is no such event.",
        "in_flight" => {
            "Not applied: its forwards are being sent right now; retry once they have answered."
        }
        "unavailable" => "Not applied: the database is unavailable; try again shortly.",
        "internal" => "Not applied: something went wrong; the server log has the details.",
        _ => return None,
    })
}

/// When the provider dated an event its scheme does not sign the time of, and
/// a mark when that is older than `key_retention` at its arrival.
fn provider_time(dated: &ProviderTime) -> Markup {
    html! {
        (time(Some(dated.at)))
        @if dated.beyond_key_retention {
            br;
            span.status-failed {
                "Dated more than key_retention (" (crate::duration::format(dated.key_retention))
                ") before it arrived. Its provider signs no time, so a genuine body can be "
                "sent again at any time: this may be an old event delivered again and taken "
                "as new, its first delivery's key purged."
            }
        }
    }
}

pub fn event(who: &Principal, view: &EventView, retried: Option<&str>) -> Markup {
    let event = &view.detail.summary;
    let (payment, customer) = id_links(event);
    let mut rows: Vec<(&str, Markup)> = vec![
        ("Source", html! { (event.source) }),
        ("Event id", id(&event.event_id)),
        ("Type", html! { (event.event_type) }),
        ("Kind", html! { (kind(event.kind.as_deref())) }),
        ("Status", status(event.status.as_str())),
        (
            "Last error",
            html! { (event.last_error.as_deref().unwrap_or_default()) },
        ),
        ("Payment", payment),
        ("Customer", customer),
        ("Deliveries", html! { (event.deliveries) }),
        ("Attempts", html! { (event.attempts) }),
        (
            "Signed with secret",
            if event.signed_with == crate::signature::Verified::FROM_PROVIDER_API.signed_with {
                html! { "none: recovered from the provider's API" }
            } else {
                html! { "#" (event.signed_with) }
            },
        ),
        ("Signature", origin(&view.origin)),
        ("Received", html! { (time(Some(event.received_at))) }),
        (
            "Last delivery",
            html! { (time(Some(event.last_delivery_at))) },
        ),
        ("Processed", html! { (time(event.processed_at)) }),
        ("Next attempt", html! { (time(event.next_attempt_at)) }),
        ("Purged", html! { (time(event.purged_at)) }),
    ];
    if let Some(dated) = &view.provider_time {
        rows.push(("Provider's time", provider_time(dated)));
    }
    let pretty = view
        .detail
        .payload
        .as_ref()
        .map(|p| serde_json::to_string_pretty(p).unwrap_or_default());
    layout(
        &format!("Event {}", event.id),
        Some(who),
        html! {
            @if let Some(note) = retried.and_then(retry_note) { p.note { (note) } }
            table {
                colgroup { col style="width:18%"; col; }
                @for (label, value) in rows { tr { th { (label) } td { (value) } } }
            }
            @if who.can_retry() && pretty.is_some() {
                form method="post" action=(format!("/admin/events/{}/retry", event.id)) {
                    input type="hidden" name="csrf" value=(who.csrf_token());
                    button { "Apply this event again" }
                }
            }
            h2 { "Handlers" }
            table {
                tr { th { "Handler" } th { "Status" } th { "Runs" } th { "HTTP" } th { "Last error" } }
                @for h in &view.handlers {
                    tr {
                        td { (h.handler) } td { (status(h.status.as_str())) } td { (h.attempts) }
                        td { (h.http_status.map(|s| s.to_string()).unwrap_or_default()) }
                        td { (h.last_error.as_deref().unwrap_or_default()) }
                    }
                }
            }
            h2 { "Payload" }
            @if view.masked && pretty.is_some() {
                p.note {
                    "Personal data is masked (•••)."
                    @if who.can_retry() {
                        form style="display:inline" method="post" action=(format!("/admin/events/{}/reveal", event.id)) {
                            input type="hidden" name="csrf" value=(who.csrf_token());
                            " " button { "Reveal personal data" }
                            " (recorded in the audit trail)"
                        }
                    }
                }
            } @else if pretty.is_some() {
                p.note { "Personal data revealed; this view is recorded in the audit trail." }
            }
            @match &pretty {
                Some(text) => pre #payload { (text) },
                None => p { "Purged by the retention policy; the dedupe key remains." },
            }
            h2 { "Attempts" }
            (attempts(&view.detail.attempts))
            @if !view.detail.conflicts.is_empty() || view.detail.conflicts_not_kept > 0 {
                h2 { "Conflicting deliveries" }
                p {
                    "Items of batched requests that reused this event's id with another payload. "
                    "They were acknowledged with their batch and not applied; the stored event "
                    "is unchanged."
                }
                table {
                    tr { th { "Received" } th { "Deliveries" } th { "Stored fingerprint" } th { "Offered fingerprint" } th { "Offered payload" } }
                    @for c in &view.detail.conflicts {
                        tr {
                            td { (time(Some(c.received_at))) }
                            td { (c.deliveries) }
                            td { code { (c.stored_fingerprint) } }
                            td { code { (c.offered_fingerprint) } }
                            td { pre { (serde_json::to_string_pretty(&c.offered_payload).unwrap_or_default()) } }
                        }
                    }
                }
                @if view.detail.conflicts_not_kept > 0 {
                    p.note #conflicts-not-kept {
                        (view.detail.conflicts_not_kept)
                        " more conflicting deliveries came past the "
                        (crate::store::events::CONFLICTS_KEPT)
                        " items kept per event: counted, not kept."
                    }
                }
            }
        },
    )
}

fn attempts(runs: &[crate::store::history::Attempt]) -> Markup {
    html! {
        table {
            tr { th { "#" } th { "Handler" } th { "Started" } th { "Duration" } th { "Outcome" } th { "HTTP" } th { "Error" } }
            @for a in runs {
                tr {
                    td { (a.attempt) } td { (a.handler) } td { (time(Some(a.started_at))) }
                    td { (format!("{:.1} ms", a.duration_ms)) } td { (status(&a.outcome)) }
                    td { (a.http_status.map(|s| s.to_string()).unwrap_or_default()) }
                    td { (a.error.as_deref().unwrap_or_default()) }
                }
            }
        }
        @if runs.is_empty() { p { "No runs." } }
    }
}

/// An amount the payments table keeps in minor units, as people read money
/// (the API keeps the minor units).
fn money(amount: i64, currency: Option<&str>) -> String {
    match currency {
        Some(currency) => crate::money::readable(amount, currency),
        None => format!("{amount} (minor units, no currency)"),
    }
}

pub fn payment(who: &Principal, view: &PaymentView) -> Markup {
    let p = &view.payment;
    let money = |amount: i64| money(amount, p.currency.as_deref());
    layout(
        &format!("Payment {}", p.payment_id),
        Some(who),
        html! {
            div.cards {
                div.card { h3 { "Status" } div.big { (status(&p.status)) } }
                @if view.amounts_sent {
                    div.card { h3 { "Amount" } div.big { (money(p.amount)) } div { "refunded: " (money(p.amount_refunded)) } }
                } @else {
                    div.card {
                        h3 { "Amount" } div.big { "not sent" }
                        div { "This provider sends no amounts: refunds show in the timeline only, and the status does not count them." }
                    }
                }
                div.card {
                    h3 { "Facts" }
                    div { "succeeded: " (p.succeeded) } div { "failed: " (p.failed) } div { "disputed: " (p.disputed) }
                }
                div.card {
                    h3 { "Customer" }
                    @if let Some(customer) = &p.customer_id { a href=(customer_href(customer)) { (customer) } }
                    div { "source: " (p.source) }
                    div { "first seen " (time(Some(p.created_at))) }
                    div { "last changed " (time(Some(p.updated_at))) }
                }
            }
            h2 { "Timeline" }
            @for (event, runs) in &view.events {
                section.event {
                    h3 {
                        (time(Some(event.received_at))) " · "
                        a href=(format!("/admin/events/{}", event.id)) { (event.event_type) }
                        " · " (status(event.status.as_str()))
                    }
                    p { "event " (event.event_id) ", " (event.deliveries) " deliveries"
                        @if let Some(error) = &event.last_error { " · " (error) } }
                    (attempts(runs))
                }
            }
            @if view.events.is_empty() { p { "No events are kept for this payment any more." } }
        },
    )
}

pub fn customer(
    who: &Principal,
    customer: &str,
    payments: &[Payment],
    next: Option<&str>,
) -> Markup {
    layout(
        &format!("Customer {customer}"),
        Some(who),
        html! {
            table {
                tr { th { "Payment" } th { "Source" } th { "Status" } th { "Amount" } th { "Refunded" } th { "First seen" } th { "Last changed" } }
                @for p in payments {
                    tr {
                        td { a href=(payment_href(&p.source, &p.payment_id)) { (p.payment_id) } }
                        td { (p.source) } td { (status(&p.status)) }
                        td { (money(p.amount, p.currency.as_deref())) }
                        td { (money(p.amount_refunded, p.currency.as_deref())) }
                        td { (time(Some(p.created_at))) } td { (time(Some(p.updated_at))) }
                    }
                }
            }
            @if payments.is_empty() { p { "No payments for this customer." } }
            @if let Some(cursor) = next {
                p { a href=(format!("{}?cursor={}", customer_href(customer), url_encode(cursor))) { "Older payments →" } }
            }
        },
    )
}

/// The bulk retry's preview, asking to confirm.
pub fn bulk_confirm(
    who: &Principal,
    filter_query: &str,
    fields: &[(&str, String)],
    preview: &BulkOutcome,
) -> Markup {
    layout(
        "Retry in bulk",
        Some(who),
        html! {
            p { "The filter matches " strong { (preview.matched) } " events." }
            @if preview.matched == 0 {
                p { a href=(format!("/admin?{filter_query}")) { "Back to the list" } }
            } @else {
                form method="post" action="/admin/retry" {
                    @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
                    input type="hidden" name="csrf" value=(who.csrf_token());
                    button { "Retry these " (preview.matched) " events" }
                    " " a href=(format!("/admin?{filter_query}")) { "cancel" }
                }
            }
        },
    )
}

pub fn bulk_done(who: &Principal, filter_query: &str, outcome: &BulkOutcome) -> Markup {
    layout(
        "Retried in bulk",
        Some(who),
        html! {
            p.note { "Retried " (outcome.retried) " of " (outcome.matched) " events." }
            table {
                tr { th { "Outcome" } th { "Events" } }
                @for (name, n) in &outcome.outcomes { tr { td { (status(name)) } td { (n) } } }
            }
            p { a href=(format!("/admin?{filter_query}")) { "Back to the list" } }
        },
    )
}

pub fn audit(who: &Principal, entries: &[AuditEntry], next: Option<&str>) -> Markup {
    layout(
        "Audit",
        Some(who),
        html! {
            table {
                tr { th { "When" } th { "Who" } th { "Did" } th { "Event" } th { "Payment" } th { "Detail" } }
                @for e in entries {
                    tr {
                        td { (time(Some(e.at))) } td { (e.who) } td { (e.action) }
                        td { @if let Some(id) = e.webhook_event_id { a href=(format!("/admin/events/{id}")) { (id) } } }
                        td { @if let (Some(source), Some(payment)) = (&e.source, &e.payment_id) {
                            a href=(payment_href(source, payment)) { (payment) } } }
                        td { (e.detail.as_ref().map(ToString::to_string).unwrap_or_default()) }
                    }
                }
            }
            @if entries.is_empty() { p { "Nothing recorded." } }
            @if let Some(cursor) = next {
                p { a href=(format!("/admin/audit?cursor={}", url_encode(cursor))) { "Older →" } }
            }
        },
    )
}
