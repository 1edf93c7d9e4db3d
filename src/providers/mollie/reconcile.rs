//! Mollie's list of payments: `GET /v2/payments`, newest first, 250 a page,
//! paged on with the `from` cursor of `_links.next` until there is none or a
//! payment was created before the window. Each payment is the event of its
//! current status (see the folder's module).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::providers::api::{self, ApiError, Call, Client, Lister, Page};

const PATH: &str = "/v2/payments";

/// Mollie's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Mollie",
    default_base: "https://api.mollie.com",
    max_window: Duration::from_secs(90 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| Box::new(Pager::new(since)),
};

pub struct Pager {
    since: DateTime<Utc>,
    from: Option<String>,
    done: bool,
}

#[derive(Deserialize)]
struct List {
    #[serde(rename = "_embedded", default)]
    embedded: Embedded,
    #[serde(rename = "_links", default)]
    links: Links,
}

#[derive(Deserialize, Default)]
struct Embedded {
    #[serde(default)]
    payments: Page,
}

#[derive(Deserialize, Default)]
struct Links {
    next: Option<Link>,
}

#[derive(Deserialize)]
struct Link {
    href: String,
}

impl Pager {
    pub fn new(since: DateTime<Utc>) -> Self {
        Pager {
            since,
            from: None,
            done: false,
        }
    }
}

#[async_trait::async_trait]
impl api::Pager for Pager {
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut query = vec![("limit", "250".to_string())];
        if let Some(from) = &self.from {
            query.push(("from", from.clone()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        let (page, older) =
            api::newer_than(list.embedded.payments, self.since, "createdAt", api, PATH)?;
        self.done = older;
        self.from = list
            .links
            .next
            .and_then(|next| api::cursor(&next.href, "from"));
        self.done |= self.from.is_none() || page.is_empty();
        Ok(Some(page))
    }
}
