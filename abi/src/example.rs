//! A deterministic example value of a type: what the offline model answers
//! with when asked for structured output, and what test fakes reply.
//!
//! The value is the smallest that fits: zero, `true` (so the validity gates
//! of real flows pass rather than loop), a short text, the first enum
//! constructor, every record field (optional ones too, while shallow), and
//! lists just long enough for `minItems`. Assertions are met where that is simple (bounds, lengths,
//! allowed values); a `pattern` is not searched for a match.

use crate::decode::check_refinement;
use crate::temporal::{Duration, Instant};
use crate::types::{Body, Type, TypeSet};
use crate::value::Value;
use bigdecimal::BigDecimal;
use num_bigint::BigInt;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The longest list or text an example is made for.
const MAX_EXAMPLE_LEN: usize = 4096;

/// How deep an example may nest before a recursive type is given up on.
const MAX_DEPTH: usize = 32;
/// Optional record fields are filled in above this depth only.
const OPTIONAL_DEPTH: usize = 8;

/// An example value of `ty`, or `None` when none can be built (Never, or
/// a recursive type with no finite value, or an unmet assertion).
pub fn example(ty: &Type, types: &TypeSet) -> Option<Value> {
    build(ty, types, 0)
}

fn build(ty: &Type, types: &TypeSet, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let d = depth + 1;
    Some(match ty {
        Type::Unit => Value::Unit,
        Type::Bool => Value::Bool(true),
        Type::Int => Value::Int(BigInt::default()),
        Type::Decimal => Value::decimal(BigDecimal::default()),
        Type::Text => Value::Text("example".into()),
        Type::Bytes => Value::Bytes(Vec::new()),
        Type::Instant => Value::Instant(Instant::from_unix_nanos(0)?),
        Type::Duration => Value::Duration(Duration::from_nanos(0)),
        Type::Never => return None,
        Type::Json => Value::Json(serde_json::Value::Null),
        Type::List(_) => Value::List(Vec::new()),
        Type::Set(_) => Value::Set(Vec::new()),
        Type::Option(_) => Value::Option(None),
        Type::Tuple(ts) => Value::Tuple(
            ts.iter()
                .map(|t| build(t, types, d))
                .collect::<Option<Vec<_>>>()?,
        ),
        Type::Dict(k, _) if **k == Type::Text => Value::TextDict(BTreeMap::new()),
        Type::Dict(_, _) => Value::Dict(Vec::new()),
        Type::Named(id) => match &types.get(*id).body {
            Body::Record(fields) => {
                let mut m = BTreeMap::new();
                for f in fields {
                    match &f.ty {
                        // Optional fields too, while shallow: a reader of the
                        // example finds every field it may look for.
                        Type::Option(t) => {
                            if depth < OPTIONAL_DEPTH
                                && let Some(v) = build(t, types, d)
                            {
                                m.insert(f.name.clone(), v);
                            }
                        }
                        t => {
                            m.insert(f.name.clone(), build(t, types, d)?);
                        }
                    }
                }
                Value::Record(m)
            }
            Body::Enum(ctors) => {
                // Prefer a constructor without payload.
                let (i, c) = ctors
                    .iter()
                    .enumerate()
                    .find(|(_, c)| c.payload.is_none())
                    .or_else(|| ctors.iter().enumerate().next())?;
                let payload = match &c.payload {
                    None => None,
                    Some(p) => Some(Box::new(build(p, types, d)?)),
                };
                Value::Enum {
                    index: i as u32,
                    name: c.name.clone(),
                    payload,
                }
            }
        },
        Type::Refined(base, r) => {
            let mut v = build(base, types, d)?;
            if let Some(allowed) = &r.one_of {
                let first = allowed.first()?;
                v = crate::decode::decode(first, base, types).ok()?;
            }
            if let Some(min) = r.min_items {
                let item = match base.base() {
                    Type::List(t) | Type::Set(t) => build(t, types, d)?,
                    _ => return None,
                };
                // No example for a list longer than this (one request
                // must not allocate without bound).
                let n = usize::try_from(min)
                    .ok()
                    .filter(|n| *n <= MAX_EXAMPLE_LEN)?;
                v = match base.base() {
                    Type::Set(_) if n > 1 => return None,
                    Type::Set(_) => Value::Set(vec![item; n]),
                    _ => Value::List(vec![item; n]),
                };
            }
            if let (Some(min), Value::Text(s)) = (r.min_length, &mut v) {
                let min = usize::try_from(min)
                    .ok()
                    .filter(|n| *n <= MAX_EXAMPLE_LEN)?;
                let have = s.chars().count();
                if have < min {
                    s.extend(std::iter::repeat_n('x', min - have));
                }
            }
            if let (Some(max), Value::Text(s)) = (r.max_length, &mut v) {
                *s = s.chars().take(usize::try_from(max).ok()?).collect();
            }
            if let Some(min) = &r.minimum {
                let m = BigDecimal::from_str(min).ok()?;
                v = match v {
                    Value::Int(i) if BigDecimal::from(i.clone()) < m => {
                        let (int, scale) = m
                            .with_scale_round(0, bigdecimal::RoundingMode::Ceiling)
                            .into_bigint_and_exponent();
                        let _ = scale;
                        Value::Int(int)
                    }
                    Value::Decimal(x) if x < m => Value::decimal(m),
                    other => other,
                };
            }
            if let Some(max) = &r.maximum {
                let m = BigDecimal::from_str(max).ok()?;
                v = match v {
                    Value::Int(i) if BigDecimal::from(i.clone()) > m => {
                        let (int, _) = m
                            .with_scale_round(0, bigdecimal::RoundingMode::Floor)
                            .into_bigint_and_exponent();
                        Value::Int(int)
                    }
                    Value::Decimal(x) if x > m => Value::decimal(m),
                    other => other,
                };
            }
            check_refinement(&v, r).ok()?;
            v
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ReadContext, read_any};

    #[test]
    fn examples_fit_their_types() {
        let schema: serde_json::Value = serde_json::from_str(
            r#"{"type":"object","required":["a","b","c","d","e","f"],"properties":{
                "a":{"type":"integer","minimum":3},
                "b":{"type":"string","enum":["x","y"]},
                "c":{"type":"array","items":{"type":"number"},"minItems":2},
                "d":{"type":"string","minLength":10},
                "e":{"oneOf":[{"type":"object","properties":{"P":{"type":"integer"}},"required":["P"]}]},
                "f":{"type":"number","maximum":-1.5},
                "g":{"type":"string"}}}"#,
        )
        .unwrap();
        let mut types = TypeSet::new();
        let mut ctx = ReadContext::new(&mut types, "t");
        let ty = read_any(&schema, "root", "", &mut ctx).unwrap();
        let v = example(&ty, &types).unwrap();
        let text = v.canonical();
        assert_eq!(
            text,
            r#"{"a":3,"b":"x","c":[0,0],"d":"examplexxx","e":{"P":0},"f":-1.5,"g":"example"}"#
        );
        assert_eq!(crate::decode::decode(&text, &ty, &types).unwrap(), v);
    }

    /// Issue 17: a huge `minItems` or `minLength` gives no example rather
    /// than an allocation without bound.
    #[test]
    fn huge_lengths_give_no_example() {
        for schema in [
            r#"{"type":"array","items":{"type":"integer"},"minItems":1000000000000}"#,
            r#"{"type":"string","minLength":1000000000000}"#,
        ] {
            let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
            let mut types = TypeSet::new();
            let mut ctx = ReadContext::new(&mut types, "t");
            let ty = read_any(&schema, "root", "", &mut ctx).unwrap();
            assert_eq!(example(&ty, &types), None, "{schema}");
        }
    }
}
