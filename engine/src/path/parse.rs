//! Reading a path: the dollar-rooted and relative forms, names, bracketed
//! members and indices, and quoted strings with their escapes.

use super::*;

pub(super) fn rooted(mut segs: Vec<Seg>, start: usize) -> Result<Path, PathError> {
    if segs.is_empty() {
        return Err(err(
            start,
            "a bare `$` names nothing here; start with `$.state`, `$.last_message` or `$.error`",
        ));
    }
    let first = segs.remove(0);
    let root = match &first {
        Seg::Name(n) => Root::from_name(n),
        Seg::Index(_) => None,
    };
    match root {
        Some(root) => Ok(Path { root, segs }),
        None => Err(err(
            start,
            format!(
                "unknown root `$.{}`: paths start with `$.state`, `$.last_message` or `$.error`",
                SegDisplay(&first).to_string().trim_start_matches('.')
            ),
        )),
    }
}

pub(super) fn rest_char(src: &str, at: usize) -> String {
    src.get(at..)
        .and_then(|s| s.chars().next())
        .map(String::from)
        .unwrap_or_default()
}

/// Parses `$` then segments from `start`; returns the raw segments (the root
/// name included) and the end offset.
pub fn parse_dollar(src: &str, start: usize) -> Result<(Vec<Seg>, usize), PathError> {
    let b = src.as_bytes();
    if b.get(start) != Some(&b'$') {
        return Err(err(start, "a path starts with `$`"));
    }
    parse_segments(src, start + 1, Vec::new())
}

/// Parses a bare relative path (`key`, `key.sub[0]`) covering all of `src`.
pub fn parse_relative(src: &str) -> Result<Vec<Seg>, PathError> {
    let (first, at) = parse_name(src, 0)?;
    let (segs, end) = parse_segments(src, at, vec![Seg::Name(first)])?;
    if end != src.len() {
        return Err(err(
            end,
            format!("unexpected `{}` in the path", rest_char(src, end)),
        ));
    }
    Ok(segs)
}

pub(super) fn parse_segments(
    src: &str,
    mut i: usize,
    mut segs: Vec<Seg>,
) -> Result<(Vec<Seg>, usize), PathError> {
    let b = src.as_bytes();
    loop {
        match b.get(i) {
            Some(b'.') => {
                if b.get(i + 1) == Some(&b'.') {
                    return Err(err(
                        i,
                        "descendant segments (`..`) name many values; use a singular path",
                    ));
                }
                if b.get(i + 1) == Some(&b'*') {
                    return Err(err(
                        i + 1,
                        "wildcards (`.*`) name many values; use a singular path",
                    ));
                }
                let (name, next) = parse_name(src, i + 1)?;
                segs.push(Seg::Name(name));
                i = next;
            }
            Some(b'[') => {
                let (seg, next) = parse_bracket(src, i)?;
                segs.push(seg);
                i = next;
            }
            _ => return Ok((segs, i)),
        }
    }
}

pub(super) fn is_name_first(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || !c.is_ascii()
}

pub(super) fn is_name_char(c: char) -> bool {
    is_name_first(c) || c.is_ascii_digit()
}

pub(super) fn parse_name(src: &str, start: usize) -> Result<(String, usize), PathError> {
    let rest = src.get(start..).unwrap_or("");
    let mut chars = rest.char_indices();
    match chars.next() {
        Some((_, c)) if is_name_first(c) => {}
        Some((_, c)) => {
            return Err(err(
                start,
                format!(
                    "`{}` cannot start a member name; write `['…']` for names that are not identifiers",
                    c
                ),
            ));
        }
        None => return Err(err(start, "expected a member name")),
    }
    let mut end = rest.len();
    for (off, c) in chars {
        if !is_name_char(c) {
            end = off;
            break;
        }
    }
    Ok((rest[..end].to_string(), start + end))
}

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

pub(super) fn parse_bracket(src: &str, open: usize) -> Result<(Seg, usize), PathError> {
    let b = src.as_bytes();
    let i = skip_ws(b, open + 1);
    let (seg, after) = match b.get(i) {
        Some(q @ (b'\'' | b'"')) => {
            let (s, next) = parse_string(src, i, *q)?;
            (Seg::Name(s), next)
        }
        Some(b'-' | b'0'..=b'9') => parse_index(src, i)?,
        Some(b'*') => {
            return Err(err(
                i,
                "wildcards (`[*]`) name many values; use a singular path",
            ));
        }
        Some(b'?') => {
            return Err(err(
                i,
                "filters (`[?…]`) are not supported in singular paths",
            ));
        }
        Some(b':') => return Err(err(i, "slices name many values; use a single index")),
        Some(_) => {
            return Err(err(
                i,
                format!(
                    "expected a quoted name or an index after `[`, found `{}`",
                    rest_char(src, i)
                ),
            ));
        }
        None => return Err(err(i, "unclosed `[`")),
    };
    let j = skip_ws(b, after);
    match b.get(j) {
        Some(b']') => Ok((seg, j + 1)),
        Some(b':') => Err(err(j, "slices name many values; use a single index")),
        Some(b',') => Err(err(
            j,
            "a union of selectors names many values; use one selector",
        )),
        Some(_) => Err(err(
            j,
            format!("expected `]`, found `{}`", rest_char(src, j)),
        )),
        None => Err(err(j, "unclosed `[`")),
    }
}

pub(super) fn parse_index(src: &str, start: usize) -> Result<(Seg, usize), PathError> {
    let b = src.as_bytes();
    let mut i = start;
    let neg = b.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    let digits_start = i;
    while matches!(b.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    let digits = &src[digits_start..i];
    if digits.is_empty() {
        return Err(err(start, "expected digits after `-`"));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(err(start, "an index has no leading zeros"));
    }
    if neg && digits == "0" {
        return Err(err(start, "`-0` is not an index"));
    }
    let magnitude = if digits.len() > 16 {
        None
    } else {
        digits.parse::<i64>().ok().filter(|n| *n <= MAX_INDEX)
    };
    let Some(m) = magnitude else {
        return Err(err(start, "index out of range (at most 2^53-1)"));
    };
    Ok((Seg::Index(if neg { -m } else { m }), i))
}

/// Reads a quoted string with JSON-style escapes (RFC 9535 §2.3.1.1); `q` is
/// the quote byte at `start`.
pub fn parse_string(src: &str, start: usize, q: u8) -> Result<(String, usize), PathError> {
    let mut out = String::new();
    let rest = src.get(start + 1..).unwrap_or("");
    let mut it = rest.char_indices();
    while let Some((off, c)) = it.next() {
        let at = start + 1 + off;
        match c {
            c if c == q as char => return Ok((out, at + 1)),
            '\\' => {
                let Some((_, e)) = it.next() else {
                    return Err(err(at, "unfinished escape"));
                };
                match e {
                    '\\' => out.push('\\'),
                    '/' => out.push('/'),
                    '\'' => out.push('\''),
                    '"' => out.push('"'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'u' => {
                        let hi = read_hex4(&mut it, at)?;
                        let cp = if (0xD800..0xDC00).contains(&hi) {
                            let ok = matches!(it.next(), Some((_, '\\')))
                                && matches!(it.next(), Some((_, 'u')));
                            if !ok {
                                return Err(err(
                                    at,
                                    "a high surrogate escape must be followed by a low one",
                                ));
                            }
                            let lo = read_hex4(&mut it, at)?;
                            if !(0xDC00..0xE000).contains(&lo) {
                                return Err(err(
                                    at,
                                    "a high surrogate escape must be followed by a low one",
                                ));
                            }
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                        } else {
                            hi
                        };
                        match char::from_u32(cp) {
                            Some(ch) => out.push(ch),
                            None => {
                                return Err(err(at, "a lone surrogate escape is not a character"));
                            }
                        }
                    }
                    other => return Err(err(at, format!("unknown escape `\\{}`", other))),
                }
            }
            c if (c as u32) < 0x20 => {
                return Err(err(at, "control characters must be escaped in a string"));
            }
            c => out.push(c),
        }
    }
    Err(err(start, "unclosed string"))
}

pub(super) fn read_hex4(it: &mut std::str::CharIndices<'_>, at: usize) -> Result<u32, PathError> {
    let mut v = 0u32;
    for _ in 0..4 {
        let d = it
            .next()
            .and_then(|(_, c)| c.to_digit(16))
            .ok_or_else(|| err(at, "`\\u` needs four hex digits"))?;
        v = v * 16 + d;
    }
    Ok(v)
}
