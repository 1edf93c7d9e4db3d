//! One conformance suite for every provider: each shipped source goes through
//! the same scenarios (see `scenarios`), driven by what its provider states —
//! its fixtures (`fixtures/<source>/`), the kind and payment row each fixture
//! documents (`fixtures/README.md`), the kinds it maps, the answer it expects,
//! the status it refuses with, the secrets it makes — never by a hand-written
//! copy per provider. What only one provider does stays in its own file.

mod scenarios;

use hookd::config::Source;
use hookd::providers::{self, Provider};
use hookd::signature::Secret;
use hookd::simulate::{Hints, SignedDelivery, sign_delivery};

use crate::support::TestApp;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// A fixture: its file's name and bytes, and the kind of each event it
/// carries, as documented (`None`: ignored).
#[derive(Debug, Clone)]
pub struct Fixture {
    pub name: String,
    pub bytes: Vec<u8>,
    pub kinds: Vec<Option<String>>,
    /// The provider's type of each event, as documented.
    pub types: Vec<String>,
}

/// A payment row: id, status, amount, refunded, currency, customer.
pub type Row = (String, String, i64, i64, Option<String>, Option<String>);

/// What the suite knows of one shipped source.
pub struct Case {
    pub source: &'static str,
    pub fixtures: Vec<Fixture>,
    /// The documented `payments` rows, by payment id.
    pub rows: Vec<Row>,
}

impl Case {
    /// The shipped source's fixtures and what `fixtures/README.md` documents of them.
    pub fn of(source: &'static str) -> Case {
        let readme = std::fs::read_to_string(format!("{MANIFEST}/fixtures/README.md"))
            .expect("fixtures/README.md");
        let heading = format!("## {source}\n");
        let start = readme.find(&heading).expect("a section for the source") + heading.len();
        let section = &readme[start..];
        let section = &section[..section.find("\n## ").unwrap_or(section.len())];
        let mut documented = Vec::new();
        let mut rows = Vec::new();
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let text = |cell: &str| {
                let cell = cell.trim_matches('`');
                (!cell.is_empty() && cell != "null").then(|| cell.to_string())
            };
            let first = text(cells[0]).expect("a first cell");
            if first.ends_with(".json") {
                let kinds: Vec<Option<String>> = cells[2]
                    .split(',')
                    .map(str::trim)
                    .map(|k| (k != "ignored").then(|| k.trim_matches('`').to_string()))
                    .collect();
                // The types are what the second cell writes as code.
                let types: Vec<String> = cells[1]
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(String::from)
                    .collect();
                documented.push((first, kinds, types));
            } else {
                let number = |cell: &str| cell.parse::<i64>().expect("an amount");
                rows.push((
                    first,
                    text(cells[1]).expect("a status"),
                    number(cells[2]),
                    number(cells[3]),
                    text(cells[4]),
                    text(cells[5]),
                ));
            }
        }
        rows.sort();
        documented.sort();
        let folder = format!("{MANIFEST}/fixtures/{source}");
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .expect("the source's fixtures")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        let listed: Vec<&String> = documented.iter().map(|(n, ..)| n).collect();
        assert_eq!(
            names.iter().collect::<Vec<_>>(),
            listed,
            "{source}: every fixture is documented"
        );
        let fixtures = documented
            .into_iter()
            .map(|(name, kinds, types)| {
                assert_eq!(kinds.len(), types.len(), "{source} {name}");
                Fixture {
                    bytes: std::fs::read(format!("{folder}/{name}")).expect("fixture"),
                    name,
                    kinds,
                    types,
                }
            })
            .collect();
        Case {
            source,
            fixtures,
            rows,
        }
    }
}

/// What the book's provider table (`docs/src/providers.md`) says of a
/// provider: the status a refused signature gets (401 unless it names
/// another) and the answer to a delivery taken (`JSON`, or the fixed body).
pub struct Documented {
    pub refused: u16,
    pub answer: String,
}

impl Documented {
    pub fn of(provider: &str) -> Documented {
        let table = std::fs::read_to_string(format!("{MANIFEST}/docs/src/providers.md"))
            .expect("docs/src/providers.md");
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{provider}` ")))
            .unwrap_or_else(|| panic!("{provider} has a row in the providers table"));
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let refused = row.split_once("(refused: ").map_or(401, |(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().expect("a status")
        });
        Documented {
            refused,
            answer: cells
                .last()
                .expect("an answer")
                .trim_matches('`')
                .to_string(),
        }
    }
}

/// The provider of an app's source.
pub fn provider_of(app: &TestApp, source: &str) -> &'static dyn Provider {
    let scheme = &app.settings().source(source).expect("a source").scheme;
    providers::named(scheme.name()).expect("a listed provider")
}

/// The provider of a shipped source.
pub fn provider_named(source: &str) -> &'static dyn Provider {
    let settings = crate::support::shipped_settings();
    let scheme = &settings.source(source).expect("a shipped source").scheme;
    providers::named(scheme.name()).expect("a listed provider")
}

/// `fixture` as the source's provider would send it, signed with `secret`
/// (its first, when `None`).
pub fn signed(
    app: &TestApp,
    source: &str,
    fixture: &Fixture,
    secret: Option<&Secret>,
) -> SignedDelivery {
    let mut configured: Source = app.settings().source(source).expect("source").clone();
    if let Some(secret) = secret {
        configured.secrets = vec![secret.clone()];
    }
    // A provider that names its events by file takes the name's first part.
    let by_file = provider_of(app, source).names_events_by_file();
    let named = fixture.name.split('.').next().unwrap_or_default();
    let hints = Hints {
        event_type: by_file.then_some(named),
        event_id: None,
    };
    sign_delivery(
        &configured,
        &fixture.bytes,
        hints,
        chrono::Utc::now().timestamp(),
    )
    .expect("sign")
}

/// Runs every scenario for each named shipped source, one test each; a
/// source whose provider takes secrets also has them rotated and forged.
macro_rules! conformance {
    (secrets: [$($source:ident),*], certificates: [$($signed:ident),*] $(,)?) => {
        $(conformance!(@every $source { conformance!(@secrets); });)*
        $(conformance!(@every $signed {});)*

        /// Every source the suite runs, by how its provider signs.
        const SECRETS: &[&str] = &[$(stringify!($source)),*];
        const CERTIFICATES: &[&str] = &[$(stringify!($signed)),*];
    };
    (@every $source:ident { $($more:tt)* }) => {
        mod $source {
            use super::scenarios;

            const SOURCE: &str = stringify!($source);

            #[tokio::test]
            async fn every_fixture_gives_its_documented_kinds_answers_and_payment_rows() {
                scenarios::documented_kinds_and_rows(SOURCE).await;
            }

            #[tokio::test]
            async fn the_fixtures_in_reverse_order_give_the_same_rows() {
                scenarios::any_order(SOURCE).await;
            }

            #[tokio::test]
            async fn a_resend_is_a_duplicate_with_the_first_answer() {
                scenarios::resend(SOURCE).await;
            }

            #[tokio::test]
            async fn slow_hookd_replay_of_the_fixtures_twice_and_anew() {
                scenarios::replay(SOURCE).await;
            }

            $($more)*
        }
    };
    (@secrets) => {
        #[tokio::test]
        async fn the_previous_and_the_newer_secret_are_both_taken_and_say_which() {
            scenarios::rotation(SOURCE).await;
        }

        #[tokio::test]
        async fn altered_or_unsigned_deliveries_are_refused_and_nothing_is_stored() {
            scenarios::tampering(SOURCE).await;
        }
    };
}

conformance!(
    secrets: [
        stripe, standard, github, shop, adyen, paddle, square, razorpay, checkout, gocardless,
        braintree
    ],
    certificates: [paypal],
);

/// Providers whose webhooks carry nothing to trust: hookd fetches what one
/// names from the provider's API at receipt (Mollie's `id=tr_…`), so nothing is
/// signed to replay, rotate or tamper with, and they have no shipped source
/// (the fetch needs an API key). `fetched_events.rs` runs each end to end
/// against a local server speaking its API.
const FETCHED: &[&str] = &["mollie"];

/// Every provider has a shipped source in the suite, filed by whether it takes
/// secrets, or fetches its events instead.
#[test]
fn every_provider_goes_through_the_suite() {
    let mut covered: Vec<&str> = Vec::new();
    for name in FETCHED {
        let provider = providers::REGISTRY
            .iter()
            .map(|e| e.provider)
            .find(|p| p.name() == *name)
            .expect("a registered provider");
        assert!(!provider.takes_secrets(), "{name}");
        assert!(
            provider.receipt_fetch(b"id=tr_conformance").is_some(),
            "{name} fetches what a webhook names"
        );
        covered.push(provider.name());
    }
    for (sources, takes_secrets) in [(SECRETS, true), (CERTIFICATES, false)] {
        for source in sources {
            let provider = provider_named(source);
            assert_eq!(provider.takes_secrets(), takes_secrets, "{source}");
            covered.push(provider.name());
        }
    }
    covered.sort();
    let mut every: Vec<&str> = providers::REGISTRY
        .iter()
        .map(|e| e.provider.name())
        .collect();
    every.sort();
    assert_eq!(covered, every);
}
