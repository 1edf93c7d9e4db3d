//! Square's event search: `POST /v2/events` with a `created_at` filter, oldest
//! first, 100 a page, paged on with the answer's `cursor` (and the same query)
//! until none comes back. The seller's Events API must be enabled first
//! (`PUT /v2/events/enable`); Square keeps 28 days. A source taking only some
//! exact types asks for those alone (`filter.event_types`).

use chrono::SecondsFormat;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::providers::api::{ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page};

/// Square's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Square", "https://connect.squareup.com", 28, |window| {
    let since = window.since;
    Box::new(Cursored::new(Events {
        since: since.to_rfc3339_opts(SecondsFormat::Secs, true),
        types: window.exact_types.to_vec(),
    }))
})
.oldest_first();

struct Events {
    since: String,
    /// Empty: every type.
    types: Vec<String>,
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    events: Page,
    cursor: Option<String>,
}

#[async_trait::async_trait]
impl CursorList for Events {
    async fn page(&self, api: &mut dyn Client, cursor: Option<&str>) -> Result<Listed, ApiError> {
        let mut search = json!({
            "limit": 100,
            "query": {
                "filter": {"created_at": {"start_at": self.since}},
                "sort": {"field": "DEFAULT", "order": "ASC"},
            },
        });
        if !self.types.is_empty() {
            search["query"]["filter"]["event_types"] = json!(self.types);
        }
        if let Some(cursor) = cursor {
            search["cursor"] = json!(cursor);
        }
        let call = Call {
            method: Method::POST,
            path: "/v2/events",
            query: Vec::new(),
            json: Some(search),
            headers: &[],
        };
        let list: List = crate::providers::api::ask(api, &call).await?;
        Ok(Listed {
            next: list.cursor.filter(|c| !c.is_empty()),
            last: list.events.is_empty(),
            events: list.events,
        })
    }
}
