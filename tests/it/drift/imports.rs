//! Which of the crate's modules name which, read from `src/` as text: enough of
//! Rust's tokens to find every `crate::…` and `super::…` path (in `use` trees and
//! in code), with comments, strings and `#[cfg(test)]` items left out.
//!
//! The rule the graph follows:
//! - A node is a top-level module (`config`, `event`, …), except that `handlers`
//!   and `store` are layers of separate parts (one handler, one table's SQL), so
//!   each part is a node of its own (`handlers::payments`, `store::payments`) and
//!   the parent (`mod.rs`, its shared items such as `Handler` or `StoreError`) is
//!   another. Everything below a node (`handlers/payments/shape.rs`) is that node.
//!   `gateway` and `idempotency` are layers too: the configuration reads the
//!   gateway's route model (`gateway::config`) and the key rules
//!   (`idempotency::rules`), leaves, while the gateway's request flow and the
//!   actix-web wrapper sit above HTTP.
//! - An edge is a path a node's code names, to the node that path leads to. A
//!   parent naming its own part (`mod`, `pub use`, a call) is assembling it, not
//!   depending on it: that edge is left out, a part naming its parent is kept.
//! - The entry points are not nodes: `lib.rs` and `main.rs` only declare and call.
//!   (`builder.rs`, the library's `main`, is a node: it hands the command line a
//!   team's `cli::Extensions`, never the other way round.) A path through a
//!   `pub use` of `lib.rs` (`crate::Event`) leads to the module it re-exports.
//! - Tests are not the crate's structure: `#[cfg(test)]` items and the `tests.rs`
//!   files (each one a `#[cfg(test)] mod tests;`) are skipped.
//!
//! `super` is read as the file's parent module: the crate has no inline modules
//! besides tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules whose parts are nodes of their own.
const LAYERS: [&str; 4] = ["handlers", "store", "gateway", "idempotency"];
/// Files that are not nodes (see the module comment).
const ENTRY_POINTS: [&str; 2] = ["lib", "main"];

/// Where one edge was seen first: the file and line.
pub type Edges = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The module graph of the crate whose sources are in `src`.
pub fn graph(src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let module_of = |file: &Path| -> Vec<String> {
        let rel = file
            .strip_prefix(src)
            .expect("under src/")
            .with_extension("");
        let mut segments: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if segments.last().is_some_and(|s| s == "mod") {
            segments.pop();
        }
        segments
    };
    let counted = |module: &[String]| {
        !(module.len() == 1 && ENTRY_POINTS.contains(&module[0].as_str()))
            && module.last().is_some_and(|s| s != "tests")
    };
    let mut nodes = BTreeSet::new();
    for file in &files {
        let module = module_of(file);
        if counted(&module) {
            nodes.insert(node_name(&module));
        }
    }
    let re_exports = re_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut edges = Edges::new();
    for file in &files {
        let module = module_of(file);
        if !counted(&module) {
            continue;
        }
        let from = node_name(&module);
        let text = std::fs::read_to_string(file).expect("read a source file");
        let shown = file
            .strip_prefix(src.parent().unwrap_or(src))
            .unwrap_or(file);
        let where_ = |line: usize| format!("{}:{line}", shown.display());
        for (path, line) in paths(&without_tests(tokens(&text)), &module) {
            let path = match path.first().and_then(|name| re_exports.get(name)) {
                Some(module) => module.iter().chain(&path[1..]).cloned().collect(),
                None => path,
            };
            let Some(to) = node_of(&path, &nodes) else {
                continue;
            };
            if to == from || to.starts_with(&format!("{from}::")) {
                continue;
            }
            edges
                .entry(from.clone())
                .or_default()
                .entry(to)
                .or_insert_with(|| where_(line));
        }
    }
    edges
}

/// The graph's cycles: from each node, the first way back to it found (one whose
/// nodes an earlier cycle covers is left out), each as its nodes in order with the
/// first repeated at the end.
pub fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut seen_parts: Vec<BTreeSet<String>> = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![start.clone()];
        if let Some(cycle) = back_to(start, edges, &mut stack, &mut BTreeSet::new()) {
            let part: BTreeSet<String> = cycle.iter().cloned().collect();
            if !seen_parts.iter().any(|p| p.is_superset(&part)) {
                seen_parts.push(part);
                found.push(cycle);
            }
        }
    }
    found
}

/// A path from the top of `stack` back to `start`, depth first.
fn back_to(
    start: &str,
    edges: &Edges,
    stack: &mut Vec<String>,
    visited: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    let here = stack.last().expect("a node").clone();
    for next in edges.get(&here).into_iter().flat_map(BTreeMap::keys) {
        if next == start {
            let mut cycle = stack.clone();
            cycle.push(next.clone());
            return Some(cycle);
        }
        if visited.insert(next.clone()) {
            stack.push(next.clone());
            if let Some(cycle) = back_to(start, edges, stack, visited) {
                return Some(cycle);
            }
            stack.pop();
        }
    }
    None
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `handlers::payments` for anything under it, else the top-level module.
fn node_name(module: &[String]) -> String {
    match module {
        [layer, part, ..] if LAYERS.contains(&layer.as_str()) => format!("{layer}::{part}"),
        [top, ..] => top.clone(),
        [] => String::new(),
    }
}

/// The node a path from the crate root leads to, if it leads into one.
fn node_of(path: &[String], nodes: &BTreeSet<String>) -> Option<String> {
    let top = path.first()?;
    if let Some(part) = path.get(1) {
        let name = format!("{top}::{part}");
        if nodes.contains(&name) {
            return Some(name);
        }
    }
    nodes.contains(top).then(|| top.clone())
}

/// `lib.rs`'s `pub use` items: the name at the root → the path it stands for.
fn re_exports(lib: &str) -> BTreeMap<String, Vec<String>> {
    let tokens = tokens(lib);
    let mut out = BTreeMap::new();
    for (i, pair) in tokens.windows(2).enumerate() {
        if pair[0].0 == Token::Ident("pub".into()) && pair[1].0 == Token::Ident("use".into()) {
            for path in use_tree(&tokens, i + 2, Vec::new()).0 {
                if let Some(name) = path.last() {
                    out.insert(name.clone(), path[..path.len() - 1].to_vec());
                }
            }
        }
    }
    out
}

/// Each `crate::…` and `super::…` path of `tokens` (of a file of `module`), from
/// the crate root, with its line.
fn paths(tokens: &[(Token, usize)], module: &[String]) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    let is = |i: usize, t: &Token| tokens.get(i).is_some_and(|(x, _)| x == t);
    let mut i = 0;
    while i < tokens.len() {
        let starts = matches!(&tokens[i].0, Token::Ident(w) if w == "crate" || w == "super")
            && is(i + 1, &Token::Path)
            && !(i > 0 && is(i - 1, &Token::Path));
        if !starts {
            i += 1;
            continue;
        }
        // `super` in `a/b.rs` and in `a/b/mod.rs` (module `a::b`) is `a`.
        let mut root: Vec<String> = Vec::new();
        if tokens[i].0 == Token::Ident("super".into()) {
            root = module[..module.len().saturating_sub(1)].to_vec();
            while is(i + 2, &Token::Ident("super".into())) && is(i + 3, &Token::Path) {
                root.pop();
                i += 2;
            }
        }
        let line = tokens[i].1;
        let (found, next) = use_tree(tokens, i + 2, root);
        out.extend(found.into_iter().map(|p| (p, line)));
        i = next.max(i + 1);
    }
    out
}

/// The paths of a use tree (`a::b`, `a::{b, c::{d, self}}`, `a::*`) starting at
/// token `at`, each after `prefix`, and the token after the tree.
fn use_tree(
    tokens: &[(Token, usize)],
    mut at: usize,
    prefix: Vec<String>,
) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix;
    loop {
        match tokens.get(at).map(|(t, _)| t) {
            Some(Token::Ident(w)) if w == "self" => at += 1,
            Some(Token::Ident(w)) => {
                path.push(w.clone());
                at += 1;
            }
            Some(Token::Punct('{')) => {
                let mut out = Vec::new();
                at += 1;
                loop {
                    match tokens.get(at).map(|(t, _)| t) {
                        None => return (out, at),
                        Some(Token::Punct('}')) => return (out, at + 1),
                        Some(Token::Punct(',')) => at += 1,
                        _ => {
                            let (inner, next) = use_tree(tokens, at, path.clone());
                            out.extend(inner);
                            // Past an `as name` to the `,` or `}`.
                            at = next;
                            while let Some((t, _)) = tokens.get(at) {
                                if matches!(t, Token::Punct(',' | '}')) {
                                    break;
                                }
                                at += 1;
                            }
                        }
                    }
                }
            }
            _ => return (vec![path], at),
        }
        if tokens.get(at).map(|(t, _)| t) == Some(&Token::Path) {
            at += 1;
        } else {
            return (vec![path], at);
        }
    }
}

/// `tokens` without the items under `#[cfg(test)]`: each runs to its `;` or to
/// the `}` closing its first `{`.
fn without_tests(tokens: Vec<(Token, usize)>) -> Vec<(Token, usize)> {
    let attribute: Vec<Token> = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ]
    .to_vec();
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let here: Vec<Token> = tokens[i..]
            .iter()
            .take(attribute.len())
            .map(|(t, _)| t.clone())
            .collect();
        if here != attribute {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i += attribute.len();
        let mut depth = 0usize;
        while let Some((token, _)) = tokens.get(i) {
            i += 1;
            match token {
                Token::Punct('(' | '[' | '{') => depth += 1,
                Token::Punct(')' | ']') => depth = depth.saturating_sub(1),
                Token::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                Token::Punct(';') if depth == 0 => break,
                _ => {}
            }
        }
    }
    out
}

/// Rust's tokens, as far as paths need them, each with its line: identifiers,
/// `::` and single punctuation; comments, strings and characters are dropped.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' || (matches!(c, 'r' | 'b') && raw_string_at(&chars, i).is_some()) {
            // A string, raw (`r#"…"#`, `br"…"`) or not, escapes and all.
            let (hashes, open) = raw_string_at(&chars, i).unwrap_or((None, i));
            i = open + 1;
            while i < chars.len() {
                line += usize::from(chars[i] == '\n');
                match hashes {
                    None if chars[i] == '\\' => {
                        line += usize::from(at(i + 1) == '\n');
                        i += 2;
                    }
                    None if chars[i] == '"' => {
                        i += 1;
                        break;
                    }
                    Some(n) if chars[i] == '"' && (1..=n).all(|k| at(i + k) == '#') => {
                        i += n + 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
        } else if c == '\'' {
            // A character (`'x'`, `'\n'`, `'\''`) or a lifetime (`'a`).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Token::Path, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// At `i`, the start of a string literal other than a plain `"`: its `#`s
/// (`None` when not raw) and where its opening quote is.
fn raw_string_at(chars: &[char], i: usize) -> Option<(Option<usize>, usize)> {
    let before_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    if !before_ok {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
        if chars.get(j) == Some(&'"') {
            return Some((None, j));
        }
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((Some(hashes), j))
}

#[test]
fn the_scanner_reads_paths_the_way_rust_does() {
    let text = r##"
        use crate::a::{b, c::{self, D}, e as f};
        // use crate::commented::Out;
        /* crate::blocked::Out */
        let s = "crate::quoted::Out"; let r = r#"crate::raw::Out"#; let q = '"';
        fn g<'x>(v: &'x crate::h::I) -> super::j::K { crate::l::m::<T>() }
        #[cfg(test)]
        mod tests { use crate::tested::Out; }
        pub(crate) fn n() {}
    "##;
    let module = ["top".to_string(), "here".to_string()];
    let found: Vec<String> = paths(&without_tests(tokens(text)), &module)
        .into_iter()
        .map(|(p, _)| p.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "a::b",
            "a::c",
            "a::c::D",
            "a::e",
            "h::I",
            "top::j::K",
            "l::m"
        ]
    );
}
