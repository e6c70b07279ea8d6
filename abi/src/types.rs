//! The Flow type model.
//!
//! Records and enums are nominal: each is a [`Decl`] in a [`TypeSet`] with an
//! identity (the key of its `$defs` entry and of a `flow tools` type term), and
//! types refer to it by [`DeclId`]. That is what lets a recursive type exist as
//! a finite graph. A schema that spells a record inline still yields a
//! declaration, whose identity the reader derives from where it stands.

use std::collections::BTreeMap;

/// A data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Unit,
    Bool,
    Int,
    Decimal,
    Text,
    Bytes,
    Instant,
    Duration,
    /// Has no values: decoding always refuses.
    Never,
    /// `json.Value`: any JSON, kept as canonical text.
    Json,
    List(Box<Type>),
    /// Canonical (sorted) order, no duplicates.
    Set(Box<Type>),
    /// In a record field, None is left out and Some(v) is v; elsewhere an
    /// ordinary enum, `"None"` or `{"Some": v}`.
    Option(Box<Type>),
    /// At least two parts.
    Tuple(Vec<Type>),
    /// `Dict<Text, V>` is a JSON object; other dicts an array of `[k, v]`.
    Dict(Box<Type>, Box<Type>),
    /// A declared record or enum.
    Named(DeclId),
    /// A type with JSON Schema assertions checked after decoding (DESIGN §4:
    /// `enum`, `minItems`/`maxItems`, `minLength`/`maxLength`,
    /// `minimum`/`maximum`, `pattern`).
    Refined(Box<Type>, Box<Refinement>),
}

/// Index of a declaration in its [`TypeSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeclId(pub(crate) u32);

/// A declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decl {
    /// Unique within the set; written as the `$defs` key, e.g.
    /// `support.json.Address` or `std/tool.ToolError`.
    pub identity: String,
    /// The short name, e.g. `Address`.
    pub name: String,
    pub doc: Option<String>,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Fields in declaration order. A field of type `Option<T>` may be left
    /// out; every other field is required.
    Record(Vec<Field>),
    /// Constructors in declaration order.
    Enum(Vec<Ctor>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: Type,
    pub doc: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ctor {
    pub name: String,
    pub doc: Option<String>,
    /// `None` for a constructor without payload (encoded as its name);
    /// otherwise `{"Name": payload}`.
    pub payload: Option<Type>,
}

/// Assertions on a decoded value. Bounds on numbers are exact decimals held
/// as canonical text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refinement {
    /// Allowed values, as canonical JSON texts (`enum` on a non-string type).
    pub one_of: Option<Vec<String>>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub minimum: Option<String>,
    pub maximum: Option<String>,
    pub pattern: Option<Pattern>,
}

/// A compiled `pattern` (ECMA-262 regular expressions as far as the `regex`
/// crate's syntax agrees; unanchored, as JSON Schema says).
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}
impl Eq for Pattern {}

/// An arena of declarations, indexed by identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeSet {
    decls: Vec<Decl>,
    by_identity: BTreeMap<String, DeclId>,
}

impl TypeSet {
    pub fn new() -> TypeSet {
        TypeSet::default()
    }

    /// Adds a declaration; refuses an identity already taken.
    pub fn add(&mut self, decl: Decl) -> Result<DeclId, String> {
        if self.by_identity.contains_key(&decl.identity) {
            return Err(format!("type {} is declared twice", decl.identity));
        }
        let id = DeclId(u32::try_from(self.decls.len()).map_err(|_| "too many types")?);
        self.by_identity.insert(decl.identity.clone(), id);
        self.decls.push(decl);
        Ok(id)
    }

    /// Reserves an identity before its body is known, so a recursive type can
    /// refer to itself; [`TypeSet::define`] fills it in.
    pub fn reserve(&mut self, identity: &str, name: &str) -> Result<DeclId, String> {
        self.add(Decl {
            identity: identity.to_string(),
            name: name.to_string(),
            doc: None,
            body: Body::Record(Vec::new()),
        })
    }

    /// Sets the body and doc of a reserved declaration.
    pub fn define(&mut self, id: DeclId, doc: Option<String>, body: Body) {
        if let Some(d) = self.decls.get_mut(id.0 as usize) {
            d.doc = doc;
            d.body = body;
        }
    }

    /// The declaration behind an id from this set. Ids are only minted by
    /// this set, so a miss is a caller mixing sets: it gets an empty record.
    pub fn get(&self, id: DeclId) -> &Decl {
        static EMPTY: Decl = Decl {
            identity: String::new(),
            name: String::new(),
            doc: None,
            body: Body::Record(Vec::new()),
        };
        self.decls.get(id.0 as usize).unwrap_or(&EMPTY)
    }

    pub fn lookup(&self, identity: &str) -> Option<DeclId> {
        self.by_identity.get(identity).copied()
    }

    pub fn decls(&self) -> impl Iterator<Item = (DeclId, &Decl)> {
        self.decls
            .iter()
            .enumerate()
            .map(|(i, d)| (DeclId(i as u32), d))
    }

    /// The declarations `ty` reaches, in identity order.
    pub fn reachable(&self, roots: &[&Type]) -> BTreeMap<String, DeclId> {
        let mut seen = BTreeMap::new();
        let mut stack: Vec<&Type> = roots.to_vec();
        while let Some(t) = stack.pop() {
            match t {
                Type::List(t) | Type::Set(t) | Type::Option(t) => stack.push(t),
                Type::Refined(t, _) => stack.push(t),
                Type::Tuple(ts) => stack.extend(ts.iter()),
                Type::Dict(k, v) => {
                    stack.push(k);
                    stack.push(v);
                }
                Type::Named(id) => {
                    let d = self.get(*id);
                    if seen.insert(d.identity.clone(), *id).is_none() {
                        match &d.body {
                            Body::Record(fields) => stack.extend(fields.iter().map(|f| &f.ty)),
                            Body::Enum(ctors) => {
                                stack.extend(ctors.iter().filter_map(|c| c.payload.as_ref()))
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        seen
    }
}

impl Type {
    /// The name used in messages (`expected Decimal, found …`).
    pub fn describe(&self, types: &TypeSet) -> String {
        match self {
            Type::Unit => "Unit".into(),
            Type::Bool => "Bool".into(),
            Type::Int => "Int".into(),
            Type::Decimal => "Decimal".into(),
            Type::Text => "Text".into(),
            Type::Bytes => "Bytes".into(),
            Type::Instant => "Instant".into(),
            Type::Duration => "Duration".into(),
            Type::Never => "Never".into(),
            Type::Json => "json.Value".into(),
            Type::List(t) => format!("List<{}>", t.describe(types)),
            Type::Set(t) => format!("Set<{}>", t.describe(types)),
            Type::Option(t) => format!("Option<{}>", t.describe(types)),
            Type::Tuple(ts) => format!(
                "({})",
                ts.iter()
                    .map(|t| t.describe(types))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Type::Dict(k, v) => format!("Dict<{}, {}>", k.describe(types), v.describe(types)),
            Type::Named(id) => {
                let d = types.get(*id);
                match d.body {
                    Body::Record(_) => format!("record {}", d.name),
                    Body::Enum(_) => format!("enum {}", d.name),
                }
            }
            Type::Refined(t, _) => t.describe(types),
        }
    }

    /// The type with refinements peeled off.
    pub fn base(&self) -> &Type {
        match self {
            Type::Refined(t, _) => t.base(),
            t => t,
        }
    }
}
