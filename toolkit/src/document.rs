//! Reading the `flow tools` document into declarations and types.
//!
//! host-boundary.txt, "Toolkits": "A toolkit answers describe from the
//! declarations it was generated from, so its fingerprints are the
//! declarations' own. It generates from what flow tools lists, not from Flow
//! source." running-a-program.txt gives the document:
//!
//! ```text
//! { "data": the data version,
//!   "programs": [{ "root", "diagnostics",
//!                  "tools": [{ "tool", "fingerprint", "signature",
//!                              "generic", "params": [{"name", "type"}], "ok", "err" }],
//!                  "types": { key: declaration } }] }
//! ```
//!
//! The toolkit rebuilds each Tool's parameter, success and error types from
//! the terms and the `types` map, and serves `tool`, `fingerprint` and
//! `signature` exactly as listed. Terms carry no refinements ("Refinements
//! are assertions, not types, and have no term"), so a value the toolkit
//! accepts may still break a schema assertion such as `maxLength`; the host
//! checks replies against the full declared type in any case.
//!
//! Every part is checked before anything is served: a missing or malformed
//! part is an error naming where it is, never silently left out
//! (host-boundary.txt, "Type descriptions": "missing parts are invalid, not
//! silently omitted").

use flow_abi::signature::ToolDecl;
use flow_abi::types::{Body, Ctor, Field, Type, TypeSet};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

/// A problem in the document: where (a JSON Pointer) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("flow tools document {pointer}: {message}")]
pub struct DocumentError {
    pub pointer: String,
    pub message: String,
}

fn err(pointer: &str, message: impl Into<String>) -> DocumentError {
    DocumentError {
        pointer: pointer.to_string(),
        message: message.into(),
    }
}

/// One Tool the document lists.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The declaration rebuilt from its terms.
    pub decl: ToolDecl,
    /// As listed; what `describe` answers.
    pub fingerprint: String,
    /// As listed; what `describe` answers.
    pub signature: Json,
}

/// Every Tool of every program in the document, and the types they reach.
/// A Tool listed by two programs must be listed alike.
pub fn read(doc: &Json) -> Result<(Vec<Listed>, TypeSet), DocumentError> {
    let top = obj(doc, "")?;
    let programs = arr(field(top, "", "programs")?, "/programs")?;
    let mut types = TypeSet::new();
    let mut listed: BTreeMap<String, Listed> = BTreeMap::new();
    // Declarations first, across all programs, so a term may name any.
    let mut bodies = Vec::new();
    for (i, p) in programs.iter().enumerate() {
        let ptr = format!("/programs/{i}");
        let p = obj(p, &ptr)?;
        let tmap = obj(field(p, &ptr, "types")?, &format!("{ptr}/types"))?;
        for (key, decl) in tmap {
            let dptr = format!("{ptr}/types/{}", pointer_token(key));
            let d = obj(decl, &dptr)?;
            let name = string(field(d, &dptr, "name")?, &format!("{dptr}/name"))?;
            match types.lookup(key) {
                Some(_) => {} // listed by an earlier program; bodies compared below
                None => {
                    types.reserve(key, name).map_err(|m| err(&dptr, m))?;
                }
            }
            bodies.push((key.clone(), dptr, d));
        }
    }
    let mut defined: BTreeMap<String, (Option<String>, Body)> = BTreeMap::new();
    for (key, dptr, d) in bodies {
        let doc = doc_of(d, &dptr)?;
        let args = arr(field(d, &dptr, "args")?, &format!("{dptr}/args"))?;
        if !args.is_empty() {
            return Err(err(
                &format!("{dptr}/args"),
                "generic declarations are not supported by this toolkit",
            ));
        }
        let kind = string(field(d, &dptr, "kind")?, &format!("{dptr}/kind"))?;
        let body = match kind {
            "record" => {
                let fptr = format!("{dptr}/fields");
                let fields = arr(field(d, &dptr, "fields")?, &fptr)?;
                Body::Record(read_fields(fields, &fptr, &types)?)
            }
            "enum" => {
                let cptr = format!("{dptr}/constructors");
                let ctors = arr(field(d, &dptr, "constructors")?, &cptr)?;
                let mut out = Vec::new();
                for (j, c) in ctors.iter().enumerate() {
                    let p = format!("{cptr}/{j}");
                    let c = obj(c, &p)?;
                    let name = string(field(c, &p, "name")?, &format!("{p}/name"))?;
                    let payload = match field(c, &p, "payload")? {
                        Json::Null => None,
                        Json::Object(m) => match (m.get("positional"), m.len()) {
                            (Some(Json::Array(ts)), 1) if ts.len() == 1 => {
                                Some(term(&ts[0], &format!("{p}/payload/positional/0"), &types)?)
                            }
                            _ => {
                                return Err(err(
                                    &format!("{p}/payload"),
                                    "only a payload of one positional part is supported",
                                ));
                            }
                        },
                        _ => {
                            return Err(err(&format!("{p}/payload"), "expected null or an object"));
                        }
                    };
                    out.push(Ctor {
                        name: name.to_string(),
                        doc: doc_of(c, &p)?,
                        payload,
                    });
                }
                Body::Enum(out)
            }
            other => {
                return Err(err(
                    &format!("{dptr}/kind"),
                    format!("kind `{other}` is not supported (record or enum)"),
                ));
            }
        };
        match defined.get(&key) {
            Some((_, b)) if *b != body => {
                return Err(err(&dptr, "listed twice with different bodies"));
            }
            Some(_) => {}
            None => {
                if let Some(id) = types.lookup(&key) {
                    types.define(id, doc.clone(), body.clone());
                }
                defined.insert(key, (doc, body));
            }
        }
    }
    for (i, p) in programs.iter().enumerate() {
        let ptr = format!("/programs/{i}");
        let p = obj(p, &ptr)?;
        let tools = arr(field(p, &ptr, "tools")?, &format!("{ptr}/tools"))?;
        for (j, t) in tools.iter().enumerate() {
            let tptr = format!("{ptr}/tools/{j}");
            let l = read_tool(t, &tptr, &types)?;
            match listed.get(&l.decl.identity) {
                Some(prev) if prev.fingerprint != l.fingerprint => {
                    return Err(err(&tptr, "listed twice with different fingerprints"));
                }
                Some(_) => {}
                None => {
                    listed.insert(l.decl.identity.clone(), l);
                }
            }
        }
    }
    Ok((listed.into_values().collect(), types))
}

fn read_tool(t: &Json, ptr: &str, types: &TypeSet) -> Result<Listed, DocumentError> {
    let t = obj(t, ptr)?;
    let identity = string(field(t, ptr, "tool")?, &format!("{ptr}/tool"))?;
    let fingerprint = string(field(t, ptr, "fingerprint")?, &format!("{ptr}/fingerprint"))?;
    if !fingerprint.starts_with("sha256:") {
        return Err(err(&format!("{ptr}/fingerprint"), "expected sha256:<hex>"));
    }
    let signature = field(t, ptr, "signature")?;
    obj(signature, &format!("{ptr}/signature"))?;
    let generic = arr(field(t, ptr, "generic")?, &format!("{ptr}/generic"))?;
    if !generic.is_empty() {
        return Err(err(
            &format!("{ptr}/generic"),
            "generic Tools are not supported by this toolkit",
        ));
    }
    let pptr = format!("{ptr}/params");
    let params = read_fields(arr(field(t, ptr, "params")?, &pptr)?, &pptr, types)?;
    let ok = term(field(t, ptr, "ok")?, &format!("{ptr}/ok"), types)?;
    let e = term(field(t, ptr, "err")?, &format!("{ptr}/err"), types)?;
    Ok(Listed {
        decl: ToolDecl {
            identity: identity.to_string(),
            doc: None,
            params,
            ok,
            err: e,
        },
        fingerprint: fingerprint.to_string(),
        signature: signature.clone(),
    })
}

/// `[{"name", "type", "doc"?}, ...]`, names unique.
fn read_fields(fields: &[Json], ptr: &str, types: &TypeSet) -> Result<Vec<Field>, DocumentError> {
    let mut out: Vec<Field> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let p = format!("{ptr}/{i}");
        let f = obj(f, &p)?;
        let name = string(field(f, &p, "name")?, &format!("{p}/name"))?;
        if out.iter().any(|o| o.name == name) {
            return Err(err(&p, format!("name `{name}` is repeated")));
        }
        let ty = term(field(f, &p, "type")?, &format!("{p}/type"), types)?;
        let doc = match f.get("doc") {
            None => None,
            Some(_) => doc_of(f, &p)?,
        };
        out.push(Field {
            name: name.to_string(),
            ty,
            doc,
        });
    }
    Ok(out)
}

/// A type term (running-a-program.txt, "flow tools").
fn term(t: &Json, ptr: &str, types: &TypeSet) -> Result<Type, DocumentError> {
    term_at(t, ptr, types, 0)
}

fn term_at(t: &Json, ptr: &str, types: &TypeSet, depth: usize) -> Result<Type, DocumentError> {
    if depth > flow_abi::limits::MAX_DEPTH {
        return Err(err(ptr, "term nested too deeply"));
    }
    let sub = |t: &Json, p: String| term_at(t, &p, types, depth + 1);
    match t {
        Json::String(s) => Ok(match s.as_str() {
            "Int" => Type::Int,
            "Decimal" => Type::Decimal,
            "Bool" => Type::Bool,
            "Text" => Type::Text,
            "Bytes" => Type::Bytes,
            "Duration" => Type::Duration,
            "Instant" => Type::Instant,
            "Unit" => Type::Unit,
            "Never" => Type::Never,
            "json.Value" => Type::Json,
            other => return Err(err(ptr, format!("unknown type `{other}`"))),
        }),
        Json::Object(m) if m.len() == 1 => {
            let Some((k, v)) = m.iter().next() else {
                return Err(err(ptr, "expected a type term"));
            };
            let p = format!("{ptr}/{k}");
            match (k.as_str(), v) {
                ("List", v) => Ok(Type::List(Box::new(sub(v, p)?))),
                ("Set", v) => Ok(Type::Set(Box::new(sub(v, p)?))),
                ("Option", v) => Ok(Type::Option(Box::new(sub(v, p)?))),
                ("Dict", Json::Array(kv)) if kv.len() == 2 => Ok(Type::Dict(
                    Box::new(sub(&kv[0], format!("{p}/0"))?),
                    Box::new(sub(&kv[1], format!("{p}/1"))?),
                )),
                ("Tuple", Json::Array(ts)) if ts.len() >= 2 => Ok(Type::Tuple(
                    ts.iter()
                        .enumerate()
                        .map(|(i, t)| sub(t, format!("{p}/{i}")))
                        .collect::<Result<_, _>>()?,
                )),
                ("Named", Json::String(key)) => types
                    .lookup(key)
                    .map(Type::Named)
                    .ok_or_else(|| err(&p, format!("`{key}` is not in the types map"))),
                ("Param", _) => Err(err(&p, "type parameters are not supported by this toolkit")),
                _ => Err(err(ptr, format!("malformed `{k}` term"))),
            }
        }
        _ => Err(err(ptr, "expected a type term")),
    }
}

fn obj<'a>(v: &'a Json, ptr: &str) -> Result<&'a Map<String, Json>, DocumentError> {
    v.as_object().ok_or_else(|| err(ptr, "expected an object"))
}

fn arr<'a>(v: &'a Json, ptr: &str) -> Result<&'a Vec<Json>, DocumentError> {
    v.as_array().ok_or_else(|| err(ptr, "expected an array"))
}

fn string<'a>(v: &'a Json, ptr: &str) -> Result<&'a str, DocumentError> {
    match v.as_str() {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(err(ptr, "expected a non-empty string")),
    }
}

fn field<'a>(m: &'a Map<String, Json>, ptr: &str, key: &str) -> Result<&'a Json, DocumentError> {
    m.get(key)
        .ok_or_else(|| err(ptr, format!("missing member `{key}`")))
}

fn doc_of(m: &Map<String, Json>, ptr: &str) -> Result<Option<String>, DocumentError> {
    match field(m, ptr, "doc")? {
        Json::Null => Ok(None),
        Json::String(s) => Ok(Some(s.clone())),
        _ => Err(err(&format!("{ptr}/doc"), "expected a string or null")),
    }
}

fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The `flow tools` document for `decls`, one program rooted at `root`:
/// what `flow tools` prints for them, built from [`ToolDecl::tools_entry`].
pub fn document(root: &str, decls: &[ToolDecl], types: &TypeSet) -> Json {
    let roots: Vec<&Type> = decls.iter().flat_map(|d| d.roots()).collect();
    let program = serde_json::json!({
        "root": root,
        "diagnostics": [],
        "tools": decls.iter().map(|d| d.tools_entry(types)).collect::<Vec<_>>(),
        "types": flow_abi::signature::types_document(&roots, types),
    });
    serde_json::json!({ "data": flow_abi::DATA_VERSION, "programs": [program] })
}
