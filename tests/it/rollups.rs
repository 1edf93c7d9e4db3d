//! The per-hour counts behind the stats, the dashboard and its charts: events at
//! known hours land in the right bars, refused signatures are counted, and the
//! counts agree with a count of the events after retries, status changes and a
//! purge.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::support::{Credential, OPERATOR, TestApp, VIEWER, spawn_app, stripe_event};

fn payment(id: &str) -> Value {
    stripe_event(
        id,
        "payment_intent.succeeded",
        json!({"id": format!("pi_{id}"), "object": "payment_intent", "amount": 100}),
    )
}

/// Delivers `count` payments named `{prefix}_{n}` and moves them to `status`,
/// received `hours_ago` hours before the hour `anchor` starts (plus ten minutes).
async fn events_at(
    app: &TestApp,
    prefix: &str,
    count: usize,
    status: &str,
    anchor: DateTime<Utc>,
    hours_ago: i64,
) {
    for n in 0..count {
        app.deliver_ok("stripe", &payment(&format!("{prefix}_{n}")))
            .await;
    }
    let at = anchor - Duration::hours(hours_ago) + Duration::minutes(10);
    let pattern = format!("{prefix}\\_%");
    app.execute(
        "UPDATE webhook_events SET status = $1, received_at = $2 WHERE event_id LIKE $3",
        &[&status, &at, &pattern],
    )
    .await;
}

async fn series(app: &TestApp) -> Value {
    let answer = app
        .admin(Credential::Bearer(VIEWER.into()))
        .get("/admin/api/stats/series")
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()
}

/// The entry of `list` that starts at `start`.
fn at(list: &Value, start: DateTime<Utc>) -> &Value {
    list.as_array()
        .expect("a list")
        .iter()
        .find(|e| {
            e["start"]
                .as_str()
                .and_then(|s| s.parse::<DateTime<Utc>>().ok())
                == Some(start)
        })
        .unwrap_or_else(|| panic!("no entry for {start} in {list}"))
}

#[tokio::test]
async fn the_series_counts_events_in_their_hours_and_refused_signatures_as_they_happen() {
    let app = spawn_app().await;
    let anchor: DateTime<Utc> = app
        .query("SELECT date_trunc('hour', now(), 'UTC')", &[])
        .await[0]
        .get(0);
    events_at(&app, "evt_two_hours", 3, "processed", anchor, 2).await;
    events_at(&app, "evt_five_hours", 2, "failed", anchor, 5).await;
    events_at(&app, "evt_five_hours_dead", 1, "dead", anchor, 5).await;
    events_at(&app, "evt_two_days", 4, "dead", anchor, 48).await;
    events_at(&app, "evt_last_month", 5, "dead", anchor, 24 * 30).await;
    let forged = serde_json::to_vec(&payment("evt_forged")).expect("json");
    for _ in 0..2 {
        let headers = vec![("Stripe-Signature".to_string(), "t=1,v1=00".to_string())];
        let refused = app.post("stripe", &headers, forged.clone()).await;
        assert!(matches!(refused.status, 400 | 401), "{}", refused.status);
    }

    let series = series(&app).await;
    let hours = &series["hours"];
    assert_eq!(hours.as_array().expect("hours").len(), 24);
    let last: DateTime<Utc> = hours[23]["start"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("start");
    assert!(
        last == anchor || last == anchor + Duration::hours(1),
        "{last}"
    );
    assert_eq!(
        at(hours, anchor - Duration::hours(2)),
        &json!({"start": (anchor - Duration::hours(2)), "processed": 3, "ignored": 0,
                "failed": 0, "dead": 0, "rejected_signatures": 0})
    );
    let five = at(hours, anchor - Duration::hours(5));
    assert_eq!((&five["failed"], &five["dead"]), (&json!(2), &json!(1)));
    let sum = |key: &str| -> i64 {
        hours
            .as_array()
            .expect("hours")
            .iter()
            .map(|h| h[key].as_i64().expect("a count"))
            .sum()
    };
    // Only the last day: not the events of two days or a month ago.
    assert_eq!((sum("processed"), sum("failed"), sum("dead")), (3, 2, 1));
    assert_eq!(sum("rejected_signatures"), 2, "{hours}");
    // Read again: refusals already added are not added twice.
    let again = self::series(&app).await;
    let again: i64 = again["hours"]
        .as_array()
        .expect("hours")
        .iter()
        .map(|h| h["rejected_signatures"].as_i64().expect("a count"))
        .sum();
    assert_eq!(again, 2);

    let days = &series["days"];
    assert_eq!(days.as_array().expect("days").len(), 7);
    let day_of = |t: DateTime<Utc>| {
        t.date_naive()
            .and_hms_opt(0, 0, 0)
            .expect("midnight")
            .and_utc()
    };
    let two_days_ago = at(days, day_of(anchor - Duration::hours(48)));
    assert_eq!(two_days_ago["dead"], 4, "{days}");
    let week_dead: i64 = days
        .as_array()
        .expect("days")
        .iter()
        .map(|d| d["dead"].as_i64().expect("dead"))
        .sum();
    assert_eq!(
        week_dead, 5,
        "the month-old events are outside the week: {days}"
    );

    // The dashboard draws the same numbers, with a text alternative.
    let page = app
        .admin(Credential::Bearer(VIEWER.into()))
        .get("/admin")
        .await
        .text();
    for shown in [
        "<svg",
        "role=\"img\"",
        "<title id=\"chart-hours-title\">",
        "<desc id=\"chart-hours-desc\">",
        "<title id=\"chart-days-title\">",
        "<th>rejected signatures</th>",
    ] {
        assert!(page.contains(shown), "{shown} missing from the dashboard");
    }
    let two_hours_label = (anchor - Duration::hours(2)).format("%H:00").to_string();
    assert!(
        page.contains(&format!(
            "<tr><th>{two_hours_label}</th><td>3</td><td>0</td><td>0</td><td>0</td></tr>"
        )),
        "the hours table has the bar of {two_hours_label}"
    );
}

/// `(status, kind, source) → count` as the stats API answers and as a count of
/// the events says.
async fn both_counts(app: &TestApp) -> (Value, Value) {
    let stats = app
        .admin(Credential::Bearer(VIEWER.into()))
        .get("/admin/api/stats?window=1000d")
        .await
        .json();
    let mut by_status = BTreeMap::<String, i64>::new();
    let mut by_kind = BTreeMap::<String, i64>::new();
    let mut by_source = BTreeMap::<String, i64>::new();
    for row in app
        .query(
            "SELECT status, COALESCE(kind, 'none'), source, count(*) FROM webhook_events
             GROUP BY 1, 2, 3",
            &[],
        )
        .await
    {
        let n: i64 = row.get(3);
        *by_status.entry(row.get(0)).or_default() += n;
        *by_kind.entry(row.get(1)).or_default() += n;
        *by_source.entry(row.get(2)).or_default() += n;
    }
    let counted = json!({"by_status": by_status, "by_kind": by_kind, "by_source": by_source});
    let answered = json!({"by_status": stats["by_status"], "by_kind": stats["by_kind"],
                          "by_source": stats["by_source"]});
    (answered, counted)
}

/// The hourly rows themselves, against a count of the events by hour.
async fn assert_rollups_match(app: &TestApp, when: &str) {
    app.app.rollups.catch_up().await.expect("fold");
    let differ = app
        .count(
            "SELECT count(*) FROM (
                 (SELECT hour, source, kind, status, events FROM event_rollups WHERE events <> 0
                  EXCEPT
                  SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'),
                         status, count(*) FROM webhook_events GROUP BY 1, 2, 3, 4)
                 UNION ALL
                 (SELECT date_trunc('hour', received_at, 'UTC'), source, COALESCE(kind, 'none'),
                         status, count(*) FROM webhook_events GROUP BY 1, 2, 3, 4
                  EXCEPT
                  SELECT hour, source, kind, status, events FROM event_rollups WHERE events <> 0)) d",
            &[],
        )
        .await;
    assert_eq!(differ, 0, "hourly rollups differ from the events {when}");
    let totals = app
        .count(
            "SELECT count(*) FROM (
                 SELECT status, count(*) AS n FROM webhook_events GROUP BY 1) c
             FULL JOIN event_status_totals t USING (status)
             WHERE COALESCE(c.n, 0) <> COALESCE(t.events, 0)",
            &[],
        )
        .await;
    assert_eq!(totals, 0, "status totals differ from the events {when}");
    let (answered, counted) = both_counts(app).await;
    assert_eq!(answered, counted, "{when}");
}

#[tokio::test]
async fn rollups_agree_with_a_count_after_retries_status_changes_and_a_purge() {
    let app = spawn_app().await;
    for n in 0..6 {
        app.deliver_ok("stripe", &payment(&format!("evt_r{n}")))
            .await;
    }
    // A payment event without a payment id is dead at once; an unknown type is ignored.
    app.deliver_ok(
        "stripe",
        &stripe_event("evt_dead", "payment_intent.succeeded", json!({"amount": 1})),
    )
    .await;
    app.deliver_ok(
        "stripe",
        &stripe_event("evt_ignored", "customer.created", json!({"id": "cus_1"})),
    )
    .await;
    // A repeated delivery is not a new event.
    app.deliver_ok("stripe", &payment("evt_r0")).await;
    assert_rollups_match(&app, "after deliveries").await;

    app.execute(
        "UPDATE webhook_events SET status = 'failed', attempts = 1,
                next_attempt_at = now() + interval '1 hour'
         WHERE event_id IN ('evt_r1', 'evt_r2')",
        &[],
    )
    .await;
    assert_rollups_match(&app, "after a status change").await;
    let id = app.event_row_id("evt_r1").await;
    let retried = app
        .admin(Credential::Bearer(OPERATOR.into()))
        .retry(id, None)
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(app.event_status("evt_r1").await, "processed");
    assert_rollups_match(&app, "after a retry").await;

    // Aged past the key retention: the purge deletes them.
    app.execute(
        "UPDATE webhook_events SET received_at = now() - interval '400 days'
         WHERE event_id IN ('evt_r3', 'evt_r4', 'evt_dead')",
        &[],
    )
    .await;
    assert_rollups_match(&app, "after moving events in time").await;
    app.app.purger.run_once(None).await.expect("purge");
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events", &[]).await,
        5
    );
    assert_rollups_match(&app, "after a purge").await;
}
