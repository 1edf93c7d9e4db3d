//! Drift guards: what must stay in step with something else, checked rather than
//! trusted — every file in `sql/` is a migration, the ingest benchmark's
//! pgbench baseline runs the store's own statements, the modules name one
//! another in one direction only, and the README and the book (`docs/src`) link
//! only to what exists and document exactly the configuration the code takes.

pub mod book;
pub mod imports;

use std::collections::BTreeMap;
use std::path::Path;

use hookd::store::MIGRATIONS;
use hookd_kit::pgbench::{Script, with_values};
use sha2::{Digest, Sha256};

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
    let work = hookd_kit::cluster::tmp_root().join(format!("drift-pgbench-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("work folder");
    for (script, transactions) in [(Script::Full, 3), (Script::Insert, 2)] {
        let text = script.text();
        assert!(!text.contains('$'), "a parameter left in:\n{text}");
        let file = work.join(format!("{}.sql", script.name()));
        std::fs::write(&file, &text).expect("script");
        let out = tokio::process::Command::new(hookd_kit::cluster::postgres_bin("pgbench"))
            .args(["-n", "-M", "prepared", "--no-vacuum", "--client=1"])
            .arg(format!("--transactions={transactions}"))
            .arg(format!("--file={}", file.display()))
            .args(["-D", "n=0", "-D"])
            .arg(format!("run={}", script.name()))
            .arg("-D")
            .arg(format!("payload={payload}"))
            .arg("-D")
            .arg(format!("sha={sha}"))
            .arg(app.database_url())
            .output()
            .await
            .expect("run pgbench");
        assert!(
            out.status.success(),
            "pgbench {}:\n{}\n{}",
            script.name(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&work);
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
    let hookd_row = filled_columns(&app, "evt_drift_hookd").await;
    let pgbench_row = filled_columns(&app, "evt_pgb_full_0_1").await;
    assert!(
        hookd_row.contains(&"signature_headers".to_string()),
        "{hookd_row:?}"
    );
    assert_eq!(pgbench_row, hookd_row);
}

/// The columns of an event's row that are not NULL.
async fn filled_columns(app: &TestApp, event_id: &str) -> Vec<String> {
    app.strings(
        "SELECT key FROM webhook_events e, jsonb_each(to_jsonb(e)) \
         WHERE e.event_id = $1 AND value <> 'null' ORDER BY key",
        &[&event_id],
    )
    .await
}
