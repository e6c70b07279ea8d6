//! The canonical writer: a fact as its JSON object, keys as DESIGN §3 names
//! them. Objects are ordered maps, so [`crate::json::canonical`] of the
//! object is the fact's canonical text; nothing else orders or spells a
//! fact's keys.

use super::{Ending, Entry, Fact, Outer, Parent, Source};
use crate::protocol::Outcome;
use serde_json::{Map, Number, Value as Json};

fn text(s: impl Into<String>) -> Json {
    Json::String(s.into())
}

fn count(n: u64) -> Json {
    Json::Number(Number::from(n))
}

fn map<const N: usize>(members: [(&str, Json); N]) -> Map<String, Json> {
    let mut m = Map::new();
    for (k, v) in members {
        m.insert(k.to_string(), v);
    }
    m
}

fn object<const N: usize>(members: [(&str, Json); N]) -> Json {
    Json::Object(map(members))
}

/// The record form of an outcome, its value moved in.
fn outcome_json(o: Outcome) -> Json {
    let tag = o.tag();
    let inner = match o {
        Outcome::Ok(v) | Outcome::Failed(v) => v,
        Outcome::NotRun(r) | Outcome::Unknown(r) | Outcome::BadReply(r) => text(r),
    };
    object([(tag, inner)])
}

impl Entry {
    pub fn to_json(&self) -> Json {
        object([
            ("module", text(&self.module)),
            ("function", text(&self.function)),
        ])
    }
}

impl Source {
    pub fn to_json(&self) -> Json {
        object([
            ("module", text(&self.module)),
            ("hash", text(&self.hash)),
            ("length", count(self.length)),
        ])
    }
}

impl Parent {
    pub fn to_json(&self) -> Json {
        object([
            ("run", text(self.run.as_str())),
            ("checkpoint", count(self.checkpoint)),
        ])
    }
}

impl Outer {
    pub fn to_json(&self) -> Json {
        object([
            ("run", text(self.run.as_str())),
            ("call", text(self.call.as_str())),
        ])
    }
}

impl Ending {
    /// `{"Completed":{"exit":…,"output":…}}` or `{"Faulted":"why"}`.
    pub fn to_json(&self) -> Json {
        self.clone().into_json()
    }

    pub fn into_json(self) -> Json {
        match self {
            Ending::Completed { exit, output } => object([(
                "Completed",
                object([("exit", text(exit)), ("output", output)]),
            )]),
            Ending::Faulted(why) => object([("Faulted", text(why))]),
        }
    }
}

impl Fact {
    /// The fact's JSON object, values moved in.
    pub fn into_json(self) -> Json {
        let kind = text(self.kind().as_str());
        match self {
            Fact::Start {
                n,
                run,
                data,
                entry,
                program,
                sources,
                input,
                parent,
                outer,
            } => {
                let mut m = map([
                    ("fact", kind),
                    ("n", count(n)),
                    ("run", text(run.as_str())),
                    ("data", text(data)),
                    ("entry", entry.to_json()),
                    ("program", text(program)),
                    (
                        "sources",
                        Json::Array(sources.iter().map(Source::to_json).collect()),
                    ),
                    ("input", input),
                ]);
                if let Some(p) = parent {
                    m.insert("parent".into(), p.to_json());
                }
                if let Some(o) = outer {
                    m.insert("outer".into(), o.to_json());
                }
                Json::Object(m)
            }
            Fact::Call {
                n,
                call,
                task,
                node,
                tool,
                fingerprint,
                args,
            } => object([
                ("fact", kind),
                ("n", count(n)),
                ("call", text(call.as_str())),
                ("task", text(task)),
                ("node", text(node)),
                ("tool", text(tool)),
                ("fingerprint", text(fingerprint)),
                ("args", args),
            ]),
            Fact::Reply { n, call, outcome } => object([
                ("fact", kind),
                ("n", count(n)),
                ("call", text(call.as_str())),
                ("outcome", outcome_json(outcome)),
            ]),
            Fact::Close { n, call, reason } => object([
                ("fact", kind),
                ("n", count(n)),
                ("call", text(call.as_str())),
                ("reason", text(reason)),
            ]),
            Fact::Checkpoint {
                n,
                task,
                node,
                state,
            } => object([
                ("fact", kind),
                ("n", count(n)),
                ("task", text(task)),
                ("node", text(node)),
                ("state", state),
            ]),
            Fact::End { n, ending } => object([
                ("fact", kind),
                ("n", count(n)),
                ("ending", ending.into_json()),
            ]),
        }
    }

    /// The fact's JSON object.
    pub fn to_json(&self) -> Json {
        self.clone().into_json()
    }

    /// The fact's canonical text: what the chain hashes when no value of it
    /// is stored as a blob.
    pub fn to_canonical(&self) -> String {
        crate::json::canonical(&self.to_json())
    }
}
