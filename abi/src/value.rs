//! Flow data values and their canonical text.
//!
//! host-boundary.txt, "The canonical form": "Equal values have one canonical
//! text and different values have different ones." A value carries what its
//! encoding needs (record field names, constructor names), so encoding takes
//! no type; decoding does (see `decode`).

use crate::json;
use crate::temporal::{Duration, Instant};
use base64::Engine as _;
use bigdecimal::BigDecimal;
use num_bigint::{BigInt, Sign};
use num_traits::ToPrimitive as _;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// One Flow value. No binary floating point anywhere.
#[derive(Debug, Clone)]
pub enum Value {
    Unit,
    Bool(bool),
    Int(BigInt),
    /// Always normalized: no trailing zeros in the coefficient.
    Decimal(BigDecimal),
    Text(String),
    Bytes(Vec<u8>),
    Instant(Instant),
    Duration(Duration),
    List(Vec<Value>),
    /// Sorted by [`Value::cmp`], no duplicates.
    Set(Vec<Value>),
    Tuple(Vec<Value>),
    /// `Dict<Text, V>`, a JSON object.
    TextDict(BTreeMap<String, Value>),
    /// Any other dict: `[[k, v], ...]` sorted by key, keys unique.
    Dict(Vec<(Value, Value)>),
    /// An Option outside a record field: `"None"` / `{"Some": v}`.
    Option(Option<Box<Value>>),
    /// A record; an Option field holding None is absent, Some(v) holds v.
    Record(BTreeMap<String, Value>),
    /// An enum value: the constructor's declaration index (for ordering),
    /// its name, and its payload.
    Enum {
        index: u32,
        name: String,
        payload: Option<Box<Value>>,
    },
    /// `json.Value`, with canonical numbers.
    Json(serde_json::Value),
}

impl Value {
    /// A Decimal, normalized.
    pub fn decimal(d: BigDecimal) -> Value {
        Value::Decimal(d.normalized())
    }

    /// The canonical text.
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        self.write_canonical(&mut out);
        out
    }

    pub fn write_canonical(&self, out: &mut String) {
        match self {
            Value::Unit => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => write_int(i, out),
            Value::Decimal(d) => write_decimal(d, out),
            Value::Text(s) => json::write_str(s, out),
            Value::Bytes(b) => {
                out.push('"');
                out.push_str(&base64::engine::general_purpose::STANDARD.encode(b));
                out.push('"');
            }
            Value::Instant(t) => {
                out.push('"');
                out.push_str(&t.to_string());
                out.push('"');
            }
            Value::Duration(d) => {
                out.push('"');
                out.push_str(&d.to_string());
                out.push('"');
            }
            Value::List(items) | Value::Set(items) | Value::Tuple(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_canonical(out);
                }
                out.push(']');
            }
            Value::TextDict(map) | Value::Record(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    json::write_str(k, out);
                    out.push(':');
                    v.write_canonical(out);
                }
                out.push('}');
            }
            Value::Dict(pairs) => {
                out.push('[');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('[');
                    k.write_canonical(out);
                    out.push(',');
                    v.write_canonical(out);
                    out.push(']');
                }
                out.push(']');
            }
            Value::Option(None) => out.push_str("\"None\""),
            Value::Option(Some(v)) => {
                out.push_str("{\"Some\":");
                v.write_canonical(out);
                out.push('}');
            }
            Value::Enum { name, payload, .. } => match payload {
                None => json::write_str(name, out),
                Some(p) => {
                    out.push('{');
                    json::write_str(name, out);
                    out.push(':');
                    p.write_canonical(out);
                    out.push('}');
                }
            },
            Value::Json(j) => json::write_canonical(j, out),
        }
    }

    /// The value as a `json.Value` (its encoding, as a tree).
    pub fn to_json(&self) -> serde_json::Value {
        // The canonical text is valid JSON within every limit by construction.
        json::parse(&self.canonical()).unwrap_or(serde_json::Value::Null)
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Unit => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Decimal(_) => 3,
            Value::Text(_) => 4,
            Value::Bytes(_) => 5,
            Value::Instant(_) => 6,
            Value::Duration(_) => 7,
            Value::List(_) => 8,
            Value::Set(_) => 9,
            Value::Tuple(_) => 10,
            Value::TextDict(_) => 11,
            Value::Dict(_) => 12,
            Value::Option(_) => 13,
            Value::Record(_) => 14,
            Value::Enum { .. } => 15,
            Value::Json(_) => 16,
        }
    }
}

/// Writes an Int in decimal. One whose magnitude fits in 64 bits (nearly
/// every Int) is written from a table of digit pairs, without
/// `to_str_radix`'s allocations.
fn write_int(i: &BigInt, out: &mut String) {
    if i.sign() == Sign::Minus {
        out.push('-');
    }
    match i.magnitude().to_u64() {
        Some(m) => push_u64(m, out),
        None => out.push_str(&i.magnitude().to_str_radix(10)),
    }
}

/// Appends the decimal digits of `m`, two at a time from a table of pairs
/// (cheaper here than `core::fmt`, or than a byte buffer that must then pass
/// `str::from_utf8`).
fn push_u64(mut m: u64, out: &mut String) {
    const PAIRS: &str = "0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    // Pairs from the lowest up; u64::MAX has 20 digits, so at most 9 pairs
    // below the leading one or two digits.
    let mut low = [0u8; 10];
    let mut k = 0;
    while m >= 100 {
        // m % 100 < 100, so the cast keeps the pair.
        low[k] = (m % 100) as u8;
        m /= 100;
        k += 1;
    }
    out.reserve(2 + 2 * k);
    // m < 100 now.
    let lead = m as usize;
    if lead >= 10 {
        out.push_str(&PAIRS[2 * lead..2 * lead + 2]);
    } else {
        out.push_str(&PAIRS[2 * lead + 1..2 * lead + 2]);
    }
    for &pair in low[..k].iter().rev() {
        let r = usize::from(pair) * 2;
        out.push_str(&PAIRS[r..r + 2]);
    }
}

/// Writes a Decimal in plain notation (never `BigDecimal`'s Display, whose
/// switch to exponent form is set by build-time environment variables).
///
/// A coefficient that fits in 64 bits (nearly every Decimal) is written in
/// place, with no allocation; a longer one goes through
/// [`crate::number::Num`], whose rules these are.
pub(crate) fn write_decimal(d: &BigDecimal, out: &mut String) {
    let (int, scale) = d.as_bigint_and_scale();
    let neg = int.sign() == Sign::Minus;
    let Some(m) = int.magnitude().to_u64() else {
        let digits = int.magnitude().to_str_radix(10);
        let n = crate::number::Num::from_parts(neg, digits.as_bytes(), scale.saturating_neg());
        n.write_canonical(out);
        return;
    };
    if m == 0 {
        out.push('0');
        return;
    }
    if neg {
        out.push('-');
    }
    let start = out.len();
    push_u64(m, out);
    // value = digits × 10^exp, digits without trailing zeros (a Decimal
    // built without `Value::decimal` may carry some).
    let all = out.len() - start;
    let kept = out[start..].trim_end_matches('0').len();
    out.truncate(start + kept);
    let exp = i128::from(scale.saturating_neg()) + (all - kept) as i128;
    let n = kept as i128;
    if exp >= 0 {
        // Bounded like every canonical number: a Decimal's exponent is
        // within the limits it was decoded or built under.
        out.extend(std::iter::repeat_n('0', exp as usize));
    } else if n + exp > 0 {
        out.insert(start + (n + exp) as usize, '.');
    } else {
        // At most 20 digits move per inserted character.
        out.insert_str(start, "0.");
        for _ in 0..-(n + exp) {
            out.insert(start + 2, '0');
        }
    }
}

/// The total order used for sets and dict keys: within a type it is the
/// natural order (numbers by value, texts by code point, instants in time,
/// sequences lexicographically, records field by field in name order, enums
/// by constructor declaration order then payload, `json.Value` by canonical
/// text). It agrees with equality: `cmp == Equal` exactly when the canonical
/// texts are equal.
impl Ord for Value {
    fn cmp(&self, other: &Value) -> Ordering {
        use Value::*;
        match (self, other) {
            (Unit, Unit) => Ordering::Equal,
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int(a), Int(b)) => a.cmp(b),
            (Decimal(a), Decimal(b)) => a.cmp(b),
            (Text(a), Text(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Instant(a), Instant(b)) => a.cmp(b),
            (Duration(a), Duration(b)) => a.cmp(b),
            (List(a), List(b)) | (Set(a), Set(b)) | (Tuple(a), Tuple(b)) => a.cmp(b),
            (TextDict(a), TextDict(b)) | (Record(a), Record(b)) => a.iter().cmp(b.iter()),
            (Dict(a), Dict(b)) => a.cmp(b),
            (Option(a), Option(b)) => a.cmp(b),
            (
                Enum {
                    index: ia,
                    name: na,
                    payload: pa,
                },
                Enum {
                    index: ib,
                    name: nb,
                    payload: pb,
                },
            ) => ia.cmp(ib).then_with(|| na.cmp(nb)).then_with(|| pa.cmp(pb)),
            (Json(a), Json(b)) => json::canonical(a).cmp(&json::canonical(b)),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Value) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn decimals_write_plain() {
        for (s, c) in [
            ("1.50", "1.5"),
            ("1e10", "10000000000"),
            ("-0.000", "0"),
            ("0.001", "0.001"),
            (
                "123456789012345678901234567890.000000000000000000001",
                "123456789012345678901234567890.000000000000000000001",
            ),
        ] {
            let v = Value::decimal(BigDecimal::from_str(s).unwrap());
            assert_eq!(v.canonical(), c, "{s}");
        }
    }

    #[test]
    fn nested_canonical() {
        let mut rec = BTreeMap::new();
        rec.insert("b".to_string(), Value::Int(BigInt::from(2)));
        rec.insert("a".to_string(), Value::Text("x\n".into()));
        let v = Value::List(vec![
            Value::Record(rec),
            Value::Option(None),
            Value::Option(Some(Box::new(Value::Bytes(b"hi".to_vec())))),
            Value::Enum {
                index: 1,
                name: "High".into(),
                payload: None,
            },
        ]);
        assert_eq!(
            v.canonical(),
            r#"[{"a":"x\n","b":2},"None",{"Some":"aGk="},"High"]"#
        );
    }
}
