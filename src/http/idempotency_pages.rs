//! The pages of the gateway's keys: the list (what needs a person first) and
//! one key with its stored answer and, for operators, the release form.

use maud::{Markup, html};

use super::auth::Principal;
use super::idempotency::{KeyDetailView, KeyPage, ListQuery};
use super::pages::{layout, time, url_encode};
use crate::store::api_idempotency::{KeyState, KeyView};

fn state_label(key: &KeyView) -> Markup {
    let text = if key.abandoned {
        "abandoned"
    } else {
        key.state.as_str()
    };
    html! { span class=(format!("label status-{text}")) { (text) } }
}

fn rows(keys: &[KeyView]) -> Markup {
    html! {
        table {
            tr {
                th { "Claimed" } th { "Route" } th { "Key" } th { "State" } th { "Upstream" }
                th { "Runs" } th { "Operation" } th { "Request" }
            }
            @for key in keys {
                tr {
                    td { (time(Some(key.claimed_at))) }
                    td { (key.route) }
                    td { a href=(format!("/admin/idempotency/{}", key.id)) { span.id title=(key.key) { (key.key) } } }
                    td { (state_label(key)) }
                    td { (key.upstream_status.map(|s| s.to_string()).unwrap_or_default()) }
                    td { (key.runs) }
                    td { span.id title=(key.operation) { (key.operation) } }
                    td { (key.method) " " (key.target) }
                }
            }
        }
    }
}

pub fn list(
    who: &Principal,
    query: &ListQuery,
    routes: &[String],
    attention: &[KeyView],
    page: &KeyPage,
) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let chosen = value(&query.state);
    let route = value(&query.route);
    let mut next = Vec::new();
    for (name, v) in [
        ("route", &query.route),
        ("state", &query.state),
        ("q", &query.q),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            next.push(format!("{name}={}", url_encode(v)));
        }
    }
    layout(
        "Idempotency keys",
        Some(who),
        html! {
            h2 { "Needs a person" }
            p.note {
                "Keys whose outcome is unknown (sent upstream, no answer: check upstream, then
                 release the key so the next copy reaches it) and claims running over a minute."
            }
            @if attention.is_empty() { p { "Nothing waits." } } @else { (rows(attention)) }
            h2 { "All keys" }
            form method="get" action="/admin/idempotency" {
                label { "Route " select name="route" {
                    option value="" { "any" }
                    @for name in routes { option value=(name) selected[*name == route] { (name) } }
                } }
                " "
                label { "State " select name="state" {
                    option value="" { "any" }
                    @for state in KeyState::ALL {
                        option value=(state.as_str()) selected[chosen == state.as_str()] { (state.as_str()) }
                    }
                } }
                " "
                label { "Key or operation " input type="search" name="q" value=(value(&query.q)); }
                " " button { "Filter" }
            }
            @if page.keys.is_empty() { p { "No key matches." } } @else { (rows(&page.keys)) }
            @if let Some(cursor) = &page.next_cursor {
                @let query = next.iter().cloned().chain([format!("cursor={}", url_encode(cursor))]);
                p { a href=(format!("/admin/idempotency?{}", query.collect::<Vec<_>>().join("&"))) { "Older →" } }
            }
        },
    )
}

pub fn detail(who: &Principal, view: &KeyDetailView) -> Markup {
    let key = &view.key;
    let releasable = key.state == KeyState::Unknown || key.abandoned;
    let body = match &view.body {
        serde_json::Value::Null if key.body_omitted => "(over 1 MiB: not kept)".to_string(),
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(text) => text.clone(),
        json => serde_json::to_string_pretty(json).unwrap_or_default(),
    };
    layout(
        &format!("Key {}", key.key),
        Some(who),
        html! {
            table {
                tr { th { "Route" } td { (key.route) } }
                tr { th { "Key" } td { (key.key) } }
                tr { th { "Scope" } td { (key.scope) } }
                tr { th { "State" } td { (state_label(key)) } }
                tr { th { "Operation" } td { (key.operation) } }
                tr { th { "Request" } td { (key.method) " " (key.target) } }
                tr { th { "Fingerprint" } td { span.id title=(key.fingerprint) { (key.fingerprint) } } }
                tr { th { "Upstream status" } td { (key.upstream_status.map(|s| s.to_string()).unwrap_or_default()) } }
                tr { th { "Runs" } td { (key.runs) } }
                tr { th { "Created" } td { (time(Some(key.created_at))) } }
                tr { th { "Claimed" } td { (time(Some(key.claimed_at))) } }
                tr { th { "Locked until" } td { (time(key.locked_until)) } }
                tr { th { "Finished" } td { (time(key.finished_at)) } }
                tr { th { "Expires" } td { (time(key.expires_at)) } }
            }
            @if releasable && who.can_retry() {
                form method="post" action=(format!("/admin/idempotency/{}/release", key.id)) {
                    p.note {
                        "Nobody knows whether upstream did this request. Check upstream for
                         operation " (key.operation) " first: once released, the next copy is
                         sent upstream again."
                    }
                    input type="hidden" name="csrf" value=(who.csrf_token());
                    button { "Release the key" }
                }
            }
            h2 { "Stored answer" }
            @if !view.headers.is_empty() {
                table { @for (name, value) in &view.headers { tr { th { (name) } td { (value) } } } }
            }
            @if view.masked { p.note { "Personal data masked." } }
            pre { (body) }
            p { a href="/admin/idempotency" { "Back to the keys" } }
        },
    )
}
