//! Square's event search: `POST /v2/events` with a `created_at` filter, oldest
//! first, 100 a page, paged on with the answer's `cursor` (and the same query)
//! until none comes back. The seller's Events API must be enabled first
//! (`PUT /v2/events/enable`); Square keeps 28 days.

use std::time::Duration;

use chrono::SecondsFormat;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::providers::api::{ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page};

const PATH: &str = "/v2/events";

/// Square's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Square",
    default_base: "https://connect.squareup.com",
    max_window: Duration::from_secs(28 * 24 * 3600),
    newest_first: false,
    token_path: None,
    pager: |since, _until| {
        Box::new(Cursored::new(Events {
            since: since.to_rfc3339_opts(SecondsFormat::Secs, true),
        }))
    },
};

struct Events {
    since: String,
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
                "sort": {"sort_field": "DEFAULT", "order": "ASC"},
            },
        });
        if let Some(cursor) = cursor {
            search["cursor"] = json!(cursor);
        }
        let call = Call {
            method: Method::POST,
            path: PATH,
            query: Vec::new(),
            json: Some(search),
            headers: &[],
        };
        let body = api.send(&call).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        Ok(Listed {
            next: list.cursor.filter(|c| !c.is_empty()),
            last: list.events.is_empty(),
            events: list.events,
        })
    }
}
