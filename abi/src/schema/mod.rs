//! JSON Schema ⇄ Flow types.
//!
//! Reading (DESIGN §2): a FlowSpec schema becomes a Flow type once, and from
//! then on flowd works with the type. A keyword flowd does not understand is a
//! diagnostic with a JSON Pointer, never silently ignored.
//!
//! Generation (host-boundary.txt, "Schemas"): "Every data type has one JSON
//! Schema (draft 2020-12), generated from its declaration. Nothing is written
//! by hand." So two spellings of one type generate one schema.
//!
//! Identities. Records and enums are declarations (see `types`). A record or
//! enum spelled inline gets the identity `<module>.<root>.<path>` from where
//! it stands (`support.json.web-search.filters`); a `$defs` entry gets
//! `<module>.<root>.<Name>`. The caller names each root uniquely.

mod decl;
mod generate;
mod reader;
mod refine;

pub use generate::generate;

use crate::types::{Body, Field, Type, TypeSet};
use reader::Reader;
use serde_json::{Map, Value as Json};

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// A problem found while reading a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable code, `schema.<what>`.
    pub code: &'static str,
    /// JSON Pointer to the offending keyword or value.
    pub pointer: String,
    pub message: String,
}

/// The state of reading the schemas of one module.
pub struct ReadContext<'t> {
    pub types: &'t mut TypeSet,
    /// Identity prefix of the declarations read, e.g. `support.json`.
    pub module: String,
    pub diagnostics: Vec<Diagnostic>,
}

impl<'t> ReadContext<'t> {
    pub fn new(types: &'t mut TypeSet, module: &str) -> ReadContext<'t> {
        ReadContext {
            types,
            module: module.to_string(),
            diagnostics: Vec::new(),
        }
    }

    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

/// Reads a full JSON Schema. `root` names it within the module (e.g.
/// `web-search.output`), `pointer` locates it in its file. Returns `None`
/// when an error diagnostic was recorded for it.
pub fn read(schema: &Json, root: &str, pointer: &str, ctx: &mut ReadContext<'_>) -> Option<Type> {
    let before = error_count(ctx);
    let mut r = Reader::new(ctx, schema, root);
    let ty = r.schema(schema, root, pointer);
    if error_count(r.ctx) > before {
        None
    } else {
        ty
    }
}

/// Reads a schema that may be the FlowSpec shorthand, a bare map of field
/// name to schema (DESIGN §2: "a record whose fields are all required"), or a
/// full JSON Schema.
pub fn read_any(
    schema: &Json,
    root: &str,
    pointer: &str,
    ctx: &mut ReadContext<'_>,
) -> Option<Type> {
    match schema {
        Json::Object(map) if is_shorthand(map) => {
            let full = shorthand_to_schema(map);
            read(&full, root, pointer, ctx)
        }
        _ => read(schema, root, pointer, ctx),
    }
}

/// Reads an object schema (full or shorthand) as a list of fields, in name
/// (code-point) order: a FlowSpec tool's params are its `input_schema`
/// properties (DESIGN §2), and a field not in `required` has an Option type.
pub fn read_fields(
    schema: &Json,
    root: &str,
    pointer: &str,
    ctx: &mut ReadContext<'_>,
) -> Option<Vec<Field>> {
    let ty = read_any(schema, root, pointer, ctx)?;
    match ty.base() {
        Type::Named(id) => match &ctx.types.get(*id).body {
            Body::Record(fields) => Some(fields.clone()),
            Body::Enum(_) => None,
        },
        _ => None,
    }
    .or_else(|| {
        ctx.diagnostics.push(Diagnostic {
            severity: Severity::Error,
            code: "schema.not-a-record",
            pointer: pointer.to_string(),
            message: "expected an object schema with `properties` (or the shorthand map of field name to schema)".into(),
        });
        None
    })
}

/// Whether an object is the FlowSpec shorthand rather than a JSON Schema: it
/// has no schema keyword at its top level and every value is an object.
pub fn is_shorthand(map: &Map<String, Json>) -> bool {
    const SCHEMA_WORDS: &[&str] = &[
        "type",
        "properties",
        "$ref",
        "$defs",
        "definitions",
        "enum",
        "oneOf",
        "anyOf",
        "allOf",
        "items",
        "prefixItems",
        "const",
        "additionalProperties",
        "format",
        "$schema",
    ];
    !map.is_empty()
        && map.values().all(Json::is_object)
        && !map.iter().any(|(k, v)| {
            SCHEMA_WORDS.contains(&k.as_str())
                && !(k == "type" && v.is_object())
                && !(k == "properties" && v.get("type").is_some_and(Json::is_string))
        })
}

fn shorthand_to_schema(map: &Map<String, Json>) -> Json {
    let mut full = Map::new();
    full.insert("type".into(), Json::String("object".into()));
    full.insert("properties".into(), Json::Object(map.clone()));
    full.insert(
        "required".into(),
        Json::Array(map.keys().map(|k| Json::String(k.clone())).collect()),
    );
    Json::Object(full)
}

fn error_count(ctx: &ReadContext<'_>) -> usize {
    ctx.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count()
}

/// Escapes a JSON Pointer token.
pub fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}
