//! Braintree's notification XML as JSON and back. An element holding elements
//! is an object of them by tag name, one with `type="array"` an array of its
//! children, one with `nil="true"` null, any other its text; other attributes
//! (`type="datetime"`, `type="integer"`…) are left out, so every value is text,
//! as Braintree writes it. Writing a JSON value and reading it back gives the
//! same value, so a fixture is the payload hookd stores.

use serde_json::{Map, Value};

/// The root element of every notification.
pub const ROOT: &str = "notification";

/// The name array items are written under (reading drops it).
const ITEM: &str = "item";

/// Why a document is not a notification, or a JSON value cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    #[error("not XML: {0}")]
    NotXml(String),
    /// The root element is not `<notification>`.
    #[error("not a Braintree notification: the root element is <{0}>")]
    NotNotification(String),
    #[error("the notification holds no elements")]
    Empty,
    #[error("a Braintree body is a JSON object: the notification's elements")]
    NotObject,
    #[error("{0:?} is not an XML element name")]
    NotName(String),
    #[error("{name} holds {c:?}, which XML cannot carry")]
    NotXmlText { name: String, c: char },
    /// It would read back as the empty text.
    #[error("{0} is an empty object: write \"\" or leave it out")]
    EmptyObject(String),
    #[error("{name} is {value}: Braintree's values are text (write \"{value}\")")]
    NotText { name: String, value: Value },
}

/// The notification an XML document holds, as a JSON object of its children.
pub fn to_json(xml: &str) -> Result<Value, XmlError> {
    let document = roxmltree::Document::parse(xml).map_err(|e| XmlError::NotXml(e.to_string()))?;
    let root = document.root_element();
    if root.tag_name().name() != ROOT {
        return Err(XmlError::NotNotification(
            root.tag_name().name().to_string(),
        ));
    }
    match value(root) {
        Value::Object(map) => Ok(Value::Object(map)),
        _ => Err(XmlError::Empty),
    }
}

fn value(node: roxmltree::Node<'_, '_>) -> Value {
    if node.attribute("nil") == Some("true") {
        return Value::Null;
    }
    let children = node.children().filter(roxmltree::Node::is_element);
    if node.attribute("type") == Some("array") {
        return Value::Array(children.map(value).collect());
    }
    let mut map = Map::new();
    for child in children {
        let name = child.tag_name().name().to_string();
        let item = value(child);
        // Braintree lists repeat under type="array"; a repeat without one is kept too.
        match map.get_mut(&name) {
            Some(Value::Array(items)) => items.push(item),
            Some(first) => *first = Value::Array(vec![first.take(), item]),
            None => {
                map.insert(name, item);
            }
        }
    }
    if !map.is_empty() {
        return Value::Object(map);
    }
    Value::String(
        node.children()
            .filter(roxmltree::Node::is_text)
            .filter_map(|t| t.text())
            .collect(),
    )
}

/// A JSON object as the notification document Braintree would send.
pub fn from_json(notification: &Value) -> Result<String, XmlError> {
    if !notification.is_object() {
        return Err(XmlError::NotObject);
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    element(ROOT, notification, &mut out)?;
    out.push('\n');
    Ok(out)
}

fn element(name: &str, value: &Value, out: &mut String) -> Result<(), XmlError> {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let starts_well = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    if !starts_well || !name.chars().all(is_name_char) {
        return Err(XmlError::NotName(name.to_string()));
    }
    match value {
        Value::Null => out.push_str(&format!("<{name} nil=\"true\"/>")),
        Value::String(text) => {
            if let Some(c) = text.chars().find(|c| !allowed_in_xml(*c)) {
                return Err(XmlError::NotXmlText {
                    name: name.to_string(),
                    c,
                });
            }
            out.push_str(&format!("<{name}>"));
            escape(text, out);
            out.push_str(&format!("</{name}>"));
        }
        // It would read back as the empty text.
        Value::Object(map) if map.is_empty() => {
            return Err(XmlError::EmptyObject(name.to_string()));
        }
        Value::Object(map) => {
            out.push_str(&format!("<{name}>"));
            for (child, item) in map {
                element(child, item, out)?;
            }
            out.push_str(&format!("</{name}>"));
        }
        Value::Array(items) => {
            out.push_str(&format!("<{name} type=\"array\">"));
            for item in items {
                element(ITEM, item, out)?;
            }
            out.push_str(&format!("</{name}>"));
        }
        Value::Number(_) | Value::Bool(_) => {
            return Err(XmlError::NotText {
                name: name.to_string(),
                value: value.clone(),
            });
        }
    }
    Ok(())
}

/// XML 1.0's characters.
fn allowed_in_xml(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && !matches!(c, '\u{fffe}' | '\u{ffff}'))
}

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            // A carriage return would be read back as a line feed.
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}
