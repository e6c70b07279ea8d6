//! JSON Schema reading and generation (DESIGN §2; host-boundary.txt
//! "Schemas"): two spellings of one type generate one schema; unsupported
//! keywords are diagnostics with a JSON Pointer; decoding follows the type.

#[path = "../../tests/fixtures/fixtures.rs"]
mod fixtures;

use flow_abi::schema::{self, ReadContext, Severity};
use flow_abi::{Type, TypeSet, decode};
use serde_json::{Value as Json, json};

fn read(schema: &Json) -> (TypeSet, Type) {
    let mut types = TypeSet::new();
    let mut ctx = ReadContext::new(&mut types, "t.json");
    let ty = schema::read_any(schema, "root", "", &mut ctx);
    assert!(!ctx.has_errors(), "{:?}", ctx.diagnostics);
    let ty = ty.expect("type");
    (types, ty)
}

fn generated(schema: &Json) -> String {
    let (types, ty) = read(schema);
    flow_abi::json::canonical(&schema::generate(&ty, &types, true))
}

fn diagnostics(schema: &Json) -> Vec<(Severity, String, &'static str)> {
    let mut types = TypeSet::new();
    let mut ctx = ReadContext::new(&mut types, "t.json");
    schema::read_any(schema, "root", "/state_schema", &mut ctx);
    ctx.diagnostics
        .into_iter()
        .map(|d| (d.severity, d.pointer, d.code))
        .collect()
}

#[test]
fn shorthand_and_full_schema_are_one_type() {
    let short = json!({"query": {"type": "string"}, "k": {"type": "integer"}});
    let full = json!({"type": "object", "required": ["query", "k"],
        "properties": {"k": {"type": "integer"}, "query": {"type": "string"}}});
    assert_eq!(generated(&short), generated(&full));
}

#[test]
fn enum_spellings_are_one_type() {
    let a = json!({"enum": ["low", "high"]});
    let b = json!({"oneOf": [{"const": "low"}, {"const": "high"}]});
    let c = json!({"type": "string", "enum": ["low", "high"]});
    assert_eq!(generated(&a), generated(&b));
    assert_eq!(generated(&a), generated(&c));
    assert_eq!(
        generated(&a),
        r##"{"$defs":{"t.json.root":{"oneOf":[{"const":"low"},{"const":"high"}]}},"$ref":"#/$defs/t.json.root"}"##
    );
}

#[test]
fn type_spellings_are_one_type() {
    assert_eq!(
        generated(&json!({"type": ["integer"]})),
        generated(&json!({"type": "integer"}))
    );
    assert_eq!(generated(&json!({})), generated(&json!(true)));
}

#[test]
fn design_table_types() {
    for (schema, want) in [
        (json!({"type": "integer"}), r#"{"type":"integer"}"#),
        (json!({"type": "number"}), r#"{"type":"number"}"#),
        (
            json!({"type": "string", "format": "date-time"}),
            r#"{"format":"date-time","type":"string"}"#,
        ),
        (
            json!({"type": "string", "format": "duration"}),
            r#"{"format":"duration","type":"string"}"#,
        ),
        (
            json!({"type": "string", "contentEncoding": "base64"}),
            r#"{"contentEncoding":"base64","type":"string"}"#,
        ),
        (json!({"type": "null"}), r#"{"type":"null"}"#),
        (
            json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true}),
            r#"{"items":{"type":"integer"},"type":"array","uniqueItems":true}"#,
        ),
        (
            json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}]}),
            r#"{"prefixItems":[{"type":"string"},{"type":"boolean"}],"type":"array"}"#,
        ),
        (
            json!({"type": "object", "additionalProperties": {"type": "number"}}),
            r#"{"additionalProperties":{"type":"number"},"type":"object"}"#,
        ),
        // DESIGN §4: a bare object is Dict<Text, json.Value>, a bare array List<json.Value>.
        (
            json!({"type": "object"}),
            r#"{"additionalProperties":{},"type":"object"}"#,
        ),
        (json!({"type": "array"}), r#"{"items":{},"type":"array"}"#),
    ] {
        assert_eq!(generated(&schema), want, "{schema}");
    }
}

#[test]
fn records_have_option_fields_and_docs() {
    let s = json!({"type": "object", "description": "A hit.",
        "properties": {"url": {"type": "string", "description": "Where."}, "score": {"type": "number"}},
        "required": ["url"]});
    assert_eq!(
        generated(&s),
        r##"{"$defs":{"t.json.root":{"description":"A hit.","properties":{"score":{"type":"number"},"url":{"description":"Where.","type":"string"}},"required":["url"],"type":"object"}},"$ref":"#/$defs/t.json.root"}"##
    );
    let (types, ty) = read(&s);
    let v = decode(r#"{"url":"x","score":1.50}"#, &ty, &types).unwrap();
    assert_eq!(v.canonical(), r#"{"score":1.5,"url":"x"}"#);
    let v = decode(r#"{"url":"x"}"#, &ty, &types).unwrap();
    assert_eq!(v.canonical(), r#"{"url":"x"}"#);
    let e = decode(r#"{"score":1}"#, &ty, &types).unwrap_err();
    assert!(
        e.to_string().contains("missing required field \"url\""),
        "{e}"
    );
}

#[test]
fn recursive_types_through_defs() {
    let s = json!({
        "$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            "required": ["name", "children"]}},
        "$ref": "#/$defs/Node"});
    let (types, ty) = read(&s);
    let g = flow_abi::json::canonical(&schema::generate(&ty, &types, true));
    assert_eq!(
        g,
        r##"{"$defs":{"t.json.root.Node":{"properties":{"children":{"items":{"$ref":"#/$defs/t.json.root.Node"},"type":"array"},"name":{"type":"string"}},"required":["children","name"],"type":"object"}},"$ref":"#/$defs/t.json.root.Node"}"##
    );
    let text = r#"{"name":"a","children":[{"name":"b","children":[]},{"children":[{"children":[],"name":"d"}],"name":"c"}]}"#;
    let v = decode(text, &ty, &types).unwrap();
    assert_eq!(
        v.canonical(),
        r#"{"children":[{"children":[],"name":"b"},{"children":[{"children":[],"name":"d"}],"name":"c"}],"name":"a"}"#
    );
    let e = decode(
        r#"{"name":"a","children":[{"name":"b","children":[{"name":1,"children":[]}]}]}"#,
        &ty,
        &types,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "$.children[0].children[0].name: expected Text, found number 1"
    );
}

#[test]
fn enums_with_payloads() {
    let s = json!({"oneOf": [
        {"const": "None"},
        {"type": "object", "properties": {"Card": {"type": "object",
            "properties": {"last4": {"type": "string"}}, "required": ["last4"]}}, "required": ["Card"]}]});
    let (types, ty) = read(&s);
    assert_eq!(
        decode(r#""None""#, &ty, &types).unwrap().canonical(),
        r#""None""#
    );
    assert_eq!(
        decode(r#"{"Card":{"last4":"4242"}}"#, &ty, &types)
            .unwrap()
            .canonical(),
        r#"{"Card":{"last4":"4242"}}"#
    );
    assert!(decode(r#"{"Card":{"last4":"4242"},"None":1}"#, &ty, &types).is_err());
    assert!(decode(r#""Card""#, &ty, &types).is_err());
    assert!(decode(r#"{"Cash":{}}"#, &ty, &types).is_err());
}

#[test]
fn decode_error_names_the_path() {
    let s = json!({"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"price": {"type": "number"}}, "required": ["price"]}}},
        "required": ["items"]});
    let (types, ty) = read(&s);
    let text = r#"{"items":[{"price":1},{"price":2},{"price":3},{"price":"9.99"}]}"#;
    let e = decode(text, &ty, &types).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"$.items[3].price: expected Decimal, found string "9.99""#
    );
}

#[test]
fn refinements_are_enforced_after_decoding() {
    let s = json!({"type": "object", "required": ["tags", "name", "score", "level"], "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "name": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "level": {"type": "integer", "enum": [1, 2, 3]}}});
    let (types, ty) = read(&s);
    assert!(
        decode(
            r#"{"tags":["a"],"name":"ab","score":0.5,"level":2}"#,
            &ty,
            &types
        )
        .is_ok()
    );
    for (bad, path) in [
        (r#"{"tags":[],"name":"ab","score":0.5,"level":2}"#, "$.tags"),
        (
            r#"{"tags":["a","b","c"],"name":"ab","score":0.5,"level":2}"#,
            "$.tags",
        ),
        (
            r#"{"tags":["a"],"name":"a","score":0.5,"level":2}"#,
            "$.name",
        ),
        (
            r#"{"tags":["a"],"name":"AB","score":0.5,"level":2}"#,
            "$.name",
        ),
        (
            r#"{"tags":["a"],"name":"ab","score":1.01,"level":2}"#,
            "$.score",
        ),
        (
            r#"{"tags":["a"],"name":"ab","score":-0.1,"level":2}"#,
            "$.score",
        ),
        (
            r#"{"tags":["a"],"name":"ab","score":0.5,"level":4}"#,
            "$.level",
        ),
    ] {
        let e = decode(bad, &ty, &types).unwrap_err();
        assert_eq!(e.path(), path, "{bad}: {e}");
    }
}

#[test]
fn unsupported_keywords_are_diagnostics_with_pointers() {
    let d = diagnostics(&json!({"type": "object", "properties": {
        "a": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "b": {"type": ["string", "null"]},
        "c": {"type": "integer", "multipleOf": 2},
        "d": {"type": "string", "default": "x"},
        "e": {"type": "string", "x-ui": "wide"},
        "f": {"$ref": "https://example.com/s.json"},
        "g": {"type": "integer", "minLength": 2}}}));
    let has = |sev: Severity, ptr: &str, code: &str| {
        assert!(
            d.iter()
                .any(|(s, p, c)| *s == sev && p == ptr && *c == code),
            "missing {sev:?} {ptr} {code} in {d:?}"
        );
    };
    has(
        Severity::Error,
        "/state_schema/properties/a/anyOf",
        "schema.unsupported-keyword",
    );
    has(
        Severity::Error,
        "/state_schema/properties/b/type",
        "schema.type-union",
    );
    has(
        Severity::Error,
        "/state_schema/properties/c/multipleOf",
        "schema.unsupported-keyword",
    );
    has(
        Severity::Warning,
        "/state_schema/properties/d/default",
        "schema.default-not-filled",
    );
    has(
        Severity::Warning,
        "/state_schema/properties/e/x-ui",
        "schema.unknown-keyword",
    );
    has(
        Severity::Error,
        "/state_schema/properties/f/$ref",
        "schema.unsupported-ref",
    );
    has(
        Severity::Error,
        "/state_schema/properties/g/minLength",
        "schema.misplaced-keyword",
    );
}

#[test]
fn bad_references_are_diagnostics() {
    let d = diagnostics(&json!({"$ref": "#/$defs/Missing"}));
    assert!(
        d.iter().any(|(_, _, c)| *c == "schema.unresolved-ref"),
        "{d:?}"
    );
    let d = diagnostics(&json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}));
    assert!(
        d.iter().any(|(_, _, c)| *c == "schema.recursive-alias"),
        "{d:?}"
    );
    let d = diagnostics(
        &json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
    );
    assert!(
        d.iter()
            .any(|(_, p, c)| *c == "schema.required-unknown" && p == "/state_schema/required/0"),
        "{d:?}"
    );
}

/// Every schema-bearing field of every FlowSpec file of `dir` reads with no
/// error; returns how many schemas there were.
fn corpus_schemas(dir: &std::path::Path) -> usize {
    let mut seen = 0;
    for (name, doc) in fixtures::flowspec_files(dir) {
        let mut found = Vec::new();
        collect_schemas(&doc, "", &mut found);
        let mut types = TypeSet::new();
        let mut ctx = ReadContext::new(&mut types, &name);
        for (i, (ptr, s)) in found.iter().enumerate() {
            seen += 1;
            schema::read_any(s, &format!("s{i}"), ptr, &mut ctx);
        }
        let errors: Vec<_> = ctx
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    seen
}

#[test]
fn repo_corpus_schemas_read_without_errors() {
    let seen = corpus_schemas(&fixtures::flowspec_corpus());
    assert!(seen >= 25, "only {seen} schemas found");
}

#[test]
#[ignore = "shared conformance: run by .ci/run when ../shared exists"]
fn shared_corpus_schemas_read_without_errors() {
    let Some(dir) = fixtures::shared("flowspec-corpus") else {
        return;
    };
    let seen = corpus_schemas(&dir);
    assert!(seen > 20, "only {seen} schemas found");
}

fn collect_schemas(v: &Json, ptr: &str, out: &mut Vec<(String, Json)>) {
    match v {
        Json::Object(m) => {
            for (k, x) in m {
                let p = format!("{ptr}/{}", schema::pointer_token(k));
                if matches!(
                    k.as_str(),
                    "state_schema" | "output_schema" | "input_schema" | "resume_schema" | "schema"
                ) && x.is_object()
                {
                    out.push((p, x.clone()));
                } else {
                    collect_schemas(x, &p, out);
                }
            }
        }
        Json::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_schemas(x, &format!("{ptr}/{i}"), out);
            }
        }
        _ => {}
    }
}
