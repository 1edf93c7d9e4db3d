//! The environment overlay: variables, their `_FILE` forms, and what counts as a
//! secret written in the file.

use super::*;

#[test]
fn environment_overrides_the_file() {
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_LISTEN", "0.0.0.0:9999"),
            ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_env1, whsec_env2"),
            ("HOOKD_ADMIN_TOKEN", "an-operator-token-from-env"),
            ("DATABASE_URL", "postgres://x@localhost/db"),
        ],
    )
    .expect("valid");
    assert_eq!(s.listen.to_string(), "0.0.0.0:9999");
    let secrets: Vec<_> = s.sources[0].secrets.iter().map(|x| x.expose()).collect();
    assert_eq!(secrets, ["whsec_env1", "whsec_env2"]);
    assert_eq!(s.admin_tokens[0].role, Role::Operator);
    assert_eq!(
        s.database_url.as_ref().map(Secret::expose),
        Some("postgres://x@localhost/db")
    );

    let s = load_env(MINIMAL, &[("HOOKD_SOURCE_STRIPPE_SECRETS", "x")]).expect("a warning only");
    assert_eq!(
        s.sources[0].secrets[0].expose(),
        "whsec_a",
        "the file's secrets stay"
    );
}

/// A file of this test's own under the system's temporary folder.
fn secret_file(name: &str, contents: &str) -> String {
    let path = std::env::temp_dir().join(format!("hookd-config-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("write secret file");
    path.display().to_string()
}

#[test]
fn secrets_and_the_admin_token_can_come_from_files() {
    let secrets = secret_file("secrets", "whsec_file1,whsec_file2\n");
    let token = secret_file("token", "an-operator-token-from-a-file\r\n");
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.as_str()),
            ("HOOKD_ADMIN_TOKEN_FILE", token.as_str()),
        ],
    )
    .expect("valid");
    let stripe: Vec<_> = s.sources[0].secrets.iter().map(|x| x.expose()).collect();
    assert_eq!(stripe, ["whsec_file1", "whsec_file2"], "newline trimmed");
    assert_eq!(s.sources[0].secrets_key, "HOOKD_SOURCE_STRIPE_SECRETS_FILE");
    let env_token = &s.admin_tokens[0];
    assert_eq!(env_token.token.expose(), "an-operator-token-from-a-file");
    assert_eq!(
        (env_token.role, env_token.key.as_str()),
        (Role::Operator, "HOOKD_ADMIN_TOKEN_FILE")
    );

    // An empty variable counts as unset, as with the plain ones.
    let s = load_env(
        MINIMAL,
        &[
            ("HOOKD_SOURCE_STRIPE_SECRETS", ""),
            ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", secrets.as_str()),
        ],
    )
    .expect("valid");
    assert_eq!(s.sources[0].secrets[0].expose(), "whsec_file1");

    // Or one a line, as a secrets manager writes a list (CRLF too).
    let lines = secret_file("secrets-lines", "whsec_file1\r\nwhsec_file2\r\n\n");
    let s = load_env(
        MINIMAL,
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", lines.as_str())],
    )
    .expect("valid");
    let stripe: Vec<_> = s.sources[0].secrets.iter().map(|x| x.expose()).collect();
    assert_eq!(stripe, ["whsec_file1", "whsec_file2"]);
}

#[test]
fn secret_files_that_cannot_be_used_are_one_line_naming_the_variable() {
    let missing = "/nonexistent/hookd/secret";
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Env, &str, &str); 5] = [
        (
            &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", missing)],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "cannot read /nonexistent/hookd/secret",
        ),
        (
            &[("HOOKD_ADMIN_TOKEN_FILE", missing)],
            "HOOKD_ADMIN_TOKEN_FILE",
            "cannot read",
        ),
        (
            &[
                ("HOOKD_SOURCE_STRIPE_SECRETS", "whsec_x"),
                ("HOOKD_SOURCE_STRIPE_SECRETS_FILE", missing),
            ],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "set either HOOKD_SOURCE_STRIPE_SECRETS or HOOKD_SOURCE_STRIPE_SECRETS_FILE, not both",
        ),
        (
            &[
                ("HOOKD_ADMIN_TOKEN", "an-operator-token-from-env"),
                ("HOOKD_ADMIN_TOKEN_FILE", missing),
            ],
            "HOOKD_ADMIN_TOKEN_FILE",
            "not both",
        ),
        (
            &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", "/")],
            "HOOKD_SOURCE_STRIPE_SECRETS_FILE",
            "cannot read /",
        ),
    ];
    for (env, key, problem) in cases {
        let e = load_env(MINIMAL, env).expect_err("refused").to_string();
        assert!(
            e.starts_with(&format!("config test.toml: {key}: ")) && e.contains(problem),
            "{env:?}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
    let empty = secret_file("empty", "\n");
    let e = load_env(
        MINIMAL,
        &[("HOOKD_SOURCE_STRIPE_SECRETS_FILE", empty.as_str())],
    )
    .expect_err("no secret")
    .to_string();
    assert!(
        e.contains("HOOKD_SOURCE_STRIPE_SECRETS_FILE: needs at least one secret"),
        "{e}"
    );
    let e = load_env(MINIMAL, &[("HOOKD_ADMIN_TOKEN_FILE", empty.as_str())])
        .expect_err("empty token")
        .to_string();
    assert!(
        e.contains("HOOKD_ADMIN_TOKEN_FILE: must not be empty"),
        "{e}"
    );
    // A file for a source that is not configured is a warning, like the plain variable.
    assert!(load_env(MINIMAL, &[("HOOKD_SOURCE_NOPE_SECRETS_FILE", missing)]).is_ok());
}

#[test]
fn credential_keys_in_the_file_are_secrets_unless_the_environment_replaced_them() {
    // Development secrets only, so the credential keys alone decide.
    let adyen = "[[sources]]\nname = \"ad\"\nscheme = \"adyen\"\n\
                 secrets = [\"686F6F6B642D6465762D616479656E2D686D61632D6B65792D30313233343536\"]\n";
    let checkout = "[[sources]]\nname = \"cko\"\nscheme = \"checkout\"\n\
                    secrets = [\"dev-checkout-signature-key\"]\n";
    let holds =
        |text: &str, env: &[(&str, &str)]| load_env(text, env).expect("valid").file_holds_secrets;
    assert!(!holds(&format!("{adyen}{checkout}"), &[]));
    let basic = format!("{adyen}basic_auth = \"u:p\"\n{checkout}");
    let authorization = format!("{adyen}{checkout}authorization = \"k\"\n");
    assert!(holds(&basic, &[]));
    assert!(holds(&authorization, &[]));
    assert!(!holds(&basic, &[("HOOKD_SOURCE_AD_BASIC_AUTH", "v:w")]));
    assert!(!holds(
        &authorization,
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION", "from-env")]
    ));
    // Replacing one source's credential leaves the other's in the file.
    assert!(holds(
        &format!("{adyen}basic_auth = \"u:p\"\n{checkout}authorization = \"k\"\n"),
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION", "from-env")]
    ));
    let file = secret_file("authorization", "from-a-file\n");
    let s = load_env(
        &authorization,
        &[("HOOKD_SOURCE_CKO_AUTHORIZATION_FILE", file.as_str())],
    )
    .expect("valid");
    assert!(!s.file_holds_secrets);
    assert!(s.secret_files.contains(&PathBuf::from(&file)));
    let in_file = load(&authorization.replace("\"k\"", "\"from-a-file\"")).expect("valid");
    assert_eq!(
        s.source("cko").map(|c| &c.scheme),
        in_file.source("cko").map(|c| &c.scheme)
    );
}

#[test]
fn mollies_url_tokens_are_secrets_and_come_from_the_environment_separated_by_commas_or_lines() {
    let mollie = "[[sources]]\nname = \"mollie\"\nscheme = \"mollie\"\napi_key = \"test_x\"\n";
    let listed =
        format!("{mollie}url_tokens = [\"token-new-0123456789\", \"token-old-0123456789\"]\n");
    let holds =
        |text: &str, env: &[(&str, &str)]| load_env(text, env).expect("valid").file_holds_secrets;
    let from_file = load_env(&listed, &[("HOOKD_SOURCE_MOLLIE_API_KEY", "test_y")]).expect("valid");
    assert!(from_file.file_holds_secrets, "the tokens are in the file");
    let env = [
        ("HOOKD_SOURCE_MOLLIE_API_KEY", "test_y"),
        (
            "HOOKD_SOURCE_MOLLIE_URL_TOKENS",
            " token-new-0123456789, token-old-0123456789 ",
        ),
    ];
    let from_env = load_env(&listed, &env).expect("valid");
    assert!(
        !from_env.file_holds_secrets,
        "the environment replaced them"
    );
    assert_eq!(
        from_env.source("mollie").map(|s| &s.scheme),
        from_file.source("mollie").map(|s| &s.scheme),
        "the same two tokens, in order"
    );
    assert!(!holds(mollie, &[("HOOKD_SOURCE_MOLLIE_API_KEY", "test_y")]));
    // A short one in the environment is refused as one in the file is.
    let short = [
        ("HOOKD_SOURCE_MOLLIE_API_KEY", "test_y"),
        (
            "HOOKD_SOURCE_MOLLIE_URL_TOKENS",
            "token-new-0123456789,short",
        ),
    ];
    let refused = load_env(mollie, &short).expect_err("short");
    assert!(
        refused
            .to_string()
            .contains("HOOKD_SOURCE_MOLLIE_URL_TOKENS[1]: is shorter"),
        "the message names the variable the token came from: {refused}"
    );
    // A file may hold one a line (as a secrets manager writes a list).
    let lines = secret_file(
        "url-tokens-lines",
        "token-new-0123456789\ntoken-old-0123456789\n",
    );
    let from_lines = load_env(
        &listed,
        &[
            ("HOOKD_SOURCE_MOLLIE_API_KEY", "test_y"),
            ("HOOKD_SOURCE_MOLLIE_URL_TOKENS_FILE", lines.as_str()),
        ],
    )
    .expect("valid");
    assert_eq!(
        from_lines.source("mollie").map(|s| &s.scheme),
        from_file.source("mollie").map(|s| &s.scheme),
        "one a line reads as the same two tokens, in order"
    );
    let short_line = secret_file("url-tokens-short", "token-new-0123456789\nshort\n");
    let refused = load_env(
        mollie,
        &[("HOOKD_SOURCE_MOLLIE_URL_TOKENS_FILE", short_line.as_str())],
    )
    .expect_err("short");
    assert!(
        refused
            .to_string()
            .contains("HOOKD_SOURCE_MOLLIE_URL_TOKENS_FILE[1]: is shorter"),
        "{refused}"
    );
    assert!(!refused.to_string().contains("token-new"), "{refused}");
    // Set but naming none (an emptied file, a stray comma): refused, never
    // taken as "no tokens", which would open the source to every call.
    let file = secret_file("url-tokens", "\n");
    for env in [
        vec![("HOOKD_SOURCE_MOLLIE_URL_TOKENS", ",")],
        vec![("HOOKD_SOURCE_MOLLIE_URL_TOKENS_FILE", file.as_str())],
    ] {
        let refused = load_env(mollie, &env).expect_err("no token");
        assert!(refused.to_string().contains("names no token"), "{refused}");
    }
    let refused = load_env(&format!("{mollie}url_tokens = []\n"), &[]).expect_err("empty");
    assert!(refused.to_string().contains("names no token"), "{refused}");
}
