//! Hand-walking a `serde_json::Value` with diagnostics.
//!
//! serde derive is avoided for the FlowSpec model on purpose: with
//! `arbitrary_precision`, untagged/tagged/flattened enums break on numbers,
//! and walking the Value lets every problem carry a JSON Pointer and be
//! reported at once instead of stopping at the first.

use crate::diag::{Code, Diagnostic, push_token};
use serde_json::{Map, Number, Value};

/// Collects diagnostics while reading.
#[derive(Debug, Default)]
pub(crate) struct Cx {
    pub diags: Vec<Diagnostic>,
}

impl Cx {
    pub fn push(&mut self, code: Code, pointer: impl Into<String>, message: impl Into<String>) {
        self.diags.push(Diagnostic::new(code, pointer, message));
    }
}

/// "a string", "an object", … for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    crate::path::kind_of(v)
}

/// An object being read: remembers which keys were asked for, so the rest
/// can be reported as unknown.
pub(crate) struct Obj<'a> {
    pub map: &'a Map<String, Value>,
    pub ptr: String,
    what: &'static str,
    known: Vec<&'static str>,
    all_known: bool,
}

impl<'a> Obj<'a> {
    /// Starts reading `v` as an object; a wrong type is reported.
    pub fn new(cx: &mut Cx, v: &'a Value, ptr: &str, what: &'static str) -> Option<Obj<'a>> {
        match v {
            Value::Object(map) => Some(Obj {
                map,
                ptr: ptr.to_string(),
                what,
                known: Vec::new(),
                all_known: false,
            }),
            other => {
                cx.push(
                    Code::WrongType,
                    ptr,
                    format!("{what} must be an object, not {}", kind(other)),
                );
                None
            }
        }
    }

    pub fn at(&self, key: &str) -> String {
        push_token(&self.ptr, key)
    }

    /// Marks `key` known and returns its value.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map.get(key)
    }

    /// Reports no unknown fields for this object (used for node types that
    /// are refused outright).
    pub fn ignore_all(&mut self) {
        self.all_known = true;
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    fn missing(&self, cx: &mut Cx, key: &str) {
        cx.push(
            Code::MissingField,
            &self.ptr,
            format!("{} is missing the required field `{key}`", self.what),
        );
    }

    fn wrong(&self, cx: &mut Cx, key: &str, want: &str, got: &Value) {
        cx.push(
            Code::WrongType,
            self.at(key),
            format!("`{key}` must be {want}, not {}", kind(got)),
        );
    }

    pub fn str(&mut self, cx: &mut Cx, key: &'static str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.wrong(cx, key, "a string", other);
                None
            }
        }
    }

    pub fn req_str(&mut self, cx: &mut Cx, key: &'static str) -> Option<String> {
        if !self.has(key) {
            self.known.push(key);
            self.missing(cx, key);
            return None;
        }
        self.str(cx, key)
    }

    /// A required value of any type (reports a missing field).
    pub fn req(&mut self, cx: &mut Cx, key: &'static str) -> Option<&'a Value> {
        let v = self.get(key);
        if v.is_none() {
            self.missing(cx, key);
        }
        v
    }

    pub fn bool(&mut self, cx: &mut Cx, key: &'static str) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong(cx, key, "true or false", other);
                None
            }
        }
    }

    /// A number, checked against inclusive bounds given as decimal text.
    pub fn number(
        &mut self,
        cx: &mut Cx,
        key: &'static str,
        min: Option<&str>,
        max: Option<&str>,
    ) -> Option<Number> {
        match self.get(key)? {
            Value::Number(n) => {
                let ok = match crate::expr::decimal(n.as_str()) {
                    None => false,
                    Some(v) => {
                        min.and_then(crate::expr::decimal).is_none_or(|m| v >= m)
                            && max.and_then(crate::expr::decimal).is_none_or(|m| v <= m)
                    }
                };
                if !ok {
                    cx.push(
                        Code::OutOfRange,
                        self.at(key),
                        format!(
                            "`{key}` is {}, outside {}",
                            n.as_str(),
                            range_text(min, max)
                        ),
                    );
                    return None;
                }
                Some(n.clone())
            }
            other => {
                self.wrong(cx, key, "a number", other);
                None
            }
        }
    }

    /// A whole number within inclusive bounds.
    pub fn uint(
        &mut self,
        cx: &mut Cx,
        key: &'static str,
        min: u64,
        max: Option<u64>,
    ) -> Option<u64> {
        let v = self.get(key)?;
        match int_value(v) {
            Some(n) if n >= min && max.is_none_or(|m| n <= m) => Some(n),
            Some(_) | None if v.is_number() => {
                let max_text = max.map(|m| m.to_string());
                cx.push(
                    Code::OutOfRange,
                    self.at(key),
                    format!(
                        "`{key}` must be a whole number {}",
                        range_text(Some(&min.to_string()), max_text.as_deref())
                    ),
                );
                None
            }
            _ => {
                self.wrong(cx, key, "a whole number", v);
                None
            }
        }
    }

    /// A string that must be one of `allowed`; a miss is `code` (BadValue
    /// for fields that change behaviour, IgnoredValue for informational ones).
    pub fn choice(
        &mut self,
        cx: &mut Cx,
        key: &'static str,
        allowed: &[&str],
        code: Code,
    ) -> Option<String> {
        let s = self.str(cx, key)?;
        if allowed.contains(&s.as_str()) {
            return Some(s);
        }
        let list = allowed
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let tail = if code == Code::BadValue {
            ""
        } else {
            "; it is ignored"
        };
        cx.push(
            code,
            self.at(key),
            format!("`{key}` is `{s}`, not one of {list}{tail}"),
        );
        if code == Code::BadValue {
            None
        } else {
            Some(s)
        }
    }

    /// An array of strings.
    pub fn str_list(&mut self, cx: &mut Cx, key: &'static str) -> Option<Vec<String>> {
        let v = self.get(key)?;
        let Value::Array(items) = v else {
            self.wrong(cx, key, "an array of strings", v);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.clone()),
                other => cx.push(
                    Code::WrongType,
                    push_token(&self.at(key), &i.to_string()),
                    format!("items of `{key}` must be strings, not {}", kind(other)),
                ),
            }
        }
        Some(out)
    }

    /// An object of strings, in key order, with each entry's pointer.
    pub fn str_map(&mut self, cx: &mut Cx, key: &'static str) -> Vec<(String, String, String)> {
        let Some(v) = self.get(key) else {
            return Vec::new();
        };
        let Value::Object(m) = v else {
            self.wrong(cx, key, "an object of strings", v);
            return Vec::new();
        };
        let base = self.at(key);
        let mut out = Vec::with_capacity(m.len());
        for (k, item) in m {
            let ptr = push_token(&base, k);
            match item {
                Value::String(s) => out.push((k.clone(), s.clone(), ptr)),
                other => cx.push(
                    Code::WrongType,
                    ptr,
                    format!("values of `{key}` must be strings, not {}", kind(other)),
                ),
            }
        }
        out
    }

    /// Reports every key not asked for as an unknown-field warning.
    pub fn finish(self, cx: &mut Cx) {
        if self.all_known {
            return;
        }
        for k in self.map.keys() {
            if !self.known.contains(&k.as_str()) {
                cx.push(
                    Code::UnknownField,
                    push_token(&self.ptr, k),
                    format!("unknown field `{k}` in {}; it is ignored", self.what),
                );
            }
        }
    }
}

fn range_text(min: Option<&str>, max: Option<&str>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("from {a} to {b}"),
        (Some(a), None) => format!("of at least {a}"),
        (None, Some(b)) => format!("of at most {b}"),
        (None, None) => "in range".into(),
    }
}

/// The value of a JSON number that is a whole number fitting in a u64
/// (`1e3` is 1000: numbers count by value, DESIGN §2).
pub(crate) fn int_value(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else { return None };
    let num = flow_abi::number::Num::parse(n.as_str().as_bytes()).ok()?;
    if !num.is_integer() || num.is_negative() || num.integer_digits() > 20 {
        return None;
    }
    num.canonical().parse::<u64>().ok()
}
