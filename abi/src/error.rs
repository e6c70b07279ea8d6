//! The decoding error: a path into the value and a message saying what to fix.

use std::fmt;

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A refusal to decode, e.g. `$.items[3].price: expected Decimal, found
/// string "9.99"`.
///
/// The path is built while the error unwinds (innermost segment first), so a
/// successful decode pays nothing for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    rev_path: Vec<Segment>,
    message: String,
}

impl DecodeError {
    pub fn new(message: impl Into<String>) -> DecodeError {
        DecodeError {
            rev_path: Vec::new(),
            message: message.into(),
        }
    }

    /// The error as seen from the object holding it under `key`.
    pub fn at_key(mut self, key: &str) -> DecodeError {
        self.rev_path.push(Segment::Key(key.to_string()));
        self
    }

    /// The error as seen from the array holding it at `index`.
    pub fn at_index(mut self, index: usize) -> DecodeError {
        self.rev_path.push(Segment::Index(index));
        self
    }

    /// The path, outermost first.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.rev_path.iter().rev()
    }

    /// The path in JSONPath form: `$`, `$.a[2]`, `$["odd key"]`.
    pub fn path(&self) -> String {
        let mut out = String::from("$");
        for seg in self.segments() {
            match seg {
                Segment::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
                Segment::Key(k) if is_plain_name(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Key(k) => {
                    out.push('[');
                    crate::json::write_str(k, &mut out);
                    out.push(']');
                }
            }
        }
        out
    }

    /// The message without the path.
    pub fn message(&self) -> &str {
        &self.message
    }
}

fn is_plain_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path(), self.message)
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rendering() {
        let e = DecodeError::new("expected Decimal, found string \"9.99\"")
            .at_key("price")
            .at_index(3)
            .at_key("items");
        assert_eq!(
            e.to_string(),
            "$.items[3].price: expected Decimal, found string \"9.99\""
        );
        let e = DecodeError::new("x").at_key("a b");
        assert_eq!(e.path(), "$[\"a b\"]");
    }
}
