//! Mollie's list of payments: `GET /v2/payments`, newest first, 250 a page,
//! paged on with the `from` cursor of `_links.next` until there is none or a
//! payment was created before the window. Each payment is the event of its
//! current status (see the folder's module).
//!
//! That list is by when a payment was created, and a payment changes long
//! after: a refund or a chargeback of a payment created before the window
//! would never be listed. So the pass then lists the window's refunds
//! (`GET /v2/refunds`) and chargebacks (`GET /v2/chargebacks`), alike, and
//! reads the payment each names (`GET /v2/payments/{paymentId}`) unless the
//! first list gave it: its current state is the event.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::PAYMENTS;
use crate::providers::api::{
    self, ApiError, Client, Cursored, Fetch, GetList, Listed, Lister, Page, Pager, RecentIds,
};

const PATH: &str = "/v2/payments";
const REFUNDS: &str = "/v2/refunds";
const CHARGEBACKS: &str = "/v2/chargebacks";
/// Payment ids the pass remembers (not to read one again for a refund),
/// the last ones given: past these, a payment may be read once more.
const REMEMBERED: usize = 50_000;

/// Mollie's list API, as reconcile asks it.
pub static LISTER: Lister = Lister::new("Mollie", "https://api.mollie.com", 90, |window| {
    let since = window.since;
    Box::new(Changed {
        lists: vec![
            list(PATH, since, |list, since, api| page(list, since, api, PATH)),
            list(REFUNDS, since, |list, since, api| {
                page(list, since, api, REFUNDS)
            }),
            list(CHARGEBACKS, since, |list, since, api| {
                page(list, since, api, CHARGEBACKS)
            }),
        ],
        at: 0,
        listed: RecentIds::new(REMEMBERED),
    })
});

/// One of the lists, newest first, 250 a page, paged on with `from`.
fn list(
    path: &'static str,
    since: DateTime<Utc>,
    read: fn(List, DateTime<Utc>, &dyn Client) -> Result<Listed, ApiError>,
) -> Cursored<GetList<List>> {
    Cursored::new(GetList {
        path,
        query: vec![("limit", "250".to_string())],
        cursor: "from",
        headers: &[],
        since,
        read,
    })
}

/// A page of `path`'s list: its items created since the window's start.
fn page(
    list: List,
    since: DateTime<Utc>,
    api: &dyn Client,
    path: &str,
) -> Result<Listed, ApiError> {
    let (events, older) = api::newer_than(list.embedded.items, since, "createdAt", api, path)?;
    Ok(Listed {
        next: list
            .links
            .next
            .and_then(|next| api::cursor(&next.href, "from")),
        last: older || events.is_empty(),
        events,
    })
}

/// The payments of the window, then those its refunds and chargebacks name.
struct Changed {
    /// The payments' list, the refunds', the chargebacks'.
    lists: Vec<Cursored<GetList<List>>>,
    /// The list being paged.
    at: usize,
    /// The payments listed or read so far (the last `REMEMBERED`).
    listed: RecentIds,
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "paymentId", default)]
    payment_id: Option<String>,
}

#[async_trait::async_trait]
impl Pager for Changed {
    async fn next(&mut self, api: &mut dyn Client) -> Result<Option<Page>, ApiError> {
        loop {
            let Some(list) = self.lists.get_mut(self.at) else {
                return Ok(None);
            };
            let Some(items) = list.next(api).await? else {
                self.at += 1;
                continue;
            };
            let path = [PATH, REFUNDS, CHARGEBACKS][self.at];
            let mut page = Vec::with_capacity(items.len());
            for item in items {
                let named: Named =
                    serde_json::from_str(item.get()).map_err(|e| api.malformed(path, &e))?;
                if self.at == 0 {
                    if let Some(id) = &named.id {
                        self.listed.insert(id);
                    }
                    page.push(item);
                    continue;
                }
                let Some(id) = named.payment_id else {
                    return Err(api.malformed(path, &"an item names no paymentId"));
                };
                if !self.listed.insert(&id) {
                    continue;
                }
                let fetch =
                    Fetch::of(PAYMENTS, &id, Vec::new()).map_err(|e| api.malformed(path, &e))?;
                let payment = fetch.send(api).await?;
                let raw = RawValue::from_string(payment.to_string())
                    .map_err(|e| api.malformed(&fetch.path, &e))?;
                page.push(raw);
            }
            return Ok(Some(page));
        }
    }
}

#[derive(Deserialize)]
struct List {
    #[serde(rename = "_embedded", default)]
    embedded: Embedded,
    #[serde(rename = "_links", default)]
    links: Links,
}

/// A list's items, under the name of what it lists.
#[derive(Deserialize, Default)]
struct Embedded {
    #[serde(rename = "payments", alias = "refunds", alias = "chargebacks", default)]
    items: Page,
}

#[derive(Deserialize, Default)]
struct Links {
    next: Option<Link>,
}

#[derive(Deserialize)]
struct Link {
    href: String,
}
