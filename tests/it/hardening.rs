//! What a team relies on when hookd faces the open internet: no live development
//! credentials, bounded inputs that never panic the server, slow clients cut off,
//! and a signed event never answered with a 5xx.

use std::process::Command;

use crate::support::{spawn_app, stripe_event};

fn hookd(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookd"));
    command
        .args(args)
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/hookd.toml"),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run hookd")
}

#[test]
fn serve_refuses_the_shipped_credentials_beyond_loopback_with_one_line() {
    let output = hookd(&["serve"], &[("HOOKD_LISTEN", "0.0.0.0:0")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.trim().lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("sources[0].secrets[0]") && lines[0].contains("development"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("whsec_dev"),
        "the secret itself is not printed"
    );
}

#[test]
fn hookd_secret_prints_a_fresh_secret_in_the_scheme_format_without_a_config() {
    let run = |scheme: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_hookd"))
            .args([
                "secret",
                "--scheme",
                scheme,
                "--config",
                "/nonexistent.toml",
            ])
            .output()
            .expect("run");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .trim()
            .to_string()
    };
    let first = run("standard");
    let second = run("standard");
    assert_ne!(first, second);
    let key = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        first.strip_prefix("whsec_").expect("whsec_ prefix"),
    )
    .expect("base64");
    assert_eq!(key.len(), 32);
    assert_eq!(run("github").len(), 64);
    let unknown = Command::new(env!("CARGO_BIN_EXE_hookd"))
        .args(["secret", "--scheme", "paypal"])
        .output()
        .expect("run");
    assert!(!unknown.status.success());
}

#[tokio::test]
async fn ages_beyond_a_hundred_years_are_400_not_a_dropped_connection() {
    let app = spawn_app().await;
    let token = "dev-viewer-token-0123456789";
    for path in [
        "/admin/api/events?since=999999999d",
        "/admin/api/events?until=999999999d",
        "/admin/api/events?since=36501d",
        "/admin/api/stats?window=999999999d",
        "/admin/api/stats?window=18446744073709551615ms",
        "/admin/api/events?cursor=OTIyMzM3MjAzNjg1NDc3NTgwNzox",
    ] {
        let response = app
            .http
            .get(format!("{}{path}", app.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: no answer: {e}"));
        assert_eq!(response.status().as_u16(), 400, "{path}");
    }
    // The longest age accepted still answers.
    let response = app
        .http
        .get(format!("{}/admin/api/events?since=36500d", app.base))
        .bearer_auth(token)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        app.deliver(
            "stripe",
            &stripe_event(
                "evt_alive",
                "customer.created",
                serde_json::json!({"id": "cus_1", "object": "customer"})
            )
        )
        .await
        .status,
        200
    );
}
