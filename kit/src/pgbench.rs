//! The ingest benchmark's baseline: hookd's per-event transaction (the dedupe
//! INSERT, a savepoint, the payment merge, the attempt row) as a pgbench script
//! made from the store's own statements, with pgbench expressions in place of
//! their parameters — so the baseline runs what hookd runs and cannot drift.

use hookd::store::events::{APPEND_ATTEMPTS, RECORD_DELIVERY};
use hookd::store::payments::MERGE_PAYMENT;

/// A unique id per transaction: the run, the pgbench client and its counter.
const EVENT_ID: &str = "('evt_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text)";
const PAYMENT_ID: &str = "('pi_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text)";
const CUSTOMER_ID: &str = "'cus_QhT4nW8xY2kLpR'";
/// A Stripe-Signature header as hookd keeps it: a timestamp and one HMAC.
const SIGNATURE_HEADERS: &str = "'{\"stripe-signature\": \"t=1726050000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd\"}'::jsonb";

/// What a transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// The dedupe INSERT alone.
    Insert,
    /// The whole per-event transaction of a new `payment_succeeded` event.
    Full,
}

impl Script {
    pub fn name(self) -> &'static str {
        match self {
            Script::Insert => "insert",
            Script::Full => "full",
        }
    }

    /// The script, reading the variables `run`, `n` (counter, start at 0),
    /// `payload` (the body with `@EVT@` and `@PI@` for the ids) and `sha` (hex).
    pub fn text(self) -> String {
        let body =
            format!("replace(replace(:payload::text, '@EVT@', {EVENT_ID}), '@PI@', {PAYMENT_ID})");
        let record = with_values(
            RECORD_DELIVERY,
            &[
                "'stripe'",
                EVENT_ID,
                "'payment_intent.succeeded'",
                "'payment_succeeded'",
                "'processed'",
                &format!("{body}::jsonb"),
                "decode(:sha::text, 'hex')",
                "1",
                PAYMENT_ID,
                CUSTOMER_ID,
                "1",
                &format!("convert_to({body}, 'UTF8')"),
                SIGNATURE_HEADERS,
                "decode(:sha::text, 'hex')",
            ],
        );
        match self {
            Script::Insert => format!("\\set n :n + 1\n{record};\n"),
            Script::Full => {
                let merge = with_values(
                    MERGE_PAYMENT,
                    &[
                        "'stripe'",
                        PAYMENT_ID,
                        "true",
                        "false",
                        "false",
                        "2000",
                        "NULL",
                        "'usd'",
                        CUSTOMER_ID,
                    ],
                );
                let attempt = with_values(
                    APPEND_ATTEMPTS,
                    &[
                        "ARRAY[:id::bigint]",
                        "ARRAY[1]",
                        "ARRAY['payment_succeeded']",
                        "ARRAY[now()]",
                        "ARRAY[now()]",
                        "ARRAY['processed']",
                        "ARRAY[NULL::text]",
                        "ARRAY[NULL::int]",
                        "ARRAY[NULL::text]",
                    ],
                );
                format!(
                    "\\set n :n + 1\nBEGIN;\n{record} \\gset\nSAVEPOINT handler;\n{merge};\n\
                     RELEASE SAVEPOINT handler;\n{attempt};\nCOMMIT;\n"
                )
            }
        }
    }
}

/// `sql` with `$1`, `$2`, … replaced by `values[0]`, `values[1]`, …; panics
/// unless every parameter has a value and every value a parameter.
pub fn with_values(sql: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(sql.len() * 2);
    let mut used = vec![false; values.len()];
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let n: usize = digits
            .parse()
            .unwrap_or_else(|_| panic!("a `$` that is not a parameter in {sql}"));
        let value = values
            .get(n - 1)
            .unwrap_or_else(|| panic!("${n} has no value: the statement changed"));
        used[n - 1] = true;
        out.push_str(value);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    if let Some(unused) = used.iter().position(|u| !u) {
        panic!(
            "value {} has no ${}: the statement changed",
            unused + 1,
            unused + 1
        );
    }
    out
}
