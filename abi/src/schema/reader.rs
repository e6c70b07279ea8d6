//! The schema reader: one walk over a schema, its keywords, strings, arrays,
//! objects and `$ref`s. Declarations and refinements are in `decl` and
//! `refine`.

use super::{Diagnostic, ReadContext, Severity, pointer_token};
use crate::types::{DeclId, Type};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

enum DefState {
    Done(Type),
    /// Being read; a declaration reserved for it, if it is nominal.
    Reading(Option<DeclId>),
}

pub(super) struct Reader<'c, 't, 's> {
    pub(super) ctx: &'c mut ReadContext<'t>,
    root_schema: &'s Json,
    root: String,
    defs: BTreeMap<String, DefState>,
    /// A declaration reserved for the `$defs` entry being read.
    pub(super) preset: Option<(String, DeclId)>,
}

/// Keywords that only annotate.
pub(super) const ANNOTATIONS: &[&str] = &[
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

impl<'c, 't, 's> Reader<'c, 't, 's> {
    pub(super) fn new(
        ctx: &'c mut ReadContext<'t>,
        root_schema: &'s Json,
        root: &str,
    ) -> Reader<'c, 't, 's> {
        Reader {
            ctx,
            root_schema,
            root: root.to_string(),
            defs: BTreeMap::new(),
            preset: None,
        }
    }
}

impl Reader<'_, '_, '_> {
    fn diag(&mut self, severity: Severity, code: &'static str, pointer: String, message: String) {
        self.ctx.diagnostics.push(Diagnostic {
            severity,
            code,
            pointer,
            message,
        });
    }

    pub(super) fn error(
        &mut self,
        code: &'static str,
        pointer: String,
        message: impl Into<String>,
    ) {
        self.diag(Severity::Error, code, pointer, message.into());
    }

    pub(super) fn identity(&self, path: &str) -> String {
        format!("{}.{}", self.ctx.module, path)
    }

    pub(super) fn schema(&mut self, schema: &Json, path: &str, ptr: &str) -> Option<Type> {
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

    pub(super) fn doc(map: &Map<String, Json>) -> Option<String> {
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

    // ------------------------------------------------------------ references

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
}
