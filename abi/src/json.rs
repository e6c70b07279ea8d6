//! Strict JSON reading and the canonical writer for `json.Value`.
//!
//! Every JSON text that enters flowd from outside (a run's input, a Tool
//! reply, a resume reply, an archive) is read here, never by a lenient
//! parser: duplicate keys, lone surrogates, nesting past
//! [`limits::MAX_DEPTH`], numbers past their limits and texts past
//! [`limits::MAX_TEXT_BYTES`] are refused with a path.
//!
//! `json.Value` is carried as a [`serde_json::Value`] (built with
//! `arbitrary_precision`, so a number keeps exact text) whose numbers are
//! already canonical, so every crate can hand it to serde without a copy.

use crate::error::DecodeError;
use crate::limits;
use crate::number::Num;
use serde_json::{Map, Number, Value as Json};
use std::borrow::Cow;

/// Reads one JSON text strictly into a `json.Value` with canonical numbers.
pub fn parse(text: &str) -> Result<Json, DecodeError> {
    let mut c = Cursor::new(text);
    let v = c.any()?;
    c.end()?;
    Ok(v)
}

/// Reads one JSON text strictly, as [`parse`], and tells whether it is
/// already the canonical text of its value (`canonical(&v) == text`),
/// judged while reading instead of by writing the value again: no white
/// space, object keys in ascending byte order, numbers in canonical form,
/// and only the escapes [`write_str`] writes.
pub fn parse_checking_canonical(text: &str) -> Result<(Json, bool), DecodeError> {
    let mut c = Cursor::new(text);
    let v = c.any()?;
    c.end()?;
    Ok((v, c.canonical))
}

/// An object's members in key order, keys borrowed from the text they
/// were read from where they hold no escape.
pub type Members<'t> = Vec<(Cow<'t, str>, Json)>;

/// Reads one JSON text that must be an object strictly, as
/// [`parse_checking_canonical`], keeping its members as a list in key
/// order rather than building the map, their keys borrowed from the text
/// where they hold no escape (a reader that takes the members out one by
/// one, as the fact reader does, needs no map).
pub fn parse_object_checking_canonical(text: &str) -> Result<(Members<'_>, bool), DecodeError> {
    let mut c = Cursor::new(text);
    if c.kind()? != Kind::Object {
        return Err(c.syntax("expected an object"));
    }
    let members = c.members()?;
    c.end()?;
    Ok((members, c.canonical))
}

/// The canonical text of a `json.Value` (host-boundary.txt, "The canonical
/// form").
pub fn canonical(v: &Json) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

/// Appends the canonical text of `v` to `out`.
pub fn write_canonical(v: &Json, out: &mut String) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(true) => out.push_str("true"),
        Json::Bool(false) => out.push_str("false"),
        Json::Number(n) => write_number(n.as_str(), out),
        Json::String(s) => write_str(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => write_canonical_object(map, out),
    }
}

/// Appends the canonical text of the object `map` to `out`.
pub fn write_canonical_object(map: &Map<String, Json>, out: &mut String) {
    // serde_json's Map is a BTreeMap (preserve_order stays off), so
    // iteration is in UTF-8 byte order, which is code-point order.
    out.push('{');
    for (i, (k, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(k, out);
        out.push(':');
        write_canonical(item, out);
    }
    out.push('}');
}

/// Writes a number token canonically. Numbers read by [`parse`] are already
/// canonical and are copied; a number built elsewhere is normalized by value.
/// A token that is not a finite JSON number within the limits (which
/// [`parse`] never produces) is written unchanged rather than expanded.
fn write_number(text: &str, out: &mut String) {
    if is_canonical_number(text) {
        out.push_str(text);
        return;
    }
    match Num::parse(text.as_bytes()) {
        Ok(n) if n.check_decimal().is_ok() => n.write_canonical(out),
        _ => out.push_str(text),
    }
}

/// Whether `text` is already in canonical number form.
pub(crate) fn is_canonical_number(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int = &b[int_start..i];
    if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
        return false;
    }
    if i == b.len() {
        // "-0" is not canonical.
        return !(int_start == 1 && int == b"0");
    }
    if b[i] != b'.' {
        return false;
    }
    i += 1;
    let frac = &b[i..];
    !frac.is_empty() && frac.iter().all(u8::is_ascii_digit) && frac[frac.len() - 1] != b'0'
}

/// Writes a JSON string canonically: only `"`, `\` and U+0000..U+001F are
/// escaped, with the short forms where one exists and lowercase `\u00xx`
/// otherwise; every other code point is written as itself.
pub fn write_str(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Most texts escape nothing: skip eight bytes at a time while none
        // of them needs it.
        if let Some(chunk) = bytes.get(i..i + 8)
            && let Ok(word) = <[u8; 8]>::try_from(chunk)
            && !any_needs_escape(u64::from_le_bytes(word))
        {
            i += 8;
            continue;
        }
        let b = bytes[i];
        i += 1;
        if !NEEDS_ESCAPE[usize::from(b)] {
            continue;
        }
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            _ => "",
        };
        // Escaped bytes are ASCII, so `start` and `i - 1` are char
        // boundaries.
        out.push_str(&s[start..i - 1]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(esc);
        }
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Whether any byte of `w` is below 0x20, `"` or `\\`. Exact: the classic
/// has-zero-byte test (`x - 0x01… & !x & 0x80…`, which borrows into a high
/// bit only where a byte of `x` is below the subtrahend's byte) applied to
/// `w` against 0x20 and to `w` xor `"` and xor `\\`; branch-free.
fn any_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let q = w ^ (ONES * u64::from(b'"'));
    let b = w ^ (ONES * u64::from(b'\\'));
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = q.wrapping_sub(ONES) & !q;
    let backslash = b.wrapping_sub(ONES) & !b;
    (below_space | quote | backslash) & HIGH != 0
}

/// The bytes [`write_str`] escapes: `"`, `\` and the controls below U+0020.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

mod cursor;
pub(crate) use cursor::{Cursor, Kind};

#[cfg(test)]
mod tests;
