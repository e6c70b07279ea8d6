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
