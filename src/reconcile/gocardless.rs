//! GoCardless's list of events: `GET /events` with `created_at[gte]`
//! (`GoCardless-Version: 2015-07-06`), newest first, 500 a page, paged on with
//! the `after` cursor of `meta.cursors.after` until it is null.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use super::Page;
use super::api::{Api, ApiError, Call};

const PATH: &str = "/events";
const VERSION: (&str, &str) = ("GoCardless-Version", "2015-07-06");

pub struct Pager {
    since: String,
    after: Option<String>,
    done: bool,
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

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since: since.to_rfc3339_opts(SecondsFormat::Millis, true),
            after: None,
            done: false,
        }
    }

    pub async fn next(&mut self, api: &mut Api) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut query = vec![
            ("limit", "500".to_string()),
            ("created_at[gte]", self.since.clone()),
        ];
        if let Some(after) = &self.after {
            query.push(("after", after.clone()));
        }
        let mut call = Call::get(PATH, query);
        call.headers = &[VERSION];
        let body = api.send(&call).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, e))?;
        self.after = list.meta.cursors.after.filter(|a| !a.is_empty());
        self.done = self.after.is_none() || list.events.is_empty();
        Ok(Some(list.events))
    }
}
