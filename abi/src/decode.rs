//! Type-directed decoding from raw JSON text.
//!
//! host-boundary.txt, "Decoding": "Decoding never coerces between types,
//! guesses a constructor, fills a default, or repairs a value." One pass over
//! the text, driven by the declared type; every refusal names its path.

use crate::error::DecodeError;
use crate::json::{Cursor, Kind};
use crate::temporal::{Duration, Instant};
use crate::types::{Body, Refinement, Type, TypeSet};
use crate::value::Value;
use base64::Engine as _;
use bigdecimal::BigDecimal;
use num_bigint::BigInt;
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// Decodes one JSON text as a value of `ty`.
pub fn decode(text: &str, ty: &Type, types: &TypeSet) -> Result<Value, DecodeError> {
    let mut c = Cursor::new(text);
    let v = Decoder { types }.value(&mut c, ty)?;
    c.end()?;
    Ok(v)
}

/// Decodes an already-parsed `json.Value` as a value of `ty`, by the same
/// rules as [`decode`] (it decodes the value's canonical text).
pub fn decode_json(
    v: &serde_json::Value,
    ty: &Type,
    types: &TypeSet,
) -> Result<Value, DecodeError> {
    decode(&crate::json::canonical(v), ty, types)
}

struct Decoder<'t> {
    types: &'t TypeSet,
}

impl Decoder<'_> {
    fn mismatch(&self, c: &mut Cursor<'_>, ty: &Type) -> DecodeError {
        DecodeError::new(format!(
            "expected {}, found {}",
            ty.describe(self.types),
            c.found()
        ))
    }

    fn value(&self, c: &mut Cursor<'_>, ty: &Type) -> Result<Value, DecodeError> {
        let kind = c.kind()?;
        match (ty, kind) {
            (Type::Unit, Kind::Null) => {
                c.null()?;
                Ok(Value::Unit)
            }
            (Type::Bool, Kind::Bool) => Ok(Value::Bool(c.bool()?)),
            (Type::Int, Kind::Number) => {
                let n = c.number()?;
                n.check_int().map_err(|m| {
                    DecodeError::new(format!("expected Int, found a number that is not one: {m}"))
                })?;
                Ok(Value::Int(num_to_bigint(&n)))
            }
            (Type::Decimal, Kind::Number) => {
                let n = c.number()?;
                n.check_decimal().map_err(DecodeError::new)?;
                let int = digits_to_bigint(n.is_negative(), n.digits(), 0);
                Ok(Value::Decimal(BigDecimal::new(int, -n.exponent())))
            }
            (Type::Text, Kind::String) => Ok(Value::Text(c.string()?)),
            (Type::Bytes, Kind::String) => {
                let s = c.string()?;
                base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .map(Value::Bytes)
                    .map_err(|e| {
                        DecodeError::new(format!(
                            "expected Bytes as padded standard base64, found a string that is not ({e})"
                        ))
                    })
            }
            (Type::Instant, Kind::String) => {
                let s = c.string()?;
                Instant::parse(&s)
                    .map(Value::Instant)
                    .map_err(|e| DecodeError::new(format!("expected Instant, found {e}")))
            }
            (Type::Duration, Kind::String) => {
                let s = c.string()?;
                Duration::parse(&s)
                    .map(Value::Duration)
                    .map_err(|e| DecodeError::new(format!("expected Duration, found {e}")))
            }
            (Type::Never, _) => Err(DecodeError::new(format!(
                "no value has type Never, found {}",
                c.found()
            ))),
            (Type::Json, _) => Ok(Value::Json(c.any()?)),
            (Type::List(t), Kind::Array) => {
                let mut items = Vec::new();
                c.array(|c, _| {
                    items.push(self.value(c, t)?);
                    Ok(())
                })?;
                Ok(Value::List(items))
            }
            (Type::Set(t), Kind::Array) => {
                let mut items: Vec<(Value, usize)> = Vec::new();
                c.array(|c, i| {
                    items.push((self.value(c, t)?, i));
                    Ok(())
                })?;
                items.sort();
                for pair in items.windows(2) {
                    if pair[0].0 == pair[1].0 {
                        return Err(DecodeError::new(format!(
                            "duplicate element in a set (also at index {})",
                            pair[0].1
                        ))
                        .at_index(pair[1].1));
                    }
                }
                Ok(Value::Set(items.into_iter().map(|(v, _)| v).collect()))
            }
            (Type::Tuple(ts), Kind::Array) => {
                let mut items = Vec::with_capacity(ts.len());
                c.array(|c, i| {
                    let t = ts.get(i).ok_or_else(|| {
                        DecodeError::new(format!("a tuple of {} parts has no part {i}", ts.len()))
                    })?;
                    items.push(self.value(c, t)?);
                    Ok(())
                })?;
                if items.len() != ts.len() {
                    return Err(DecodeError::new(format!(
                        "expected a tuple of {} parts, found {}",
                        ts.len(),
                        items.len()
                    )));
                }
                Ok(Value::Tuple(items))
            }
            (Type::Dict(k, v), Kind::Object) if **k == Type::Text => {
                let mut map = BTreeMap::new();
                c.object(|c, key| {
                    if map.contains_key(key.as_ref()) {
                        return Err(DecodeError::new("duplicate key"));
                    }
                    let val = self.value(c, v)?;
                    map.insert(key.into_owned(), val);
                    Ok(())
                })?;
                Ok(Value::TextDict(map))
            }
            (Type::Dict(k, v), Kind::Array) if **k != Type::Text => {
                let mut pairs: Vec<(Value, Value, usize)> = Vec::new();
                c.array(|c, i| {
                    if c.kind()? != Kind::Array {
                        return Err(DecodeError::new(format!(
                            "expected a [key, value] pair, found {}",
                            c.found()
                        )));
                    }
                    let mut key = None;
                    let mut val = None;
                    c.array(|c, j| match j {
                        0 => {
                            key = Some(self.value(c, k)?);
                            Ok(())
                        }
                        1 => {
                            val = Some(self.value(c, v)?);
                            Ok(())
                        }
                        _ => Err(DecodeError::new("a [key, value] pair has two parts")),
                    })?;
                    match (key, val) {
                        (Some(key), Some(val)) => {
                            pairs.push((key, val, i));
                            Ok(())
                        }
                        _ => Err(DecodeError::new("a [key, value] pair has two parts")),
                    }
                })?;
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                for w in pairs.windows(2) {
                    if w[0].0 == w[1].0 {
                        return Err(DecodeError::new("duplicate key in a dict").at_index(w[1].2));
                    }
                }
                Ok(Value::Dict(
                    pairs.into_iter().map(|(k, v, _)| (k, v)).collect(),
                ))
            }
            (Type::Option(_), Kind::String) => {
                let s = c.string()?;
                if s == "None" {
                    Ok(Value::Option(None))
                } else {
                    let mut quoted = String::new();
                    crate::json::write_str(&s, &mut quoted);
                    Err(DecodeError::new(format!(
                        "expected {}, found string {quoted}",
                        ty.describe(self.types)
                    )))
                }
            }
            (Type::Option(t), Kind::Object) => {
                let mut some = None;
                c.object(|c, key| {
                    if key != "Some" || some.is_some() {
                        return Err(DecodeError::new(
                            "an Option is \"None\" or an object with the one key \"Some\"",
                        ));
                    }
                    some = Some(self.value(c, t)?);
                    Ok(())
                })?;
                some.map(|v| Value::Option(Some(Box::new(v))))
                    .ok_or_else(|| {
                        DecodeError::new(
                            "an Option is \"None\" or an object with the one key \"Some\"",
                        )
                    })
            }
            (Type::Named(id), _) => {
                let decl = self.types.get(*id);
                match (&decl.body, kind) {
                    (Body::Record(fields), Kind::Object) => self.record(c, fields),
                    (Body::Enum(ctors), Kind::String) => {
                        let s = c.string()?;
                        match ctors.iter().enumerate().find(|(_, k)| k.name == s) {
                            Some((i, k)) if k.payload.is_none() => Ok(Value::Enum {
                                index: i as u32,
                                name: s,
                                payload: None,
                            }),
                            Some(_) => Err(DecodeError::new(format!(
                                "constructor {s:?} of enum {} takes a payload: write {{{s:?}: …}}",
                                decl.name
                            ))),
                            None => Err(DecodeError::new(format!(
                                "{s:?} is not a constructor of enum {} (expected one of {})",
                                decl.name,
                                ctor_list(ctors)
                            ))),
                        }
                    }
                    (Body::Enum(ctors), Kind::Object) => {
                        let mut out = None;
                        c.object(|c, key| {
                            if out.is_some() {
                                return Err(DecodeError::new(
                                    "an enum value with a payload is an object with exactly one key",
                                ));
                            }
                            let Some((i, k)) =
                                ctors.iter().enumerate().find(|(_, k)| k.name == key)
                            else {
                                return Err(DecodeError::new(format!(
                                    "{key:?} is not a constructor of enum {} (expected one of {})",
                                    decl.name,
                                    ctor_list(ctors)
                                )));
                            };
                            let Some(pt) = &k.payload else {
                                return Err(DecodeError::new(format!(
                                    "constructor {key:?} of enum {} has no payload: write {key:?}",
                                    decl.name
                                )));
                            };
                            let p = self.value(c, pt)?;
                            out = Some(Value::Enum {
                                index: i as u32,
                                name: key.into_owned(),
                                payload: Some(Box::new(p)),
                            });
                            Ok(())
                        })?;
                        out.ok_or_else(|| {
                            DecodeError::new(format!(
                                "expected a constructor of enum {}, found an empty object",
                                decl.name
                            ))
                        })
                    }
                    _ => Err(self.mismatch(c, ty)),
                }
            }
            (Type::Refined(t, r), _) => {
                let v = self.value(c, t)?;
                check_refinement(&v, r)?;
                Ok(v)
            }
            _ => Err(self.mismatch(c, ty)),
        }
    }

    fn record(
        &self,
        c: &mut Cursor<'_>,
        fields: &[crate::types::Field],
    ) -> Result<Value, DecodeError> {
        let mut map = BTreeMap::new();
        let mut seen = vec![false; fields.len()];
        let mut extra: BTreeSet<String> = BTreeSet::new();
        c.object(|c, key| {
            match fields.iter().position(|f| f.name == key) {
                Some(i) => {
                    if seen[i] {
                        return Err(DecodeError::new("duplicate key"));
                    }
                    seen[i] = true;
                    let ft = match &fields[i].ty {
                        Type::Option(inner) => inner.as_ref(),
                        t => t,
                    };
                    let v = self.value(c, ft)?;
                    map.insert(key.into_owned(), v);
                }
                None => {
                    // Replies may carry extra fields: judged as JSON, dropped.
                    if !extra.insert(key.into_owned()) {
                        return Err(DecodeError::new("duplicate key"));
                    }
                    c.any()?;
                }
            }
            Ok(())
        })?;
        for (f, seen) in fields.iter().zip(&seen) {
            if !seen && !matches!(f.ty, Type::Option(_)) {
                return Err(DecodeError::new(format!(
                    "missing required field {:?} ({})",
                    f.name,
                    f.ty.describe(self.types)
                )));
            }
        }
        Ok(Value::Record(map))
    }
}

fn ctor_list(ctors: &[crate::types::Ctor]) -> String {
    ctors
        .iter()
        .map(|k| format!("{:?}", k.name))
        .collect::<Vec<_>>()
        .join(", ")
}

fn num_to_bigint(n: &crate::number::Num) -> BigInt {
    // check_int has bounded the exponent to the digit limit.
    let zeros = usize::try_from(n.exponent().max(0)).unwrap_or(0);
    digits_to_bigint(n.is_negative(), n.digits(), zeros)
}

/// The integer `±digits × 10^zeros`, from ASCII digits. One of at most 19
/// digits (nearly every number) is accumulated in a u64, without the
/// copies and the radix conversion `BigInt::parse_bytes` makes.
fn digits_to_bigint(neg: bool, digits: &[u8], zeros: usize) -> BigInt {
    let v = if digits.len() + zeros <= 19 {
        let mut m: u64 = 0;
        for &d in digits {
            m = m * 10 + u64::from(d.saturating_sub(b'0'));
        }
        for _ in 0..zeros {
            m *= 10;
        }
        BigInt::from(m)
    } else {
        let mut all = Vec::with_capacity(digits.len() + zeros);
        all.extend_from_slice(digits);
        all.extend(std::iter::repeat_n(b'0', zeros));
        BigInt::parse_bytes(&all, 10).unwrap_or_default()
    };
    if neg { -v } else { v }
}

/// Checks the JSON Schema assertions DESIGN §4 enforces after decoding.
pub fn check_refinement(v: &Value, r: &Refinement) -> Result<(), DecodeError> {
    if let Some(allowed) = &r.one_of {
        let text = v.canonical();
        if !allowed.contains(&text) {
            return Err(DecodeError::new(format!(
                "{text} is not one of the allowed values {}",
                allowed.join(", ")
            )));
        }
    }
    let count = match v {
        Value::List(x) | Value::Set(x) | Value::Tuple(x) => Some(x.len()),
        Value::Dict(x) => Some(x.len()),
        Value::TextDict(x) => Some(x.len()),
        _ => None,
    };
    if let Some(n) = count {
        let n = n as u64;
        if let Some(min) = r.min_items
            && n < min
        {
            return Err(DecodeError::new(format!(
                "expected at least {min} items, found {n}"
            )));
        }
        if let Some(max) = r.max_items
            && n > max
        {
            return Err(DecodeError::new(format!(
                "expected at most {max} items, found {n}"
            )));
        }
    }
    if let Value::Text(s) = v {
        let n = s.chars().count() as u64;
        if let Some(min) = r.min_length
            && n < min
        {
            return Err(DecodeError::new(format!(
                "expected a text of at least {min} characters, found {n}"
            )));
        }
        if let Some(max) = r.max_length
            && n > max
        {
            return Err(DecodeError::new(format!(
                "expected a text of at most {max} characters, found {n}"
            )));
        }
        if let Some(p) = &r.pattern
            && !p.0.is_match(s)
        {
            return Err(DecodeError::new(format!(
                "text does not match the pattern {:?}",
                p.0.as_str()
            )));
        }
    }
    let number = match v {
        Value::Int(i) => Some(BigDecimal::from(i.clone())),
        Value::Decimal(d) => Some(d.clone()),
        _ => None,
    };
    if let Some(x) = number {
        if let Some(min) = &r.minimum
            && let Ok(m) = BigDecimal::from_str(min)
            && x < m
        {
            return Err(DecodeError::new(format!("expected at least {min}")));
        }
        if let Some(max) = &r.maximum
            && let Ok(m) = BigDecimal::from_str(max)
            && x > m
        {
            return Err(DecodeError::new(format!("expected at most {max}")));
        }
    }
    Ok(())
}
