//! Both fingerprints of a payload, and whether it holds a NUL, in one walk: the
//! canonical JSON (keys sorted, no whitespace) is written once, and the stable
//! fingerprint hashes the same bytes with the ignored members cut out, so no
//! second copy of the payload is built. Byte for byte the form hookd always
//! hashed (serde_json's own escaping and number forms): fingerprints stored by
//! an older hookd still match.

use std::ops::Range;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// What one walk over a payload found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprints {
    /// SHA-256 of the canonical JSON of the whole payload.
    pub full: [u8; 32],
    /// The same without the members the ignore list names.
    pub stable: [u8; 32],
    /// A NUL character in a string or key (jsonb cannot hold one).
    pub has_nul: bool,
    /// A number that is not an integer of 64 bits: its text may be one
    /// PostgreSQL's numeric refuses (`1e-20000`, which serde reads as 0).
    pub has_float: bool,
}

impl Fingerprints {
    /// Walks `payload` once. `ignore` holds JSON pointers; absent ones are skipped.
    pub fn of_payload(payload: &Value, ignore: &[String]) -> Self {
        let Some(paths) = member_paths(payload, ignore) else {
            // A pointer through an array: removing an item shifts the ones after
            // it, which the cut-out walk does not follow; rare enough to copy for.
            let mut walk = Walk::new(&[]);
            walk.value(payload, &[]);
            let full = Sha256::digest(&walk.out).into();
            let stable = if ignore.iter().all(|p| payload.pointer(p).is_none()) {
                full
            } else {
                let mut trimmed = payload.clone();
                super::remove_pointers(&mut trimmed, ignore);
                Self::of_payload(&trimmed, &[]).full
            };
            return Self {
                full,
                stable,
                has_nul: walk.has_nul,
                has_float: walk.has_float,
            };
        };
        let all: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
        let mut walk = Walk::new(&all);
        walk.value(payload, &all);
        let Some(first) = walk.cuts.first() else {
            let full = Sha256::digest(&walk.out).into();
            return Self {
                full,
                stable: full,
                has_nul: walk.has_nul,
                has_float: walk.has_float,
            };
        };
        // The bytes before the first cut are hashed once, for both.
        let mut stable = Sha256::new();
        stable.update(&walk.out[..first.start]);
        let mut full = stable.clone();
        full.update(&walk.out[first.start..]);
        // Cuts come in the order written and never overlap.
        let mut at = first.end;
        for cut in &walk.cuts[1..] {
            stable.update(&walk.out[at..cut.start]);
            at = cut.end;
        }
        stable.update(&walk.out[at..]);
        let (full, stable) = (full.finalize().into(), stable.finalize().into());
        Self {
            full,
            stable,
            has_nul: walk.has_nul,
            has_float: walk.has_float,
        }
    }
}

/// The ignore list as paths of object members present in `payload`, or `None`
/// when one of them passes through (or names an item of) an array.
fn member_paths(payload: &Value, ignore: &[String]) -> Option<Vec<Vec<String>>> {
    let mut paths = Vec::new();
    for pointer in ignore {
        let Some(rest) = pointer.strip_prefix('/') else {
            continue; // "" names the whole payload, which is never removed
        };
        let segments: Vec<String> = rest
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        let mut at = payload;
        let mut present = true;
        for segment in &segments {
            match at {
                Value::Object(map) => match map.get(segment) {
                    Some(next) => at = next,
                    None => {
                        present = false;
                        break;
                    }
                },
                Value::Array(_) => return None,
                _ => {
                    present = false;
                    break;
                }
            }
        }
        if present && !paths.contains(&segments) {
            paths.push(segments);
        }
    }
    Some(paths)
}

struct Walk {
    out: Vec<u8>,
    /// Byte ranges of `out` the stable fingerprint leaves out.
    cuts: Vec<Range<usize>>,
    has_nul: bool,
    has_float: bool,
}

impl Walk {
    fn new(paths: &[&[String]]) -> Self {
        Walk {
            out: Vec::with_capacity(2048),
            cuts: Vec::with_capacity(paths.len()),
            has_nul: false,
            has_float: false,
        }
    }

    /// Writes `value`; `paths` are the ignored members' paths below it.
    fn value(&mut self, value: &Value, paths: &[&[String]]) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                // serde_json's map is sorted already unless a crate in the build
                // turned on its insertion order: sort only then.
                if !entries.is_sorted_by(|a, b| a.0 <= b.0) {
                    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                }
                let mut kept_before = false;
                self.out.push(b'{');
                for (i, (key, item)) in entries.iter().enumerate() {
                    let start = self.out.len();
                    if i > 0 {
                        self.out.push(b',');
                    }
                    let cut = paths.iter().any(|p| p.len() == 1 && &p[0] == *key);
                    self.string(key);
                    self.out.push(b':');
                    if paths.is_empty() || cut {
                        self.value(item, &[]);
                    } else {
                        let below: Vec<&[String]> = paths
                            .iter()
                            .filter(|p| p.len() > 1 && &p[0] == *key)
                            .map(|p| &p[1..])
                            .collect();
                        self.value(item, &below);
                    }
                    if !cut {
                        kept_before = true;
                        continue;
                    }
                    // A member cut out takes one comma with it: its own (before
                    // it) when a kept member precedes it, else the next member's.
                    let range = if kept_before {
                        start..self.out.len()
                    } else {
                        let next_comma = usize::from(i + 1 < entries.len());
                        start + usize::from(i > 0)..self.out.len() + next_comma
                    };
                    self.cuts.push(range);
                }
                self.out.push(b'}');
            }
            Value::Array(items) => {
                self.out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.value(item, &[]);
                }
                self.out.push(b']');
            }
            Value::String(s) => self.string(s),
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Number(n) => {
                self.has_float |= n.is_f64();
                // Writing a number into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut self.out, n);
            }
        }
    }

    fn string(&mut self, s: &str) {
        let plain = s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
        if plain {
            self.out.push(b'"');
            self.out.extend_from_slice(s.as_bytes());
            self.out.push(b'"');
            return;
        }
        self.has_nul |= s.as_bytes().contains(&0);
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.out, s);
    }
}
