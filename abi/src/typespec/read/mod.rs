//! Reading a type-description document's shape: terms, slots, fields,
//! constructors, templates and the declarations graph. References are
//! checked afterwards (see `validate`).

use super::graph::{CtorSpec, FieldSpec, Payload, Slot, SpecTerm, Template, TemplateKind};
use super::shape::{
    Sink, TermForm, as_array, as_object, check_members, json_kind, ptr, ptr_i, read_bool, read_doc,
    read_name, read_names, read_uint, term_form, term_parts,
};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};

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

pub(super) fn read_term(v: &Json, at: &str, depth: usize, sink: &mut Sink) -> Option<SpecTerm> {
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
pub(super) struct Graph {
    pub(super) keys: BTreeSet<String>,
    pub(super) templates: BTreeMap<String, Template>,
    /// Every template and root read without a problem, so reachability can be
    /// judged without false alarms.
    pub(super) complete: bool,
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
pub(super) enum SpecShape {
    TypeSpec,
    CallView,
}

/// What was read of a TypeSpec or call view; a part that failed is `None`.
pub(super) struct Parts {
    /// TypeSpec `generic`.
    pub(super) generic: Option<Vec<String>>,
    /// Call view `bindings`.
    pub(super) generic_slots: Option<Vec<Slot>>,
    pub(super) slots: Option<Vec<Slot>>,
    pub(super) ok: Option<SpecTerm>,
    pub(super) err: Option<SpecTerm>,
    pub(super) graph: Graph,
}

pub(super) fn read_spec_parts(v: &Json, shape: SpecShape, sink: &mut Sink) -> Option<Parts> {
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

pub(super) fn push_roots<'a>(parts: &'a Parts, roots: &mut Vec<(String, &'a SpecTerm)>) {
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

#[cfg(test)]
mod tests;
