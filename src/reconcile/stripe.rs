//! Stripe's list of events: `GET /v1/events` with `created[gte]`, newest
//! first, 100 a page, paged on with `starting_after` (the last id) while
//! `has_more`. Stripe lists the last 30 days.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::api::{Api, ApiError, Call};
use super::{Page, last_field};

const PATH: &str = "/v1/events";

pub struct Pager {
    since: i64,
    after: Option<String>,
    done: bool,
}

#[derive(Deserialize)]
struct List {
    data: Page,
    has_more: bool,
}

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since: since.timestamp(),
            after: None,
            done: false,
        }
    }

    pub async fn next(&mut self, api: &mut Api) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut query = vec![
            ("limit", "100".to_string()),
            ("created[gte]", self.since.to_string()),
        ];
        if let Some(after) = &self.after {
            query.push(("starting_after", after.clone()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, e))?;
        self.after = last_field(&list.data, "id");
        self.done = !list.has_more || self.after.is_none();
        Ok(Some(list.data))
    }
}
