//! Drift guards: what must stay in step with something else, checked rather than
//! trusted — every file in `sql/` is a migration, the ingest and gateway
//! benchmarks' pgbench baselines run the store's own statements, the modules
//! name one another in one direction only, and the README and the book
//! (`docs/src`) link only to what exists and document exactly the
//! configuration the code takes.

pub mod book;
pub mod imports;

use std::collections::BTreeMap;
use std::path::Path;

use hookd::store::MIGRATIONS;
use hookd_kit::pgbench::{KEY_CALLER, KEY_ROUTE, KeyScript, Script, with_values};
use sha2::{Digest, Sha256};

use crate::gateway::{Call, gateway, route};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{TestApp, spawn_app};

#[test]
fn every_sql_file_is_a_migration_in_order() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("sql/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sql") {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            files.insert(name, std::fs::read_to_string(&path).expect("read"));
        }
    }
    assert!(!files.is_empty());
    for (name, sql) in &files {
        let migration = MIGRATIONS
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| {
                panic!("sql/{name} is not in store::MIGRATIONS: it would never run")
            });
        assert_eq!(
            migration.sql, sql,
            "{name}: the migration is another file's text"
        );
        let number: i32 = name[..4].parse().expect("a four-digit prefix");
        assert_eq!(migration.version, number, "{name}");
    }
    assert_eq!(
        MIGRATIONS.len(),
        files.len(),
        "a migration without its file"
    );
    let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(versions, (1..=files.len() as i32).collect::<Vec<_>>());
}

/// A cycle (`config` needing `event` needing `config`) means none of its modules
/// can be read, tested or moved alone. The rule of the graph is in `imports.rs`.
#[test]
fn the_module_graph_has_no_cycle() {
    let edges = imports::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The scanner sees the graph: edges that must be there are.
    for (from, to) in [("cli", "config"), ("handlers::payments", "store::payments")] {
        assert!(
            edges.get(from).is_some_and(|e| e.contains_key(to)),
            "no edge {from} → {to}: {edges:#?}"
        );
    }
    let cycles: Vec<String> = imports::cycles(&edges)
        .iter()
        .map(|cycle| {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|pair| format!("{} → {} ({})", pair[0], pair[1], edges[&pair[0]][&pair[1]]))
                .collect();
            steps.join("\n  ")
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "the modules name one another in a cycle:\n  {}",
        cycles.join("\n\n  ")
    );
}

#[test]
fn parameters_are_replaced_all_and_only() {
    assert_eq!(with_values("f($1, $2, $1)", &["a", "b"]), "f(a, b, a)");
    // `$1` is not the start of `$10`.
    let sql: Vec<String> = (1..=10).rev().map(|n| format!("${n}")).collect();
    let values: Vec<String> = (1..=10).map(|n| format!("v{n}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let expected: Vec<String> = (1..=10).rev().map(|n| format!("v{n}")).collect();
    assert_eq!(with_values(&sql.join(","), &values), expected.join(","));
    for (sql, values) in [("f($1, $3)", vec!["a", "b", "c"]), ("f($1, $2)", vec!["a"])] {
        let caught = std::panic::catch_unwind(|| with_values(sql, &values));
        assert!(caught.is_err(), "{sql} with {values:?}");
    }
}

/// The baseline runs under pgbench against a real database and leaves what
/// hookd leaves for the same event: one processed event, its payment and its
/// attempt, with the same columns filled.
#[tokio::test]
async fn the_pgbench_baseline_runs_the_stores_statements() {
    let app = spawn_app().await;
    let payload = hookd_kit::load::stripe_payment_succeeded("@EVT@", "@PI@", 1_726_050_000);
    let sha = hex::encode(Sha256::digest(payload.as_bytes()));
    for (script, transactions) in [(Script::Full, 3), (Script::Insert, 2)] {
        let defines = [("payload", payload.as_str()), ("sha", sha.as_str())];
        run_pgbench(&app, script.name(), &script.text(), transactions, &defines).await;
    }
    let count = |sql: &'static str| app.count(sql, &[]);
    assert_eq!(
        count("SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt_pgb_full_%'").await,
        3
    );
    assert_eq!(
        count("SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt_pgb_insert_%'").await,
        2
    );
    assert_eq!(
        count("SELECT count(*) FROM payments WHERE payment_id LIKE 'pi_pgb_full_%'").await,
        3
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM webhook_event_attempts a JOIN webhook_events e \
             ON e.id = a.webhook_event_id WHERE e.event_id LIKE 'evt_pgb_full_%'"
        )
        .await,
        3
    );

    // hookd stores the same body: the same columns end up filled.
    let body = hookd_kit::load::stripe_payment_succeeded(
        "evt_drift_hookd",
        "pi_drift_hookd",
        1_726_050_000,
    );
    let headers = app.sign("stripe", body.as_bytes(), Default::default());
    assert_eq!(
        app.post("stripe", &headers, body.into_bytes()).await.status,
        200
    );
    let hookd_row = app.strings(EVENT_COLUMNS, &[&"evt_drift_hookd"]).await;
    let pgbench_row = app.strings(EVENT_COLUMNS, &[&"evt_pgb_full_0_1"]).await;
    assert!(
        hookd_row.contains(&"signature_headers".to_string()),
        "{hookd_row:?}"
    );
    assert_eq!(pgbench_row, hookd_row);
}

/// Runs `text` under pgbench (`-M prepared`, one client) against the test's
/// database, with `n` from 0 and `run` the script's name.
async fn run_pgbench(
    app: &TestApp,
    name: &str,
    text: &str,
    transactions: u32,
    defines: &[(&str, &str)],
) {
    assert!(!text.contains('$'), "a parameter left in:\n{text}");
    let work = hookd_kit::cluster::tmp_root().join(format!("drift-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("work folder");
    let file = work.join(format!("{name}.sql"));
    std::fs::write(&file, text).expect("script");
    let mut command = tokio::process::Command::new(hookd_kit::cluster::postgres_bin("pgbench"));
    command
        .args(["-n", "-M", "prepared", "--no-vacuum", "--client=1"])
        .arg(format!("--transactions={transactions}"))
        .arg(format!("--file={}", file.display()))
        .args(["-D", "n=0", "-D"])
        .arg(format!("run={name}"));
    for (variable, value) in defines {
        command.arg("-D").arg(format!("{variable}={value}"));
    }
    let out = command
        .arg(app.database_url())
        .output()
        .await
        .expect("run pgbench");
    let _ = std::fs::remove_dir_all(&work);
    assert!(
        out.status.success(),
        "pgbench {name}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The gateway benchmark's baseline runs under pgbench and leaves what the
/// gateway leaves for a new key: a completed key with its answer, the same
/// columns filled; a copy adds no row and runs nothing again.
#[tokio::test]
async fn the_gateway_pgbench_baseline_runs_the_stores_statements() {
    let upstream = Upstream::start(vec![], Reply::json(201, r#"{"id":"pay"}"#)).await;
    let app = gateway(&route(
        KEY_ROUTE,
        "/payments",
        &upstream.url,
        "scope = \"header:Authorization\"",
    ))
    .await;
    let body = r#"{"amount": 1000, "currency": "EUR", "order": "drift"}"#;
    let mut call = Call::post("/payments", "key_drift_hookd", body);
    call.auth = Some(KEY_CALLER);
    assert_eq!(call.send(&app).await.status, 201);

    for (script, transactions) in [(KeyScript::New, 2), (KeyScript::HalfCopies, 4)] {
        run_pgbench(&app, script.name(), &script.text(), transactions, &[]).await;
    }
    for (prefix, keys) in [("key_pgb_keys-new_%", 2), ("key_pgb_keys-half-copies_%", 2)] {
        let states = app
            .strings(
                "SELECT state || ' ' || runs FROM api_idempotency_keys \
                 WHERE idempotency_key LIKE $1 ORDER BY id",
                &[&prefix],
            )
            .await;
        assert_eq!(states, vec!["completed 1".to_string(); keys], "{prefix}");
    }
    let hookd_row = app.strings(KEY_COLUMNS, &[&"key_drift_hookd"]).await;
    assert!(
        hookd_row.contains(&"response_body".to_string()),
        "{hookd_row:?}"
    );
    let pgbench_row = app.strings(KEY_COLUMNS, &[&"key_pgb_keys-new_0_1"]).await;
    assert_eq!(pgbench_row, hookd_row);
    // The same scope (the caller's credential), the same stored answer.
    let same = app
        .strings(
            "SELECT count(DISTINCT (scope, response_status, response_headers, response_body))::text \
             FROM api_idempotency_keys",
            &[],
        )
        .await;
    assert_eq!(same, vec!["1".to_string()]);
}

/// The columns of a key's row that are not NULL.
const KEY_COLUMNS: &str = "SELECT key FROM api_idempotency_keys k, jsonb_each(to_jsonb(k)) \
     WHERE k.idempotency_key = $1 AND value <> 'null' ORDER BY key";

/// The columns of an event's row that are not NULL.
const EVENT_COLUMNS: &str = "SELECT key FROM webhook_events e, jsonb_each(to_jsonb(e)) \
     WHERE e.event_id = $1 AND value <> 'null' ORDER BY key";
