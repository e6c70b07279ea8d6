//! The type-description graph's terms and declarations, with the entry
//! points that read, validate and write a TypeSpec and a call view.

use super::read::{SpecShape, push_roots, read_spec_parts, read_term};
use super::shape::{Sink, err_at};
use super::validate::{Scope, check_graph};
use super::view::check_against_served;
use super::{Prim, TypeSpecError};
use serde_json::{Map, Number, Value as Json};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// The type-description graph.
// ---------------------------------------------------------------------------

/// A term of a type description (host-boundary.txt, "Type descriptions").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecTerm {
    Prim(Prim),
    List(Box<SpecTerm>),
    Set(Box<SpecTerm>),
    Option(Box<SpecTerm>),
    Task(Box<SpecTerm>),
    /// `{"Dict": [k, v]}`.
    Dict(Box<SpecTerm>, Box<SpecTerm>),
    /// `{"Tuple": [a, b, ...]}`, at least two parts.
    Tuple(Vec<SpecTerm>),
    /// `{"Function": {"params": [..], "result": r}}`.
    Function {
        params: Vec<SpecTerm>,
        result: Box<SpecTerm>,
    },
    /// `{"Named": {"declaration": local id, "args": [..]}}`.
    Named {
        declaration: String,
        args: Vec<SpecTerm>,
    },
    /// `{"Param": {"owner": owner, "index": i}}`: the owner is a template's
    /// own local id inside that template, or [`TOOL_OWNER`] in a TypeSpec's
    /// roots.
    Param {
        owner: String,
        index: u64,
    },
}

/// The owner of the type parameters a TypeSpec's Tool roots use.
pub const TOOL_OWNER: &str = "tool";

/// A `{"name", "type"}` pair: a Tool parameter or a call view's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub ty: SpecTerm,
}

/// A record field or a named payload's field: `{"name", "type", "doc"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    pub name: String,
    pub ty: SpecTerm,
    pub doc: Option<String>,
}

/// An enum constructor: `{"name", "doc", "payload"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtorSpec {
    pub name: String,
    pub doc: Option<String>,
    /// `None` is the JSON `null`: no payload.
    pub payload: Option<Payload>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `{"positional": [term, ...]}`.
    Positional(Vec<SpecTerm>),
    /// `{"named": [field, ...]}`.
    Named(Vec<FieldSpec>),
}

/// What a template declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateKind {
    Record(Vec<FieldSpec>),
    Enum(Vec<CtorSpec>),
    Host,
    Nondata,
}

impl TemplateKind {
    pub fn tag(&self) -> &'static str {
        match self {
            TemplateKind::Record(_) => "record",
            TemplateKind::Enum(_) => "enum",
            TemplateKind::Host => "host",
            TemplateKind::Nondata => "nondata",
        }
    }
}

/// One unsubstituted declaration of a description graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    pub identity: String,
    /// Positive.
    pub lexical_ordinal: u64,
    /// Its type parameters' names, in declaration order.
    pub generic: Vec<String>,
    pub opaque: bool,
    pub kind: TemplateKind,
    pub doc: Option<String>,
}

/// A generated TypeSpec: `{generic, params, ok, err, declarations}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSpec {
    pub generic: Vec<String>,
    pub params: Vec<Slot>,
    pub ok: SpecTerm,
    pub err: SpecTerm,
    /// Keyed by local id.
    pub declarations: BTreeMap<String, Template>,
}

/// A generic call's types view: `{bindings, params, ok, err, declarations}`,
/// every root concrete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    pub bindings: Vec<Slot>,
    pub params: Vec<Slot>,
    pub ok: SpecTerm,
    pub err: SpecTerm,
    /// Keyed by local id (the view's own, not the served TypeSpec's).
    pub declarations: BTreeMap<String, Template>,
}

impl SpecTerm {
    /// Reads one term on its own: shape only, since references need a graph.
    pub fn from_json(v: &Json) -> Result<SpecTerm, Vec<TypeSpecError>> {
        let mut sink = Sink::default();
        let t = read_term(v, "", 0, &mut sink);
        match t {
            Some(t) if sink.0.is_empty() => Ok(t),
            _ => Err(sink.0),
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            SpecTerm::Prim(p) => Json::String(p.name().to_string()),
            SpecTerm::List(t) => one("List", t.to_json()),
            SpecTerm::Set(t) => one("Set", t.to_json()),
            SpecTerm::Option(t) => one("Option", t.to_json()),
            SpecTerm::Task(t) => one("Task", t.to_json()),
            SpecTerm::Dict(k, v) => one("Dict", Json::Array(vec![k.to_json(), v.to_json()])),
            SpecTerm::Tuple(ts) => one("Tuple", terms_json(ts)),
            SpecTerm::Function { params, result } => {
                let mut m = Map::new();
                m.insert("params".into(), terms_json(params));
                m.insert("result".into(), result.to_json());
                one("Function", Json::Object(m))
            }
            SpecTerm::Named { declaration, args } => {
                let mut m = Map::new();
                m.insert("declaration".into(), Json::String(declaration.clone()));
                m.insert("args".into(), terms_json(args));
                one("Named", Json::Object(m))
            }
            SpecTerm::Param { owner, index } => {
                let mut m = Map::new();
                m.insert("owner".into(), Json::String(owner.clone()));
                m.insert("index".into(), Json::Number(Number::from(*index)));
                one("Param", Json::Object(m))
            }
        }
    }

    /// The term with every `Param` of `owner` replaced by the argument at its
    /// index (a Param whose index has no argument is kept). Only this term is
    /// rewritten: `Named` references stay references, so substituting into a
    /// recursive type copies no template body. The result mixes the
    /// arguments' namespace of local ids with this term's; the caller keeps
    /// track of which graph each side belongs to.
    pub fn substitute(&self, owner: &str, args: &[SpecTerm]) -> SpecTerm {
        let sub = |t: &SpecTerm| t.substitute(owner, args);
        match self {
            SpecTerm::Param { owner: o, index } if o == owner => {
                match usize::try_from(*index).ok().and_then(|i| args.get(i)) {
                    Some(a) => a.clone(),
                    None => self.clone(),
                }
            }
            SpecTerm::Prim(_) | SpecTerm::Param { .. } => self.clone(),
            SpecTerm::List(t) => SpecTerm::List(Box::new(sub(t))),
            SpecTerm::Set(t) => SpecTerm::Set(Box::new(sub(t))),
            SpecTerm::Option(t) => SpecTerm::Option(Box::new(sub(t))),
            SpecTerm::Task(t) => SpecTerm::Task(Box::new(sub(t))),
            SpecTerm::Dict(k, v) => SpecTerm::Dict(Box::new(sub(k)), Box::new(sub(v))),
            SpecTerm::Tuple(ts) => SpecTerm::Tuple(ts.iter().map(sub).collect()),
            SpecTerm::Function { params, result } => SpecTerm::Function {
                params: params.iter().map(sub).collect(),
                result: Box::new(sub(result)),
            },
            SpecTerm::Named {
                declaration,
                args: a,
            } => SpecTerm::Named {
                declaration: declaration.clone(),
                args: a.iter().map(sub).collect(),
            },
        }
    }

    /// Calls `f` on this term and every term inside it, outermost first.
    pub(super) fn visit<'a>(&'a self, f: &mut impl FnMut(&'a SpecTerm)) {
        f(self);
        match self {
            SpecTerm::Prim(_) | SpecTerm::Param { .. } => {}
            SpecTerm::List(t) | SpecTerm::Set(t) | SpecTerm::Option(t) | SpecTerm::Task(t) => {
                t.visit(f)
            }
            SpecTerm::Dict(k, v) => {
                k.visit(f);
                v.visit(f);
            }
            SpecTerm::Tuple(ts) | SpecTerm::Named { args: ts, .. } => {
                ts.iter().for_each(|t| t.visit(f))
            }
            SpecTerm::Function { params, result } => {
                params.iter().for_each(|t| t.visit(f));
                result.visit(f);
            }
        }
    }
}

impl Template {
    pub fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("name".into(), Json::String(self.name.clone()));
        m.insert("identity".into(), Json::String(self.identity.clone()));
        m.insert(
            "lexical_ordinal".into(),
            Json::Number(Number::from(self.lexical_ordinal)),
        );
        m.insert("generic".into(), names_json(&self.generic));
        m.insert("opaque".into(), Json::Bool(self.opaque));
        m.insert("kind".into(), Json::String(self.kind.tag().to_string()));
        m.insert("doc".into(), doc_json(&self.doc));
        match &self.kind {
            TemplateKind::Record(fields) => {
                m.insert("fields".into(), fields_json(fields));
            }
            TemplateKind::Enum(ctors) => {
                let cs = ctors
                    .iter()
                    .map(|c| {
                        let mut cm = Map::new();
                        cm.insert("name".into(), Json::String(c.name.clone()));
                        cm.insert("doc".into(), doc_json(&c.doc));
                        let payload = match &c.payload {
                            None => Json::Null,
                            Some(Payload::Positional(ts)) => one("positional", terms_json(ts)),
                            Some(Payload::Named(fs)) => one("named", fields_json(fs)),
                        };
                        cm.insert("payload".into(), payload);
                        Json::Object(cm)
                    })
                    .collect();
                m.insert("constructors".into(), Json::Array(cs));
            }
            TemplateKind::Host | TemplateKind::Nondata => {}
        }
        Json::Object(m)
    }

    /// Every term the template's members hold, with its pointer relative to
    /// the template.
    pub(super) fn member_terms(&self) -> Vec<(String, &SpecTerm)> {
        let mut out = Vec::new();
        match &self.kind {
            TemplateKind::Record(fields) => {
                for (i, f) in fields.iter().enumerate() {
                    out.push((format!("/fields/{i}/type"), &f.ty));
                }
            }
            TemplateKind::Enum(ctors) => {
                for (i, c) in ctors.iter().enumerate() {
                    match &c.payload {
                        None => {}
                        Some(Payload::Positional(ts)) => {
                            for (j, t) in ts.iter().enumerate() {
                                out.push((format!("/constructors/{i}/payload/positional/{j}"), t));
                            }
                        }
                        Some(Payload::Named(fs)) => {
                            for (j, f) in fs.iter().enumerate() {
                                out.push((
                                    format!("/constructors/{i}/payload/named/{j}/type"),
                                    &f.ty,
                                ));
                            }
                        }
                    }
                }
            }
            TemplateKind::Host | TemplateKind::Nondata => {}
        }
        out
    }
}

impl TypeSpec {
    /// Reads and validates a TypeSpec. Every problem found is returned.
    pub fn from_json(v: &Json) -> Result<TypeSpec, Vec<TypeSpecError>> {
        let mut sink = Sink::default();
        let parts = read_spec_parts(v, SpecShape::TypeSpec, &mut sink);
        let Some(parts) = parts else {
            return Err(sink.0);
        };
        let generic_count = parts.generic.as_ref().map(Vec::len);
        let mut roots: Vec<(String, &SpecTerm)> = Vec::new();
        push_roots(&parts, &mut roots);
        let scope = match generic_count {
            Some(n) => Scope::Tool(n),
            None => Scope::Unknown,
        };
        check_graph(&roots, scope, &parts.graph, &mut sink);
        if !sink.0.is_empty() {
            return Err(sink.0);
        }
        match (parts.generic, parts.slots, parts.ok, parts.err) {
            (Some(generic), Some(params), Some(ok), Some(err)) => Ok(TypeSpec {
                generic,
                params,
                ok,
                err,
                declarations: parts.graph.templates,
            }),
            _ => Err(vec![err_at("", "incomplete TypeSpec")]),
        }
    }

    pub fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("generic".into(), names_json(&self.generic));
        m.insert("params".into(), slots_json(&self.params));
        m.insert("ok".into(), self.ok.to_json());
        m.insert("err".into(), self.err.to_json());
        m.insert("declarations".into(), templates_json(&self.declarations));
        Json::Object(m)
    }
}

impl CallView {
    /// Reads and validates a generic call's types view against the TypeSpec
    /// the implementation serves: structure first, then that the bindings
    /// and parameters match the served signature by name, count and order,
    /// that the served signature instantiated with the bindings agrees with
    /// the view's concrete roots, and that every view template carrying a
    /// served template's identity agrees with it (ordinal, arity, kind and
    /// ordered members; docs ignored). Caller-private templates get the
    /// structural checks only.
    ///
    /// The schema view that travels beside this one is checked against the
    /// success type's schema projection elsewhere (schema generation).
    pub fn from_json(v: &Json, served: &TypeSpec) -> Result<CallView, Vec<TypeSpecError>> {
        let mut sink = Sink::default();
        let Some(parts) = read_spec_parts(v, SpecShape::CallView, &mut sink) else {
            return Err(sink.0);
        };
        let mut roots: Vec<(String, &SpecTerm)> = Vec::new();
        if let Some(bindings) = &parts.generic_slots {
            for (i, b) in bindings.iter().enumerate() {
                roots.push((format!("/bindings/{i}/type"), &b.ty));
            }
        }
        push_roots(&parts, &mut roots);
        check_graph(&roots, Scope::Concrete, &parts.graph, &mut sink);
        check_against_served(&parts, served, &mut sink);
        if !sink.0.is_empty() {
            return Err(sink.0);
        }
        match (parts.generic_slots, parts.slots, parts.ok, parts.err) {
            (Some(bindings), Some(params), Some(ok), Some(err)) => Ok(CallView {
                bindings,
                params,
                ok,
                err,
                declarations: parts.graph.templates,
            }),
            _ => Err(vec![err_at("", "incomplete call view")]),
        }
    }

    pub fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("bindings".into(), slots_json(&self.bindings));
        m.insert("params".into(), slots_json(&self.params));
        m.insert("ok".into(), self.ok.to_json());
        m.insert("err".into(), self.err.to_json());
        m.insert("declarations".into(), templates_json(&self.declarations));
        Json::Object(m)
    }
}

// ---------------------------------------------------------------------------
// Writing.
// ---------------------------------------------------------------------------

pub(super) fn one(key: &str, v: Json) -> Json {
    let mut m = Map::new();
    m.insert(key.to_string(), v);
    Json::Object(m)
}

fn terms_json(ts: &[SpecTerm]) -> Json {
    Json::Array(ts.iter().map(SpecTerm::to_json).collect())
}

fn names_json(names: &[String]) -> Json {
    Json::Array(names.iter().map(|n| Json::String(n.clone())).collect())
}

fn doc_json(doc: &Option<String>) -> Json {
    doc.as_ref().map_or(Json::Null, |d| Json::String(d.clone()))
}

fn slots_json(slots: &[Slot]) -> Json {
    Json::Array(
        slots
            .iter()
            .map(|s| {
                let mut m = Map::new();
                m.insert("name".into(), Json::String(s.name.clone()));
                m.insert("type".into(), s.ty.to_json());
                Json::Object(m)
            })
            .collect(),
    )
}

fn fields_json(fields: &[FieldSpec]) -> Json {
    Json::Array(
        fields
            .iter()
            .map(|f| {
                let mut m = Map::new();
                m.insert("name".into(), Json::String(f.name.clone()));
                m.insert("type".into(), f.ty.to_json());
                m.insert("doc".into(), doc_json(&f.doc));
                Json::Object(m)
            })
            .collect(),
    )
}

fn templates_json(decls: &BTreeMap<String, Template>) -> Json {
    Json::Object(
        decls
            .iter()
            .map(|(k, t)| (k.clone(), t.to_json()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typespec::test_support::*;
    use crate::typespec::*;
    use serde_json::json;

    #[test]
    fn substitute_replaces_only_the_owners_params() {
        let t = SpecTerm::from_json(&json!({"Dict": [param("tool", 0), named("box", json!([param("tool", 1), param("box", 0)]))]})).unwrap();
        let got = t.substitute(
            "tool",
            &[SpecTerm::Prim(Prim::Text), SpecTerm::Prim(Prim::Int)],
        );
        let want = SpecTerm::from_json(
            &json!({"Dict": ["Text", named("box", json!(["Int", param("box", 0)]))]}),
        )
        .unwrap();
        assert_eq!(got, want);
        // An index with no argument stays a Param.
        let p = SpecTerm::from_json(&param("tool", 3)).unwrap();
        assert_eq!(p.substitute("tool", &[]), p);
    }
}
