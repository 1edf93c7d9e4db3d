//! GoCardless's list of events: `GET /events` with `created_at[gte]`
//! (`GoCardless-Version: 2015-07-06`), newest first, 500 a page, paged on with
//! the `after` cursor of `meta.cursors.after` until it is null. GoCardless
//! filters the list on one `resource_type` and one `action`: a source taking
//! only some exact types (`payments.confirmed`) asks for their resource type
//! when they share one, and for the action too when there is one type.

use chrono::SecondsFormat;
use serde::Deserialize;

use crate::providers::api::{GetList, Listed, Lister, Page};

/// GoCardless's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("GoCardless", "https://api.gocardless.com", 30, |window| {
    let since = window.since;
    let mut query = vec![
        ("limit", "500".to_string()),
        (
            "created_at[gte]",
            since.to_rfc3339_opts(SecondsFormat::Millis, true),
        ),
    ];
    query.extend(narrowed(window.exact_types));
    GetList {
        path: "/events",
        query,
        cursor: "after",
        headers: &[("GoCardless-Version", "2015-07-06")],
        since,
        read: |list: List, _, _| {
            Ok(Listed {
                next: list.meta.cursors.after.filter(|a| !a.is_empty()),
                last: list.events.is_empty(),
                events: list.events,
            })
        },
    }
    .pager()
});

/// The list's own filters for `types` (exact, `resource_type.action`): the
/// resource type they all share, and the action when they share that too;
/// none when they differ (hookd then skips the other types itself).
fn narrowed(types: &[String]) -> Vec<(&'static str, String)> {
    let Some(split) = types
        .iter()
        .map(|t| t.split_once('.'))
        .collect::<Option<Vec<_>>>()
    else {
        return Vec::new();
    };
    let Some(&(resource, action)) = split.first() else {
        return Vec::new();
    };
    if split.iter().any(|&(r, _)| r != resource) {
        return Vec::new();
    }
    let mut query = vec![("resource_type", resource.to_string())];
    if split.iter().all(|&(_, a)| a == action) {
        query.push(("action", action.to_string()));
    }
    query
}

#[derive(Deserialize)]
struct List {
    events: Page,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    cursors: Cursors,
}

#[derive(Deserialize)]
struct Cursors {
    after: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::narrowed;

    fn types(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn the_list_is_narrowed_to_what_the_types_share() {
        assert_eq!(
            narrowed(&types(&["payments.confirmed"])),
            [
                ("resource_type", "payments".to_string()),
                ("action", "confirmed".to_string())
            ]
        );
        assert_eq!(
            narrowed(&types(&["payments.confirmed", "payments.failed"])),
            [("resource_type", "payments".to_string())]
        );
        // Nothing shared, every type (none given), or a type GoCardless would
        // not name so: the whole list.
        assert!(narrowed(&types(&["payments.confirmed", "mandates.created"])).is_empty());
        assert!(narrowed(&[]).is_empty());
        assert!(narrowed(&types(&["payments"])).is_empty());
    }
}
