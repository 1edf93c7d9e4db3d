//! Migrations: applied once, under an advisory lock, however many instances start
//! at the same moment; `hookd migrate` does the same from the command line.

use hookd::store;

use crate::support::{cluster, connect};

async fn empty_database(name: &str) -> tokio_postgres::Config {
    let admin = connect(cluster().config("postgres")).await;
    for statement in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&statement).await.expect("create");
    }
    cluster().config(name)
}

async fn drop_database(name: &str) {
    let admin = connect(cluster().config("postgres")).await;
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

#[tokio::test]
async fn instances_starting_together_migrate_once() {
    let name = format!("m_{}", std::process::id());
    let config = empty_database(&name).await;
    let pools: Vec<_> = (0..4)
        .map(|_| store::pool(config.clone(), store::DbConnector::Plain, 2))
        .collect();
    let results = futures_util::future::join_all(pools.iter().map(store::migrate)).await;
    let applied: Vec<usize> = results.into_iter().map(|r| r.expect("migrate")).collect();
    assert_eq!(
        applied.iter().sum::<usize>(),
        store::MIGRATIONS.len(),
        "{applied:?}"
    );
    store::is_ready(&pools[0], &[]).await.expect("ready");
    assert_eq!(store::migrate(&pools[0]).await.expect("again"), 0);
    for pool in pools {
        pool.close();
    }
    drop_database(&name).await;
}

#[tokio::test]
async fn slow_hookd_migrate_applies_the_schema_and_says_so() {
    let name = format!("mcli_{}", std::process::id());
    empty_database(&name).await;
    let url = cluster().connection_string(&name);
    let output = crate::support::run_hookd(&["migrate"], Some(url)).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("applied {} migration(s)", store::MIGRATIONS.len())),
        "{stdout}"
    );
    let db = connect(cluster().config(&name)).await;
    for table in [
        "webhook_events",
        "webhook_event_attempts",
        "payments",
        "admin_idempotency_keys",
    ] {
        let exists: bool = db
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .expect("query")
            .get(0);
        assert!(exists, "{table}");
    }
    drop(db);
    drop_database(&name).await;
}

#[tokio::test]
async fn slow_a_bad_configuration_stops_startup_with_one_line() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("bad-{}.toml", std::process::id()));
    std::fs::write(&path, "retention = \"1h\"\n").expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookd"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("retention") && stderr.contains("24h"),
        "{stderr}"
    );
}
