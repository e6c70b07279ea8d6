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
mod tests {
    use super::*;
    use crate::typespec::test_support::*;
    use crate::typespec::*;
    use serde_json::json;

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
}
