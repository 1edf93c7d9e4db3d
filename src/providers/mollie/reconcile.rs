//! Mollie's list of payments: `GET /v2/payments`, newest first, 250 a page,
//! paged on with the `from` cursor of `_links.next` until there is none or a
//! payment was created before the window. Each payment is the event of its
//! current status (see the folder's module).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::providers::api::{
    self, ApiError, Call, Client, CursorList, Cursored, Listed, Lister, Page,
};

const PATH: &str = "/v2/payments";

/// Mollie's list API, as reconcile asks it.
pub static LISTER: Lister = Lister {
    title: "Mollie",
    default_base: "https://api.mollie.com",
    max_window: Duration::from_secs(90 * 24 * 3600),
    newest_first: true,
    token_path: None,
    pager: |since, _until| Box::new(Cursored::new(Payments { since })),
};

struct Payments {
    since: DateTime<Utc>,
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

#[async_trait::async_trait]
impl CursorList for Payments {
    async fn page(&self, api: &mut dyn Client, from: Option<&str>) -> Result<Listed, ApiError> {
        let mut query = vec![("limit", "250".to_string())];
        if let Some(from) = from {
            query.push(("from", from.to_string()));
        }
        let body = api.send(&Call::get(PATH, query)).await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| api.malformed(PATH, &e))?;
        let (events, older) =
            api::newer_than(list.embedded.payments, self.since, "createdAt", api, PATH)?;
        Ok(Listed {
            next: list
                .links
                .next
                .and_then(|next| api::cursor(&next.href, "from")),
            last: older || events.is_empty(),
            events,
        })
    }
}
