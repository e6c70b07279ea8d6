//! JSONPath singular queries: the subset of RFC 9535 that names one value.
//!
//! DESIGN §4: expressions use "JSONPath (RFC 9535) operands over `$.state`
//! (and `$.last_message` in debates)"; `fail_branch` makes `$.error` visible
//! "to expressions and templates". FlowSpec only ever needs singular
//! queries (RFC 9535 §2.3.5.1): `$`, then member names written `.name`,
//! `['name']` or `["name"]`, and array indexes `[0]` / `[-1]`. Wildcards,
//! slices, filters and descendants are refused with a clear message rather
//! than half-supported.
//!
//! Grammar (RFC 9535 §2.5.1 / §2.3.5.1, whitespace allowed inside brackets):
//!
//! ```text
//! path      = "$" segment*
//! relative  = name-first name-char* segment*      ; a state key, bare
//! segment   = "." name | "[" S selector S "]"
//! selector  = string | index
//! name      = name-first name-char*               ; ALPHA / "_" / non-ASCII, then also DIGIT
//! string    = "'" chars "'" | '"' chars '"'       ; JSON-style escapes
//! index     = "0" | ["-"] [1-9] DIGIT*            ; within ±(2^53-1)
//! ```

use serde_json::Value;
use std::fmt;

/// The largest index RFC 9535 allows (I-JSON exact integers).
const MAX_INDEX: i64 = (1 << 53) - 1;

/// One step of a singular query.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seg {
    /// A member of an object.
    Name(String),
    /// An element of an array; negative counts from the end.
    Index(i64),
}

/// What a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Root {
    /// `$.state`: the flow state.
    State,
    /// `$.last_message`: the latest message of an `agent_debate`.
    LastMessage,
    /// `$.error`: `{node, call, outcome}` after a `fail_branch` route.
    Error,
}

impl Root {
    pub fn as_str(self) -> &'static str {
        match self {
            Root::State => "state",
            Root::LastMessage => "last_message",
            Root::Error => "error",
        }
    }

    fn from_name(name: &str) -> Option<Root> {
        match name {
            "state" => Some(Root::State),
            "last_message" => Some(Root::LastMessage),
            "error" => Some(Root::Error),
            _ => None,
        }
    }
}

/// A singular query with a known root, e.g. `$.state.topics[0]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path {
    pub root: Root,
    pub segs: Vec<Seg>,
}

/// A syntax error in a path, with the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

fn err(offset: usize, message: impl Into<String>) -> PathError {
    PathError {
        offset,
        message: message.into(),
    }
}

/// The values a path can start from. A root that is absent evaluates to
/// missing.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub state: &'a Value,
    pub last_message: Option<&'a Value>,
    pub error: Option<&'a Value>,
}

impl<'a> Scope<'a> {
    /// A scope with only the state.
    pub fn state(state: &'a Value) -> Scope<'a> {
        Scope {
            state,
            last_message: None,
            error: None,
        }
    }

    fn root(&self, root: Root) -> Option<&'a Value> {
        match root {
            Root::State => Some(self.state),
            Root::LastMessage => self.last_message,
            Root::Error => self.error,
        }
    }
}

/// Stepping into a value that has no such member or element kind, e.g.
/// `.name` on a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveError {
    pub message: String,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Path {
    /// A path rooted at `$.state` with the given segments.
    pub fn state(segs: Vec<Seg>) -> Path {
        Path {
            root: Root::State,
            segs,
        }
    }

    /// Parses a whole string as a `$`-path whose first member is a root
    /// (`state`, `last_message` or `error`).
    pub fn parse(src: &str) -> Result<Path, PathError> {
        let (path, end) = Path::parse_prefix(src, 0)?;
        if end != src.len() {
            return Err(err(
                end,
                format!("unexpected `{}` after the path", rest_char(src, end)),
            ));
        }
        Ok(path)
    }

    /// Parses a `$`-path starting at byte `start` of `src` and returns it with
    /// the offset just past it (used by the expression tokenizer).
    pub fn parse_prefix(src: &str, start: usize) -> Result<(Path, usize), PathError> {
        let (segs, end) = parse_dollar(src, start)?;
        let path = rooted(segs, start)?;
        Ok((path, end))
    }

    /// Parses a source as the maps and `*_expr` fields accept it: a `$`-path,
    /// or a bare relative path (`question`, `a.b[0]`) meaning a state key.
    pub fn parse_source(src: &str) -> Result<Path, PathError> {
        if src.starts_with('$') {
            Path::parse(src)
        } else {
            let segs = parse_relative(src)?;
            Ok(Path::state(segs))
        }
    }

    /// Resolves the path against `scope`: `Ok(None)` when a member or element
    /// is missing, an error when a step does not fit the value's kind.
    pub fn resolve<'a>(&self, scope: &Scope<'a>) -> Result<Option<&'a Value>, ResolveError> {
        let Some(mut cur) = scope.root(self.root) else {
            return Ok(None);
        };
        for (i, seg) in self.segs.iter().enumerate() {
            let next = match (seg, cur) {
                (Seg::Name(n), Value::Object(m)) => m.get(n),
                (Seg::Index(ix), Value::Array(a)) => index(a, *ix),
                (Seg::Name(_) | Seg::Index(_), Value::Null) => None,
                (seg, v) => {
                    let at = Path {
                        root: self.root,
                        segs: self.segs[..i].to_vec(),
                    };
                    let what = match seg {
                        Seg::Name(n) => format!("member `{}`", n),
                        Seg::Index(ix) => format!("index [{}]", ix),
                    };
                    return Err(ResolveError {
                        message: format!("`{}` is {}, which has no {}", at, kind_of(v), what),
                    });
                }
            };
            match next {
                Some(v) => cur = v,
                None => return Ok(None),
            }
        }
        Ok(Some(cur))
    }

    /// The first member name under the root, if any (`topics` for
    /// `$.state.topics[0]`).
    pub fn first_key(&self) -> Option<&str> {
        match self.segs.first() {
            Some(Seg::Name(n)) => Some(n),
            _ => None,
        }
    }
}

fn index(a: &[Value], ix: i64) -> Option<&Value> {
    if ix >= 0 {
        usize::try_from(ix).ok().and_then(|i| a.get(i))
    } else {
        let back = usize::try_from(ix.unsigned_abs()).ok()?;
        a.len().checked_sub(back).and_then(|i| a.get(i))
    }
}

/// "a string", "an object", ... for messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Writes a member name as `.name` when it is an identifier, else as
/// `['name']` with escapes.
struct SegDisplay<'a>(&'a Seg);

impl fmt::Display for SegDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Seg::Index(i) => write!(f, "[{}]", i),
            Seg::Name(n) => {
                let mut cs = n.chars();
                let shorthand = cs.next().is_some_and(is_name_first) && cs.all(is_name_char);
                if shorthand {
                    write!(f, ".{}", n)
                } else {
                    f.write_str("['")?;
                    write_quoted_body(f, n, '\'')?;
                    f.write_str("']")
                }
            }
        }
    }
}

/// Writes `s` escaped for a string delimited by `q`.
pub fn write_quoted_body(f: &mut impl fmt::Write, s: &str, q: char) -> fmt::Result {
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\u{8}' => f.write_str("\\b")?,
            '\u{c}' => f.write_str("\\f")?,
            c if c == q => {
                f.write_char('\\')?;
                f.write_char(c)?;
            }
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    Ok(())
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$.{}", self.root.as_str())?;
        for s in &self.segs {
            write!(f, "{}", SegDisplay(s))?;
        }
        Ok(())
    }
}

/// Where a mapping writes: a state field and, below it, member names
/// (`key`, `$.state.key.sub`, or `$.output.key`, which is the state field
/// `output` — DESIGN §4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The state field written.
    pub field: String,
    /// Member names below the field (empty for a whole field).
    pub below: Vec<String>,
}

impl Target {
    /// Parses a mapping target: `key`, `key.sub`, `$.state.key…` or
    /// `$.output.key…`. Indexes are refused: a mapping writes members only.
    /// A plain key of letters, digits, `_` and `-` is the state key as
    /// written (`user-name`: buildaharness's mapping `to` is "a state
    /// key", any string), though `-` is not a JSONPath name character.
    pub fn parse(src: &str) -> Result<Target, PathError> {
        if !src.is_empty()
            && src.contains('-')
            && src
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Ok(Target {
                field: src.to_string(),
                below: Vec::new(),
            });
        }
        let segs = if src.starts_with('$') {
            let (mut segs, end) = parse_dollar(src, 0)?;
            if end != src.len() {
                return Err(err(
                    end,
                    format!("unexpected `{}` after the path", rest_char(src, end)),
                ));
            }
            match segs.first() {
                Some(Seg::Name(n)) if n == "state" => {
                    segs.remove(0);
                }
                Some(Seg::Name(n)) if n == "output" => {}
                _ => {
                    return Err(err(
                        0,
                        "a mapping target is a state key, `$.state.<key>` or `$.output.<key>`",
                    ));
                }
            }
            segs
        } else {
            parse_relative(src)?
        };
        let mut names = Vec::with_capacity(segs.len());
        for s in segs {
            match s {
                Seg::Name(n) => names.push(n),
                Seg::Index(_) => {
                    return Err(err(0, "a mapping target cannot write an array index"));
                }
            }
        }
        if names.is_empty() {
            return Err(err(0, "a mapping target must name a state key"));
        }
        let field = names.remove(0);
        Ok(Target {
            field,
            below: names,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = Path::state(
            std::iter::once(&self.field)
                .chain(&self.below)
                .map(|n| Seg::Name(n.clone()))
                .collect(),
        );
        p.fmt(f)
    }
}

mod parse;
use parse::*;
pub use parse::{parse_dollar, parse_relative, parse_string};

#[cfg(test)]
mod tests;
