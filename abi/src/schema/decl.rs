//! Reading the schemas that declare: records, enums and `oneOf` unions.

use super::pointer_token;
use super::reader::{ANNOTATIONS, Reader};
use crate::types::{Body, Ctor, DeclId, Field, Refinement, Type};
use serde_json::{Map, Value as Json};

impl Reader<'_, '_, '_> {
    pub(super) fn record(
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
    pub(super) fn declare(&mut self, path: &str) -> Option<DeclId> {
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

    pub(super) fn enumeration(
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

    pub(super) fn one_of(
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
}
