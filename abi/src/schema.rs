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

use crate::types::{Body, Ctor, Decl, DeclId, Field, Pattern, Refinement, Type, TypeSet};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

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
    let mut r = Reader {
        ctx,
        root_schema: schema,
        root: root.to_string(),
        defs: BTreeMap::new(),
        preset: None,
    };
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

enum DefState {
    Done(Type),
    /// Being read; a declaration reserved for it, if it is nominal.
    Reading(Option<DeclId>),
}

struct Reader<'c, 't, 's> {
    ctx: &'c mut ReadContext<'t>,
    root_schema: &'s Json,
    root: String,
    defs: BTreeMap<String, DefState>,
    /// A declaration reserved for the `$defs` entry being read.
    preset: Option<(String, DeclId)>,
}

/// Keywords that only annotate.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "reducer",
    "$schema",
    "$id",
];

/// Assertion keywords flowd does not enforce: refusing them is better than
/// accepting a flow whose schema promises a check nobody makes.
const UNSUPPORTED: &[&str] = &[
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "$dynamicRef",
    "$dynamicAnchor",
    "$anchor",
    "contentMediaType",
    "contentSchema",
    "dependencies",
    "nullable",
];

impl Reader<'_, '_, '_> {
    fn diag(&mut self, severity: Severity, code: &'static str, pointer: String, message: String) {
        self.ctx.diagnostics.push(Diagnostic {
            severity,
            code,
            pointer,
            message,
        });
    }

    fn error(&mut self, code: &'static str, pointer: String, message: impl Into<String>) {
        self.diag(Severity::Error, code, pointer, message.into());
    }

    fn identity(&self, path: &str) -> String {
        format!("{}.{}", self.ctx.module, path)
    }

    fn schema(&mut self, schema: &Json, path: &str, ptr: &str) -> Option<Type> {
        let map = match schema {
            Json::Bool(true) => return Some(Type::Json),
            Json::Bool(false) => return Some(Type::Never),
            Json::Object(m) => m,
            _ => {
                self.error(
                    "schema.not-a-schema",
                    ptr.to_string(),
                    "a schema is an object (or true/false)",
                );
                return None;
            }
        };
        self.check_keywords(map, ptr);
        if let Some(r) = map.get("$ref") {
            return self.reference(r, &format!("{ptr}/$ref"));
        }
        if let Some(v) = map.get("oneOf") {
            return self.one_of(map, v, path, ptr);
        }
        let ty_word = match map.get("type") {
            None => None,
            Some(Json::String(s)) => Some(s.as_str()),
            Some(Json::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str(),
            Some(Json::Array(_)) => {
                self.error(
                    "schema.type-union",
                    format!("{ptr}/type"),
                    "a list of types is not supported; to make a record field optional, leave it out of `required`",
                );
                return None;
            }
            Some(_) => {
                self.error(
                    "schema.bad-type",
                    format!("{ptr}/type"),
                    "`type` is a string",
                );
                return None;
            }
        };
        if let Some(e) = map.get("enum") {
            return self.enumeration(map, e, ty_word, path, ptr);
        }
        if map.contains_key("const") {
            self.error(
                "schema.const",
                format!("{ptr}/const"),
                "`const` is supported only in the branches of a `oneOf` enum",
            );
            return None;
        }
        let base = match ty_word {
            Some("integer") => Some(Type::Int),
            Some("number") => Some(Type::Decimal),
            Some("boolean") => Some(Type::Bool),
            Some("null") => Some(Type::Unit),
            Some("string") => self.string(map, ptr),
            Some("array") => self.array(map, path, ptr),
            Some("object") => self.object(map, path, ptr),
            None if map.contains_key("properties") => self.object(map, path, ptr),
            None if map.contains_key("items") || map.contains_key("prefixItems") => {
                self.array(map, path, ptr)
            }
            None => Some(Type::Json),
            Some(other) => {
                self.error(
                    "schema.bad-type",
                    format!("{ptr}/type"),
                    format!("unknown type {other:?}"),
                );
                None
            }
        }?;
        self.refine(base, map, ptr)
    }

    fn check_keywords(&mut self, map: &Map<String, Json>, ptr: &str) {
        const KNOWN: &[&str] = &[
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "prefixItems",
            "uniqueItems",
            "enum",
            "const",
            "oneOf",
            "format",
            "contentEncoding",
            "$ref",
            "$defs",
            "definitions",
            "default",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "minimum",
            "maximum",
            "pattern",
        ];
        for (k, v) in map {
            let at = format!("{ptr}/{}", pointer_token(k));
            if UNSUPPORTED.contains(&k.as_str()) {
                self.error(
                    "schema.unsupported-keyword",
                    at,
                    format!("`{k}` is not supported: flowd would not enforce it"),
                );
            } else if k == "default" {
                self.diag(
                    Severity::Warning,
                    "schema.default-not-filled",
                    at,
                    "`default` is accepted but never filled in: decoding does not fill defaults"
                        .into(),
                );
            } else if (k == "$defs" || k == "definitions") && !std::ptr::eq(map, self.root_map()) {
                self.error(
                    "schema.nested-defs",
                    at,
                    format!("`{k}` is supported only at the top of a schema"),
                );
            } else if k == "description" && !v.is_string() {
                self.error("schema.bad-annotation", at, "`description` is a string");
            } else if !KNOWN.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                self.diag(
                    Severity::Warning,
                    "schema.unknown-keyword",
                    at,
                    format!("unknown keyword `{k}` is ignored"),
                );
            }
        }
    }

    fn root_map(&self) -> &Map<String, Json> {
        static EMPTY: std::sync::OnceLock<Map<String, Json>> = std::sync::OnceLock::new();
        match self.root_schema {
            Json::Object(m) => m,
            _ => EMPTY.get_or_init(Map::new),
        }
    }

    fn doc(map: &Map<String, Json>) -> Option<String> {
        map.get("description")
            .and_then(Json::as_str)
            .map(str::to_string)
    }

    fn string(&mut self, map: &Map<String, Json>, ptr: &str) -> Option<Type> {
        if let Some(enc) = map.get("contentEncoding") {
            if enc.as_str() == Some("base64") {
                return Some(Type::Bytes);
            }
            self.error(
                "schema.content-encoding",
                format!("{ptr}/contentEncoding"),
                "only contentEncoding \"base64\" is supported",
            );
            return None;
        }
        match map.get("format").map(|f| f.as_str()) {
            None => Some(Type::Text),
            Some(Some("date-time")) => Some(Type::Instant),
            Some(Some("duration")) => Some(Type::Duration),
            Some(Some(other)) => {
                self.diag(
                    Severity::Warning,
                    "schema.format-not-checked",
                    format!("{ptr}/format"),
                    format!("format {other:?} is not checked; the value is Text"),
                );
                Some(Type::Text)
            }
            Some(None) => {
                self.error(
                    "schema.bad-format",
                    format!("{ptr}/format"),
                    "`format` is a string",
                );
                None
            }
        }
    }

    fn array(&mut self, map: &Map<String, Json>, path: &str, ptr: &str) -> Option<Type> {
        if let Some(prefix) = map.get("prefixItems") {
            let Some(parts) = prefix.as_array() else {
                self.error(
                    "schema.bad-prefix-items",
                    format!("{ptr}/prefixItems"),
                    "`prefixItems` is an array of schemas",
                );
                return None;
            };
            if parts.len() < 2 {
                self.error(
                    "schema.short-tuple",
                    format!("{ptr}/prefixItems"),
                    "a tuple has at least two parts",
                );
                return None;
            }
            if !matches!(map.get("items"), None | Some(Json::Bool(false))) {
                self.error(
                    "schema.tuple-items",
                    format!("{ptr}/items"),
                    "a tuple (`prefixItems`) takes no further `items`",
                );
                return None;
            }
            let mut tys = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                tys.push(self.schema(p, &format!("{path}.{i}"), &format!("{ptr}/prefixItems/{i}")));
            }
            return tys.into_iter().collect::<Option<Vec<_>>>().map(Type::Tuple);
        }
        let item = match map.get("items") {
            None => Type::Json,
            Some(s) => self.schema(s, &format!("{path}.item"), &format!("{ptr}/items"))?,
        };
        match map.get("uniqueItems") {
            None | Some(Json::Bool(false)) => Some(Type::List(Box::new(item))),
            Some(Json::Bool(true)) => Some(Type::Set(Box::new(item))),
            Some(_) => {
                self.error(
                    "schema.bad-unique-items",
                    format!("{ptr}/uniqueItems"),
                    "`uniqueItems` is a boolean",
                );
                None
            }
        }
    }

    fn object(&mut self, map: &Map<String, Json>, path: &str, ptr: &str) -> Option<Type> {
        let additional = map.get("additionalProperties");
        let Some(props) = map.get("properties") else {
            return match additional {
                None | Some(Json::Bool(true)) => {
                    Some(Type::Dict(Box::new(Type::Text), Box::new(Type::Json)))
                }
                Some(Json::Bool(false)) => self.record(map, &Map::new(), path, ptr),
                Some(s) => {
                    let v = self.schema(
                        s,
                        &format!("{path}.value"),
                        &format!("{ptr}/additionalProperties"),
                    )?;
                    Some(Type::Dict(Box::new(Type::Text), Box::new(v)))
                }
            };
        };
        let Some(props) = props.as_object() else {
            self.error(
                "schema.bad-properties",
                format!("{ptr}/properties"),
                "`properties` is an object of schemas",
            );
            return None;
        };
        match additional {
            None | Some(Json::Bool(true)) => {}
            Some(Json::Bool(false)) => self.diag(
                Severity::Warning,
                "schema.closed-record",
                format!("{ptr}/additionalProperties"),
                "extra fields are dropped when decoding, not refused (replies may carry extra fields)".into(),
            ),
            Some(_) => {
                self.error(
                    "schema.record-and-dict",
                    format!("{ptr}/additionalProperties"),
                    "an object with both `properties` and an `additionalProperties` schema is not supported",
                );
                return None;
            }
        }
        self.record(map, props, path, ptr)
    }

    fn record(
        &mut self,
        map: &Map<String, Json>,
        props: &Map<String, Json>,
        path: &str,
        ptr: &str,
    ) -> Option<Type> {
        let mut required: Vec<&str> = Vec::new();
        match map.get("required") {
            None => {}
            Some(Json::Array(names)) => {
                for (i, n) in names.iter().enumerate() {
                    let at = format!("{ptr}/required/{i}");
                    match n.as_str() {
                        Some(s) if !props.contains_key(s) => {
                            self.error(
                                "schema.required-unknown",
                                at,
                                format!("required field {s:?} is not among the properties"),
                            );
                        }
                        Some(s) if required.contains(&s) => {
                            self.error(
                                "schema.required-duplicate",
                                at,
                                format!("{s:?} is listed twice"),
                            );
                        }
                        Some(s) => required.push(s),
                        None => {
                            self.error("schema.bad-required", at, "`required` lists field names")
                        }
                    }
                }
            }
            Some(_) => {
                self.error(
                    "schema.bad-required",
                    format!("{ptr}/required"),
                    "`required` is an array of field names",
                );
                return None;
            }
        }
        let id = self.declare(path)?;
        let mut fields = Vec::new();
        let mut ok = true;
        // `properties` is a BTreeMap: fields in code-point order, since JSON
        // object order carries no meaning (DESIGN §2).
        for (name, s) in props {
            let at = format!("{ptr}/properties/{}", pointer_token(name));
            let Some(ty) = self.schema(s, &format!("{path}.{name}"), &at) else {
                ok = false;
                continue;
            };
            let ty = if required.contains(&name.as_str()) {
                ty
            } else {
                Type::Option(Box::new(ty))
            };
            let doc = s.as_object().and_then(Self::doc);
            fields.push(Field {
                name: name.clone(),
                ty,
                doc,
            });
        }
        self.ctx
            .types
            .define(id, Self::doc(map), Body::Record(fields));
        ok.then_some(Type::Named(id))
    }

    /// Reserves the declaration for a record or enum at `path`.
    fn declare(&mut self, path: &str) -> Option<DeclId> {
        if let Some((p, id)) = self.preset.take() {
            if p == path {
                return Some(id);
            }
            self.preset = Some((p, id));
        }
        let identity = self.identity(path);
        let name = path.rsplit('.').next().unwrap_or(path).to_string();
        match self.ctx.types.reserve(&identity, &name) {
            Ok(id) => Some(id),
            Err(e) => {
                self.error("schema.duplicate-identity", String::new(), e);
                None
            }
        }
    }

    fn enumeration(
        &mut self,
        map: &Map<String, Json>,
        values: &Json,
        ty_word: Option<&str>,
        path: &str,
        ptr: &str,
    ) -> Option<Type> {
        let at = format!("{ptr}/enum");
        let Some(values) = values.as_array().filter(|v| !v.is_empty()) else {
            self.error("schema.bad-enum", at, "`enum` is a non-empty array");
            return None;
        };
        if values.iter().all(Json::is_string) && matches!(ty_word, None | Some("string")) {
            let mut ctors: Vec<Ctor> = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let name = v.as_str().unwrap_or_default().to_string();
                if ctors.iter().any(|c| c.name == name) {
                    self.error(
                        "schema.enum-duplicate",
                        format!("{at}/{i}"),
                        format!("{name:?} is listed twice"),
                    );
                    return None;
                }
                ctors.push(Ctor {
                    name,
                    doc: None,
                    payload: None,
                });
            }
            let id = self.declare(path)?;
            self.ctx.types.define(id, Self::doc(map), Body::Enum(ctors));
            return Some(Type::Named(id));
        }
        // An enum of other values is an assertion on the base type.
        let mut rest = map.clone();
        rest.remove("enum");
        let base = if ty_word.is_some() {
            self.schema(&Json::Object(rest), path, ptr)?
        } else {
            Type::Json
        };
        let mut allowed = Vec::new();
        for (i, v) in values.iter().enumerate() {
            match crate::decode::decode_json(v, &base, self.ctx.types) {
                Ok(val) => allowed.push(val.canonical()),
                Err(e) => {
                    self.error(
                        "schema.enum-value",
                        format!("{at}/{i}"),
                        format!("enum value does not fit the type: {e}"),
                    );
                    return None;
                }
            }
        }
        Some(Type::Refined(
            Box::new(base),
            Box::new(Refinement {
                one_of: Some(allowed),
                ..Refinement::default()
            }),
        ))
    }

    fn one_of(
        &mut self,
        map: &Map<String, Json>,
        branches: &Json,
        path: &str,
        ptr: &str,
    ) -> Option<Type> {
        let at = format!("{ptr}/oneOf");
        let Some(branches) = branches.as_array().filter(|b| !b.is_empty()) else {
            self.error("schema.bad-one-of", at, "`oneOf` is a non-empty array");
            return None;
        };
        let id = self.declare(path)?;
        let mut ctors: Vec<Ctor> = Vec::new();
        let mut ok = true;
        for (i, b) in branches.iter().enumerate() {
            let bptr = format!("{at}/{i}");
            let Some(bm) = b.as_object() else {
                self.error(
                    "schema.one-of-branch",
                    bptr,
                    "a `oneOf` branch is an object",
                );
                ok = false;
                continue;
            };
            let doc = Self::doc(bm);
            let ctor = if let Some(c) = bm.get("const") {
                let Some(name) = c.as_str() else {
                    self.error(
                        "schema.one-of-branch",
                        format!("{bptr}/const"),
                        "an enum constructor's `const` is a string",
                    );
                    ok = false;
                    continue;
                };
                for k in bm.keys() {
                    if !matches!(k.as_str(), "const" | "type") && !ANNOTATIONS.contains(&k.as_str())
                    {
                        self.error(
                            "schema.one-of-branch",
                            format!("{bptr}/{}", pointer_token(k)),
                            format!("`{k}` is not allowed in an enum constructor branch"),
                        );
                        ok = false;
                    }
                }
                Ctor {
                    name: name.to_string(),
                    doc,
                    payload: None,
                }
            } else {
                let props = bm.get("properties").and_then(Json::as_object);
                let single = props.filter(|p| p.len() == 1);
                let required_ok = single.is_some_and(|p| {
                    bm.get("required")
                        .and_then(Json::as_array)
                        .is_some_and(|r| {
                            r.len() == 1 && p.keys().next().map(String::as_str) == r[0].as_str()
                        })
                });
                let (Some(p), true) = (single, required_ok) else {
                    self.error(
                        "schema.one-of-branch",
                        bptr,
                        "`oneOf` is supported as an enum: each branch a `const` string, or an object with one required property naming the constructor",
                    );
                    ok = false;
                    continue;
                };
                let Some((name, ps)) = p.iter().next() else {
                    continue;
                };
                let pptr = format!("{bptr}/properties/{}", pointer_token(name));
                match self.schema(ps, &format!("{path}.{name}"), &pptr) {
                    Some(t) => Ctor {
                        name: name.clone(),
                        doc,
                        payload: Some(t),
                    },
                    None => {
                        ok = false;
                        continue;
                    }
                }
            };
            if ctors.iter().any(|c| c.name == ctor.name) {
                self.error(
                    "schema.enum-duplicate",
                    bptr,
                    format!("constructor {:?} is listed twice", ctor.name),
                );
                ok = false;
                continue;
            }
            ctors.push(ctor);
        }
        self.ctx.types.define(id, Self::doc(map), Body::Enum(ctors));
        ok.then_some(Type::Named(id))
    }

    fn reference(&mut self, r: &Json, ptr: &str) -> Option<Type> {
        let Some(r) = r.as_str() else {
            self.error("schema.bad-ref", ptr.to_string(), "`$ref` is a string");
            return None;
        };
        let (section, name) = match r
            .strip_prefix("#/$defs/")
            .map(|n| ("$defs", n))
            .or_else(|| r.strip_prefix("#/definitions/").map(|n| ("definitions", n)))
        {
            Some((s, n)) if !n.contains('/') => (s, n.replace("~1", "/").replace("~0", "~")),
            _ => {
                self.error(
                    "schema.unsupported-ref",
                    ptr.to_string(),
                    format!(
                        "only references into this schema's own $defs are supported, not {r:?}"
                    ),
                );
                return None;
            }
        };
        match self.defs.get(&name) {
            Some(DefState::Done(t)) => return Some(t.clone()),
            Some(DefState::Reading(Some(id))) => return Some(Type::Named(*id)),
            Some(DefState::Reading(None)) => {
                self.error(
                    "schema.recursive-alias",
                    ptr.to_string(),
                    format!("{name:?} refers to itself without a record or enum in between"),
                );
                return None;
            }
            None => {}
        }
        let Some(def) = self.root_schema.get(section).and_then(|d| d.get(&name)) else {
            self.error(
                "schema.unresolved-ref",
                ptr.to_string(),
                format!("no definition {name:?} in {section}"),
            );
            return None;
        };
        let def_ptr = format!("/{section}/{}", pointer_token(&name));
        // A nominal definition (record or enum) is reserved first so its
        // body can refer to it.
        let nominal = def.as_object().is_some_and(|m| {
            m.contains_key("properties")
                || m.contains_key("oneOf")
                || m.get("enum")
                    .and_then(Json::as_array)
                    .is_some_and(|v| v.iter().all(Json::is_string))
        });
        let path = format!("{}.{name}", self.root);
        let ty = if nominal {
            // Reserve the declaration first so its body can refer to it; the
            // record or enum reader picks the reservation up by its path.
            let id = self.declare(&path)?;
            self.defs.insert(name.clone(), DefState::Reading(Some(id)));
            self.preset = Some((path.clone(), id));
            let t = self.schema(def, &path, &def_ptr);
            self.preset = None;
            t
        } else {
            self.defs.insert(name.clone(), DefState::Reading(None));
            self.schema(def, &path, &def_ptr)
        };
        match &ty {
            Some(t) => {
                self.defs.insert(name, DefState::Done(t.clone()));
            }
            None => {
                self.defs.remove(&name);
            }
        }
        ty
    }

    fn refine(&mut self, base: Type, map: &Map<String, Json>, ptr: &str) -> Option<Type> {
        let mut r = Refinement::default();
        let mut any = false;
        let b = base.base().clone();
        let is_list = matches!(b, Type::List(_) | Type::Set(_) | Type::Tuple(_));
        let is_text = b == Type::Text;
        let is_num = matches!(b, Type::Int | Type::Decimal);
        for (key, slot) in [
            ("minItems", 0),
            ("maxItems", 1),
            ("minLength", 2),
            ("maxLength", 3),
        ] {
            let Some(v) = map.get(key) else { continue };
            let at = format!("{ptr}/{key}");
            let fits = if slot < 2 { is_list } else { is_text };
            if !fits {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`{key}` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            let Some(n) = v.as_u64() else {
                self.error(
                    "schema.bad-bound",
                    at,
                    format!("`{key}` is a non-negative integer"),
                );
                return None;
            };
            any = true;
            match slot {
                0 => r.min_items = Some(n),
                1 => r.max_items = Some(n),
                2 => r.min_length = Some(n),
                _ => r.max_length = Some(n),
            }
        }
        for key in ["minimum", "maximum"] {
            let Some(v) = map.get(key) else { continue };
            let at = format!("{ptr}/{key}");
            if !is_num {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`{key}` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            let Json::Number(n) = v else {
                self.error("schema.bad-bound", at, format!("`{key}` is a number"));
                return None;
            };
            let text = crate::json::canonical(&Json::Number(n.clone()));
            any = true;
            if key == "minimum" {
                r.minimum = Some(text);
            } else {
                r.maximum = Some(text);
            }
        }
        if let Some(p) = map.get("pattern") {
            let at = format!("{ptr}/pattern");
            if !is_text {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`pattern` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            match p.as_str().map(regex::Regex::new) {
                Some(Ok(re)) => {
                    r.pattern = Some(Pattern(re));
                    any = true;
                }
                Some(Err(e)) => {
                    self.error(
                        "schema.bad-pattern",
                        at,
                        format!("pattern does not compile: {e}"),
                    );
                    return None;
                }
                None => {
                    self.error("schema.bad-pattern", at, "`pattern` is a string");
                    return None;
                }
            }
        }
        Some(if any {
            Type::Refined(Box::new(base), Box::new(r))
        } else {
            base
        })
    }
}

// ---------------------------------------------------------------- generation

/// Percent-encodes what a URI fragment may not hold, after JSON Pointer
/// escaping.
fn ref_to(identity: &str) -> String {
    let token = pointer_token(identity);
    let mut out = String::from("#/$defs/");
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The JSON Schema (draft 2020-12) of `ty`, self-contained: the declarations
/// it reaches go into a top-level `$defs` keyed by identity. With `docs`
/// false, no `description` is written (the form fingerprints hash).
pub fn generate(ty: &Type, types: &TypeSet, docs: bool) -> Json {
    let g = Gen { types, docs };
    let mut root = match g.schema(ty) {
        Json::Object(m) => m,
        other => return other,
    };
    let reach = types.reachable(&[ty]);
    if !reach.is_empty() {
        let mut defs = Map::new();
        for (identity, id) in reach {
            defs.insert(identity, g.decl(types.get(id)));
        }
        root.insert("$defs".into(), Json::Object(defs));
    }
    Json::Object(root)
}

struct Gen<'t> {
    types: &'t TypeSet,
    docs: bool,
}

fn obj<const N: usize>(pairs: [(&str, Json); N]) -> Json {
    Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn s(v: &str) -> Json {
    Json::String(v.to_string())
}

impl Gen<'_> {
    fn schema(&self, ty: &Type) -> Json {
        match ty {
            Type::Unit => obj([("type", s("null"))]),
            Type::Bool => obj([("type", s("boolean"))]),
            Type::Int => obj([("type", s("integer"))]),
            Type::Decimal => obj([("type", s("number"))]),
            Type::Text => obj([("type", s("string"))]),
            Type::Bytes => obj([("type", s("string")), ("contentEncoding", s("base64"))]),
            Type::Instant => obj([("type", s("string")), ("format", s("date-time"))]),
            Type::Duration => obj([("type", s("string")), ("format", s("duration"))]),
            Type::Never => obj([("not", obj([]))]),
            Type::Json => obj([]),
            Type::List(t) => obj([("type", s("array")), ("items", self.schema(t))]),
            Type::Set(t) => obj([
                ("type", s("array")),
                ("items", self.schema(t)),
                ("uniqueItems", Json::Bool(true)),
            ]),
            Type::Tuple(ts) => obj([
                ("type", s("array")),
                (
                    "prefixItems",
                    Json::Array(ts.iter().map(|t| self.schema(t)).collect()),
                ),
            ]),
            Type::Dict(k, v) if **k == Type::Text => obj([
                ("type", s("object")),
                ("additionalProperties", self.schema(v)),
            ]),
            Type::Dict(k, v) => obj([
                ("type", s("array")),
                (
                    "items",
                    obj([
                        ("type", s("array")),
                        (
                            "prefixItems",
                            Json::Array(vec![self.schema(k), self.schema(v)]),
                        ),
                    ]),
                ),
            ]),
            // Outside a record field, Option is an ordinary enum.
            Type::Option(t) => obj([(
                "oneOf",
                Json::Array(vec![
                    obj([("const", s("None"))]),
                    obj([
                        ("type", s("object")),
                        ("properties", obj([("Some", self.schema(t))])),
                        ("required", Json::Array(vec![s("Some")])),
                    ]),
                ]),
            )]),
            Type::Named(id) => obj([("$ref", Json::String(ref_to(&self.types.get(*id).identity)))]),
            Type::Refined(t, r) => {
                let mut m = match self.schema(t) {
                    Json::Object(m) => m,
                    _ => Map::new(),
                };
                if let Some(vals) = &r.one_of {
                    let vals = vals
                        .iter()
                        .filter_map(|v| crate::json::parse(v).ok())
                        .collect();
                    m.insert("enum".into(), Json::Array(vals));
                }
                for (k, v) in [
                    ("minItems", r.min_items),
                    ("maxItems", r.max_items),
                    ("minLength", r.min_length),
                    ("maxLength", r.max_length),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), Json::Number(v.into()));
                    }
                }
                for (k, v) in [("minimum", &r.minimum), ("maximum", &r.maximum)] {
                    if let Some(v) = v {
                        m.insert(
                            k.into(),
                            Json::Number(serde_json::Number::from_string_unchecked(v.clone())),
                        );
                    }
                }
                if let Some(p) = &r.pattern {
                    m.insert("pattern".into(), s(p.0.as_str()));
                }
                Json::Object(m)
            }
        }
    }

    fn with_doc(&self, schema: Json, doc: &Option<String>) -> Json {
        match (schema, doc) {
            (Json::Object(mut m), Some(d)) if self.docs => {
                m.insert("description".into(), s(d));
                Json::Object(m)
            }
            (schema, _) => schema,
        }
    }

    fn decl(&self, d: &Decl) -> Json {
        let body = match &d.body {
            Body::Record(fields) => {
                let mut props = Map::new();
                let mut required = Vec::new();
                for f in fields {
                    let ty = match &f.ty {
                        Type::Option(inner) => inner.as_ref(),
                        t => {
                            required.push(s(&f.name));
                            t
                        }
                    };
                    props.insert(f.name.clone(), self.with_doc(self.schema(ty), &f.doc));
                }
                let mut m = Map::new();
                m.insert("type".into(), s("object"));
                m.insert("properties".into(), Json::Object(props));
                if !required.is_empty() {
                    m.insert("required".into(), Json::Array(required));
                }
                Json::Object(m)
            }
            Body::Enum(ctors) => {
                let branches = ctors
                    .iter()
                    .map(|c| {
                        let b = match &c.payload {
                            None => obj([("const", s(&c.name))]),
                            Some(t) => obj([
                                ("type", s("object")),
                                (
                                    "properties",
                                    Json::Object(
                                        [(c.name.clone(), self.schema(t))].into_iter().collect(),
                                    ),
                                ),
                                ("required", Json::Array(vec![s(&c.name)])),
                            ]),
                        };
                        self.with_doc(b, &c.doc)
                    })
                    .collect();
                obj([("oneOf", Json::Array(branches))])
            }
        };
        self.with_doc(body, &d.doc)
    }
}
