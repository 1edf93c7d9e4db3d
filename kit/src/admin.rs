//! Admin requests to a test app: a credential, a method per admin API route and
//! per page action (sign-in, list, event, retry, sign-out), and `send` for what
//! no method covers (other pages, odd methods, headers and bodies).

use serde_json::Value;

use crate::app::{Answer, TestApp};

/// How an admin request proves who sends it.
#[derive(Debug, Clone)]
pub enum Credential {
    None,
    Bearer(String),
    /// A `hookd_session=…` cookie pair, as a browser would send it.
    Cookie(String),
}

/// Admin requests to one app, without following redirects (so a test sees them).
pub struct AdminClient<'a> {
    pub app: &'a TestApp,
    pub credential: Credential,
    http: reqwest::Client,
}

/// The shipped development tokens (they work on loopback only).
pub const VIEWER_TOKEN: &str = "dev-viewer-token-0123456789";
pub const OPERATOR_TOKEN: &str = "dev-operator-token-0123456789";

impl TestApp {
    /// Admin requests with the shipped viewer token.
    pub fn viewer(&self) -> AdminClient<'_> {
        self.admin(Credential::Bearer(VIEWER_TOKEN.into()))
    }

    /// Admin requests with the shipped operator token.
    pub fn operator(&self) -> AdminClient<'_> {
        self.admin(Credential::Bearer(OPERATOR_TOKEN.into()))
    }

    pub fn admin(&self, credential: Credential) -> AdminClient<'_> {
        AdminClient {
            app: self,
            credential,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
        }
    }

    /// Signs in through the page's form; returns the session cookie pair.
    pub async fn sign_in(&self, token: &str) -> String {
        let answer = self.admin(Credential::None).login(token).await;
        assert_eq!(answer.status, 303, "sign-in");
        answer
            .header("set-cookie")
            .and_then(|c| c.split(';').next())
            .expect("session cookie")
            .to_string()
    }
}

impl AdminClient<'_> {
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Answer {
        let url = format!("{}{path}", self.app.base);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, url).body(body);
        request = match &self.credential {
            Credential::None => request,
            Credential::Bearer(token) => request.bearer_auth(token),
            Credential::Cookie(cookie) => request.header("Cookie", cookie),
        };
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Answer::read(request.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[], Vec::new()).await
    }

    pub async fn post(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.send("POST", path, headers, Vec::new()).await
    }

    // The admin API, one method per route. `query` is a query string without
    // its `?` (may be empty); `key` an Idempotency-Key.

    /// `GET /admin/api/events?query`
    pub async fn events(&self, query: &str) -> Answer {
        self.get(&with_query("/admin/api/events", query)).await
    }

    /// `GET /admin/api/events/{id}`
    pub async fn event(&self, id: i64) -> Answer {
        self.get(&format!("/admin/api/events/{id}")).await
    }

    /// `POST /admin/api/events/{id}/retry`
    pub async fn retry(&self, id: i64, key: Option<&str>) -> Answer {
        let path = format!("/admin/api/events/{id}/retry");
        self.post(&path, &idempotency(key)).await
    }

    /// `POST /admin/api/events/retry` with a filter body.
    pub async fn bulk_retry(&self, filter: &Value, key: Option<&str>) -> Answer {
        let mut headers = vec![("Content-Type", "application/json")];
        headers.extend(idempotency(key));
        let body = serde_json::to_vec(filter).expect("json");
        self.send("POST", "/admin/api/events/retry", &headers, body)
            .await
    }

    /// `GET /admin/api/stats?query`
    pub async fn stats(&self, query: &str) -> Answer {
        self.get(&with_query("/admin/api/stats", query)).await
    }

    /// `GET /admin/api/payments/{source}/{payment_id}`
    pub async fn payment(&self, source: &str, payment_id: &str) -> Answer {
        self.get(&format!("/admin/api/payments/{source}/{payment_id}"))
            .await
    }

    /// `GET /admin/api/payments?query` (a customer's payments)
    pub async fn payments(&self, query: &str) -> Answer {
        self.get(&with_query("/admin/api/payments", query)).await
    }

    /// `GET /admin/api/audit?query`
    pub async fn audit(&self, query: &str) -> Answer {
        self.get(&with_query("/admin/api/audit", query)).await
    }

    /// `GET /admin/api/idempotency?query`
    pub async fn idempotency_keys(&self, query: &str) -> Answer {
        self.get(&with_query("/admin/api/idempotency", query)).await
    }

    /// `GET /admin/api/idempotency/{id}?query`
    pub async fn idempotency_key(&self, id: i64, query: &str) -> Answer {
        self.get(&with_query(&format!("/admin/api/idempotency/{id}"), query))
            .await
    }

    /// `POST /admin/api/idempotency/{id}/release`
    pub async fn release_idempotency_key(&self, id: i64) -> Answer {
        self.post(&format!("/admin/api/idempotency/{id}/release"), &[])
            .await
    }

    /// `GET /admin/api/openapi.json`
    pub async fn openapi(&self) -> Answer {
        self.get("/admin/api/openapi.json").await
    }

    // The page.

    /// `GET /admin?query`: the dashboard and the list.
    pub async fn list_page(&self, query: &str) -> Answer {
        self.get(&with_query("/admin", query)).await
    }

    /// `GET /admin/events/{id}`
    pub async fn event_page(&self, id: i64) -> Answer {
        self.get(&format!("/admin/events/{id}")).await
    }

    /// `POST /admin/events/{id}/retry`, the page's retry button, with its form token.
    pub async fn retry_from_page(&self, id: i64, csrf: &str, headers: &[(&str, &str)]) -> Answer {
        let path = format!("/admin/events/{id}/retry");
        self.post_form(&path, headers, &[("csrf", csrf)]).await
    }

    /// `POST /admin/login` with the page's form.
    pub async fn login(&self, token: &str) -> Answer {
        self.post_form("/admin/login", &[], &[("token", token)])
            .await
    }

    /// `POST /admin/login` with a JSON body, as scripts sign in.
    pub async fn login_json(&self, token: &str) -> Answer {
        let body = serde_json::to_vec(&serde_json::json!({ "token": token })).expect("json");
        let headers = [("Content-Type", "application/json")];
        self.send("POST", "/admin/login", &headers, body).await
    }

    /// `POST /admin/logout`, with the page's form token.
    pub async fn sign_out(&self, csrf: &str) -> Answer {
        self.post_form("/admin/logout", &[], &[("csrf", csrf)])
            .await
    }

    /// A page form post, with its fields url-encoded.
    pub async fn post_form(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        fields: &[(&str, &str)],
    ) -> Answer {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut all = vec![("Content-Type", "application/x-www-form-urlencoded")];
        all.extend_from_slice(headers);
        self.send("POST", path, &all, body.into_bytes()).await
    }
}

fn with_query(path: &str, query: &str) -> String {
    match query.trim_start_matches('?') {
        "" => path.to_string(),
        query => format!("{path}?{query}"),
    }
}

fn idempotency(key: Option<&str>) -> Vec<(&str, &str)> {
    key.map(|key| ("Idempotency-Key", key))
        .into_iter()
        .collect()
}

/// The form token of a page (`name=csrf value="…"`).
pub fn csrf_of(html: &str) -> String {
    let field = html.find("name=\"csrf\"").expect("csrf field");
    let value = html[field..].find("value=\"").expect("csrf value") + field + "value=\"".len();
    html[value..].split('"').next().expect("value").to_string()
}

/// A form field as `application/x-www-form-urlencoded` writes it.
fn form_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
