use super::*;
use rustls::CertificateError;

fn split(url: &str) -> (String, UrlParams) {
    split_hookd_params(url).expect("split")
}

fn params(mode: SslMode, root_cert: Option<&str>) -> UrlParams {
    UrlParams {
        mode,
        root_cert: root_cert.map(PathBuf::from),
        pooler: Pooler::None,
    }
}

#[test]
fn prefer_is_the_default_and_the_rest_is_untouched() {
    for url in [
        "postgres://u:p@db.example:5432/hookd?application_name=x",
        "host=db.example user=u dbname=hookd",
        "postgresql://db.example/hookd",
    ] {
        assert_eq!(split(url), (url.to_string(), UrlParams::default()), "{url}");
    }
}

#[test]
fn url_form_takes_both_keys_out() {
    let (rest, found) = split(
        "postgres://u:p@localhost:5432/db?sslmode=verify-full&connect_timeout=3&sslrootcert=/etc/ca.pem",
    );
    assert_eq!(rest, "postgres://u:p@localhost:5432/db?connect_timeout=3");
    assert_eq!(found, params(SslMode::VerifyFull, Some("/etc/ca.pem")));

    let (rest, found) = split("postgresql://localhost/db?sslmode=require");
    assert_eq!(rest, "postgresql://localhost/db");
    assert_eq!(found, params(SslMode::Require, None));
}

#[test]
fn url_form_is_percent_decoded() {
    let (rest, found) = split(
        "postgres://localhost/db?ssl%6Dode=verify%2Dca&sslrootcert=%2Fsecrets%2Fmy%20ca%26co.pem",
    );
    assert_eq!(rest, "postgres://localhost/db");
    assert_eq!(
        found,
        params(SslMode::VerifyCa, Some("/secrets/my ca&co.pem"))
    );
}

#[test]
fn url_form_query_starts_after_the_user_info() {
    let (rest, found) = split("postgres://u:pa?ss@localhost/db?sslmode=disable");
    assert_eq!(rest, "postgres://u:pa?ss@localhost/db");
    assert_eq!(found.mode, SslMode::Disable);
}

#[test]
fn key_value_form_takes_both_keys_out() {
    let (rest, found) =
        split("host=localhost  sslmode = verify-full port=5432 sslrootcert=/etc/ca.pem");
    assert_eq!(rest, "host=localhost port=5432");
    assert_eq!(found, params(SslMode::VerifyFull, Some("/etc/ca.pem")));
}

#[test]
fn key_value_form_honours_quotes_and_escapes() {
    let (rest, found) =
        split(r"host='/tmp/a b' sslrootcert='/etc/my ca\'s.pem' password='x y' sslmode='require'");
    assert_eq!(rest, "host='/tmp/a b' password='x y'");
    assert_eq!(found, params(SslMode::Require, Some("/etc/my ca's.pem")));

    let (_, found) = split(r"sslrootcert=/etc/with\ space.pem");
    assert_eq!(found.root_cert, Some(PathBuf::from("/etc/with space.pem")));
}

#[test]
fn the_last_value_wins_and_empty_rootcert_means_none() {
    let (_, found) = split("sslmode=disable sslmode=verify-ca sslrootcert=/a sslrootcert=''");
    assert_eq!(found, params(SslMode::VerifyCa, None));
}

#[test]
fn what_cannot_be_read_is_left_for_tokio_postgres() {
    let (rest, found) = split("sslmode=require host='unterminated");
    assert_eq!(rest, "host='unterminated");
    assert_eq!(found.mode, SslMode::Require);
    assert!(tokio_postgres::Config::from_str(&rest).is_err());
}

#[test]
fn prefer_is_flagged_only_towards_another_machine() {
    for url in [
        "postgres://u@db.internal/db",
        "postgres://u@db.internal/db?sslmode=prefer",
        "host=10.0.0.5 sslmode=prefer",
        "host=localhost hostaddr=192.0.2.7",
    ] {
        assert!(prefers_tls_beyond_this_machine(url), "{url}");
    }
    for url in [
        "postgres://u@localhost/db",
        "postgres://u@127.0.0.1:5432/db?sslmode=prefer",
        "host=/run/postgresql sslmode=prefer",
        "postgres://u@db.internal/db?sslmode=require",
        "postgres://u@db.internal/db?sslmode=disable",
        "postgres://u@db.internal/db?sslmode=verify-full",
    ] {
        assert!(!prefers_tls_beyond_this_machine(url), "{url}");
    }
}

#[test]
fn an_unknown_sslmode_is_an_error_naming_it() {
    for url in [
        "host=localhost sslmode=allow",
        "postgres://localhost/db?sslmode=verify_full",
        "sslmode=''",
    ] {
        let error = split_hookd_params(url).expect_err(url).to_string();
        assert!(error.starts_with("sslmode: "), "{error}");
        assert!(error.contains("verify-full"), "{error}");
    }
}

#[test]
fn the_rest_parses_and_gets_the_mode() {
    let (config, tls, _) =
        connect_options("postgres://u@localhost:6543/db?sslmode=require&application_name=t")
            .expect("options");
    assert_eq!(config.get_ssl_mode(), PgSslMode::Require);
    assert_eq!(config.get_ports(), [6543]);
    assert!(matches!(tls, DbConnector::Tls(_)));

    let (config, tls, _) = connect_options("host=localhost sslmode=prefer").expect("options");
    assert_eq!(config.get_ssl_mode(), PgSslMode::Prefer);
    assert!(matches!(tls, DbConnector::Tls(_)));

    let (config, tls, _) = connect_options("host=localhost sslmode=disable").expect("options");
    assert_eq!(config.get_ssl_mode(), PgSslMode::Disable);
    assert!(matches!(tls, DbConnector::Plain));
}

#[test]
fn pgbouncer_true_is_taken_out_and_names_a_transaction_pooler() {
    for (url, rest) in [
        (
            "postgres://u@pool:6432/db?pgbouncer=true&application_name=t",
            "postgres://u@pool:6432/db?application_name=t",
        ),
        ("host=pool port=6432 pgbouncer=true", "host=pool port=6432"),
    ] {
        let (kept, params) = split(url);
        assert_eq!(kept, rest, "{url}");
        assert_eq!(params.pooler, Pooler::Transaction, "{url}");
    }
    let (_, params) = split("postgres://u@db/db?pgbouncer=false");
    assert_eq!(params.pooler, Pooler::None);
    let (_, _, pooler) =
        connect_options("postgres://u@pool:6432/db?sslmode=disable&pgbouncer=true")
            .expect("options");
    assert_eq!(pooler, Pooler::Transaction);
    let error = connect_options("postgres://u@pool/db?pgbouncer=yes")
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.contains("pgbouncer") && error.contains("yes"),
        "{error}"
    );
}

#[test]
fn a_unix_socket_never_uses_tls() {
    let (config, tls, _) =
        connect_options("host=/var/run/postgresql sslmode=verify-full sslrootcert=/nowhere")
            .expect("options");
    assert_eq!(config.get_ssl_mode(), PgSslMode::Disable);
    assert!(matches!(tls, DbConnector::Plain));
}

#[test]
fn a_missing_or_empty_rootcert_names_the_key_and_file() {
    let missing = connect_options("host=localhost sslmode=verify-ca sslrootcert=/no/such/ca.pem")
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        missing.as_deref(),
        Some("sslrootcert: /no/such/ca.pem: No such file or directory")
    );

    let dir = std::env::temp_dir().join(format!("hookd-tls-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").expect("write");
    let error = connect_options(&format!(
        "host=localhost sslmode=require sslrootcert={}",
        empty.display()
    ))
    .err()
    .map(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        error,
        Some(format!(
            "sslrootcert: {}: no certificate in it",
            empty.display()
        ))
    );
}

#[test]
fn a_bad_remainder_says_why() {
    let error = connect_options("host=localhost frobnicate=1")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.starts_with("invalid connection string: "), "{error}");
    assert!(error.contains("frobnicate"), "{error}");
}

#[test]
fn a_certificate_failure_says_so() {
    let handshake = io::Error::new(
        io::ErrorKind::InvalidData,
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
    );
    let text = explain(&handshake);
    assert!(text.contains("certificate could not be verified"), "{text}");
}
