use super::*;
use crate::typespec::test_support::*;
use crate::typespec::*;
use serde_json::{Value as Json, json};

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
