//! `/metrics` as Prometheus reads it, so tests compare values rather than match
//! text.

/// One sample of the text exposition format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// The text exposition format as Prometheus reads it: `# TYPE` and `# HELP`
/// lines per family, then `name{label="value",…} value` samples (label values
/// with `\\`, `\"` and `\n` escapes). Panics on anything else.
pub fn parse_exposition(text: &str) -> (Vec<(String, String)>, Vec<String>, Vec<Sample>) {
    let (mut types, mut helps, mut samples) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            types.push((name.to_string(), kind.to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.trim().is_empty(), "{line}");
            helps.push(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let name_end = line.find(['{', ' ']).expect("a value");
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            loop {
                let (start, c) = chars.next().expect("label or }");
                if c == '}' {
                    rest = &inner[start + 1..];
                    break;
                }
                if c == ',' {
                    continue;
                }
                let eq = inner[start..].find("=\"").expect("label=\"") + start;
                let key = inner[start..eq].to_string();
                while chars.peek().is_some_and(|(i, _)| *i <= eq + 1) {
                    chars.next();
                }
                let mut value = String::new();
                loop {
                    match chars.next().expect("closing quote") {
                        (_, '"') => break,
                        (_, '\\') => match chars.next().expect("escape") {
                            (_, 'n') => value.push('\n'),
                            (_, other) => value.push(other),
                        },
                        (_, other) => value.push(other),
                    }
                }
                labels.push((key, value));
            }
        }
        let value_text = rest.trim();
        let value = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    (types, helps, samples)
}

/// A parsed `/metrics` page: values are looked up by name and exact label set,
/// so `…} 1` can never be read off `…} 10`.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub text: String,
    pub types: Vec<(String, String)>,
    pub helps: Vec<String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let (types, helps, samples) = parse_exposition(text);
        Exposition {
            text: text.to_string(),
            types,
            helps,
            samples,
        }
    }

    /// The value of the series with exactly these labels, if it is exposed.
    pub fn series(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
            })
            .collect();
        assert!(
            found.len() <= 1,
            "{name}{labels:?} twice in:\n{}",
            self.text
        );
        found.first().map(|s| s.value)
    }

    /// The value of the series with exactly these labels; it must be exposed.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{}", self.text))
    }
}
