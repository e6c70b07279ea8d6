//! Type descriptions and type terms.
//!
//! Two term languages cross the host boundary:
//!
//! * The type-description graph of host-boundary.txt, "Type descriptions":
//!   a [`TypeSpec`] (what a generic Tool's toolkit is generated from) and a
//!   generic call's types view, [`CallView`]. Terms are [`SpecTerm`]s that
//!   refer to unsubstituted [`Template`]s by local id, so a recursive type is
//!   a finite graph and is validated as one: nothing here ever copies a
//!   template body.
//! * The simpler term language of the `flow tools` document
//!   (running-a-program.txt, "flow tools"): [`Term`].
//!
//! Every reader here is strict and total: it takes an already parsed
//! [`serde_json::Value`] (read with [`crate::json::parse`] when it comes from
//! outside), never panics, and reports every problem it finds as a
//! [`TypeSpecError`] naming a JSON Pointer (RFC 6901) into the document.
//!
//! Decisions the seed leaves open, written down here:
//! * Names, identities, local ids and owners must be non-empty strings.
//! * `lexical_ordinal` and `Param` indices are held as `u64`; a larger
//!   integer is refused as out of range.
//! * Two templates of one graph with the same identity conflict ("one
//!   declaration is not repeated with a different instantiated body").
//! * "Recursive templates obey types.md" is read as: the set of
//!   instantiations a template graph reaches is finite. A template that
//!   reaches itself with an argument that grows (`A<T>` holding `A<List<T>>`)
//!   is refused ("invalid recursive substitution"). This is the expansive
//!   cycle test over the graph of type-parameter flows, so it terminates on
//!   any finite graph.
//! * Terms nest at most [`crate::limits::MAX_DEPTH`] deep, so every walk
//!   over them is bounded whatever built the JSON value.
//! * A `Tuple` holds at least two terms in both term languages.

use crate::limits;
use crate::number::Num;
use serde_json::{Map, Number, Value as Json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One problem found in a type description or term: where (a JSON Pointer
/// into the document; `""` is the whole document) and what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSpecError {
    pub pointer: String,
    pub message: String,
}

impl fmt::Display for TypeSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "(document): {}", self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

impl std::error::Error for TypeSpecError {}

/// The built-in types, spelled as terms in both term languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Prim {
    Int,
    Decimal,
    Bool,
    Text,
    Bytes,
    Duration,
    Instant,
    Unit,
    Never,
    /// `json.Value`.
    JsonValue,
}

impl Prim {
    pub const ALL: [Prim; 10] = [
        Prim::Int,
        Prim::Decimal,
        Prim::Bool,
        Prim::Text,
        Prim::Bytes,
        Prim::Duration,
        Prim::Instant,
        Prim::Unit,
        Prim::Never,
        Prim::JsonValue,
    ];

    /// The term spelling, e.g. `"Int"` or `"json.Value"`.
    pub fn name(self) -> &'static str {
        match self {
            Prim::Int => "Int",
            Prim::Decimal => "Decimal",
            Prim::Bool => "Bool",
            Prim::Text => "Text",
            Prim::Bytes => "Bytes",
            Prim::Duration => "Duration",
            Prim::Instant => "Instant",
            Prim::Unit => "Unit",
            Prim::Never => "Never",
            Prim::JsonValue => "json.Value",
        }
    }

    pub fn from_name(name: &str) -> Option<Prim> {
        Prim::ALL.into_iter().find(|p| p.name() == name)
    }
}

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
    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a SpecTerm)) {
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
    fn member_terms(&self) -> Vec<(String, &SpecTerm)> {
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
// Reading: shapes.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Sink(Vec<TypeSpecError>);

impl Sink {
    fn err(&mut self, at: &str, message: impl Into<String>) {
        self.0.push(err_at(at, message));
    }
}

fn err_at(at: &str, message: impl Into<String>) -> TypeSpecError {
    TypeSpecError {
        pointer: at.to_string(),
        message: message.into(),
    }
}

/// `at` extended by one object key, escaped as RFC 6901 says.
fn ptr(at: &str, key: &str) -> String {
    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"))
}

fn ptr_i(at: &str, i: usize) -> String {
    format!("{at}/{i}")
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn as_object<'a>(
    v: &'a Json,
    at: &str,
    what: &str,
    sink: &mut Sink,
) -> Option<&'a Map<String, Json>> {
    match v {
        Json::Object(m) => Some(m),
        other => {
            sink.err(
                at,
                format!("expected {what} (an object), found {}", json_kind(other)),
            );
            None
        }
    }
}

fn as_array<'a>(v: &'a Json, at: &str, what: &str, sink: &mut Sink) -> Option<&'a Vec<Json>> {
    match v {
        Json::Array(a) => Some(a),
        other => {
            sink.err(
                at,
                format!("expected {what} (an array), found {}", json_kind(other)),
            );
            None
        }
    }
}

/// Reports missing required members and members that are neither required
/// nor optional. Returns whether the object has exactly the allowed shape.
fn check_members(
    m: &Map<String, Json>,
    at: &str,
    required: &[&str],
    optional: &[&str],
    what: &str,
    sink: &mut Sink,
) -> bool {
    let mut ok = true;
    for r in required {
        if !m.contains_key(*r) {
            sink.err(at, format!("{what} is missing member \"{r}\""));
            ok = false;
        }
    }
    for k in m.keys() {
        if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
            sink.err(&ptr(at, k), format!("unknown member \"{k}\" in {what}"));
            ok = false;
        }
    }
    ok
}

fn read_name(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<String> {
    match v {
        Json::String(s) if !s.is_empty() => Some(s.clone()),
        Json::String(_) => {
            sink.err(at, format!("{what} must not be empty"));
            None
        }
        other => {
            sink.err(
                at,
                format!("expected {what} (a string), found {}", json_kind(other)),
            );
            None
        }
    }
}

fn read_doc(v: &Json, at: &str, sink: &mut Sink) -> Option<Option<String>> {
    match v {
        Json::Null => Some(None),
        Json::String(s) => Some(Some(s.clone())),
        other => {
            sink.err(
                at,
                format!(
                    "expected doc (a string or null), found {}",
                    json_kind(other)
                ),
            );
            None
        }
    }
}

fn read_bool(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<bool> {
    match v {
        Json::Bool(b) => Some(*b),
        other => {
            sink.err(
                at,
                format!("expected {what} (a boolean), found {}", json_kind(other)),
            );
            None
        }
    }
}

/// Reads an integer at least `min`, judged by value (so `1.0` and `1e0` are
/// 1), never expanding a huge exponent.
fn read_uint(v: &Json, at: &str, what: &str, min: u64, sink: &mut Sink) -> Option<u64> {
    let expected = if min == 0 {
        "a nonnegative integer"
    } else {
        "a positive integer"
    };
    let Json::Number(n) = v else {
        sink.err(
            at,
            format!("expected {what} ({expected}), found {}", json_kind(v)),
        );
        return None;
    };
    let parsed = Num::parse(n.as_str().as_bytes())
        .ok()
        .filter(|x| x.is_integer() && !x.is_negative());
    let Some(num) = parsed else {
        sink.err(
            at,
            format!("expected {what} ({expected}), found {}", n.as_str()),
        );
        return None;
    };
    // u64::MAX has 20 digits; anything longer is out of range without
    // writing it out.
    let value = if num.integer_digits() > 20 {
        None
    } else {
        num.canonical().parse::<u64>().ok()
    };
    match value {
        Some(x) if x >= min => Some(x),
        Some(_) => {
            sink.err(
                at,
                format!("expected {what} ({expected}), found {}", n.as_str()),
            );
            None
        }
        None => {
            sink.err(at, format!("{what} is out of range (at most {})", u64::MAX));
            None
        }
    }
}

/// An array of unique, non-empty names.
fn read_names(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<Vec<String>> {
    let arr = as_array(v, at, what, sink)?;
    let mut out = Vec::with_capacity(arr.len());
    let mut ok = true;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in arr.iter().enumerate() {
        let at_i = ptr_i(at, i);
        match read_name(item, &at_i, "a name", sink) {
            Some(name) => {
                if let Json::String(s) = item
                    && let Some(first) = seen.insert(s.as_str(), i)
                {
                    sink.err(
                        &at_i,
                        format!("duplicate name \"{s}\" in {what} (also at index {first})"),
                    );
                    ok = false;
                }
                out.push(name);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// Reads every term of `arr`; `None` if any of them is invalid (all are
/// still read, so every problem is reported).
fn read_terms(arr: &[Json], at: &str, depth: usize, sink: &mut Sink) -> Option<Vec<SpecTerm>> {
    let terms: Vec<Option<SpecTerm>> = arr
        .iter()
        .enumerate()
        .map(|(i, t)| read_term(t, &ptr_i(at, i), depth, sink))
        .collect();
    terms.into_iter().collect()
}

/// What every term is: a primitive by name, or a one-member object
/// `{tag: inner}` (`at` is the inner term's pointer).
enum TermForm<'v> {
    Prim(Prim),
    Compound {
        tag: &'v str,
        inner: &'v Json,
        at: String,
    },
}

/// Reads a term's form, refusing (into `sink`) a term nested too deep, an
/// unknown name, an object without exactly one member, or any other JSON.
/// `noun` names the primitives in the message.
fn term_form<'v>(
    v: &'v Json,
    at: &str,
    depth: usize,
    noun: &str,
    sink: &mut Sink,
) -> Option<TermForm<'v>> {
    if depth >= limits::MAX_DEPTH {
        sink.err(at, format!("term nested deeper than {}", limits::MAX_DEPTH));
        return None;
    }
    match v {
        Json::String(s) => match Prim::from_name(s) {
            Some(p) => Some(TermForm::Prim(p)),
            None => {
                sink.err(at, format!("unknown term \"{s}\""));
                None
            }
        },
        Json::Object(m) => {
            let mut members = m.iter();
            let (Some((tag, inner)), None) = (members.next(), members.next()) else {
                sink.err(
                    at,
                    format!(
                        "a compound term is an object with exactly one member, found {}",
                        m.len()
                    ),
                );
                return None;
            };
            Some(TermForm::Compound {
                tag,
                inner,
                at: ptr(at, tag),
            })
        }
        other => {
            sink.err(
                at,
                format!(
                    "expected a term (a {noun} name or a one-member object), found {}",
                    json_kind(other)
                ),
            );
            None
        }
    }
}

/// The parts of a `Dict` (exactly two) or a `Tuple` (at least two).
fn term_parts<'v>(inner: &'v Json, at: &str, tag: &str, sink: &mut Sink) -> Option<&'v [Json]> {
    let (what, ok, rule) = match tag {
        "Dict" => (
            "Dict's [key, value]",
            inner.as_array().is_some_and(|a| a.len() == 2),
            "exactly two",
        ),
        _ => (
            "Tuple's parts",
            inner.as_array().is_some_and(|a| a.len() >= 2),
            "at least two",
        ),
    };
    let arr = as_array(inner, at, what, sink)?;
    if !ok {
        sink.err(at, format!("{tag} holds {rule} terms, found {}", arr.len()));
        return None;
    }
    Some(arr)
}

fn read_term(v: &Json, at: &str, depth: usize, sink: &mut Sink) -> Option<SpecTerm> {
    let d = depth + 1;
    let (tag, inner, at_t) = match term_form(v, at, depth, "primitive", sink)? {
        TermForm::Prim(p) => return Some(SpecTerm::Prim(p)),
        TermForm::Compound { tag, inner, at } => (tag, inner, at),
    };
    let boxed = |t: Option<SpecTerm>| t.map(Box::new);
    match tag {
        "List" => boxed(read_term(inner, &at_t, d, sink)).map(SpecTerm::List),
        "Set" => boxed(read_term(inner, &at_t, d, sink)).map(SpecTerm::Set),
        "Option" => boxed(read_term(inner, &at_t, d, sink)).map(SpecTerm::Option),
        "Task" => boxed(read_term(inner, &at_t, d, sink)).map(SpecTerm::Task),
        "Dict" => {
            let arr = term_parts(inner, &at_t, tag, sink)?;
            let mut ts = read_terms(arr, &at_t, d, sink)?.into_iter();
            match (ts.next(), ts.next()) {
                (Some(k), Some(v)) => Some(SpecTerm::Dict(Box::new(k), Box::new(v))),
                _ => None,
            }
        }
        "Tuple" => {
            let arr = term_parts(inner, &at_t, tag, sink)?;
            read_terms(arr, &at_t, d, sink).map(SpecTerm::Tuple)
        }
        "Function" => {
            let fm = as_object(inner, &at_t, "a Function", sink)?;
            check_members(fm, &at_t, &["params", "result"], &[], "a Function", sink);
            let params = fm.get("params").and_then(|p| {
                let at_p = ptr(&at_t, "params");
                let arr = as_array(p, &at_p, "Function params", sink)?;
                read_terms(arr, &at_p, d, sink)
            });
            let result = fm
                .get("result")
                .and_then(|r| read_term(r, &ptr(&at_t, "result"), d, sink));
            if fm.len() != 2 {
                return None;
            }
            Some(SpecTerm::Function {
                params: params?,
                result: Box::new(result?),
            })
        }
        "Named" => {
            let nm = as_object(inner, &at_t, "a Named term", sink)?;
            check_members(
                nm,
                &at_t,
                &["declaration", "args"],
                &[],
                "a Named term",
                sink,
            );
            let declaration = nm.get("declaration").and_then(|x| {
                read_name(
                    x,
                    &ptr(&at_t, "declaration"),
                    "a local declaration id",
                    sink,
                )
            });
            let args = nm.get("args").and_then(|a| {
                let at_a = ptr(&at_t, "args");
                let arr = as_array(a, &at_a, "Named args", sink)?;
                read_terms(arr, &at_a, d, sink)
            });
            if nm.len() != 2 {
                return None;
            }
            Some(SpecTerm::Named {
                declaration: declaration?,
                args: args?,
            })
        }
        "Param" => {
            let pm = as_object(inner, &at_t, "a Param term", sink)?;
            check_members(pm, &at_t, &["owner", "index"], &[], "a Param term", sink);
            let owner = pm
                .get("owner")
                .and_then(|x| read_name(x, &ptr(&at_t, "owner"), "a Param owner", sink));
            let index = pm
                .get("index")
                .and_then(|x| read_uint(x, &ptr(&at_t, "index"), "a Param index", 0, sink));
            if pm.len() != 2 {
                return None;
            }
            Some(SpecTerm::Param {
                owner: owner?,
                index: index?,
            })
        }
        other => {
            sink.err(at, format!("unknown term \"{other}\""));
            None
        }
    }
}

/// `[{"name", "type"}, ...]` with unique names.
fn read_slots(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<Vec<Slot>> {
    let arr = as_array(v, at, what, sink)?;
    let mut out = Vec::with_capacity(arr.len());
    let mut ok = true;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in arr.iter().enumerate() {
        let at_i = ptr_i(at, i);
        let Some(m) = as_object(item, &at_i, "a {name, type} entry", sink) else {
            ok = false;
            continue;
        };
        ok &= check_members(
            m,
            &at_i,
            &["name", "type"],
            &[],
            "a {name, type} entry",
            sink,
        );
        let name = m
            .get("name")
            .and_then(|n| read_name(n, &ptr(&at_i, "name"), "a name", sink));
        if let Some(Json::String(s)) = m.get("name")
            && !s.is_empty()
            && let Some(first) = seen.insert(s.as_str(), i)
        {
            sink.err(
                &ptr(&at_i, "name"),
                format!("duplicate name \"{s}\" in {what} (also at index {first})"),
            );
            ok = false;
        }
        let ty = m
            .get("type")
            .and_then(|t| read_term(t, &ptr(&at_i, "type"), 0, sink));
        match (name, ty) {
            (Some(name), Some(ty)) => out.push(Slot { name, ty }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// `[{"name", "type", "doc"}, ...]` with unique names.
fn read_fields(v: &Json, at: &str, what: &str, sink: &mut Sink) -> Option<Vec<FieldSpec>> {
    let arr = as_array(v, at, what, sink)?;
    let mut out = Vec::with_capacity(arr.len());
    let mut ok = true;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in arr.iter().enumerate() {
        let at_i = ptr_i(at, i);
        let Some(m) = as_object(item, &at_i, "a field", sink) else {
            ok = false;
            continue;
        };
        ok &= check_members(m, &at_i, &["name", "type", "doc"], &[], "a field", sink);
        let name = m
            .get("name")
            .and_then(|n| read_name(n, &ptr(&at_i, "name"), "a field name", sink));
        if let Some(Json::String(s)) = m.get("name")
            && !s.is_empty()
            && let Some(first) = seen.insert(s.as_str(), i)
        {
            sink.err(
                &ptr(&at_i, "name"),
                format!("duplicate field name \"{s}\" in {what} (also at index {first})"),
            );
            ok = false;
        }
        let ty = m
            .get("type")
            .and_then(|t| read_term(t, &ptr(&at_i, "type"), 0, sink));
        let doc = m
            .get("doc")
            .and_then(|d| read_doc(d, &ptr(&at_i, "doc"), sink));
        match (name, ty, doc) {
            (Some(name), Some(ty), Some(doc)) => out.push(FieldSpec { name, ty, doc }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

fn read_payload(v: &Json, at: &str, sink: &mut Sink) -> Option<Option<Payload>> {
    if v.is_null() {
        return Some(None);
    }
    let m = as_object(v, at, "a payload (null or an object)", sink)?;
    let mut members = m.iter();
    let (Some((tag, inner)), None) = (members.next(), members.next()) else {
        sink.err(
            at,
            format!(
                "a payload object has exactly one member, positional or named; found {}",
                m.len()
            ),
        );
        return None;
    };
    let at_t = ptr(at, tag);
    match tag.as_str() {
        "positional" => {
            let arr = as_array(inner, &at_t, "positional parts", sink)?;
            read_terms(arr, &at_t, 0, sink).map(|ts| Some(Payload::Positional(ts)))
        }
        "named" => {
            read_fields(inner, &at_t, "a named payload", sink).map(|fs| Some(Payload::Named(fs)))
        }
        other => {
            sink.err(
                &at_t,
                format!("unknown payload member \"{other}\" (expected positional or named)"),
            );
            None
        }
    }
}

fn read_ctors(v: &Json, at: &str, sink: &mut Sink) -> Option<Vec<CtorSpec>> {
    let arr = as_array(v, at, "constructors", sink)?;
    let mut out = Vec::with_capacity(arr.len());
    let mut ok = true;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in arr.iter().enumerate() {
        let at_i = ptr_i(at, i);
        let Some(m) = as_object(item, &at_i, "a constructor", sink) else {
            ok = false;
            continue;
        };
        ok &= check_members(
            m,
            &at_i,
            &["name", "doc", "payload"],
            &[],
            "a constructor",
            sink,
        );
        let name = m
            .get("name")
            .and_then(|n| read_name(n, &ptr(&at_i, "name"), "a constructor name", sink));
        if let Some(Json::String(s)) = m.get("name")
            && !s.is_empty()
            && let Some(first) = seen.insert(s.as_str(), i)
        {
            sink.err(
                &ptr(&at_i, "name"),
                format!("duplicate constructor name \"{s}\" (also at index {first})"),
            );
            ok = false;
        }
        let doc = m
            .get("doc")
            .and_then(|d| read_doc(d, &ptr(&at_i, "doc"), sink));
        let payload = m
            .get("payload")
            .and_then(|p| read_payload(p, &ptr(&at_i, "payload"), sink));
        match (name, doc, payload) {
            (Some(name), Some(doc), Some(payload)) => out.push(CtorSpec { name, doc, payload }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

const COMMON: [&str; 7] = [
    "name",
    "identity",
    "lexical_ordinal",
    "generic",
    "opaque",
    "kind",
    "doc",
];

fn read_template(v: &Json, at: &str, sink: &mut Sink) -> Option<Template> {
    let m = as_object(v, at, "a declaration template", sink)?;
    let kind_tag = match m.get("kind") {
        None => None,
        Some(Json::String(k)) if ["record", "enum", "host", "nondata"].contains(&k.as_str()) => {
            Some(k.as_str())
        }
        Some(Json::String(k)) => {
            sink.err(
                &ptr(at, "kind"),
                format!("unknown kind \"{k}\" (expected record, enum, host or nondata)"),
            );
            None
        }
        Some(other) => {
            sink.err(
                &ptr(at, "kind"),
                format!("expected kind (a string), found {}", json_kind(other)),
            );
            None
        }
    };
    let mut required: Vec<&str> = COMMON.to_vec();
    let mut optional: Vec<&str> = Vec::new();
    match kind_tag {
        Some("record") => required.push("fields"),
        Some("enum") => required.push("constructors"),
        Some(_) => {}
        // With no valid kind the body members cannot be judged; refusing
        // them too would only repeat the kind's problem.
        None => optional.extend(["fields", "constructors"]),
    }
    let shape_ok = check_members(m, at, &required, &optional, "a declaration template", sink);
    let get = |k: &str| m.get(k).map(|x| (x, ptr(at, k)));
    let name = get("name").and_then(|(x, p)| read_name(x, &p, "a name", sink));
    let identity = get("identity").and_then(|(x, p)| read_name(x, &p, "an identity", sink));
    let ordinal =
        get("lexical_ordinal").and_then(|(x, p)| read_uint(x, &p, "lexical_ordinal", 1, sink));
    let generic = get("generic").and_then(|(x, p)| read_names(x, &p, "generic", sink));
    let opaque = get("opaque").and_then(|(x, p)| read_bool(x, &p, "opaque", sink));
    let doc = get("doc").and_then(|(x, p)| read_doc(x, &p, sink));
    let kind = match kind_tag {
        Some("record") => get("fields")
            .and_then(|(x, p)| read_fields(x, &p, "a record", sink))
            .map(TemplateKind::Record),
        Some("enum") => get("constructors")
            .and_then(|(x, p)| read_ctors(x, &p, sink))
            .map(TemplateKind::Enum),
        Some("host") => Some(TemplateKind::Host),
        Some("nondata") => Some(TemplateKind::Nondata),
        _ => None,
    };
    if !shape_ok {
        return None;
    }
    Some(Template {
        name: name?,
        identity: identity?,
        lexical_ordinal: ordinal?,
        generic: generic?,
        opaque: opaque?,
        kind: kind?,
        doc: doc?,
    })
}

/// The declarations of one graph: every key present (so a reference to a
/// template that failed to read still resolves, and is not reported twice)
/// and the templates that were read.
#[derive(Default)]
struct Graph {
    keys: BTreeSet<String>,
    templates: BTreeMap<String, Template>,
    /// Every template and root read without a problem, so reachability can be
    /// judged without false alarms.
    complete: bool,
}

fn read_declarations(v: &Json, at: &str, sink: &mut Sink) -> Option<Graph> {
    let m = as_object(v, at, "declarations", sink)?;
    let mut g = Graph {
        complete: true,
        ..Graph::default()
    };
    for (id, t) in m {
        let at_t = ptr(at, id);
        if id.is_empty() {
            sink.err(&at_t, "a local declaration id must not be empty");
            g.complete = false;
            continue;
        }
        g.keys.insert(id.clone());
        match read_template(t, &at_t, sink) {
            Some(t) => {
                g.templates.insert(id.clone(), t);
            }
            None => g.complete = false,
        }
    }
    Some(g)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SpecShape {
    TypeSpec,
    CallView,
}

/// What was read of a TypeSpec or call view; a part that failed is `None`.
struct Parts {
    /// TypeSpec `generic`.
    generic: Option<Vec<String>>,
    /// Call view `bindings`.
    generic_slots: Option<Vec<Slot>>,
    slots: Option<Vec<Slot>>,
    ok: Option<SpecTerm>,
    err: Option<SpecTerm>,
    graph: Graph,
}

fn read_spec_parts(v: &Json, shape: SpecShape, sink: &mut Sink) -> Option<Parts> {
    let (what, first) = match shape {
        SpecShape::TypeSpec => ("a TypeSpec", "generic"),
        SpecShape::CallView => ("a call types view", "bindings"),
    };
    let m = as_object(v, "", what, sink)?;
    let shape_ok = check_members(
        m,
        "",
        &[first, "params", "ok", "err", "declarations"],
        &[],
        what,
        sink,
    );
    let mut parts = Parts {
        generic: None,
        generic_slots: None,
        slots: None,
        ok: None,
        err: None,
        graph: Graph::default(),
    };
    match shape {
        SpecShape::TypeSpec => {
            parts.generic = m
                .get("generic")
                .and_then(|g| read_names(g, "/generic", "generic", sink));
        }
        SpecShape::CallView => {
            parts.generic_slots = m
                .get("bindings")
                .and_then(|b| read_slots(b, "/bindings", "bindings", sink));
        }
    }
    parts.slots = m
        .get("params")
        .and_then(|p| read_slots(p, "/params", "params", sink));
    parts.ok = m.get("ok").and_then(|t| read_term(t, "/ok", 0, sink));
    parts.err = m.get("err").and_then(|t| read_term(t, "/err", 0, sink));
    if let Some(g) = m
        .get("declarations")
        .and_then(|d| read_declarations(d, "/declarations", sink))
    {
        parts.graph = g;
    }
    let roots_ok = shape_ok
        && parts.slots.is_some()
        && parts.ok.is_some()
        && parts.err.is_some()
        && match shape {
            SpecShape::TypeSpec => parts.generic.is_some(),
            SpecShape::CallView => parts.generic_slots.is_some(),
        };
    parts.graph.complete &= roots_ok;
    Some(parts)
}

fn push_roots<'a>(parts: &'a Parts, roots: &mut Vec<(String, &'a SpecTerm)>) {
    if let Some(params) = &parts.slots {
        for (i, p) in params.iter().enumerate() {
            roots.push((format!("/params/{i}/type"), &p.ty));
        }
    }
    if let Some(ok) = &parts.ok {
        roots.push(("/ok".to_string(), ok));
    }
    if let Some(err) = &parts.err {
        roots.push(("/err".to_string(), err));
    }
}

// ---------------------------------------------------------------------------
// Validation: references, owners, arity, reachability, recursion.
// ---------------------------------------------------------------------------

/// Which Params a term may hold.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// A TypeSpec's Tool roots, with the Tool's generic count.
    Tool(usize),
    /// A TypeSpec root whose Tool generic list did not read: owners are still
    /// checked, indices cannot be.
    Unknown,
    /// A call view's roots and bindings: no Param at all.
    Concrete,
    /// Inside the template with this local id and generic count.
    Template(&'a str, usize),
}

fn check_term(t: &SpecTerm, at: &str, scope: Scope<'_>, g: &Graph, sink: &mut Sink) {
    match t {
        SpecTerm::Prim(_) => {}
        SpecTerm::List(x) => check_term(x, &ptr(at, "List"), scope, g, sink),
        SpecTerm::Set(x) => check_term(x, &ptr(at, "Set"), scope, g, sink),
        SpecTerm::Option(x) => check_term(x, &ptr(at, "Option"), scope, g, sink),
        SpecTerm::Task(x) => check_term(x, &ptr(at, "Task"), scope, g, sink),
        SpecTerm::Dict(k, v) => {
            check_term(k, &format!("{at}/Dict/0"), scope, g, sink);
            check_term(v, &format!("{at}/Dict/1"), scope, g, sink);
        }
        SpecTerm::Tuple(ts) => {
            for (i, x) in ts.iter().enumerate() {
                check_term(x, &format!("{at}/Tuple/{i}"), scope, g, sink);
            }
        }
        SpecTerm::Function { params, result } => {
            for (i, x) in params.iter().enumerate() {
                check_term(x, &format!("{at}/Function/params/{i}"), scope, g, sink);
            }
            check_term(result, &format!("{at}/Function/result"), scope, g, sink);
        }
        SpecTerm::Named { declaration, args } => {
            if !g.keys.contains(declaration) {
                sink.err(
                    &format!("{at}/Named/declaration"),
                    format!("unresolved declaration \"{declaration}\""),
                );
            } else if let Some(tpl) = g.templates.get(declaration)
                && tpl.generic.len() != args.len()
            {
                sink.err(
                    &format!("{at}/Named/args"),
                    format!(
                        "declaration \"{declaration}\" ({}) takes {} argument(s), given {}",
                        tpl.identity,
                        tpl.generic.len(),
                        args.len()
                    ),
                );
            }
            for (i, x) in args.iter().enumerate() {
                check_term(x, &format!("{at}/Named/args/{i}"), scope, g, sink);
            }
        }
        SpecTerm::Param { owner, index } => {
            let (expected, count) = match scope {
                Scope::Concrete => {
                    sink.err(
                        &ptr(at, "Param"),
                        format!("a concrete term has no free Param, found owner \"{owner}\" index {index}"),
                    );
                    return;
                }
                Scope::Tool(n) => (TOOL_OWNER, Some(n)),
                Scope::Unknown => (TOOL_OWNER, None),
                Scope::Template(id, n) => (id, Some(n)),
            };
            if owner != expected {
                sink.err(
                    &format!("{at}/Param/owner"),
                    format!(
                        "Param owner \"{owner}\" is not \"{expected}\", the owner in scope here"
                    ),
                );
            } else if let Some(n) = count
                && usize::try_from(*index).map_or(true, |i| i >= n)
            {
                sink.err(
                    &format!("{at}/Param/index"),
                    format!("Param index {index} is out of range: \"{owner}\" declares {n} type parameter(s)"),
                );
            }
        }
    }
}

fn check_graph(roots: &[(String, &SpecTerm)], scope: Scope<'_>, g: &Graph, sink: &mut Sink) {
    for (at, t) in roots {
        check_term(t, at, scope, g, sink);
    }
    let mut identities: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, tpl) in &g.templates {
        let at = ptr("/declarations", id);
        let inner = Scope::Template(id, tpl.generic.len());
        for (rel, t) in tpl.member_terms() {
            check_term(t, &format!("{at}{rel}"), inner, g, sink);
        }
        if let Some(first) = identities.insert(&tpl.identity, id) {
            sink.err(
                &ptr(&at, "identity"),
                format!(
                    "conflicting templates: identity \"{}\" is also declared by \"{first}\"",
                    tpl.identity
                ),
            );
        }
    }
    if g.complete {
        let reached = reachable(roots.iter().map(|(_, t)| *t), g);
        for id in &g.keys {
            if !reached.contains(id.as_str()) {
                sink.err(
                    &ptr("/declarations", id),
                    "disconnected declaration: not reachable from the roots",
                );
            }
        }
    }
    check_recursion(g, sink);
}

/// The local ids reachable from `roots` through Named declarations and
/// arguments, Function parameters and results, Task items and template
/// members.
fn reachable<'a>(roots: impl Iterator<Item = &'a SpecTerm>, g: &'a Graph) -> BTreeSet<&'a str> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&SpecTerm> = roots.collect();
    while let Some(t) = stack.pop() {
        t.visit(&mut |s| {
            if let SpecTerm::Named { declaration, .. } = s
                && let Some((id, tpl)) = g.templates.get_key_value(declaration)
                && seen.insert(id.as_str())
            {
                stack.extend(tpl.member_terms().into_iter().map(|(_, m)| m));
            }
        });
    }
    seen
}

/// Refuses non-regular recursion: a template that reaches itself through a
/// chain of references in which one of its parameters flows into a strictly
/// larger argument, which would make the set of instantiations infinite.
///
/// Nodes are (template, parameter index). A reference `Y<..., a_j, ...>`
/// inside template `X` adds, for each `Param(X, i)` in `a_j`, an edge
/// `(X, i) → (Y, j)`; the edge is expansive unless `a_j` is exactly that
/// Param. The graph is infinite-instantiation-free iff no strongly connected
/// component contains an expansive edge.
fn check_recursion(g: &Graph, sink: &mut Sink) {
    let mut node: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    for (id, tpl) in &g.templates {
        for i in 0..tpl.generic.len() {
            let n = node.len();
            node.insert((id.as_str(), i), n);
        }
    }
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); node.len()];
    let mut expansive: Vec<(usize, usize, &str, &str)> = Vec::new();
    for (id, tpl) in &g.templates {
        for (_, member) in tpl.member_terms() {
            member.visit(&mut |t| {
                let SpecTerm::Named { declaration, args } = t else {
                    return;
                };
                for (j, a) in args.iter().enumerate() {
                    let Some(&target) = node.get(&(declaration.as_str(), j)) else {
                        continue;
                    };
                    let direct = matches!(a, SpecTerm::Param { owner, .. } if owner == id);
                    a.visit(&mut |p| {
                        if let SpecTerm::Param { owner, index } = p
                            && owner == id
                            && let Ok(i) = usize::try_from(*index)
                            && let Some(&source) = node.get(&(id.as_str(), i))
                        {
                            adj[source].push(target);
                            if !direct {
                                expansive.push((source, target, id.as_str(), declaration.as_str()));
                            }
                        }
                    });
                }
            });
        }
    }
    if expansive.is_empty() {
        return;
    }
    let comp = strongly_connected(&adj);
    let mut reported: BTreeSet<&str> = BTreeSet::new();
    for (u, v, origin, target) in expansive {
        if comp.get(u) == comp.get(v) && reported.insert(origin) {
            sink.err(
                &ptr("/declarations", origin),
                format!(
                    "invalid recursive substitution: \"{origin}\" reaches itself through \"{target}\" with a growing type argument, so its instantiations are not finite"
                ),
            );
        }
    }
}

/// Kosaraju's algorithm with explicit stacks: the component number of every
/// node.
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<usize> {
    let n = adj.len();
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for s in 0..n {
        if visited[s] {
            continue;
        }
        visited[s] = true;
        let mut stack: Vec<(usize, usize)> = vec![(s, 0)];
        while let Some(top) = stack.last_mut() {
            let (u, i) = *top;
            if let Some(&w) = adj[u].get(i) {
                top.1 += 1;
                if !visited[w] {
                    visited[w] = true;
                    stack.push((w, 0));
                }
            } else {
                order.push(u);
                stack.pop();
            }
        }
    }
    let mut radj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (u, ws) in adj.iter().enumerate() {
        for &w in ws {
            radj[w].push(u);
        }
    }
    let mut comp = vec![usize::MAX; n];
    let mut c = 0;
    for &s in order.iter().rev() {
        if comp[s] != usize::MAX {
            continue;
        }
        comp[s] = c;
        let mut stack = vec![s];
        while let Some(u) = stack.pop() {
            for &w in &radj[u] {
                if comp[w] == usize::MAX {
                    comp[w] = c;
                    stack.push(w);
                }
            }
        }
        c += 1;
    }
    comp
}

// ---------------------------------------------------------------------------
// A call view against the served TypeSpec.
// ---------------------------------------------------------------------------

/// How the served side of a comparison reads its Params.
#[derive(Clone, Copy)]
enum Env<'a> {
    /// Comparing a served Tool root with a view root: `Param(tool, k)` is
    /// the view's k-th binding (a view term, compared by view identity).
    Roots(&'a [Slot]),
    /// Comparing a served template's member with the matching view
    /// template's: `Param(served id, i)` must be `Param(view id, i)`.
    Templates { served: &'a str, view: &'a str },
}

struct Compare<'a> {
    served: &'a TypeSpec,
    view: &'a Graph,
    served_by_identity: BTreeMap<&'a str, &'a str>,
}

fn check_against_served(parts: &Parts, served: &TypeSpec, sink: &mut Sink) {
    let cmp = Compare {
        served,
        view: &parts.graph,
        served_by_identity: served
            .declarations
            .iter()
            .map(|(id, t)| (t.identity.as_str(), id.as_str()))
            .collect(),
    };
    let bindings_ok = match &parts.generic_slots {
        Some(bindings) => match_names(
            bindings.iter().map(|b| b.name.as_str()),
            served.generic.iter().map(String::as_str),
            "/bindings",
            "binding",
            "type parameter",
            sink,
        ),
        None => false,
    };
    if let Some(params) = &parts.slots {
        match_names(
            params.iter().map(|p| p.name.as_str()),
            served.params.iter().map(|p| p.name.as_str()),
            "/params",
            "parameter",
            "parameter",
            sink,
        );
        // Types are compared only where the bindings line up, since every
        // Param of the served side reads through them.
        if let (true, Some(bindings)) = (bindings_ok, &parts.generic_slots) {
            let env = Env::Roots(bindings);
            for (i, (p, sp)) in params.iter().zip(&served.params).enumerate() {
                if p.name == sp.name {
                    cmp.root(&sp.ty, &p.ty, env, &format!("/params/{i}/type"), sink);
                }
            }
            if let Some(ok) = &parts.ok {
                cmp.root(&served.ok, ok, env, "/ok", sink);
            }
            if let Some(err) = &parts.err {
                cmp.root(&served.err, err, env, "/err", sink);
            }
        }
    }
    for (vid, vt) in &parts.graph.templates {
        if let Some(&sid) = cmp.served_by_identity.get(vt.identity.as_str())
            && let Some(st) = served.declarations.get(sid)
        {
            cmp.templates(sid, st, vid, vt, sink);
        }
    }
}

/// Names, count and order must match; returns whether they do.
fn match_names<'a>(
    got: impl ExactSizeIterator<Item = &'a str>,
    want: impl ExactSizeIterator<Item = &'a str>,
    at: &str,
    what: &str,
    served_what: &str,
    sink: &mut Sink,
) -> bool {
    let got: Vec<&str> = got.collect();
    let want: Vec<&str> = want.collect();
    let mut ok = true;
    if got.len() != want.len() {
        sink.err(
            at,
            format!(
                "{} {what}(s) given, but the served TypeSpec declares {} {served_what}(s): [{}]",
                got.len(),
                want.len(),
                want.join(", ")
            ),
        );
        ok = false;
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            sink.err(
                &format!("{at}/{i}/name"),
                format!("{what} \"{g}\" is not \"{w}\", the served {served_what} at this position"),
            );
            ok = false;
        }
    }
    ok
}

impl Compare<'_> {
    fn root(&self, s: &SpecTerm, v: &SpecTerm, env: Env<'_>, at: &str, sink: &mut Sink) {
        if let Err((at, message)) = self.agree(s, v, env, at) {
            sink.err(&at, message);
        }
    }

    /// Compares a served term (under `env`) with a view term; the first
    /// disagreement is reported at its place in the view term.
    fn agree(
        &self,
        s: &SpecTerm,
        v: &SpecTerm,
        env: Env<'_>,
        at: &str,
    ) -> Result<(), (String, String)> {
        let mismatch = || {
            Err((
                at.to_string(),
                format!(
                    "expected {} (the served signature instantiated with the bindings), found {}",
                    self.render_served(s, env),
                    render(v, &self.view.templates)
                ),
            ))
        };
        match (s, v) {
            (SpecTerm::Param { owner, index }, _) => match env {
                Env::Roots(bindings) => {
                    let bound = usize::try_from(*index).ok().and_then(|i| bindings.get(i));
                    match bound {
                        Some(b) if owner == TOOL_OWNER && b.ty == *v => Ok(()),
                        _ => mismatch(),
                    }
                }
                Env::Templates { served, view } => match v {
                    SpecTerm::Param {
                        owner: vo,
                        index: vi,
                    } if owner == served && vo == view && vi == index => Ok(()),
                    _ => mismatch(),
                },
            },
            (SpecTerm::Prim(a), SpecTerm::Prim(b)) if a == b => Ok(()),
            (SpecTerm::List(a), SpecTerm::List(b)) => self.agree(a, b, env, &ptr(at, "List")),
            (SpecTerm::Set(a), SpecTerm::Set(b)) => self.agree(a, b, env, &ptr(at, "Set")),
            (SpecTerm::Option(a), SpecTerm::Option(b)) => self.agree(a, b, env, &ptr(at, "Option")),
            (SpecTerm::Task(a), SpecTerm::Task(b)) => self.agree(a, b, env, &ptr(at, "Task")),
            (SpecTerm::Dict(sk, sv), SpecTerm::Dict(vk, vv)) => {
                self.agree(sk, vk, env, &format!("{at}/Dict/0"))?;
                self.agree(sv, vv, env, &format!("{at}/Dict/1"))
            }
            (SpecTerm::Tuple(a), SpecTerm::Tuple(b)) if a.len() == b.len() => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Tuple/{i}"))?;
                }
                Ok(())
            }
            (
                SpecTerm::Function {
                    params: sp,
                    result: sr,
                },
                SpecTerm::Function {
                    params: vp,
                    result: vr,
                },
            ) if sp.len() == vp.len() => {
                for (i, (x, y)) in sp.iter().zip(vp).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Function/params/{i}"))?;
                }
                self.agree(sr, vr, env, &format!("{at}/Function/result"))
            }
            (
                SpecTerm::Named {
                    declaration: sd,
                    args: sa,
                },
                SpecTerm::Named {
                    declaration: vd,
                    args: va,
                },
            ) => {
                let si = self
                    .served
                    .declarations
                    .get(sd)
                    .map(|t| t.identity.as_str());
                let vi = self.view.templates.get(vd).map(|t| t.identity.as_str());
                // A view template that failed to read was already reported.
                if vi.is_none() && self.view.keys.contains(vd) {
                    return Ok(());
                }
                if si.is_none() || si != vi || sa.len() != va.len() {
                    return mismatch();
                }
                for (i, (x, y)) in sa.iter().zip(va).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Named/args/{i}"))?;
                }
                Ok(())
            }
            _ => mismatch(),
        }
    }

    /// A view template carrying a served template's identity must agree
    /// with it: name, ordinal, arity, opacity, kind and ordered members,
    /// docs ignored. Member terms are compared unsubstituted, references by
    /// identity, so recursion needs no unfolding: each referenced pair is
    /// itself checked by this same pass.
    fn templates(&self, sid: &str, st: &Template, vid: &str, vt: &Template, sink: &mut Sink) {
        let at = ptr("/declarations", vid);
        let who = format!("served declaration {}", st.identity);
        let mut field = |key: &str, ok: bool, served: String, view: String| {
            if !ok {
                sink.err(
                    &ptr(&at, key),
                    format!("{key} {view} does not agree with the {who} ({key} {served})"),
                );
            }
        };
        field("name", st.name == vt.name, st.name.clone(), vt.name.clone());
        field(
            "lexical_ordinal",
            st.lexical_ordinal == vt.lexical_ordinal,
            st.lexical_ordinal.to_string(),
            vt.lexical_ordinal.to_string(),
        );
        field(
            "generic",
            st.generic.len() == vt.generic.len(),
            format!("arity {}", st.generic.len()),
            format!("arity {}", vt.generic.len()),
        );
        field(
            "opaque",
            st.opaque == vt.opaque,
            st.opaque.to_string(),
            vt.opaque.to_string(),
        );
        if st.kind.tag() != vt.kind.tag() {
            field("kind", false, st.kind.tag().into(), vt.kind.tag().into());
            return;
        }
        if st.generic.len() != vt.generic.len() {
            return;
        }
        let env = Env::Templates {
            served: sid,
            view: vid,
        };
        let fields = |sf: &[FieldSpec], vf: &[FieldSpec], at: &str, sink: &mut Sink| {
            if sf.len() != vf.len() {
                sink.err(
                    at,
                    format!("{} field(s), but the {who} has {}", vf.len(), sf.len()),
                );
                return;
            }
            for (i, (a, b)) in sf.iter().zip(vf).enumerate() {
                let at_i = ptr_i(at, i);
                if a.name != b.name {
                    sink.err(
                        &ptr(&at_i, "name"),
                        format!("field \"{}\" is \"{}\" in the {who}", b.name, a.name),
                    );
                } else if let Err((p, m)) = self.agree(&a.ty, &b.ty, env, &ptr(&at_i, "type")) {
                    sink.err(&p, m);
                }
            }
        };
        match (&st.kind, &vt.kind) {
            (TemplateKind::Record(sf), TemplateKind::Record(vf)) => {
                fields(sf, vf, &ptr(&at, "fields"), sink)
            }
            (TemplateKind::Enum(sc), TemplateKind::Enum(vc)) => {
                let at_c = ptr(&at, "constructors");
                if sc.len() != vc.len() {
                    sink.err(
                        &at_c,
                        format!(
                            "{} constructor(s), but the {who} has {}",
                            vc.len(),
                            sc.len()
                        ),
                    );
                    return;
                }
                for (i, (a, b)) in sc.iter().zip(vc).enumerate() {
                    let at_i = ptr_i(&at_c, i);
                    if a.name != b.name {
                        sink.err(
                            &ptr(&at_i, "name"),
                            format!("constructor \"{}\" is \"{}\" in the {who}", b.name, a.name),
                        );
                        continue;
                    }
                    let at_p = ptr(&at_i, "payload");
                    match (&a.payload, &b.payload) {
                        (None, None) => {}
                        (Some(Payload::Positional(x)), Some(Payload::Positional(y)))
                            if x.len() == y.len() =>
                        {
                            for (j, (s, v)) in x.iter().zip(y).enumerate() {
                                let at_j = format!("{at_p}/positional/{j}");
                                if let Err((p, m)) = self.agree(s, v, env, &at_j) {
                                    sink.err(&p, m);
                                }
                            }
                        }
                        (Some(Payload::Named(x)), Some(Payload::Named(y))) => {
                            fields(x, y, &ptr(&at_p, "named"), sink)
                        }
                        _ => sink.err(
                            &at_p,
                            format!("payload of \"{}\" does not agree with the {who}", b.name),
                        ),
                    }
                }
            }
            _ => {}
        }
    }

    fn render_served(&self, s: &SpecTerm, env: Env<'_>) -> String {
        match env {
            Env::Roots(bindings) => {
                let args: Vec<SpecTerm> = bindings.iter().map(|b| b.ty.clone()).collect();
                // Rendered per node so that served references name served
                // templates and substituted bindings name view templates.
                render_with(s, &mut |t, out| match t {
                    SpecTerm::Param { owner, index } if owner == TOOL_OWNER => {
                        match usize::try_from(*index).ok().and_then(|i| args.get(i)) {
                            Some(b) => {
                                out.push_str(&render(b, &self.view.templates));
                                true
                            }
                            None => false,
                        }
                    }
                    SpecTerm::Named { declaration, .. } => {
                        render_named(declaration, &self.served.declarations, out);
                        false
                    }
                    _ => false,
                })
            }
            Env::Templates { .. } => render(s, &self.served.declarations),
        }
    }
}

/// A term in Flow's own notation for messages: `List<Int>`, `(Int, Text)`,
/// `fn(Int) -> Text`, a declaration by identity with its arguments.
pub fn render(t: &SpecTerm, decls: &BTreeMap<String, Template>) -> String {
    render_with(t, &mut |t, out| match t {
        SpecTerm::Named { declaration, .. } => {
            render_named(declaration, decls, out);
            false
        }
        SpecTerm::Param { owner, index } => {
            let name = decls.get(owner).and_then(|tpl| {
                usize::try_from(*index)
                    .ok()
                    .and_then(|i| tpl.generic.get(i))
            });
            match name {
                Some(n) => {
                    out.push_str(n);
                    true
                }
                None => false,
            }
        }
        _ => false,
    })
}

/// Writes a Named term's head; its arguments are written by the caller.
fn render_named(declaration: &str, decls: &BTreeMap<String, Template>, out: &mut String) {
    match decls.get(declaration) {
        Some(tpl) => out.push_str(&tpl.identity),
        None => {
            out.push('#');
            out.push_str(declaration);
        }
    }
}

/// Renders `t`; `hook` may write a whole node itself (returning true) or
/// write a Named head (returning false, having pushed the head).
fn render_with(t: &SpecTerm, hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool) -> String {
    let mut out = String::new();
    render_into(t, hook, &mut out);
    out
}

fn render_into(
    t: &SpecTerm,
    hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
    out: &mut String,
) {
    let before = out.len();
    if hook(t, out) {
        return;
    }
    let wrote_head = out.len() > before;
    let list = |ts: &[SpecTerm],
                hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
                out: &mut String| {
        for (i, x) in ts.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            render_into(x, hook, out);
        }
    };
    let wrap = |name: &str,
                x: &SpecTerm,
                hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
                out: &mut String| {
        out.push_str(name);
        out.push('<');
        render_into(x, hook, out);
        out.push('>');
    };
    match t {
        SpecTerm::Prim(p) => out.push_str(p.name()),
        SpecTerm::List(x) => wrap("List", x, hook, out),
        SpecTerm::Set(x) => wrap("Set", x, hook, out),
        SpecTerm::Option(x) => wrap("Option", x, hook, out),
        SpecTerm::Task(x) => wrap("Task", x, hook, out),
        SpecTerm::Dict(k, v) => {
            out.push_str("Dict<");
            render_into(k, hook, out);
            out.push_str(", ");
            render_into(v, hook, out);
            out.push('>');
        }
        SpecTerm::Tuple(ts) => {
            out.push('(');
            list(ts, hook, out);
            out.push(')');
        }
        SpecTerm::Function { params, result } => {
            out.push_str("fn(");
            list(params, hook, out);
            out.push_str(") -> ");
            render_into(result, hook, out);
        }
        SpecTerm::Named { declaration, args } => {
            if !wrote_head {
                out.push('#');
                out.push_str(declaration);
            }
            if !args.is_empty() {
                out.push('<');
                list(args, hook, out);
                out.push('>');
            }
        }
        SpecTerm::Param { owner, index } => {
            out.push_str(owner);
            out.push('#');
            out.push_str(&index.to_string());
        }
    }
}

// ---------------------------------------------------------------------------
// Writing.
// ---------------------------------------------------------------------------

fn one(key: &str, v: Json) -> Json {
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
    use serde_json::json;

    fn spec_errors(v: Json) -> Vec<TypeSpecError> {
        match TypeSpec::from_json(&v) {
            Ok(_) => Vec::new(),
            Err(e) => e,
        }
    }

    /// Asserts that `v` is refused with a problem at `pointer` whose message
    /// contains `needle`.
    #[track_caller]
    fn refused(v: Json, pointer: &str, needle: &str) {
        let errs = spec_errors(v);
        assert!(
            errs.iter()
                .any(|e| e.pointer == pointer && e.message.contains(needle)),
            "expected a problem at {pointer:?} containing {needle:?}, got {errs:#?}"
        );
    }

    #[track_caller]
    fn accepted(v: Json) -> TypeSpec {
        match TypeSpec::from_json(&v) {
            Ok(s) => {
                assert_eq!(s.to_json(), v, "round trip");
                s
            }
            Err(e) => panic!("refused: {e:#?}"),
        }
    }

    fn record(name: &str, generic: Json, fields: Json) -> Json {
        json!({
            "name": name, "identity": format!("acme@1.0/lib.flow.{name}"),
            "lexical_ordinal": 1, "generic": generic, "opaque": false,
            "kind": "record", "doc": null, "fields": fields
        })
    }

    fn named(id: &str, args: Json) -> Json {
        json!({"Named": {"declaration": id, "args": args}})
    }

    fn param(owner: &str, index: u64) -> Json {
        json!({"Param": {"owner": owner, "index": index}})
    }

    /// A non-generic Tool: `(query: Text) -> Result<Int, Err>`.
    fn simple() -> Json {
        json!({
            "generic": [],
            "params": [{"name": "query", "type": "Text"}],
            "ok": "Int",
            "err": named("e", json!([])),
            "declarations": {
                "e": record("Err", json!([]), json!([{"name": "message", "type": "Text", "doc": "why"}]))
            }
        })
    }

    /// A generic Tool: `<T>(items: List<T>) -> Result<Box<T>, Text>` with
    /// `Box<A> { value: A }`.
    fn generic() -> Json {
        json!({
            "generic": ["T"],
            "params": [{"name": "items", "type": {"List": param("tool", 0)}}],
            "ok": named("box", json!([param("tool", 0)])),
            "err": "Text",
            "declarations": {
                "box": record("Box", json!(["A"]), json!([{"name": "value", "type": param("box", 0), "doc": null}]))
            }
        })
    }

    /// `v` with the member at `pointer` set (an object member is added when
    /// missing).
    fn with(mut v: Json, pointer: &str, new: Json) -> Json {
        if let Some(slot) = v.pointer_mut(pointer) {
            *slot = new;
            return v;
        }
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
        match v.pointer_mut(parent) {
            Some(Json::Object(m)) => {
                m.insert(key.replace("~1", "/").replace("~0", "~"), new);
            }
            _ => panic!("no object at {parent}"),
        }
        v
    }

    fn without(mut v: Json, pointer: &str, key: &str) -> Json {
        match v.pointer_mut(pointer) {
            Some(Json::Object(m)) => {
                m.remove(key);
            }
            _ => panic!("no object at {pointer}"),
        }
        v
    }

    // --- valid examples, one per construct ---

    #[test]
    fn valid_simple_and_generic() {
        let s = accepted(simple());
        assert_eq!(s.params[0].ty, SpecTerm::Prim(Prim::Text));
        let g = accepted(generic());
        assert_eq!(g.generic, vec!["T".to_string()]);
    }

    #[test]
    fn valid_every_primitive() {
        let params: Vec<Json> = Prim::ALL
            .iter()
            .enumerate()
            .map(|(i, p)| json!({"name": format!("p{i}"), "type": p.name()}))
            .collect();
        let s = accepted(
            json!({"generic": [], "params": params, "ok": "Unit", "err": "Never", "declarations": {}}),
        );
        assert_eq!(s.params[9].ty, SpecTerm::Prim(Prim::JsonValue));
    }

    #[test]
    fn valid_compound_terms() {
        let t = |term: Json| json!({"generic": ["T"], "params": [{"name": "x", "type": term}], "ok": "Unit", "err": "Text", "declarations": {}});
        accepted(t(json!({"List": "Int"})));
        accepted(t(json!({"Set": "Text"})));
        accepted(t(json!({"Option": param("tool", 0)})));
        accepted(t(json!({"Task": "Int"})));
        accepted(t(json!({"Dict": ["Text", {"List": "Decimal"}]})));
        accepted(t(json!({"Tuple": ["Int", "Text", "Bool"]})));
        accepted(t(
            json!({"Function": {"params": ["Int", param("tool", 0)], "result": "Text"}}),
        ));
        accepted(t(
            json!({"Function": {"params": [], "result": {"Task": "Unit"}}}),
        ));
    }

    #[test]
    fn valid_enum_payloads_host_and_nondata() {
        let shape = json!({
            "name": "Shape", "identity": "acme@1.0/geo.flow.Shape", "lexical_ordinal": 3,
            "generic": [], "opaque": false, "kind": "enum", "doc": "A shape.",
            "constructors": [
                {"name": "Empty", "doc": null, "payload": null},
                {"name": "Circle", "doc": null, "payload": {"positional": ["Decimal"]}},
                {"name": "Rect", "doc": "w×h", "payload": {"named": [
                    {"name": "w", "type": "Decimal", "doc": null},
                    {"name": "h", "type": "Decimal", "doc": null}]}},
                // Equal field names in different payloads are not duplicates.
                {"name": "Square", "doc": null, "payload": {"named": [{"name": "w", "type": "Decimal", "doc": null}]}}
            ]
        });
        let page = json!({"name": "Page", "identity": "acme@1.0/web.flow.Page", "lexical_ordinal": 1,
            "generic": [], "opaque": true, "kind": "host", "doc": null});
        let handle = json!({"name": "Handle", "identity": "acme@1.0/web.flow.Handle", "lexical_ordinal": 2,
            "generic": ["T"], "opaque": false, "kind": "nondata", "doc": null});
        let s = accepted(json!({
            "generic": [], "params": [{"name": "s", "type": named("s", json!([]))}, {"name": "p", "type": named("p", json!([]))}],
            "ok": named("h", json!(["Int"])), "err": "Text",
            "declarations": {"s": shape, "p": page, "h": handle}
        }));
        assert!(matches!(s.declarations["p"].kind, TemplateKind::Host));
        assert!(matches!(s.declarations["h"].kind, TemplateKind::Nondata));
        let TemplateKind::Enum(ctors) = &s.declarations["s"].kind else {
            panic!("enum")
        };
        assert_eq!(ctors[0].payload, None);
        assert!(matches!(ctors[1].payload, Some(Payload::Positional(_))));
        assert!(matches!(ctors[2].payload, Some(Payload::Named(_))));
    }

    #[test]
    fn valid_recursive_and_mutually_recursive_templates() {
        // Tree<T> = Leaf | Node(Tree<T>, T, Tree<T>); Forest<T> { trees: List<Tree2<T>> },
        // Tree2<T> { kids: Forest<T> }.
        let tree = json!({
            "name": "Tree", "identity": "acme@1.0/t.flow.Tree", "lexical_ordinal": 1,
            "generic": ["T"], "opaque": false, "kind": "enum", "doc": null,
            "constructors": [
                {"name": "Leaf", "doc": null, "payload": null},
                {"name": "Node", "doc": null, "payload": {"positional": [
                    named("tree", json!([param("tree", 0)])), param("tree", 0), named("tree", json!([param("tree", 0)]))]}}
            ]
        });
        let forest = record(
            "Forest",
            json!(["T"]),
            json!([{"name": "trees", "type": {"List": named("t2", json!([param("forest", 0)]))}, "doc": null}]),
        );
        let t2 = record(
            "Tree2",
            json!(["U"]),
            json!([{"name": "kids", "type": named("forest", json!([param("t2", 0)])), "doc": null}]),
        );
        accepted(json!({
            "generic": ["T"],
            "params": [{"name": "t", "type": named("tree", json!([param("tool", 0)]))}],
            "ok": named("forest", json!(["Int"])), "err": "Text",
            "declarations": {"tree": tree, "forest": forest, "t2": t2}
        }));
    }

    #[test]
    fn local_ids_need_not_be_consecutive_and_keys_are_escaped() {
        let v = with(simple(), "/err", named("a/b~c", json!([])));
        let v = without(v, "/declarations", "e");
        let v = with(
            v,
            "/declarations",
            json!({"a/b~c": record("Err", json!([]), json!([]))}),
        );
        accepted(v.clone());
        // A problem inside it names the escaped pointer.
        let bad = with(v, "/declarations/a~1b~0c/lexical_ordinal", json!(0));
        refused(
            bad,
            "/declarations/a~1b~0c/lexical_ordinal",
            "positive integer",
        );
    }

    // --- invalid: shapes ---

    #[test]
    fn typespec_object_shape() {
        refused(json!([]), "", "expected a TypeSpec (an object)");
        refused(without(simple(), "", "ok"), "", "missing member \"ok\"");
        refused(
            with(simple(), "/extra", json!(1)),
            "/extra",
            "unknown member \"extra\"",
        );
        // A call view's member is not a TypeSpec's.
        refused(
            with(simple(), "/bindings", json!([])),
            "/bindings",
            "unknown member",
        );
    }

    #[test]
    fn generic_names() {
        refused(
            with(generic(), "/generic", json!(["T", "T"])),
            "/generic/1",
            "duplicate name \"T\"",
        );
        refused(
            with(generic(), "/generic", json!("T")),
            "/generic",
            "an array",
        );
        refused(
            with(generic(), "/generic", json!([1])),
            "/generic/0",
            "a string",
        );
        refused(
            with(generic(), "/generic", json!([""])),
            "/generic/0",
            "must not be empty",
        );
    }

    #[test]
    fn params_shape_and_names() {
        let two = json!([{"name": "a", "type": "Int"}, {"name": "a", "type": "Text"}]);
        refused(
            with(simple(), "/params", two),
            "/params/1/name",
            "duplicate name \"a\"",
        );
        refused(
            with(simple(), "/params/0/doc", json!(null)),
            "/params/0/doc",
            "unknown member",
        );
        refused(
            without(simple(), "/params/0", "type"),
            "/params/0",
            "missing member \"type\"",
        );
        refused(with(simple(), "/params", json!({})), "/params", "an array");
    }

    #[test]
    fn template_common_members() {
        let at = "/declarations/e";
        refused(
            without(simple(), at, "identity"),
            at,
            "missing member \"identity\"",
        );
        refused(
            with(simple(), &format!("{at}/extra"), json!(1)),
            &format!("{at}/extra"),
            "unknown member",
        );
        refused(
            with(simple(), &format!("{at}/name"), json!(5)),
            &format!("{at}/name"),
            "a string",
        );
        refused(
            with(simple(), &format!("{at}/opaque"), json!("no")),
            &format!("{at}/opaque"),
            "a boolean",
        );
        refused(
            with(simple(), &format!("{at}/doc"), json!(1)),
            &format!("{at}/doc"),
            "a string or null",
        );
        refused(
            with(simple(), &format!("{at}/generic"), json!(["A", "A"])),
            &format!("{at}/generic/1"),
            "duplicate name",
        );
        refused(
            with(simple(), &format!("{at}/kind"), json!("struct")),
            &format!("{at}/kind"),
            "unknown kind",
        );
    }

    #[test]
    fn lexical_ordinal_is_a_positive_integer() {
        let at = "/declarations/e/lexical_ordinal";
        for bad in [json!(0), json!(-1), json!(1.5), json!("1"), json!(null)] {
            refused(with(simple(), at, bad), at, "positive integer");
        }
        let huge: Json = crate::json::parse("1e30").unwrap();
        refused(with(simple(), at, huge), at, "out of range");
        // By value: 2.0 is the integer 2.
        let two: Json = serde_json::from_str("2.0").unwrap();
        let s = TypeSpec::from_json(&with(simple(), at, two)).unwrap();
        assert_eq!(s.declarations["e"].lexical_ordinal, 2);
    }

    #[test]
    fn kind_members_are_exact() {
        let at = "/declarations/e";
        // A record needs fields; an enum needs constructors.
        refused(
            without(simple(), at, "fields"),
            at,
            "missing member \"fields\"",
        );
        refused(
            with(simple(), &format!("{at}/kind"), json!("enum")),
            &format!("{at}/fields"),
            "unknown member \"fields\"",
        );
        // Host and nondata templates have only the common members.
        for kind in ["host", "nondata"] {
            refused(
                with(simple(), &format!("{at}/kind"), json!(kind)),
                &format!("{at}/fields"),
                "unknown member \"fields\"",
            );
        }
    }

    #[test]
    fn record_fields() {
        let at = "/declarations/e/fields";
        let dup = json!([{"name": "a", "type": "Int", "doc": null}, {"name": "a", "type": "Int", "doc": null}]);
        refused(
            with(simple(), at, dup),
            &format!("{at}/1/name"),
            "duplicate field name \"a\"",
        );
        refused(
            without(simple(), &format!("{at}/0"), "doc"),
            &format!("{at}/0"),
            "missing member \"doc\"",
        );
        refused(
            with(simple(), &format!("{at}/0/default"), json!(1)),
            &format!("{at}/0/default"),
            "unknown member",
        );
    }

    fn with_enum(ctors: Json) -> Json {
        let e = json!({"name": "E", "identity": "acme@1.0/e.flow.E", "lexical_ordinal": 1,
            "generic": [], "opaque": false, "kind": "enum", "doc": null, "constructors": ctors});
        with(simple(), "/declarations/e", e)
    }

    #[test]
    fn enum_constructors_and_payloads() {
        let at = "/declarations/e/constructors";
        let dup = json!([{"name": "A", "doc": null, "payload": null}, {"name": "A", "doc": null, "payload": null}]);
        refused(
            with_enum(dup),
            &format!("{at}/1/name"),
            "duplicate constructor name \"A\"",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null}])),
            &format!("{at}/0"),
            "missing member \"payload\"",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null, "payload": null, "tag": 1}])),
            &format!("{at}/0/tag"),
            "unknown member",
        );
        let p = format!("{at}/0/payload");
        refused(
            with_enum(
                json!([{"name": "A", "doc": null, "payload": {"positional": ["Int"], "named": []}}]),
            ),
            &p,
            "exactly one member",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null, "payload": {}}])),
            &p,
            "exactly one member",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null, "payload": {"tuple": []}}])),
            &format!("{p}/tuple"),
            "unknown payload member",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null, "payload": {"positional": "Int"}}])),
            &format!("{p}/positional"),
            "an array",
        );
        refused(
            with_enum(json!([{"name": "A", "doc": null, "payload": "Int"}])),
            &p,
            "a payload",
        );
        let dup_named = json!([{"name": "A", "doc": null, "payload": {"named": [
            {"name": "x", "type": "Int", "doc": null}, {"name": "x", "type": "Int", "doc": null}]}}]);
        refused(
            with_enum(dup_named),
            &format!("{p}/named/1/name"),
            "duplicate field name \"x\"",
        );
    }

    // --- invalid: terms ---

    #[track_caller]
    fn bad_term(term: Json, pointer: &str, needle: &str) {
        let v = with(generic(), "/params/0/type", term);
        refused(v, &format!("/params/0/type{pointer}"), needle);
    }

    #[test]
    fn term_shapes() {
        bad_term(json!("Float"), "", "unknown term \"Float\"");
        bad_term(json!("int"), "", "unknown term \"int\"");
        bad_term(json!({"Array": "Int"}), "", "unknown term \"Array\"");
        bad_term(
            json!({"List": "Int", "Set": "Int"}),
            "",
            "exactly one member, found 2",
        );
        bad_term(json!({}), "", "exactly one member, found 0");
        bad_term(json!(3), "", "expected a term");
        bad_term(json!(null), "", "expected a term");
        bad_term(json!({"List": ["Int"]}), "/List", "expected a term");
        bad_term(
            json!({"Dict": ["Text"]}),
            "/Dict",
            "exactly two terms, found 1",
        );
        bad_term(
            json!({"Dict": ["Text", "Int", "Int"]}),
            "/Dict",
            "exactly two terms, found 3",
        );
        bad_term(json!({"Dict": {"k": "Text"}}), "/Dict", "an array");
        bad_term(
            json!({"Tuple": ["Int"]}),
            "/Tuple",
            "at least two terms, found 1",
        );
        bad_term(
            json!({"Tuple": []}),
            "/Tuple",
            "at least two terms, found 0",
        );
        bad_term(
            json!({"Tuple": ["Int", "Nope"]}),
            "/Tuple/1",
            "unknown term \"Nope\"",
        );
        bad_term(
            json!({"Function": {"params": [], "result": "Int", "async": true}}),
            "/Function/async",
            "unknown member",
        );
        bad_term(
            json!({"Function": {"params": []}}),
            "/Function",
            "missing member \"result\"",
        );
        bad_term(
            json!({"Named": {"declaration": "box"}}),
            "/Named",
            "missing member \"args\"",
        );
        bad_term(
            json!({"Named": {"declaration": "box", "args": [], "x": 1}}),
            "/Named/x",
            "unknown member",
        );
        bad_term(json!({"Named": "box"}), "/Named", "an object");
        bad_term(json!({"Param": "T"}), "/Param", "an object");
        bad_term(
            json!({"Param": {"owner": "tool", "index": -1}}),
            "/Param/index",
            "nonnegative integer",
        );
        bad_term(
            json!({"Param": {"owner": "tool", "index": 0.5}}),
            "/Param/index",
            "nonnegative integer",
        );
        bad_term(
            json!({"Param": {"owner": 1, "index": 0}}),
            "/Param/owner",
            "a string",
        );
    }

    #[test]
    fn term_nesting_is_bounded() {
        let mut t = json!("Int");
        for _ in 0..200 {
            t = json!({"List": t});
        }
        let errs = spec_errors(with(generic(), "/params/0/type", t));
        assert!(
            errs.iter()
                .any(|e| e.message.contains("nested deeper than 128")),
            "{errs:?}"
        );
    }

    // --- invalid: references, owners, arity ---

    #[test]
    fn named_references_resolve() {
        bad_term(
            named("nope", json!([])),
            "/Named/declaration",
            "unresolved declaration \"nope\"",
        );
    }

    #[test]
    fn named_arity_agrees() {
        bad_term(
            named("box", json!([])),
            "/Named/args",
            "takes 1 argument(s), given 0",
        );
        bad_term(
            named("box", json!(["Int", "Int"])),
            "/Named/args",
            "takes 1 argument(s), given 2",
        );
    }

    #[test]
    fn root_params_are_owned_by_tool() {
        bad_term(param("box", 0), "/Param/owner", "is not \"tool\"");
        bad_term(
            param("tool", 1),
            "/Param/index",
            "out of range: \"tool\" declares 1",
        );
        // A non-generic Tool has no Params at all.
        let v = with(simple(), "/ok", param("tool", 0));
        refused(v, "/ok/Param/index", "declares 0");
    }

    #[test]
    fn template_params_are_owned_by_the_template() {
        let at = "/declarations/box/fields/0/type";
        refused(
            with(generic(), at, param("tool", 0)),
            &format!("{at}/Param/owner"),
            "is not \"box\"",
        );
        refused(
            with(generic(), at, param("box", 1)),
            &format!("{at}/Param/index"),
            "\"box\" declares 1",
        );
    }

    #[test]
    fn disconnected_declarations_are_invalid() {
        let v = with(
            simple(),
            "/declarations/extra",
            record("Extra", json!([]), json!([])),
        );
        refused(v, "/declarations/extra", "disconnected");
        // Reached only through another template's member is connected.
        let v = with(
            simple(),
            "/declarations/e/fields/0/type",
            named("inner", json!([])),
        );
        let v = with(
            v,
            "/declarations/inner",
            record("Inner", json!([]), json!([])),
        );
        accepted(v);
        // Reached through Function and Task terms is connected too.
        let v = with(
            simple(),
            "/ok",
            json!({"Function": {"params": [{"Task": named("inner", json!([]))}], "result": "Int"}}),
        );
        let v = with(
            v,
            "/declarations/inner",
            record("Inner", json!([]), json!([])),
        );
        accepted(v);
    }

    #[test]
    fn conflicting_templates_are_invalid() {
        let v = with(simple(), "/params/0/type", named("e2", json!([])));
        let v = with(v, "/declarations/e2", record("Err", json!([]), json!([])));
        refused(v, "/declarations/e2/identity", "conflicting templates");
    }

    #[test]
    fn growing_recursion_is_invalid() {
        // Nest<T> { inner: Option<Nest<List<T>>> } has infinitely many
        // instantiations.
        let nest = record(
            "Nest",
            json!(["T"]),
            json!([{"name": "inner", "type": {"Option": named("nest", json!([{"List": param("nest", 0)}]))}, "doc": null}]),
        );
        let v = json!({"generic": [], "params": [], "ok": named("nest", json!(["Int"])), "err": "Text",
            "declarations": {"nest": nest}});
        refused(v, "/declarations/nest", "invalid recursive substitution");
        // The same through a second template.
        let a = record(
            "A",
            json!(["T"]),
            json!([{"name": "b", "type": named("b", json!([{"Option": param("a", 0)}])), "doc": null}]),
        );
        let b = record(
            "B",
            json!(["U"]),
            json!([{"name": "a", "type": {"List": named("a", json!([param("b", 0)]))}, "doc": null}]),
        );
        let v = json!({"generic": [], "params": [], "ok": named("a", json!(["Int"])), "err": "Text",
            "declarations": {"a": a, "b": b}});
        refused(v, "/declarations/a", "invalid recursive substitution");
        // A growing argument to a non-recursive template is fine.
        let pair = record(
            "Pair",
            json!(["T"]),
            json!([{"name": "x", "type": named("box", json!([{"List": param("pair", 0)}])), "doc": null}]),
        );
        let v = with(generic(), "/declarations/pair", pair);
        let v = with(v, "/err", named("pair", json!(["Text"])));
        accepted(v);
    }

    #[test]
    fn empty_local_id_is_invalid() {
        let v = with(
            simple(),
            "/declarations/",
            record("X", json!([]), json!([])),
        );
        refused(v, "/declarations/", "must not be empty");
    }

    #[test]
    fn every_problem_is_reported() {
        let v = json!({
            "generic": ["T", "T"],
            "params": [{"name": "a", "type": "Float"}],
            "ok": named("missing", json!([])),
            "err": param("tool", 7),
            "declarations": {"e": record("E", json!([]), json!([]))},
            "extra": true
        });
        let errs = spec_errors(v);
        let at: BTreeSet<&str> = errs.iter().map(|e| e.pointer.as_str()).collect();
        for p in [
            "/generic/1",
            "/params/0/type",
            "/ok/Named/declaration",
            "/extra",
        ] {
            assert!(at.contains(p), "{p} missing from {errs:#?}");
        }
        assert!(errs.iter().all(|e| !e.to_string().is_empty()));
    }

    #[test]
    fn error_display() {
        let e = err_at("/ok", "bad");
        assert_eq!(e.to_string(), "/ok: bad");
        assert_eq!(err_at("", "bad").to_string(), "(document): bad");
    }

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

    #[test]
    fn render_terms() {
        let s = TypeSpec::from_json(&generic()).unwrap();
        let t = SpecTerm::from_json(&json!({"Function": {"params": [{"Tuple": ["Int", "Text"]}],
            "result": named("box", json!([{"Dict": ["Text", {"Set": "Int"}]}]))}}))
        .unwrap();
        assert_eq!(
            render(&t, &s.declarations),
            "fn((Int, Text)) -> acme@1.0/lib.flow.Box<Dict<Text, Set<Int>>>"
        );
    }

    // --- call views ---

    fn point() -> Json {
        json!({"name": "Point", "identity": "caller/main.flow.Point", "lexical_ordinal": 4,
            "generic": [], "opaque": false, "kind": "record", "doc": null,
            "fields": [{"name": "x", "type": "Int", "doc": null}, {"name": "y", "type": "Int", "doc": null}]})
    }

    /// `generic()` called with T = the caller's private `Point`; the view
    /// uses its own local ids.
    fn view() -> Json {
        json!({
            "bindings": [{"name": "T", "type": named("p1", json!([]))}],
            "params": [{"name": "items", "type": {"List": named("p1", json!([]))}}],
            "ok": named("b7", json!([named("p1", json!([]))])),
            "err": "Text",
            "declarations": {
                "b7": record("Box", json!(["X"]), json!([{"name": "value", "type": param("b7", 0), "doc": "docs may differ"}])),
                "p1": point()
            }
        })
    }

    fn view_errors(v: Json, served: &TypeSpec) -> Vec<TypeSpecError> {
        match CallView::from_json(&v, served) {
            Ok(_) => Vec::new(),
            Err(e) => e,
        }
    }

    #[track_caller]
    fn view_refused(v: Json, pointer: &str, needle: &str) {
        let served = TypeSpec::from_json(&generic()).unwrap();
        let errs = view_errors(v, &served);
        assert!(
            errs.iter()
                .any(|e| e.pointer == pointer && e.message.contains(needle)),
            "expected a problem at {pointer:?} containing {needle:?}, got {errs:#?}"
        );
    }

    #[test]
    fn valid_call_view() {
        let served = TypeSpec::from_json(&generic()).unwrap();
        let v = CallView::from_json(&view(), &served).unwrap();
        assert_eq!(v.to_json(), view());
        assert_eq!(v.bindings[0].name, "T");
        // A binding to a primitive.
        let prim = json!({"bindings": [{"name": "T", "type": "Int"}],
            "params": [{"name": "items", "type": {"List": "Int"}}],
            "ok": named("b", json!(["Int"])), "err": "Text",
            "declarations": {"b": record("Box", json!(["A"]), json!([{"name": "value", "type": param("b", 0), "doc": null}]))}});
        CallView::from_json(&prim, &served).unwrap();
    }

    #[test]
    fn call_view_shape() {
        view_refused(
            without(view(), "", "bindings"),
            "",
            "missing member \"bindings\"",
        );
        view_refused(
            with(view(), "/generic", json!([])),
            "/generic",
            "unknown member",
        );
        view_refused(
            with(view(), "/bindings/0/doc", json!(null)),
            "/bindings/0/doc",
            "unknown member",
        );
        let dup = json!([{"name": "T", "type": "Int"}, {"name": "T", "type": "Int"}]);
        view_refused(
            with(view(), "/bindings", dup),
            "/bindings/1/name",
            "duplicate name \"T\"",
        );
    }

    #[test]
    fn call_view_bindings_match_served_generic() {
        let two = json!([{"name": "T", "type": "Int"}, {"name": "U", "type": "Int"}]);
        view_refused(
            with(view(), "/bindings", two),
            "/bindings",
            "2 binding(s) given, but the served TypeSpec declares 1",
        );
        view_refused(
            with(view(), "/bindings/0/name", json!("U")),
            "/bindings/0/name",
            "is not \"T\"",
        );
    }

    #[test]
    fn call_view_params_match_served_params() {
        view_refused(
            with(view(), "/params/0/name", json!("things")),
            "/params/0/name",
            "is not \"items\"",
        );
        let extra = json!([{"name": "items", "type": {"List": named("p1", json!([]))}}, {"name": "more", "type": "Int"}]);
        view_refused(
            with(view(), "/params", extra),
            "/params",
            "2 parameter(s) given",
        );
    }

    #[test]
    fn call_view_roots_are_concrete() {
        view_refused(
            with(view(), "/err", param("tool", 0)),
            "/err/Param",
            "no free Param",
        );
        view_refused(
            with(view(), "/bindings/0/type", param("tool", 0)),
            "/bindings/0/type/Param",
            "no free Param",
        );
    }

    #[test]
    fn call_view_instantiation_must_agree() {
        // The served List<T> with T = Point is not List<Int>.
        view_refused(
            with(view(), "/params/0/type", json!({"List": "Int"})),
            "/params/0/type/List",
            "expected caller/main.flow.Point",
        );
        // Nor is it Set<Point>.
        view_refused(
            with(
                view(),
                "/params/0/type",
                json!({"Set": named("p1", json!([]))}),
            ),
            "/params/0/type",
            "expected List<caller/main.flow.Point>",
        );
        // err is Text in the served signature.
        view_refused(with(view(), "/err", json!("Int")), "/err", "expected Text");
        // ok's argument must be the binding.
        view_refused(
            with(view(), "/ok/Named/args/0", json!("Int")),
            "/ok/Named/args/0",
            "expected caller/main.flow.Point",
        );
    }

    #[test]
    fn call_view_templates_match_by_identity() {
        // ok names a template that is not the served Box.
        let v = with(view(), "/ok", named("p2", json!([])));
        let v = with(v, "/declarations/p2", {
            let mut p = point();
            p["identity"] = json!("caller/main.flow.Other");
            p
        });
        let v = without(v, "/declarations", "b7");
        view_refused(
            v,
            "/ok",
            "expected acme@1.0/lib.flow.Box<caller/main.flow.Point>",
        );
    }

    #[test]
    fn call_view_served_templates_must_agree() {
        let at = "/declarations/b7";
        view_refused(
            with(view(), &format!("{at}/lexical_ordinal"), json!(2)),
            &format!("{at}/lexical_ordinal"),
            "does not agree",
        );
        view_refused(
            with(view(), &format!("{at}/fields/0/name"), json!("val")),
            &format!("{at}/fields/0/name"),
            "is \"value\" in the served",
        );
        view_refused(
            with(view(), &format!("{at}/fields/0/type"), json!("Int")),
            &format!("{at}/fields/0/type"),
            "expected A (the served",
        );
        view_refused(
            with(
                view(),
                &format!("{at}/fields"),
                json!([{"name": "value", "type": param("b7", 0), "doc": null},
                {"name": "more", "type": "Int", "doc": null}]),
            ),
            &format!("{at}/fields"),
            "2 field(s)",
        );
        view_refused(
            with(view(), &format!("{at}/opaque"), json!(true)),
            &format!("{at}/opaque"),
            "does not agree",
        );
        view_refused(
            with(view(), &format!("{at}/name"), json!("Crate")),
            &format!("{at}/name"),
            "does not agree",
        );
    }

    #[test]
    fn call_view_disconnected_and_unresolved() {
        view_refused(
            with(
                view(),
                "/declarations/extra",
                record("Extra", json!([]), json!([])),
            ),
            "/declarations/extra",
            "disconnected",
        );
        view_refused(
            with(view(), "/bindings/0/type", named("nope", json!([]))),
            "/bindings/0/type/Named/declaration",
            "unresolved",
        );
    }

    #[test]
    fn call_view_recursive_served_template_remaps_ids() {
        // Served: <T>(l: Lst<T>) -> Result<Int, Text>, Lst<A> = Nil | Cons(A, Lst<A>).
        let lst = |id: &str| {
            json!({"name": "Lst", "identity": "acme@1.0/l.flow.Lst", "lexical_ordinal": 2,
                "generic": ["A"], "opaque": false, "kind": "enum", "doc": null,
                "constructors": [{"name": "Nil", "doc": null, "payload": null},
                    {"name": "Cons", "doc": null, "payload": {"positional": [param(id, 0), named(id, json!([param(id, 0)]))]}}]})
        };
        let served = TypeSpec::from_json(&json!({"generic": ["T"],
            "params": [{"name": "l", "type": named("l", json!([param("tool", 0)]))}],
            "ok": "Int", "err": "Text", "declarations": {"l": lst("l")}}))
        .unwrap();
        let v = json!({"bindings": [{"name": "T", "type": {"Option": "Text"}}],
            "params": [{"name": "l", "type": named("zz", json!([{"Option": "Text"}]))}],
            "ok": "Int", "err": "Text", "declarations": {"zz": lst("zz")}});
        CallView::from_json(&v, &served).unwrap();
        // The view's recursive member pointing at the wrong parameter owner.
        let bad = with(
            v,
            "/declarations/zz/constructors/1/payload/positional/0",
            "Int".into(),
        );
        let errs = view_errors(bad, &served);
        assert!(
            errs.iter()
                .any(|e| e.pointer == "/declarations/zz/constructors/1/payload/positional/0"),
            "{errs:#?}"
        );
    }

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
