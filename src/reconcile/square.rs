//! Square's event search: `POST /v2/events` with a `created_at` filter, oldest
//! first, 100 a page, paged on with the answer's `cursor` (and the same query)
//! until none comes back. The seller's Events API must be enabled first
//! (`PUT /v2/events/enable`); Square keeps 28 days.

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::Page;
use super::api::{Api, ApiError, Call};

const PATH: &str = "/v2/events";

pub struct Pager {
    since: String,
    cursor: Option<String>,
    done: bool,
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    events: Page,
    cursor: Option<String>,
}

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since: since.to_rfc3339_opts(SecondsFormat::Secs, true),
            cursor: None,
            done: false,
        }
    }

    pub async fn next(&mut self, api: &mut Api) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut search = json!({
            "limit": 100,
            "query": {
                "filter": {"created_at": {"start_at": self.since}},
                "sort": {"sort_field": "DEFAULT", "order": "ASC"},
            },
        });
        if let Some(cursor) = &self.cursor {
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
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, e))?;
        self.cursor = list.cursor.filter(|c| !c.is_empty());
        self.done = self.cursor.is_none() || list.events.is_empty();
        Ok(Some(list.events))
    }
}
