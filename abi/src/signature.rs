//! Tool declarations: their canonical signature, fingerprint, type terms and
//! the entries of the `flow tools` document.
//!
//! host-boundary.txt, "Identity and fingerprints": "Its fingerprint is the
//! SHA-256 hash of its canonical signature, written sha256: followed by
//! lowercase hex. The canonical signature is the canonical JSON of
//! { "params": [[name, schema], ...], "ok": schema of T, "err": schema of E,
//! "generic": [type parameter names] } ... with every schema stripped of
//! description, and every $defs key written without its @version."
//!
//! Our identities carry no version (a FlowSpec file is outside any
//! repository: DESIGN §2), so only descriptions are stripped.

use crate::schema::generate;
use crate::types::{Body, Decl, Field, Type, TypeSet};
use crate::typespec::{Prim, Term};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};

/// A Tool declaration: identity `<module>#<tool-id>` and its signature
/// `(params) -> Result<ok, err>`. FlowSpec Tools are not generic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDecl {
    pub identity: String,
    pub doc: Option<String>,
    /// In declaration order. For a FlowSpec tool: its `input_schema`
    /// properties in name (code-point) order (DESIGN §2).
    pub params: Vec<Field>,
    pub ok: Type,
    pub err: Type,
}

impl ToolDecl {
    /// The signature object; with `docs`, descriptions included (what
    /// `describe` lists), without, the canonical signature that is hashed.
    pub fn signature(&self, types: &TypeSet, docs: bool) -> Json {
        let params = self
            .params
            .iter()
            .map(|p| {
                let mut schema = generate(&p.ty, types, docs);
                if let (true, Some(d), Json::Object(m)) = (docs, &p.doc, &mut schema) {
                    m.insert("description".into(), Json::String(d.clone()));
                }
                Json::Array(vec![Json::String(p.name.clone()), schema])
            })
            .collect();
        let mut m = Map::new();
        m.insert("params".into(), Json::Array(params));
        m.insert("ok".into(), generate(&self.ok, types, docs));
        m.insert("err".into(), generate(&self.err, types, docs));
        m.insert("generic".into(), Json::Array(Vec::new()));
        Json::Object(m)
    }

    /// `sha256:` + lowercase hex of the canonical signature's SHA-256.
    pub fn fingerprint(&self, types: &TypeSet) -> String {
        let text = crate::json::canonical(&self.signature(types, false));
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
    }

    /// The tool's entry of the `flow tools` document
    /// (running-a-program.txt): tool, fingerprint, signature, generic,
    /// params as `{name, type}` terms, ok and err terms.
    pub fn tools_entry(&self, types: &TypeSet) -> Json {
        let mut m = Map::new();
        m.insert("tool".into(), Json::String(self.identity.clone()));
        m.insert("fingerprint".into(), Json::String(self.fingerprint(types)));
        m.insert("signature".into(), self.signature(types, true));
        m.insert("generic".into(), Json::Array(Vec::new()));
        m.insert(
            "params".into(),
            Json::Array(
                self.params
                    .iter()
                    .map(|p| {
                        let mut e = Map::new();
                        e.insert("name".into(), Json::String(p.name.clone()));
                        e.insert("type".into(), term(&p.ty, types));
                        Json::Object(e)
                    })
                    .collect(),
            ),
        );
        m.insert("ok".into(), term(&self.ok, types));
        m.insert("err".into(), term(&self.err, types));
        Json::Object(m)
    }

    /// Every type this declaration's terms reach.
    pub fn roots(&self) -> Vec<&Type> {
        let mut r: Vec<&Type> = self.params.iter().map(|p| &p.ty).collect();
        r.push(&self.ok);
        r.push(&self.err);
        r
    }
}

/// The record every FlowSpec tool fails with when it declares no error type
/// (DESIGN §2): `ToolError {message: Text}`, identity `std/tool.ToolError`.
pub fn tool_error(types: &mut TypeSet) -> Type {
    const IDENTITY: &str = "std/tool.ToolError";
    if let Some(id) = types.lookup(IDENTITY) {
        return Type::Named(id);
    }
    let decl = Decl {
        identity: IDENTITY.to_string(),
        name: "ToolError".to_string(),
        doc: Some("Why a Tool call failed.".to_string()),
        body: Body::Record(vec![Field {
            name: "message".to_string(),
            ty: Type::Text,
            doc: None,
        }]),
    };
    match types.add(decl) {
        Ok(id) => Type::Named(id),
        // Unreachable: the lookup above found no such identity.
        Err(_) => Type::Never,
    }
}

/// The type term of `ty` (running-a-program.txt, `flow tools`): a built-in
/// type by name, `{"List": t}`, `{"Set": t}`, `{"Option": t}`,
/// `{"Dict": [k, v]}`, `{"Tuple": [t, ...]}`, or `{"Named": key}` with the key
/// of the type's `$defs` entry. Refinements are assertions, not types, and
/// have no term.
pub fn term(ty: &Type, types: &TypeSet) -> Json {
    type_term(ty, types).to_json()
}

/// The term of `ty` as a [`Term`].
pub fn type_term(ty: &Type, types: &TypeSet) -> Term {
    let b = |t: &Type| Box::new(type_term(t, types));
    match ty {
        Type::Unit => Term::Prim(Prim::Unit),
        Type::Bool => Term::Prim(Prim::Bool),
        Type::Int => Term::Prim(Prim::Int),
        Type::Decimal => Term::Prim(Prim::Decimal),
        Type::Text => Term::Prim(Prim::Text),
        Type::Bytes => Term::Prim(Prim::Bytes),
        Type::Instant => Term::Prim(Prim::Instant),
        Type::Duration => Term::Prim(Prim::Duration),
        Type::Never => Term::Prim(Prim::Never),
        Type::Json => Term::Prim(Prim::JsonValue),
        Type::List(t) => Term::List(b(t)),
        Type::Set(t) => Term::Set(b(t)),
        Type::Option(t) => Term::Option(b(t)),
        Type::Tuple(ts) => Term::Tuple(ts.iter().map(|t| type_term(t, types)).collect()),
        Type::Dict(k, v) => Term::Dict(b(k), b(v)),
        Type::Named(id) => Term::Named(types.get(*id).identity.clone()),
        Type::Refined(t, _) => type_term(t, types),
    }
}

/// The `types` map of the `flow tools` document: each declaration the roots
/// reach, keyed by identity, with its name, identity, args, doc and kind.
pub fn types_document(roots: &[&Type], types: &TypeSet) -> Json {
    let field = |f: &Field| {
        let mut m = Map::new();
        m.insert("name".into(), Json::String(f.name.clone()));
        m.insert("type".into(), term(&f.ty, types));
        m.insert("doc".into(), doc(&f.doc));
        Json::Object(m)
    };
    let mut out = Map::new();
    for (identity, id) in types.reachable(roots) {
        let d = types.get(id);
        let mut m = Map::new();
        m.insert("name".into(), Json::String(d.name.clone()));
        m.insert("identity".into(), Json::String(identity.clone()));
        m.insert("args".into(), Json::Array(Vec::new()));
        m.insert("doc".into(), doc(&d.doc));
        match &d.body {
            Body::Record(fields) => {
                m.insert("kind".into(), Json::String("record".into()));
                m.insert(
                    "fields".into(),
                    Json::Array(fields.iter().map(field).collect()),
                );
            }
            Body::Enum(ctors) => {
                m.insert("kind".into(), Json::String("enum".into()));
                let ctors = ctors
                    .iter()
                    .map(|c| {
                        let mut cm = Map::new();
                        cm.insert("name".into(), Json::String(c.name.clone()));
                        cm.insert("doc".into(), doc(&c.doc));
                        let payload = match &c.payload {
                            None => Json::Null,
                            Some(t) => Json::Object(
                                [("positional".to_string(), Json::Array(vec![term(t, types)]))]
                                    .into_iter()
                                    .collect(),
                            ),
                        };
                        cm.insert("payload".into(), payload);
                        Json::Object(cm)
                    })
                    .collect();
                m.insert("constructors".into(), Json::Array(ctors));
            }
        }
        out.insert(identity, Json::Object(m));
    }
    Json::Object(out)
}

fn doc(d: &Option<String>) -> Json {
    d.as_ref().map_or(Json::Null, |d| Json::String(d.clone()))
}
