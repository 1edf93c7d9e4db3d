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
    store::is_ready(&pools[0], &[], false).await.expect("ready");
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
    let output = crate::support::run_hookd(&["migrate"], Some(url.clone())).await;
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
    let listed = crate::support::run_hookd(&["events", "list"], Some(url.clone())).await;
    assert!(listed.status.success(), "{listed:?}");

    // A schema another build left behind (here: its newest migration not
    // recorded) is refused by any other command, which changes nothing: a
    // newer binary run for a look must not migrate under running instances.
    let versions: Vec<i32> = store::MIGRATIONS.iter().map(|m| m.version).collect();
    let (previous, newest) = (versions[versions.len() - 2], versions[versions.len() - 1]);
    db.execute(
        "DELETE FROM hookd_schema_migrations WHERE version = $1",
        &[&newest],
    )
    .await
    .expect("an older schema");
    for args in [&["events", "list"][..], &["purge", "--dry-run"]] {
        let refused = crate::support::run_hookd(args, Some(url.clone())).await;
        let said = String::from_utf8_lossy(&refused.stderr).trim().to_string();
        assert!(!refused.status.success(), "{args:?}");
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains(&format!(
                "hookd's schema is at version {previous}, this build needs {newest}"
            )) && said.contains("run `hookd migrate`"),
            "{said}"
        );
    }
    let recorded: i32 = db
        .query_one("SELECT max(version) FROM hookd_schema_migrations", &[])
        .await
        .expect("query")
        .get(0);
    assert_eq!(
        recorded, previous,
        "the command that only looks changed nothing"
    );
    drop(db);
    drop_database(&name).await;
}

#[tokio::test]
async fn slow_a_command_on_a_database_no_hookd_has_used_migrates_it_first() {
    let name = format!("mfresh_{}", std::process::id());
    empty_database(&name).await;
    let url = cluster().connection_string(&name);
    let listed = crate::support::run_hookd(&["events", "list"], Some(url.clone())).await;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        String::from_utf8_lossy(&listed.stdout).ends_with("\n(no events match)\n"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let recorded: i64 = connect(cluster().config(&name))
        .await
        .query_one("SELECT count(*) FROM hookd_schema_migrations", &[])
        .await
        .expect("the schema made")
        .get(0);
    assert_eq!(recorded, store::MIGRATIONS.len() as i64);
    let preview = crate::support::run_hookd(&["purge", "--dry-run"], Some(url)).await;
    assert!(preview.status.success(), "{preview:?}");
    drop_database(&name).await;
}

#[tokio::test]
async fn slow_a_bad_configuration_stops_startup_with_one_line() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("bad-{}.toml", std::process::id()));
    std::fs::write(&path, "retention = \"1h\"\n").expect("write");
    let output = crate::support::hookd_binary()
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

#[tokio::test]
async fn slow_a_migration_behind_a_long_reader_never_holds_deliveries_behind_it() {
    let db = crate::support::TestDb::create().await;
    let pool = store::pool(db.config(), store::DbConnector::Plain, 2);
    store::migrate(&pool).await.expect("migrate");
    // A long reader (a dump, a report) holds the events table's weakest lock.
    let reader = connect(db.config()).await;
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM webhook_events;")
        .await
        .expect("reader");
    // An application migration that needs the table to itself.
    const ALTER: &[store::Migration] = &[store::Migration {
        version: 1,
        name: "0001_note.sql",
        sql: "ALTER TABLE webhook_events ADD COLUMN note text",
    }];
    let migrating = tokio::spawn({
        let pool = pool.clone();
        async move { store::migrate_with(&pool, ALTER).await }
    });
    // Once the migration asks for its lock, a delivery's statement: before,
    // it queued behind that request for as long as the reader read.
    let watcher = connect(db.config()).await;
    crate::support::wait_for(
        "the migration to wait for its lock",
        std::time::Duration::from_secs(10),
        || async {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND query LIKE 'ALTER TABLE webhook_events%'",
                    &[],
                )
                .await
                .expect("activity")
                .get(0);
            (waiting == 1).then_some(())
        },
    )
    .await;
    let writer = connect(db.config()).await;
    let insert = writer.execute(
        "INSERT INTO webhook_events
             (source, event_id, event_type, status, payload, payload_sha256, signed_with)
         VALUES ('stripe', 'evt_during_migration', 't', 'ignored', '{}', '\\x00', 0)",
        &[],
    );
    let written = tokio::time::timeout(std::time::Duration::from_secs(20), insert).await;
    assert_eq!(
        written
            .expect("the insert waited for the migration")
            .expect("insert"),
        1
    );
    assert!(
        !migrating.is_finished(),
        "the migration waits for the reader"
    );
    // The reader ends: the migration goes through on a later try.
    reader.batch_execute("COMMIT").await.expect("commit");
    let applied = migrating.await.expect("join").expect("migrated");
    assert_eq!(applied, 1);
    let column = connect(db.config())
        .await
        .query_one(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_name = 'webhook_events' AND column_name = 'note'",
            &[],
        )
        .await
        .expect("column")
        .get::<_, i64>(0);
    assert_eq!(column, 1);
}
