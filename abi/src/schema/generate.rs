//! Generating the one JSON Schema (draft 2020-12) of a Flow type.

use super::pointer_token;
use crate::types::{Body, Decl, Type, TypeSet};
use serde_json::{Map, Value as Json};

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
