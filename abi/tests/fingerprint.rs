//! Fingerprints (host-boundary.txt, "Identity and fingerprints"): the
//! fingerprint moves when a parameter is added, removed, renamed, retyped or
//! reordered, or when the success or error type changes; it stays for a
//! description change or another spelling of the same types.

use flow_abi::schema::{self, ReadContext};
use flow_abi::signature::{ToolDecl, term, tool_error, types_document};
use flow_abi::{Field, Type, TypeSet};
use serde_json::{Value as Json, json};

/// A FlowSpec tool: params from `input_schema`, ok from `output_schema`,
/// err the default ToolError (DESIGN §2).
fn tool(input: &Json, output: &Json) -> (ToolDecl, TypeSet) {
    let mut types = TypeSet::new();
    let mut ctx = ReadContext::new(&mut types, "support.json");
    let params = schema::read_fields(input, "web-search.args", "/tools/0/input_schema", &mut ctx)
        .expect("params");
    let ok =
        schema::read_any(output, "web-search.ok", "/tools/0/output_schema", &mut ctx).expect("ok");
    assert!(!ctx.has_errors(), "{:?}", ctx.diagnostics);
    let err = tool_error(&mut types);
    (
        ToolDecl {
            identity: "support.json#web-search".into(),
            doc: None,
            params,
            ok,
            err,
        },
        types,
    )
}

fn fp(input: Json, output: Json) -> String {
    let (t, types) = tool(&input, &output);
    t.fingerprint(&types)
}

fn base_in() -> Json {
    json!({"query": {"type": "string", "description": "What to look for."}, "limit": {"type": "integer"}})
}

fn base_out() -> Json {
    json!({"type": "object", "properties": {"hits": {"type": "array", "items": {"type": "string"}}}, "required": ["hits"]})
}

#[test]
fn fingerprint_form() {
    let f = fp(base_in(), base_out());
    assert!(f.starts_with("sha256:"));
    assert_eq!(f.len(), "sha256:".len() + 64);
    assert!(
        f[7..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    // Deterministic.
    assert_eq!(f, fp(base_in(), base_out()));
}

#[test]
fn moves_on_signature_changes() {
    let base = fp(base_in(), base_out());
    let changes = [
        (
            "param added",
            json!({"query": {"type": "string"}, "limit": {"type": "integer"}, "lang": {"type": "string"}}),
            base_out(),
        ),
        (
            "param removed",
            json!({"query": {"type": "string"}}),
            base_out(),
        ),
        (
            "param renamed",
            json!({"q": {"type": "string"}, "limit": {"type": "integer"}}),
            base_out(),
        ),
        (
            "param retyped",
            json!({"query": {"type": "string"}, "limit": {"type": "number"}}),
            base_out(),
        ),
        (
            "param made optional",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}),
            base_out(),
        ),
        (
            "ok changed",
            base_in(),
            json!({"type": "object", "properties": {"hits": {"type": "array", "items": {"type": "integer"}}}, "required": ["hits"]}),
        ),
        (
            "ok nested field renamed",
            base_in(),
            json!({"type": "object", "properties": {"results": {"type": "array", "items": {"type": "string"}}}, "required": ["results"]}),
        ),
    ];
    for (what, input, output) in changes {
        assert_ne!(fp(input, output), base, "{what}");
    }
}

#[test]
fn moves_when_params_are_reordered_or_err_changes() {
    let (t, types) = tool(&base_in(), &base_out());
    let base = t.fingerprint(&types);
    let mut swapped = t.clone();
    swapped.params.reverse();
    assert_ne!(swapped.fingerprint(&types), base, "reordered params");
    let mut other_err = t.clone();
    other_err.err = Type::Text;
    assert_ne!(other_err.fingerprint(&types), base, "err changed");
    let mut no_err = t.clone();
    no_err.err = Type::Never;
    assert_ne!(no_err.fingerprint(&types), base, "err changed to Never");
}

#[test]
fn stays_for_descriptions_and_spellings() {
    let base = fp(base_in(), base_out());
    // Descriptions changed or removed.
    assert_eq!(
        fp(
            json!({"query": {"type": "string", "description": "Other words."}, "limit": {"type": "integer"}}),
            base_out()
        ),
        base
    );
    assert_eq!(
        fp(
            base_in(),
            json!({"type": "object", "description": "Results.", "properties": {"hits": {"type": "array", "description": "Found.", "items": {"type": "string"}}}, "required": ["hits"]})
        ),
        base
    );
    // The shorthand and the full schema of the same params.
    assert_eq!(
        fp(
            json!({"type": "object", "properties": {"limit": {"type": "integer"}, "query": {"type": "string"}}, "required": ["query", "limit"]}),
            base_out()
        ),
        base
    );
    // JSON object order carries no meaning (an editor re-sorting keys).
    let reordered: Json =
        serde_json::from_str(r#"{"limit": {"type": "integer"}, "query": {"type": ["string"]}}"#)
            .unwrap();
    assert_eq!(fp(reordered, base_out()), base);
    // Annotations are not part of the signature.
    assert_eq!(
        fp(
            json!({"query": {"type": "string", "title": "Q", "examples": ["x"]}, "limit": {"type": "integer"}}),
            base_out()
        ),
        base
    );
}

#[test]
fn describe_signature_keeps_descriptions() {
    let (t, types) = tool(&base_in(), &base_out());
    let with = flow_abi::json::canonical(&t.signature(&types, true));
    let without = flow_abi::json::canonical(&t.signature(&types, false));
    assert!(with.contains("What to look for."));
    assert!(!without.contains("description"));
    assert!(
        without.starts_with(r#"{"err":{"$defs":{"std/tool.ToolError":"#),
        "{without}"
    );
    assert!(
        without.contains(r##""$ref":"#/$defs/std~1tool.ToolError""##),
        "{without}"
    );
}

#[test]
fn tools_entry_and_types_document() {
    let (t, types) = tool(&base_in(), &base_out());
    let entry = t.tools_entry(&types);
    assert_eq!(entry["tool"], "support.json#web-search");
    assert_eq!(
        entry["params"],
        json!([{"name": "limit", "type": "Int"}, {"name": "query", "type": "Text"}])
    );
    assert_eq!(entry["ok"], json!({"Named": "support.json.web-search.ok"}));
    assert_eq!(entry["err"], json!({"Named": "std/tool.ToolError"}));
    let doc = types_document(&t.roots(), &types);
    assert_eq!(
        doc["support.json.web-search.ok"],
        json!({"name": "ok", "identity": "support.json.web-search.ok", "args": [], "doc": null, "kind": "record",
               "fields": [{"name": "hits", "type": {"List": "Text"}, "doc": null}]})
    );
    assert_eq!(doc.as_object().unwrap().len(), 2);
    // Terms of the compound types.
    let ty = Type::Dict(
        Box::new(Type::Int),
        Box::new(Type::Option(Box::new(Type::Tuple(vec![
            Type::Bool,
            Type::Json,
        ])))),
    );
    assert_eq!(
        term(&ty, &types),
        json!({"Dict": ["Int", {"Option": {"Tuple": ["Bool", "json.Value"]}}]})
    );
    let f = Field {
        name: "x".into(),
        ty: Type::Set(Box::new(Type::Instant)),
        doc: None,
    };
    assert_eq!(term(&f.ty, &types), json!({"Set": "Instant"}));
}
