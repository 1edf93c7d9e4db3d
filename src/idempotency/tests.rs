use super::*;

#[test]
fn a_key_is_1_to_255_visible_characters_or_a_quoted_string_of_them() {
    assert_eq!(
        parse_key(b"8e03978e-40d5-43e8").as_deref(),
        Ok("8e03978e-40d5-43e8")
    );
    assert_eq!(parse_key(b"\"8e03978e\"").as_deref(), Ok("8e03978e"));
    assert_eq!(parse_key(br#""a\"b\\c""#).as_deref(), Ok(r#"a"b\c"#));
    assert_eq!(parse_key(&[b'k'; 255]).map(|k| k.len()), Ok(255));
    for bad in [
        &b""[..],
        b"\"\"",
        &[b'k'; 256],
        b"two words",
        b"tab\there",
        "caf\u{e9}".as_bytes(),
        b"\"unclosed",
        b"\"x\"trailing",
        b"\"bad\\escape\"",
        b"\"two words\"",
    ] {
        assert_eq!(parse_key(bad), Err(Refusal::KeyInvalid), "{bad:?}");
    }
}

#[test]
fn the_fingerprint_ignores_key_order_whitespace_and_ignored_fields_only() {
    let ignore: Vec<String> = vec!["/client_time".into()];
    let print =
        |body: &str, query: &str| fingerprint("POST", "/payments", query, body.as_bytes(), &ignore);
    let first = print(
        r#"{"amount": 100, "currency": "EUR", "client_time": 1}"#,
        "",
    );
    assert_eq!(
        first,
        print(r#"{"currency":"EUR","client_time":2,"amount":100}"#, "")
    );
    assert_ne!(first, print(r#"{"amount": 101, "currency": "EUR"}"#, ""));
    assert_ne!(
        first,
        print(r#"{"amount": 100, "currency": "EUR"}"#, "dry_run=1")
    );
    assert_ne!(
        first,
        fingerprint(
            "PUT",
            "/payments",
            "",
            br#"{"amount":100,"currency":"EUR"}"#,
            &ignore
        )
    );
    // Not JSON: the raw bytes.
    assert_ne!(print("amount=100", ""), print("amount=100 ", ""));
    // A member named twice, or a number no double holds: the raw bytes too, so
    // a body an upstream may read otherwise is never another's copy.
    let twice = print(r#"{"amount": 1, "amount": 1000}"#, "");
    assert_ne!(twice, print(r#"{"amount": 1000}"#, ""));
    assert_ne!(twice, print(r#"{"amount":1,"amount":1000}"#, ""));
    assert_ne!(
        print(r#"{"amount": 100000000000000000001}"#, ""),
        print(r#"{"amount": 100000000000000000000}"#, "")
    );
    // Notation alone is no difference.
    assert_eq!(
        print(r#"{"amount": 1.50}"#, ""),
        print(r#"{"amount":1.5}"#, "")
    );
}

#[test]
fn statuses_that_say_nothing_was_done_release_the_key() {
    for status in [500, 502, 503, 504, 408, 429] {
        assert_eq!(settle(status), Settle::Release, "{status}");
    }
    for status in [200, 201, 202, 204, 301, 400, 401, 402, 404, 409, 422] {
        assert_eq!(settle(status), Settle::Store, "{status}");
    }
}

#[test]
fn an_operation_id_is_op_and_a_version_4_uuid() {
    let id = new_operation_id();
    let uuid = id.strip_prefix("op_").expect("op_");
    let groups: Vec<&str> = uuid.split('-').collect();
    assert_eq!(
        groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12]
    );
    assert!(groups[2].starts_with('4'));
    assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    assert_ne!(id, new_operation_id());
}

fn row(state: KeyState, locked: bool) -> StoredKey {
    StoredKey {
        id: 1,
        fingerprint: vec![1; 32],
        state,
        operation_id: "op_x".into(),
        locked,
        answer: (state == KeyState::Completed).then(|| StoredAnswer {
            status: 201,
            headers: vec![],
            body: b"{}".to_vec(),
            body_omitted: false,
        }),
    }
}

#[test]
fn a_row_that_could_not_be_claimed_is_judged_by_the_table() {
    let same = [1; 32];
    let refused = |r| Decision::Answer(Claim::Refused(r, Some("op_x".to_string())));
    // Another fingerprint: 422 whatever the state.
    for state in KeyState::ALL {
        assert_eq!(
            decide(&row(state, true), &[2; 32], true),
            refused(Refusal::Reused)
        );
    }
    assert!(matches!(
        decide(&row(KeyState::Completed, false), &same, true),
        Decision::Answer(Claim::Replay(_, _))
    ));
    assert_eq!(
        decide(&row(KeyState::InProgress, true), &same, true),
        refused(Refusal::InProgress)
    );
    assert_eq!(
        decide(&row(KeyState::InProgress, false), &same, false),
        Decision::MarkUnknown
    );
    assert_eq!(
        decide(&row(KeyState::Unknown, false), &same, false),
        refused(Refusal::OutcomeUnknown)
    );
    // What the claim should have taken: it changed meanwhile, so claim again.
    for (state, locked, resend) in [
        (KeyState::Unknown, false, true),
        (KeyState::InProgress, false, true),
        (KeyState::Released, false, false),
    ] {
        assert_eq!(
            decide(&row(state, locked), &same, resend),
            Decision::ClaimAgain
        );
    }
}
