//! The simpler term language of the `flow tools` document
//! (running-a-program.txt, "flow tools").

use super::graph::one;
use super::shape::{Sink, TermForm, ptr, ptr_i, read_name, term_form, term_parts};
use super::{Prim, TypeSpecError};
use serde_json::Value as Json;

// ---------------------------------------------------------------------------
// The `flow tools` term language.
// ---------------------------------------------------------------------------

/// A type term of the `flow tools` document (running-a-program.txt): a
/// built-in by name, `{"List": t}`, `{"Set": t}`, `{"Option": t}`,
/// `{"Dict": [k, v]}`, `{"Tuple": [t, ...]}`, a type parameter
/// `{"Param": "T"}` or a declared type `{"Named": key}`, the key being the
/// declaration's `$defs` key in the document's `types` map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    Prim(Prim),
    List(Box<Term>),
    Set(Box<Term>),
    Option(Box<Term>),
    Dict(Box<Term>, Box<Term>),
    /// At least two parts.
    Tuple(Vec<Term>),
    Param(String),
    Named(String),
}

impl Term {
    /// Reads a term, refusing unknown terms and malformed ones; every
    /// problem is returned.
    pub fn from_json(v: &Json) -> Result<Term, Vec<TypeSpecError>> {
        let mut sink = Sink::default();
        match read_tools_term(v, "", 0, &mut sink) {
            Some(t) if sink.0.is_empty() => Ok(t),
            _ => Err(sink.0),
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            Term::Prim(p) => Json::String(p.name().to_string()),
            Term::List(t) => one("List", t.to_json()),
            Term::Set(t) => one("Set", t.to_json()),
            Term::Option(t) => one("Option", t.to_json()),
            Term::Dict(k, v) => one("Dict", Json::Array(vec![k.to_json(), v.to_json()])),
            Term::Tuple(ts) => one("Tuple", Json::Array(ts.iter().map(Term::to_json).collect())),
            Term::Param(p) => one("Param", Json::String(p.clone())),
            Term::Named(k) => one("Named", Json::String(k.clone())),
        }
    }

    /// Checks the term's references in its context: every `Param` names one
    /// of the Tool's `generic` parameters and every `Named` key is in the
    /// document's `types` map. `at` is the term's own pointer.
    pub fn check_refs(
        &self,
        at: &str,
        generic: &[String],
        has_type: &dyn Fn(&str) -> bool,
    ) -> Vec<TypeSpecError> {
        let mut sink = Sink::default();
        self.refs_into(at, generic, has_type, &mut sink);
        sink.0
    }

    fn refs_into(
        &self,
        at: &str,
        generic: &[String],
        has_type: &dyn Fn(&str) -> bool,
        sink: &mut Sink,
    ) {
        match self {
            Term::Prim(_) => {}
            Term::List(t) => t.refs_into(&ptr(at, "List"), generic, has_type, sink),
            Term::Set(t) => t.refs_into(&ptr(at, "Set"), generic, has_type, sink),
            Term::Option(t) => t.refs_into(&ptr(at, "Option"), generic, has_type, sink),
            Term::Dict(k, v) => {
                k.refs_into(&format!("{at}/Dict/0"), generic, has_type, sink);
                v.refs_into(&format!("{at}/Dict/1"), generic, has_type, sink);
            }
            Term::Tuple(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    t.refs_into(&format!("{at}/Tuple/{i}"), generic, has_type, sink);
                }
            }
            Term::Param(p) => {
                if !generic.iter().any(|g| g == p) {
                    sink.err(
                        &ptr(at, "Param"),
                        format!(
                            "type parameter \"{p}\" is not declared (generic: [{}])",
                            generic.join(", ")
                        ),
                    );
                }
            }
            Term::Named(k) => {
                if !has_type(k) {
                    sink.err(
                        &ptr(at, "Named"),
                        format!("type \"{k}\" is not in the types map"),
                    );
                }
            }
        }
    }
}

fn read_tools_term(v: &Json, at: &str, depth: usize, sink: &mut Sink) -> Option<Term> {
    let d = depth + 1;
    let (tag, inner, at_t) = match term_form(v, at, depth, "built-in", sink)? {
        TermForm::Prim(p) => return Some(Term::Prim(p)),
        TermForm::Compound { tag, inner, at } => (tag, inner, at),
    };
    let many = |arr: &[Json], sink: &mut Sink| -> Option<Vec<Term>> {
        let ts: Vec<Option<Term>> = arr
            .iter()
            .enumerate()
            .map(|(i, x)| read_tools_term(x, &ptr_i(&at_t, i), d, sink))
            .collect();
        ts.into_iter().collect()
    };
    match tag {
        "List" => read_tools_term(inner, &at_t, d, sink).map(|t| Term::List(Box::new(t))),
        "Set" => read_tools_term(inner, &at_t, d, sink).map(|t| Term::Set(Box::new(t))),
        "Option" => read_tools_term(inner, &at_t, d, sink).map(|t| Term::Option(Box::new(t))),
        "Dict" => {
            let arr = term_parts(inner, &at_t, tag, sink)?;
            let mut ts = many(arr, sink)?.into_iter();
            match (ts.next(), ts.next()) {
                (Some(k), Some(v)) => Some(Term::Dict(Box::new(k), Box::new(v))),
                _ => None,
            }
        }
        "Tuple" => {
            let arr = term_parts(inner, &at_t, tag, sink)?;
            many(arr, sink).map(Term::Tuple)
        }
        "Param" => read_name(inner, &at_t, "a type parameter name", sink).map(Term::Param),
        "Named" => read_name(inner, &at_t, "a types key", sink).map(Term::Named),
        other => {
            sink.err(at, format!("unknown term \"{other}\""));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typespec::*;
    use serde_json::json;

    // --- the flow tools term language ---

    #[test]
    fn tools_terms_round_trip() {
        for v in [
            json!("Int"),
            json!("json.Value"),
            json!({"List": "Text"}),
            json!({"Set": "Int"}),
            json!({"Option": {"Param": "T"}}),
            json!({"Dict": ["Text", {"Named": "acme/x.flow.Foo"}]}),
            json!({"Tuple": ["Int", "Bool", "Unit"]}),
            json!({"Param": "T"}),
            json!({"Named": "support.json.Address"}),
        ] {
            let t = Term::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e:?}"));
            assert_eq!(t.to_json(), v);
        }
        for p in Prim::ALL {
            assert_eq!(Term::from_json(&json!(p.name())).unwrap(), Term::Prim(p));
        }
    }

    #[track_caller]
    fn tools_refused(v: Json, pointer: &str, needle: &str) {
        let errs = Term::from_json(&v).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.pointer == pointer && e.message.contains(needle)),
            "expected {pointer:?} {needle:?}, got {errs:#?}"
        );
    }

    #[test]
    fn tools_terms_refused() {
        tools_refused(json!("Float"), "", "unknown term");
        tools_refused(json!({"Task": "Int"}), "", "unknown term \"Task\"");
        tools_refused(
            json!({"Function": {"params": [], "result": "Int"}}),
            "",
            "unknown term \"Function\"",
        );
        tools_refused(
            json!({"List": "Int", "Set": "Int"}),
            "",
            "exactly one member",
        );
        tools_refused(json!({"Dict": ["Text"]}), "/Dict", "exactly two");
        tools_refused(json!({"Tuple": ["Int"]}), "/Tuple", "at least two");
        tools_refused(
            json!({"Param": {"owner": "tool", "index": 0}}),
            "/Param",
            "a string",
        );
        tools_refused(json!({"Named": ""}), "/Named", "must not be empty");
        tools_refused(
            json!({"List": {"Option": 7}}),
            "/List/Option",
            "expected a term",
        );
        tools_refused(json!([]), "", "expected a term");
    }

    #[test]
    fn tools_term_references() {
        let t = Term::from_json(&json!({"Tuple": [{"Param": "T"}, {"List": {"Named": "k"}}, {"Param": "U"}, {"Named": "x"}]})).unwrap();
        let errs = t.check_refs("/tools/0/ok", &["T".to_string()], &|k| k == "k");
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert_eq!(errs[0].pointer, "/tools/0/ok/Tuple/2/Param");
        assert_eq!(errs[1].pointer, "/tools/0/ok/Tuple/3/Named");
    }

    #[test]
    fn tools_terms_read_what_signature_writes() {
        let mut types = crate::TypeSet::new();
        let err = crate::signature::tool_error(&mut types);
        let ty = crate::Type::Dict(
            Box::new(crate::Type::Text),
            Box::new(crate::Type::Tuple(vec![crate::Type::Int, err])),
        );
        let t = Term::from_json(&crate::signature::term(&ty, &types)).unwrap();
        let want = Term::Dict(
            Box::new(Term::Prim(Prim::Text)),
            Box::new(Term::Tuple(vec![
                Term::Prim(Prim::Int),
                Term::Named("std/tool.ToolError".into()),
            ])),
        );
        assert_eq!(t, want);
    }
}
