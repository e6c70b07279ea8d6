//! Integers in requests, held to the range the OpenAPI document declares
//! (issue 36 item 6). utoipa declares a `u64` as `int64` from 0 and a `u32`
//! as `int32` from 0, but serde would take a `u64` up to 2⁶⁴−1: a fact
//! number above `i64::MAX` reached the store (whose numbers are SQL
//! `BIGINT`s) instead of a 400 naming the parameter and its range. Every
//! integer a request carries — query, path, header or JSON body — goes
//! through one of these.

use super::error::{ApiError, ApiResult};
use serde::Deserializer;
use serde::de::{self, Visitor};
use std::fmt;

/// The largest `int64` value; integers are never negative here.
pub const INT64_MAX: u64 = i64::MAX as u64;
/// The largest `int32` value.
pub const INT32_MAX: u64 = i32::MAX as u64;

fn range(max: u64) -> String {
    format!("must be an integer from 0 to {max}")
}

/// Decimal digits only (no sign, no space, no fraction), at most `max`.
fn parse(text: &str, max: u64) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // More digits than u64 holds are above every max.
    text.parse::<u64>().ok().filter(|n| *n <= max)
}

/// A header or path segment that holds an `int64`: 400 naming `name` and
/// the range otherwise.
pub fn int64(name: &str, text: &str) -> ApiResult<u64> {
    parse(text, INT64_MAX)
        .ok_or_else(|| ApiError::bad_request(format!("{name} {} (not {text:?})", range(INT64_MAX))))
}

/// Reads an integer up to `max`: from a query string's text, or a JSON
/// body's number (`text` false: a JSON string is refused).
struct Bounded {
    max: u64,
    text: bool,
}

impl<'de> Visitor<'de> for Bounded {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an integer from 0 to {}", self.max)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        if v <= self.max {
            Ok(v)
        } else {
            Err(E::custom(format!("{} (not {v})", range(self.max))))
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("{} (not {v})", range(self.max)))),
        }
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<u64, E> {
        Err(E::custom(format!("{} (not {v})", range(self.max))))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<u64, E> {
        Err(E::custom(format!("{} (not {v})", range(self.max))))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        Err(E::custom(format!("{} (not {v})", range(self.max))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        if !self.text {
            return Err(E::custom(format!(
                "{} (not the string {v:?})",
                range(self.max)
            )));
        }
        self.number(v)
    }

    // serde_json's arbitrary_precision hands a number over as a one-entry
    // map holding its text.
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let Some((_, text)) = map.next_entry::<String, String>()? else {
            return Err(de::Error::custom(range(self.max)));
        };
        self.number(&text)
    }
}

impl Bounded {
    fn number<E: de::Error>(&self, v: &str) -> Result<u64, E> {
        parse(v, self.max).ok_or_else(|| E::custom(format!("{} (not {v:?})", range(self.max))))
    }
}

/// `#[serde(default, deserialize_with = "…")]` for an optional `int64`
/// query parameter.
pub fn query_int64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let b = Bounded {
        max: INT64_MAX,
        text: true,
    };
    d.deserialize_any(b).map(Some)
}

/// `#[serde(default, deserialize_with = "…")]` for an optional `int32`
/// query parameter (a `limit`: its handler then checks its narrower range).
pub fn query_int32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let b = Bounded {
        max: INT32_MAX,
        text: true,
    };
    // INT32_MAX fits a u32.
    d.deserialize_any(b).map(|n| Some(n as u32))
}

/// `#[serde(deserialize_with = "…")]` for a JSON body's `int64`.
pub fn body_int64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let b = Bounded {
        max: INT64_MAX,
        text: false,
    };
    d.deserialize_any(b)
}

/// `#[serde(default, deserialize_with = "…")]` for a JSON body's optional
/// `int64`.
pub fn body_opt_int64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_int64(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Q {
        #[serde(default, deserialize_with = "query_int64")]
        after: Option<u64>,
        #[serde(default, deserialize_with = "query_int32")]
        limit: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct B {
        #[serde(default, deserialize_with = "body_opt_int64")]
        after: Option<u64>,
        #[serde(default, deserialize_with = "body_int64")]
        limit: u64,
    }

    fn query(s: &str) -> Result<Q, String> {
        let uri: axum::http::Uri = format!("/x?{s}").parse().unwrap();
        axum::extract::Query::<Q>::try_from_uri(&uri)
            .map(|q| q.0)
            .map_err(|e| e.body_text())
    }

    fn body(s: &str) -> Result<B, String> {
        // As the Body extractor reads one: flow_abi's parser, then serde.
        let v = flow_abi::json::parse(s).unwrap();
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn integers_within_the_declared_range() {
        let q = query("after=9223372036854775807&limit=2147483647").unwrap();
        assert_eq!(q.after, Some(INT64_MAX));
        assert_eq!(q.limit, Some(i32::MAX as u32));
        assert_eq!(query("").unwrap().after, None);
        let b = body(r#"{"after": 9223372036854775807, "limit": 5}"#).unwrap();
        assert_eq!((b.after, b.limit), (Some(INT64_MAX), 5));
        assert_eq!(body(r#"{"limit": 0}"#).unwrap().after, None);
        for bad in [
            "after=9223372036854775808",
            "after=18446744073709551615",
            "after=99999999999999999999999",
            "after=-1",
            "after=+1",
            "after=1.0",
            "after=",
            "after=%201",
            "limit=2147483648",
            "limit=4294967296",
        ] {
            let e = query(bad).unwrap_err();
            let name = bad.split('=').next().unwrap();
            assert!(
                e.contains(&format!("{name}: must be an integer from 0 to")),
                "{bad}: {e}"
            );
        }
        for bad in [
            r#"{"after": 9223372036854775808, "limit": 1}"#,
            r#"{"after": 18446744073709551616, "limit": 1}"#,
            r#"{"after": -1, "limit": 1}"#,
            r#"{"after": 1.5, "limit": 1}"#,
            r#"{"after": "1", "limit": 1}"#,
            r#"{"limit": 9223372036854775808}"#,
        ] {
            let e = body(bad).unwrap_err();
            assert!(e.contains("must be an integer from 0 to"), "{bad}: {e}");
        }
        assert!(int64("Last-Event-ID", "9223372036854775808").is_err());
        assert_eq!(int64("fact", "12").unwrap(), 12);
    }
}
