//! Whether values of one declared type fit another, judged from the types
//! alone (issue 11 item 2, issue 41 item 2): [`never_fits`] when no value
//! of the one is a value of the other (FS0901), [`always_fits`] when every
//! one is. In between a write may or may not fit (FS0902) and is decoded
//! at the write.
//!
//! Both answers are conservative in the direction that keeps the checker
//! quiet: `never_fits` is only true when the JSON kinds cannot meet, and
//! `always_fits` only false where a value of the source can be built that
//! the destination refuses.

use flow_abi::{Body, Type, TypeSet};

const STRING: u8 = 1;
const NUMBER: u8 = 2;
const BOOL: u8 = 4;
const NULL: u8 = 8;
const ARRAY: u8 = 16;
const OBJECT: u8 = 32;

/// The JSON kinds a value of `t` can be written as.
fn kinds(t: &Type, types: &TypeSet) -> u8 {
    match t {
        Type::Json => STRING | NUMBER | BOOL | NULL | ARRAY | OBJECT,
        Type::Unit => NULL,
        Type::Bool => BOOL,
        Type::Int | Type::Decimal => NUMBER,
        Type::Text | Type::Bytes | Type::Instant | Type::Duration => STRING,
        Type::Never => 0,
        Type::List(_) | Type::Set(_) | Type::Tuple(_) => ARRAY,
        Type::Option(t) | Type::Refined(t, _) => kinds(t, types),
        Type::Dict(k, _) if *k.base() == Type::Text => OBJECT,
        Type::Dict(..) => ARRAY,
        Type::Named(id) => match &types.get(*id).body {
            Body::Record(_) => OBJECT,
            Body::Enum(ctors) if ctors.iter().all(|c| c.payload.is_none()) => STRING,
            Body::Enum(_) => STRING | OBJECT,
        },
    }
}

/// `t` without its Option and refinements.
pub(super) fn strip(t: &Type) -> &Type {
    match t {
        Type::Option(t) | Type::Refined(t, _) => strip(t),
        t => t,
    }
}

/// `t` without its Option (a state field that is not `required`, a record
/// field that may be left out).
fn unwrap_option(t: &Type) -> &Type {
    match t {
        Type::Option(t) => unwrap_option(t),
        t => t,
    }
}

/// True when no value of `src` is a value of `dst`.
pub(super) fn never_fits(src: &Type, dst: &Type, types: &TypeSet) -> bool {
    match (strip(src), strip(dst)) {
        (Type::List(a) | Type::Set(a), Type::List(b) | Type::Set(b)) => never_fits(a, b, types),
        (s, d) => kinds(s, types) & kinds(d, types) == 0,
    }
}

/// True when every value of `src` is a value of `dst` (decoding one never
/// refuses it). `null` is left aside: the machine takes it for a field
/// that is not required, and refuses it for one that is, whatever wrote it.
pub(super) fn always_fits(src: &Type, dst: &Type, types: &TypeSet) -> bool {
    let (s, d) = (unwrap_option(src), unwrap_option(dst));
    if s == d {
        return true;
    }
    match (s, d) {
        (_, Type::Json) => true,
        // A refinement of the source only narrows it; one of the
        // destination's is met only by the same refinement.
        (Type::Refined(s, _), d) if !matches!(d, Type::Refined(..)) => always_fits(s, d, types),
        (Type::Refined(s, rs), Type::Refined(d, rd)) => rs == rd && always_fits(s, d, types),
        (_, Type::Refined(..)) => false,
        (Type::Int, Type::Decimal) => true,
        (Type::List(a) | Type::Set(a), Type::List(b)) | (Type::Set(a), Type::Set(b)) => {
            always_fits(a, b, types)
        }
        (Type::Dict(ka, va), Type::Dict(kb, vb)) => {
            always_fits(ka, kb, types) && always_fits(va, vb, types)
        }
        (Type::Named(a), Type::Named(b)) => match (&types.get(*a).body, &types.get(*b).body) {
            (Body::Record(sf), Body::Record(df)) => df.iter().all(|f| {
                let required = !matches!(f.ty, Type::Option(_));
                match sf.iter().find(|g| g.name == f.name) {
                    Some(g) => {
                        (!required || !matches!(g.ty, Type::Option(_)))
                            && always_fits(&g.ty, &f.ty, types)
                    }
                    None => !required,
                }
            }),
            (Body::Enum(sc), Body::Enum(dc)) => sc.iter().all(|c| {
                dc.iter().any(|e| {
                    e.name == c.name
                        && match (&c.payload, &e.payload) {
                            (None, None) => true,
                            (Some(p), Some(q)) => always_fits(p, q, types),
                            _ => false,
                        }
                })
            }),
            _ => false,
        },
        (Type::Named(a), Type::Dict(k, v)) if *k.base() == Type::Text => {
            match &types.get(*a).body {
                Body::Record(sf) => sf.iter().all(|f| always_fits(&f.ty, v, types)),
                Body::Enum(_) => false,
            }
        }
        (Type::Named(a), Type::Text) => matches!(
            &types.get(*a).body,
            Body::Enum(ctors) if ctors.iter().all(|c| c.payload.is_none())
        ),
        _ => false,
    }
}
