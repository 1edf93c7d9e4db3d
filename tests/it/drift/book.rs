//! The README and the book (`docs/src`, an mdBook) checked against the files and
//! the code: every relative link leads to a file and, with `#anchor`, to a
//! heading that exists; every page is in `SUMMARY.md`; and the configuration
//! reference names exactly the keys and environment variables hookd takes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use hookd::config::Settings;
use hookd::providers::REGISTRY;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// Every `.md` file under `dir`, sorted.
fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a book folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            pages(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// A line without its inline code spans (`` `…` ``).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join("")
}

/// The targets of the inline links (`[text](target)`) of a Markdown text.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((n, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// The text a heading shows: code marks, emphasis and link targets left out.
fn heading_text(raw: &str) -> String {
    let mut text = String::new();
    let mut rest = raw;
    // [text](target) shows its text only.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.replace('`', "")
}

/// mdBook's id for a heading: lower case, each space a `-`, letters, digits,
/// `_` and `-` kept, everything else dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page's headings, a repeated one numbered as mdBook does
/// (`name`, `name-1`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ids = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = anchor(&heading_text(line[hashes..].trim().trim_end_matches('#')));
        let count = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *count == 0 {
            id.clone()
        } else {
            format!("{id}-{count}")
        });
        *count += 1;
    }
    ids
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with each relative link of `file` (whose text is `text`): a
/// file that does not exist, a heading that does not, or — from the book — a
/// file outside the book, which the built book would not have.
fn broken_links(file: &Path, text: &str, inside: Option<&Path>) -> Vec<String> {
    let shown = file
        .strip_prefix(root())
        .unwrap_or(file)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (line, target) in links(text) {
        let external = target.contains("://") || target.starts_with("mailto:");
        if external || target.is_empty() {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            normal(&file.parent().expect("a folder").join(path))
        };
        let at = format!("{shown}:{line}: ({target})");
        if let Some(inside) = inside
            && !resolved.starts_with(inside)
        {
            broken.push(format!("{at} leads out of the book"));
            continue;
        }
        if !resolved.exists() {
            broken.push(format!("{at}: no file {}", resolved.display()));
            continue;
        }
        let Some(fragment) = fragment else { continue };
        let is_page = resolved.extension().is_some_and(|e| e == "md");
        let heading_there = is_page
            && anchors(&std::fs::read_to_string(&resolved).expect("a page")).contains(fragment);
        if !heading_there {
            broken.push(format!("{at}: no heading #{fragment} there"));
        }
    }
    broken
}

#[test]
fn every_link_of_the_readme_and_the_book_leads_somewhere() {
    let book = book();
    let mut files = Vec::new();
    pages(&book, &mut files);
    assert!(files.len() > 20, "the book has its pages: {files:?}");
    let mut broken = Vec::new();
    let readme = root().join("README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md");
    assert!(links(&text).len() > 10, "the README links into the book");
    broken.extend(broken_links(&readme, &text, None));
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a page");
        broken.extend(broken_links(file, &text, Some(&book)));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The checker itself: a link to a missing page, a missing heading or out of
/// the book is found; the rule for anchors is mdBook's.
#[test]
fn the_link_check_finds_broken_links() {
    let page = book().join("receiving.md");
    let text = "See [a](providers/stripe.md), [b](providers/nope.md),\n\
                [c](#group-commit), [d](#no-such-heading), [e](../../README.md),\n\
                `[f](not-a-link.md)` and [g](https://example.com/x.md).\n\
                ```\n[h](inside-code.md)\n```\n";
    let broken = broken_links(&page, text, Some(&book()));
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].contains("(providers/nope.md): no file"),
        "{broken:#?}"
    );
    assert!(
        broken[1].contains("no heading #no-such-heading"),
        "{broken:#?}"
    );
    assert!(broken[2].contains("leads out of the book"), "{broken:#?}");
    assert_eq!(
        anchor(&heading_text("`[[gateway.routes]]`")),
        "gatewayroutes"
    );
    assert_eq!(
        anchor(&heading_text("Choices where providers leave room")),
        "choices-where-providers-leave-room"
    );
    assert_eq!(
        anchor(&heading_text("Adyen (`scheme = \"adyen\"`)")),
        "adyen-scheme--adyen"
    );
    let twice = anchors("# A\n## Notes\n## Notes\n```\n# Not a heading\n```\n");
    assert_eq!(twice, ["a", "notes", "notes-1"].map(String::from).into());
}

/// mdBook renders only what `SUMMARY.md` lists: a page missing from it would
/// never be read, and one it lists but nobody wrote fails the build.
#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let book = book();
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&summary)
        .into_iter()
        .map(|(_, target)| normal(&book.join(target)))
        .collect();
    let mut files = Vec::new();
    pages(&book, &mut files);
    let unlisted: Vec<_> = files
        .iter()
        .filter(|f| !f.ends_with("SUMMARY.md") && !listed.contains(*f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages SUMMARY.md leaves out: {unlisted:?}"
    );
}

/// The configuration reference's tables: for each section heading, the keys
/// its tables name in their first column (a key of one scheme with its scheme
/// from the second).
fn documented_keys(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for (_, line) in prose(text) {
        if let Some(heading) = line.strip_prefix("## ").or(line.strip_prefix("### ")) {
            section = heading_text(heading).trim().to_string();
            continue;
        }
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = row.split(" | ").collect();
        let key = cells[0].trim_end_matches('`').to_string();
        let key = match (section.as_str(), cells.get(1)) {
            ("Keys of one scheme", Some(scheme)) => {
                format!("{}.{key}", scheme.trim().trim_matches('`'))
            }
            _ => key,
        };
        sections.entry(section.clone()).or_default().insert(key);
    }
    sections
}

/// The keys a table accepts, as the code says when it meets one it does not
/// (`unknown field `x`, expected one of `a`, `b`…`).
fn accepted_keys(toml: &str) -> BTreeSet<String> {
    let refused = Settings::from_toml("hookd.toml", toml, &HashMap::new())
        .expect_err("an unknown key is refused");
    let message = &refused.problem;
    let expected = message
        .split_once("expected ")
        .unwrap_or_else(|| panic!("{}: {message}", refused.key))
        .1;
    let keys: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect();
    assert!(!keys.is_empty(), "{message}");
    keys
}

#[test]
fn the_configuration_reference_names_every_key_and_no_other() {
    let text = std::fs::read_to_string(book().join("configuration.md")).expect("configuration.md");
    let documented = documented_keys(&text);
    let source = "[[sources]]\nzz_unknown = 1\nname = \"s\"\nscheme = \"stripe\"\n\
                  secrets = [\"whsec_a-secret-of-this-test-0123456789\"]\n";
    let code: [(&str, BTreeSet<String>); 7] = [
        ("Top-level keys", accepted_keys("zz_unknown = 1\n")),
        (
            "[[sources]]",
            accepted_keys(source)
                .into_iter()
                .chain(reconcile_keys())
                .collect(),
        ),
        (
            "[[forwards]]",
            accepted_keys("[[forwards]]\nzz_unknown = 1\n"),
        ),
        ("[admin]", accepted_keys("[admin]\nzz_unknown = 1\n")),
        (
            "[[admin.tokens]]",
            accepted_keys("[[admin.tokens]]\nzz_unknown = 1\n"),
        ),
        ("[gateway]", accepted_keys("[gateway]\nzz_unknown = 1\n")),
        (
            "[[gateway.routes]]",
            accepted_keys("[[gateway.routes]]\nzz_unknown = 1\n"),
        ),
    ];
    let mut wrong = Vec::new();
    for (section, keys) in &code {
        let written = documented.get(*section).cloned().unwrap_or_default();
        for key in keys.difference(&written) {
            wrong.push(format!("{section}: `{key}` is taken but not documented"));
        }
        for key in written.difference(keys) {
            wrong.push(format!("{section}: `{key}` is documented but not taken"));
        }
    }
    let scheme_keys: BTreeSet<String> = REGISTRY
        .iter()
        .flat_map(|e| e.keys.iter().map(|k| format!("{}.{k}", e.provider.name())))
        .collect();
    assert!(scheme_keys.contains("hmac.signature_header"));
    let written = documented
        .get("Keys of one scheme")
        .cloned()
        .unwrap_or_default();
    for key in scheme_keys.difference(&written) {
        wrong.push(format!(
            "Keys of one scheme: `{key}` is taken but not documented"
        ));
    }
    for key in written.difference(&scheme_keys) {
        wrong.push(format!(
            "Keys of one scheme: `{key}` is documented but not taken"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The environment variables hookd's code reads, as written in it: string
/// literals naming one (`HOOKD_*`, `OTEL_*`, `DATABASE_URL`, `RUST_LOG`), with
/// a `format!` placeholder as `<NAME>`, outside tests and compile-time `env!`.
fn variables_read() -> BTreeSet<String> {
    let mut files = Vec::new();
    crate::drift::imports::rust_files(&root().join("src"), &mut files);
    files.push(root().join("build.rs"));
    let mut names = BTreeSet::new();
    for file in files {
        let name = file.file_name().expect("a name").to_string_lossy();
        let in_tests_folder = file
            .strip_prefix(root().join("src"))
            .is_ok_and(|path| path.components().any(|c| c.as_os_str() == "tests"));
        if name == "tests.rs" || name.ends_with("_tests.rs") || in_tests_folder {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("source");
        let code = text.split("#[cfg(test)]").next().expect("text");
        let parts: Vec<&str> = code.split('"').collect();
        for (i, literal) in parts.iter().enumerate().skip(1).step_by(2) {
            if parts[i - 1].ends_with("env!(") {
                continue;
            }
            let named = literal.starts_with("HOOKD_")
                || literal.starts_with("OTEL_")
                || ["DATABASE_URL", "RUST_LOG"].contains(literal);
            let mut shape = String::new();
            let mut rest = *literal;
            while let Some(open) = rest.find('{') {
                shape.push_str(&rest[..open]);
                let Some(close) = rest[open..].find('}') else {
                    break;
                };
                shape.push_str("<NAME>");
                rest = &rest[open + close + 1..];
            }
            shape.push_str(rest);
            let plain = shape
                .replace("<NAME>", "")
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            // Prefixes (`HOOKD_SOURCE_`) and names built of two parts are
            // not variables on their own.
            if named && plain && !shape.ends_with('_') && !shape.contains("<NAME><NAME>") {
                names.insert(shape);
            }
        }
    }
    // `HOOKD_SOURCE_<NAME>_<KEY>` for each credential key of a scheme.
    let config =
        std::fs::read_to_string(root().join("src/config/load.rs")).expect("config/load.rs");
    let credentials = config
        .split_once("const CREDENTIAL_KEYS")
        .and_then(|(_, rest)| rest.split_once('='))
        .and_then(|(_, rest)| rest.split_once(';'))
        .expect("CREDENTIAL_KEYS in src/config/load.rs")
        .0;
    for key in credentials.split('"').skip(1).step_by(2) {
        names.insert(format!("HOOKD_SOURCE_<NAME>_{}", key.to_ascii_uppercase()));
    }
    // And for each key of a source's reconciling.
    for key in reconcile_keys() {
        names.insert(format!("HOOKD_SOURCE_<NAME>_{}", key.to_ascii_uppercase()));
    }
    names
}

/// The keys a source takes for reconciling with its provider's API
/// (`KEYS` in `src/config/reconcile.rs`: read by the source's table as a whole,
/// so serde's message does not list them).
fn reconcile_keys() -> Vec<String> {
    let text =
        std::fs::read_to_string(root().join("src/config/reconcile.rs")).expect("reconcile.rs");
    let list = text
        .split_once("pub const KEYS")
        .and_then(|(_, rest)| rest.split_once('='))
        .and_then(|(_, rest)| rest.split_once(';'))
        .expect("KEYS in src/config/reconcile.rs")
        .0;
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Whether `written` (maybe `…_FILE`, maybe with a source's name in place of
/// `<NAME>`) is the variable `read`.
fn names_variable(written: &str, read: &str) -> bool {
    let plain = written.strip_suffix("_FILE");
    names_plain_variable(written, read) || plain.is_some_and(|p| names_plain_variable(p, read))
}

fn names_plain_variable(written: &str, read: &str) -> bool {
    match read.split_once("<NAME>") {
        None => written == read,
        Some((before, after)) => written
            .strip_prefix(before)
            .and_then(|rest| rest.strip_suffix(after))
            .is_some_and(|name| {
                name == "<NAME>"
                    || !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            }),
    }
}

#[test]
fn the_configuration_reference_names_every_variable_and_no_other() {
    let read = variables_read();
    for expected in [
        "DATABASE_URL",
        "HOOKD_CONFIG",
        "HOOKD_GATEWAY_LISTEN",
        "HOOKD_REVISION",
        "HOOKD_SOURCE_<NAME>_SECRETS",
        "HOOKD_SOURCE_<NAME>_BASIC_AUTH",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        assert!(read.contains(expected), "{expected} not found in {read:?}");
    }
    let text = std::fs::read_to_string(book().join("configuration.md")).expect("configuration.md");
    let section = text
        .split_once("\n## Environment variables\n")
        .expect("a section of environment variables")
        .1;
    let section = section.split("\n## ").next().expect("text");
    let mut written = BTreeSet::new();
    for line in section.lines() {
        for (i, _) in line.match_indices(['H', 'O', 'D', 'R']) {
            let rest = &line[i..];
            let starts = ["HOOKD_", "OTEL_", "DATABASE_URL", "RUST_LOG"]
                .iter()
                .any(|p| rest.starts_with(p));
            let boundary = line[..i]
                .chars()
                .last()
                .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_' && c != '<');
            if starts && boundary {
                let name: String = rest
                    .chars()
                    .take_while(|c| {
                        c.is_ascii_uppercase() || c.is_ascii_digit() || "_<>".contains(*c)
                    })
                    .collect();
                written.insert(name);
            }
        }
    }
    let mut wrong = Vec::new();
    for variable in &read {
        if !written.contains(variable) {
            wrong.push(format!("{variable} is read but not documented"));
        }
    }
    for name in &written {
        if !read.iter().any(|r| names_variable(name, r)) {
            wrong.push(format!("{name} is documented but never read"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
