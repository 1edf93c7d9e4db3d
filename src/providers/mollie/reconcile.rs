//! Mollie's list of payments: `GET /v2/payments`, newest first, 250 a page,
//! paged on with the `from` cursor of `_links.next` until there is none or a
//! payment was created before the window. Each payment is the event of its
//! current status (see the folder's module).

use serde::Deserialize;

use crate::providers::api::{self, GetList, Listed, Lister, Page};

const PATH: &str = "/v2/payments";

/// Mollie's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Mollie", "https://api.mollie.com", 90, |since, _| {
    GetList {
        path: PATH,
        query: vec![("limit", "250".to_string())],
        cursor: "from",
        headers: &[],
        since,
        read: |list: List, since, api| {
            let (events, older) =
                api::newer_than(list.embedded.payments, since, "createdAt", api, PATH)?;
            Ok(Listed {
                next: list
                    .links
                    .next
                    .and_then(|next| api::cursor(&next.href, "from")),
                last: older || events.is_empty(),
                events,
            })
        },
    }
    .pager()
});

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
