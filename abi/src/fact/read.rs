//! The strict reader: a JSON value is a fact only with exactly the keys of
//! its kind, each of its type. Unknown keys, missing keys, wrong types,
//! malformed ids and unknown kinds are refused with a path into the fact.
//!
//! The reader takes the value by value and moves the values it holds into
//! the fact, so reading a stored history copies no state or args.

use super::{CallId, Ending, Entry, Fact, FactKind, Outer, Parent, RunId, Source};
use super::{is_node_id, is_task_id};
use crate::protocol::{self, Outcome};
use serde_json::Value as Json;
use std::borrow::Cow;

/// Why a JSON value is not a fact: where (a JSONPath into the fact, `$`
/// for the whole) and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FactError {
    path: String,
    message: String,
}

impl FactError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> FactError {
        FactError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Where: `$`, `$.sources[0].hash`.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

type Result<T> = std::result::Result<T, FactError>;

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// `at` extended by `key`, as JSONPath.
fn member(at: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("{at}.{key}")
    } else {
        let mut out = format!("{at}[");
        crate::json::write_str(key, &mut out);
        out.push(']');
        out
    }
}

/// An object being read: members are taken out as they are read.
struct Obj<'t> {
    m: Vec<(Cow<'t, str>, Json)>,
    at: Cow<'static, str>,
}

impl<'t> Obj<'t> {
    /// `v` as an object of `what`, refusing a key not in `keys`.
    fn new(v: Json, at: String, what: &str, keys: &[&str]) -> Result<Obj<'t>> {
        match v {
            Json::Object(m) => Obj::of(
                m.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect(),
                at.into(),
                what,
                keys,
            ),
            other => Err(FactError::new(
                at,
                format!("{what} is an object, found {}", json_kind(&other)),
            )),
        }
    }

    /// The members `m` (distinct keys) as an object of `what`.
    fn of(
        m: Vec<(Cow<'t, str>, Json)>,
        at: Cow<'static, str>,
        what: &str,
        keys: &[&str],
    ) -> Result<Obj<'t>> {
        if let Some((k, _)) = m.iter().find(|(k, _)| !keys.contains(&k.as_ref())) {
            return Err(FactError::new(
                member(&at, k),
                format!("unknown key: {what} has {}", list(keys)),
            ));
        }
        Ok(Obj { m, at })
    }

    /// Takes member `key` out, if there is one.
    fn remove(&mut self, key: &str) -> Option<Json> {
        let i = self.m.iter().position(|(k, _)| k == key)?;
        Some(self.m.swap_remove(i).1)
    }

    fn path(&self, key: &str) -> String {
        member(&self.at, key)
    }

    fn take(&mut self, key: &str) -> Result<Json> {
        self.remove(key)
            .ok_or_else(|| FactError::new(self.path(key), "missing"))
    }

    fn text(&mut self, key: &str) -> Result<String> {
        match self.take(key)? {
            Json::String(s) => Ok(s),
            other => Err(FactError::new(
                self.path(key),
                format!("expected a string, found {}", json_kind(&other)),
            )),
        }
    }

    /// A whole number from `min`.
    fn count(&mut self, key: &str, min: u64) -> Result<u64> {
        let v = self.take(key)?;
        match v.as_u64() {
            Some(n) if n >= min => Ok(n),
            Some(_) => Err(FactError::new(
                self.path(key),
                format!("expected a count from {min}, found {v}"),
            )),
            None => Err(FactError::new(
                self.path(key),
                format!("expected a count from {min}, found {}", json_kind(&v)),
            )),
        }
    }

    fn id<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(&str) -> std::result::Result<T, super::IdError>,
    ) -> Result<T> {
        let s = self.text(key)?;
        parse(&s).map_err(|e| FactError::new(self.path(key), e.to_string()))
    }

    fn task(&mut self, key: &str) -> Result<String> {
        let s = self.text(key)?;
        if !is_task_id(&s) {
            return Err(FactError::new(
                self.path(key),
                format!("not a task id: {s:?} (expected root or <parent>/<branch-node-id>)"),
            ));
        }
        Ok(s)
    }

    fn node(&mut self, key: &str) -> Result<String> {
        let s = self.text(key)?;
        if !is_node_id(&s) {
            return Err(FactError::new(
                self.path(key),
                format!(
                    "not a node id: {s:?} (lowercase letters, digits, - and _, starting with a letter or digit)"
                ),
            ));
        }
        Ok(s)
    }

    fn object(&mut self, key: &str, what: &str, keys: &[&str]) -> Result<Obj<'static>> {
        let v = self.take(key)?;
        Obj::new(v, self.path(key), what, keys)
    }

    fn optional_object(
        &mut self,
        key: &str,
        what: &str,
        keys: &[&str],
    ) -> Result<Option<Obj<'static>>> {
        match self.remove(key) {
            None => Ok(None),
            Some(v) => Obj::new(v, self.path(key), what, keys).map(Some),
        }
    }
}

fn list(keys: &[&str]) -> String {
    match keys {
        [] => "no keys".into(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The keys of each kind, `fact` and `n` first.
fn keys_of(kind: FactKind) -> &'static [&'static str] {
    match kind {
        FactKind::Start => &[
            "fact", "n", "run", "data", "entry", "program", "sources", "input", "parent", "outer",
        ],
        FactKind::Call => &[
            "fact",
            "n",
            "call",
            "task",
            "node",
            "tool",
            "fingerprint",
            "args",
        ],
        FactKind::Reply => &["fact", "n", "call", "outcome"],
        FactKind::Close => &["fact", "n", "call", "reason"],
        FactKind::Checkpoint => &["fact", "n", "task", "node", "state"],
        FactKind::End => &["fact", "n", "ending"],
    }
}

/// A kind's facts, for messages.
fn what(kind: FactKind) -> &'static str {
    match kind {
        FactKind::Start => "a Start fact",
        FactKind::Call => "a Call fact",
        FactKind::Reply => "a Reply fact",
        FactKind::Close => "a Close fact",
        FactKind::Checkpoint => "a Checkpoint fact",
        FactKind::End => "an End fact",
    }
}

/// Whether `s` is `blake3:` and 64 lowercase hex digits.
fn is_blake3(s: &str) -> bool {
    s.strip_prefix("blake3:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl Fact {
    /// Reads one fact from its JSON text (read strictly, as every JSON text
    /// entering flowd is).
    pub fn parse(text: &str) -> Result<Fact> {
        let v = crate::json::parse(text)
            .map_err(|e| FactError::new(e.path(), format!("not JSON: {}", e.message())))?;
        Fact::from_value(v)
    }

    /// Reads a fact from a JSON value (copying its values).
    pub fn from_json(v: &Json) -> Result<Fact> {
        Fact::from_value(v.clone())
    }

    /// Reads a fact from a JSON value, moving its values into the fact.
    pub fn from_value(v: Json) -> Result<Fact> {
        match v {
            Json::Object(m) => {
                Fact::from_members(m.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect())
            }
            other => Err(FactError::new(
                "$",
                format!("a fact is a JSON object, found {}", json_kind(&other)),
            )),
        }
    }

    /// Reads a fact from the members of its JSON object (distinct keys, as
    /// [`crate::json::parse_object_checking_canonical`] reads them), moving
    /// its values into the fact.
    pub fn from_members(m: crate::json::Members<'_>) -> Result<Fact> {
        let kind = match m.iter().find(|(k, _)| k == "fact").map(|(_, v)| v) {
            None => {
                return Err(FactError::new(
                    "$.fact",
                    "missing: a fact names its kind in \"fact\"",
                ));
            }
            Some(Json::String(s)) => FactKind::parse(s).ok_or_else(|| {
                FactError::new(
                    "$.fact",
                    format!(
                        "unknown fact kind {s:?} (expected Start, Call, Reply, Close, Checkpoint or End)"
                    ),
                )
            })?,
            Some(other) => {
                return Err(FactError::new(
                    "$.fact",
                    format!("expected a fact kind (a string), found {}", json_kind(other)),
                ));
            }
        };
        let mut o = Obj::of(m, Cow::Borrowed("$"), what(kind), keys_of(kind))?;
        o.remove("fact");
        let n = o.count("n", 0)?;
        if n == 0 {
            return Err(FactError::new("$.n", "facts are numbered from 1"));
        }
        Ok(match kind {
            FactKind::Start => read_start(o, n)?,
            FactKind::Call => Fact::Call {
                n,
                call: o.id("call", CallId::parse)?,
                task: o.task("task")?,
                node: o.node("node")?,
                tool: o.text("tool")?,
                fingerprint: o.text("fingerprint")?,
                args: o.take("args")?,
            },
            FactKind::Reply => {
                let call = o.id("call", CallId::parse)?;
                let outcome = Outcome::from_record_value(o.take("outcome")?)
                    .map_err(|e| outcome_error(&o.path("outcome"), e))?;
                Fact::Reply { n, call, outcome }
            }
            FactKind::Close => Fact::Close {
                n,
                call: o.id("call", CallId::parse)?,
                reason: o.text("reason")?,
            },
            FactKind::Checkpoint => Fact::Checkpoint {
                n,
                task: o.task("task")?,
                node: o.node("node")?,
                state: o.take("state")?,
            },
            FactKind::End => Fact::End {
                n,
                ending: read_ending(&mut o)?,
            },
        })
    }
}

fn read_start(mut o: Obj, n: u64) -> Result<Fact> {
    let run = o.id("run", RunId::parse)?;
    let data = o.text("data")?;
    // REQUIREMENTS VER-3: a reader refuses a history whose major is unknown.
    let major = |v: &str| v.split('.').next().map(str::to_string);
    if major(&data) != major(crate::DATA_VERSION) {
        return Err(FactError::new(
            o.path("data"),
            format!("unknown data version {data:?}"),
        ));
    }
    let mut e = o.object("entry", "Start.entry", &["module", "function"])?;
    let entry = Entry {
        module: e.text("module")?,
        function: e.text("function")?,
    };
    let program = o.text("program")?;
    let at = o.path("sources");
    let sources = match o.take("sources")? {
        Json::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, s) in items.into_iter().enumerate() {
                let mut s = Obj::new(
                    s,
                    format!("{at}[{i}]"),
                    "a Start source",
                    &["module", "hash", "length"],
                )?;
                let module = s.text("module")?;
                let hash = s.text("hash")?;
                if !is_blake3(&hash) {
                    return Err(FactError::new(
                        s.path("hash"),
                        format!("expected blake3:<64 lowercase hex>, found {hash:?}"),
                    ));
                }
                let length = s.count("length", 0)?;
                out.push(Source {
                    module,
                    hash,
                    length,
                });
            }
            out
        }
        other => {
            return Err(FactError::new(
                at,
                format!("expected a list, found {}", json_kind(&other)),
            ));
        }
    };
    let input = o.take("input")?;
    let parent = match o.optional_object("parent", "Start.parent", &["run", "checkpoint"])? {
        None => None,
        Some(mut p) => Some(Parent {
            run: p.id("run", RunId::parse)?,
            checkpoint: p.count("checkpoint", 1)?,
        }),
    };
    let outer = match o.optional_object("outer", "Start.outer", &["run", "call"])? {
        None => None,
        Some(mut p) => Some(Outer {
            run: p.id("run", RunId::parse)?,
            call: p.id("call", CallId::parse)?,
        }),
    };
    Ok(Fact::Start {
        n,
        run,
        data,
        entry,
        program,
        sources,
        input,
        parent,
        outer,
    })
}

fn read_ending(o: &mut Obj) -> Result<Ending> {
    let at = o.path("ending");
    let m = match o.take("ending")? {
        Json::Object(m) if m.len() == 1 => m,
        other => {
            return Err(FactError::new(
                at,
                format!(
                    "expected an object with exactly one of Completed or Faulted, found {}",
                    match &other {
                        Json::Object(m) => format!("{} members", m.len()),
                        v => json_kind(v).to_string(),
                    }
                ),
            ));
        }
    };
    let Some((tag, inner)) = m.into_iter().next() else {
        return Err(FactError::new(at, "expected one member"));
    };
    let here = member(&at, &tag);
    match tag.as_str() {
        "Completed" => {
            let mut c = Obj::new(inner, here, "End.ending.Completed", &["exit", "output"])?;
            Ok(Ending::Completed {
                exit: c.text("exit")?,
                output: c.take("output")?,
            })
        }
        "Faulted" => match inner {
            Json::String(why) => Ok(Ending::Faulted(why)),
            other => Err(FactError::new(
                here,
                format!(
                    "Faulted holds a reason (a string), found {}",
                    json_kind(&other)
                ),
            )),
        },
        other => Err(FactError::new(
            here,
            format!("unknown ending {other:?} (expected Completed or Faulted)"),
        )),
    }
}

/// An outcome refusal, its JSON pointer (relative to the outcome) as a path.
fn outcome_error(at: &str, e: protocol::Error) -> FactError {
    match e {
        protocol::Error::Shape { pointer, message } => {
            let mut path = at.to_string();
            for token in pointer.split('/').skip(1) {
                path = member(&path, &token.replace("~1", "/").replace("~0", "~"));
            }
            FactError::new(path, message)
        }
        other => FactError::new(at, other.to_string()),
    }
}
