//! Merkle-style value storage (DESIGN §3).
//!
//! DESIGN §3: "any value or sub-value (an object field, a list element, the
//! whole value) whose canonical text exceeds 1 KiB is stored once as a blob
//! and replaced by `{"$blob":"blake3:<hex>","length":L}`, innermost first".
//!
//! * Innermost first: children are replaced before their parent's text is
//!   measured, so the threshold applies to the *stored* text of a node.
//! * `length` is the byte length of the value's full logical canonical text
//!   (blobs expanded, keys unescaped), so a reader can decide whether to load
//!   it (the 4096-byte presentation bound) without loading it. The blob body
//!   is the canonical text of the stored form and its hash covers exactly it.
//! * DESIGN §3: "A user object that itself has a `$blob` key is escaped so it
//!   cannot be mistaken for a reference." A user key made of one or more `$`
//!   followed by `blob` gets one more `$` when stored (`$blob` → `$$blob`,
//!   `$$blob` → `$$$blob`) and loses it when loaded. So a stored key that is
//!   exactly `$blob` is always a reference.

use crate::error::{Error, Result};
use crate::hash::{blob_hash, hash_text, parse_hash};
use flow_abi::json::{canonical, write_canonical, write_str};
use serde_json::{Map, Number, Value};
use std::collections::{HashMap, HashSet};

/// Canonical texts longer than this many bytes become blobs.
pub const BLOB_THRESHOLD: usize = 1024;

/// Deepest nesting the store walks; flow-abi refuses past 128 already.
const MAX_DEPTH: usize = 200;

/// A blob produced while storing a value, not yet written.
#[derive(Clone, Debug)]
pub struct NewBlob {
    pub hash: [u8; 32],
    pub body: Vec<u8>,
}

/// A value in stored form with the lengths of its stored and logical text.
pub(crate) struct Stored {
    pub value: Value,
    pub stored_len: usize,
    pub logical_len: usize,
}

fn is_blob_key_family(k: &str) -> Option<usize> {
    let dollars = k.strip_suffix("blob")?;
    (!dollars.is_empty() && dollars.bytes().all(|b| b == b'$')).then_some(dollars.len())
}

/// The stored form of a user object key.
pub(crate) fn escape_key(k: &str) -> String {
    match is_blob_key_family(k) {
        Some(_) => format!("${k}"),
        None => k.to_string(),
    }
}

/// The user key of a stored object key (`$blob` itself is never a user key).
pub(crate) fn unescape_key(k: &str) -> &str {
    match is_blob_key_family(k) {
        Some(n) if n >= 2 => &k[1..],
        _ => k,
    }
}

fn str_len(s: &str, scratch: &mut String) -> usize {
    scratch.clear();
    write_str(s, scratch);
    scratch.len()
}

/// Escapes every object key of `v` (no blobs): for fact fields that are not
/// value positions.
pub(crate) fn escape_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, c)| (escape_key(k), escape_value(c)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(escape_value).collect()),
        other => other.clone(),
    }
}

/// Refuses a value nested deeper than [`MAX_DEPTH`] (both writers of the
/// stored form walk it).
fn within_depth(depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::InvalidFact(format!(
            "value nested deeper than {MAX_DEPTH}"
        )));
    }
    Ok(())
}

/// Stores a logical value: escapes keys and replaces every node whose stored
/// canonical text exceeds [`BLOB_THRESHOLD`] by a reference, innermost first.
/// New blobs are pushed onto `blobs` (the caller writes them; equal blobs
/// share one row because the address is their hash).
pub(crate) fn externalize(v: &Value, blobs: &mut Vec<NewBlob>) -> Result<Stored> {
    let mut scratch = String::new();
    ext(v, blobs, &mut scratch, 0)
}

fn ext(v: &Value, blobs: &mut Vec<NewBlob>, scratch: &mut String, depth: usize) -> Result<Stored> {
    within_depth(depth)?;
    let (value, stored_len, logical_len) = match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let (mut slen, mut llen) = (2usize, 2usize);
            for (i, (k, c)) in m.iter().enumerate() {
                if i > 0 {
                    slen += 1;
                    llen += 1;
                }
                let sk = escape_key(k);
                slen += str_len(&sk, scratch) + 1;
                llen += str_len(k, scratch) + 1;
                let child = ext(c, blobs, scratch, depth + 1)?;
                slen += child.stored_len;
                llen += child.logical_len;
                out.insert(sk, child.value);
            }
            (Value::Object(out), slen, llen)
        }
        Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            let (mut slen, mut llen) = (2usize, 2usize);
            for (i, c) in a.iter().enumerate() {
                if i > 0 {
                    slen += 1;
                    llen += 1;
                }
                let child = ext(c, blobs, scratch, depth + 1)?;
                slen += child.stored_len;
                llen += child.logical_len;
                out.push(child.value);
            }
            (Value::Array(out), slen, llen)
        }
        scalar => {
            scratch.clear();
            write_canonical(scalar, scratch);
            (scalar.clone(), scratch.len(), scratch.len())
        }
    };
    if stored_len <= BLOB_THRESHOLD {
        return Ok(Stored {
            value,
            stored_len,
            logical_len,
        });
    }
    Ok(stored_as_blob(
        canonical(&value).into_bytes(),
        logical_len,
        blobs,
    ))
}

/// A value whose canonical text is `body`, stored as a new blob: its
/// reference, the reference's stored length, and the value's logical one.
fn stored_as_blob(body: Vec<u8>, logical_len: usize, blobs: &mut Vec<NewBlob>) -> Stored {
    let hash = blob_hash(&body);
    blobs.push(NewBlob { hash, body });
    let value = reference(&hash, logical_len as u64);
    Stored {
        stored_len: canonical(&value).len(),
        value,
        logical_len,
    }
}

/// Positions inside a value that must be stored as blobs whatever their
/// size: a flow's `runtime_hints.sensitive` fields (docs/custody.md
/// "Sensitive values"), so that they can become holes later. Each is the
/// path of object keys (or list indexes) from the value's root. Inside a
/// pinned value every member and element is a blob too: a copy of a
/// sensitive value anywhere in a pinned field (an item appended to a
/// list) is the same blob, and one redaction makes a hole of it
/// everywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pins {
    paths: Vec<Vec<String>>,
    /// Inside a pinned value: everything is pinned.
    all: bool,
}

impl Pins {
    /// No pins.
    #[cfg(test)]
    pub(crate) const NONE: Pins = Pins {
        paths: Vec::new(),
        all: false,
    };

    pub(crate) fn new(paths: Vec<Vec<String>>) -> Pins {
        Pins { paths, all: false }
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.all && self.paths.is_empty()
    }

    /// Whether the value itself is pinned.
    fn here(&self) -> bool {
        self.all || self.paths.iter().any(Vec::is_empty)
    }

    /// The pins inside member or element `key`.
    pub(crate) fn under(&self, key: &str) -> Pins {
        Pins {
            all: self.here(),
            paths: self
                .paths
                .iter()
                .filter(|p| p.first().map(String::as_str) == Some(key))
                .map(|p| p[1..].to_vec())
                .collect(),
        }
    }
}

/// [`externalize`], with every value at one of `pins` stored as a blob
/// whatever its size (innermost first still: a pinned value's own large
/// parts are blobs inside it). Without pins it is [`externalize`].
pub(crate) fn externalize_pinned(
    v: &Value,
    pins: &Pins,
    blobs: &mut Vec<NewBlob>,
) -> Result<Stored> {
    if pins.is_empty() {
        return externalize(v, blobs);
    }
    let mut scratch = String::new();
    let s = match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, c) in m {
                out.insert(
                    escape_key(k),
                    externalize_pinned(c, &pins.under(k), blobs)?.value,
                );
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, c)| Ok(externalize_pinned(c, &pins.under(&i.to_string()), blobs)?.value))
                .collect::<Result<_>>()?,
        ),
        scalar => scalar.clone(),
    };
    let logical_len = logical_len(&s).map_err(Error::InvalidFact)? as usize;
    scratch.clear();
    write_canonical(&s, &mut scratch);
    if scratch.len() <= BLOB_THRESHOLD && !pins.here() {
        return Ok(Stored {
            value: s,
            stored_len: scratch.len(),
            logical_len,
        });
    }
    Ok(stored_as_blob(scratch.into_bytes(), logical_len, blobs))
}

/// Appends the stored canonical text of logical value `v` to `out` and
/// returns the length of its logical canonical text: the text
/// `canonical(&externalize(v)?.value)` is, with the same blobs pushed in the
/// same order, written in one pass without building the stored tree (the
/// write path of a Call's args, a Reply's value and an End's output).
pub(crate) fn write_stored(v: &Value, out: &mut String, blobs: &mut Vec<NewBlob>) -> Result<usize> {
    ws(v, out, blobs, 0)
}

fn ws(v: &Value, out: &mut String, blobs: &mut Vec<NewBlob>, depth: usize) -> Result<usize> {
    within_depth(depth)?;
    let start = out.len();
    let logical_len = match v {
        Value::Object(m) if m.keys().any(|k| is_blob_key_family(k).is_some()) => {
            escaped_object(m, out, blobs, depth)?
        }
        Value::Object(m) => {
            // No key is escaped, so the stored keys are the user keys in
            // the map's (canonical) order.
            out.push('{');
            let mut llen = 2;
            for (i, (k, c)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    llen += 1;
                }
                let at = out.len();
                write_str(k, out);
                out.push(':');
                llen += out.len() - at;
                llen += ws(c, out, blobs, depth + 1)?;
            }
            out.push('}');
            llen
        }
        Value::Array(a) => {
            out.push('[');
            let mut llen = 2;
            for (i, c) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    llen += 1;
                }
                llen += ws(c, out, blobs, depth + 1)?;
            }
            out.push(']');
            llen
        }
        scalar => {
            write_canonical(scalar, out);
            out.len() - start
        }
    };
    if out.len() - start <= BLOB_THRESHOLD {
        return Ok(logical_len);
    }
    let body = out.as_bytes()[start..].to_vec();
    let hash = blob_hash(&body);
    blobs.push(NewBlob { hash, body });
    out.truncate(start);
    write_canonical(&reference(&hash, logical_len as u64), out);
    Ok(logical_len)
}

/// An object with a key to escape (rare): escaping can move a key in the
/// canonical order, so its members are written apart, in the user keys'
/// order (the order `ext` pushes their blobs in), then joined in the
/// stored keys' order.
fn escaped_object(
    m: &Map<String, Value>,
    out: &mut String,
    blobs: &mut Vec<NewBlob>,
    depth: usize,
) -> Result<usize> {
    let mut members = Vec::with_capacity(m.len());
    let mut llen = 2 + m.len().saturating_sub(1);
    let mut scratch = String::new();
    for (k, c) in m {
        let mut text = String::new();
        llen += ws(c, &mut text, blobs, depth + 1)?;
        llen += str_len(k, &mut scratch) + 1;
        members.push((escape_key(k), text));
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    out.push('{');
    for (i, (k, text)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(k, out);
        out.push(':');
        out.push_str(text);
    }
    out.push('}');
    Ok(llen)
}

/// `{"$blob":"blake3:<hex>","length":L}`.
pub fn reference(hash: &[u8; 32], length: u64) -> Value {
    let mut m = Map::new();
    m.insert("$blob".to_string(), Value::String(hash_text(hash)));
    m.insert("length".to_string(), Value::Number(Number::from(length)));
    Value::Object(m)
}

/// `{"$hole":"blake3:<hex>","length":L}`: what a read shows in place of a
/// value whose blob is a hole of the run (docs/custody.md "Holes"). It is
/// presentation: a read that needs the value refuses with
/// [`Error::Hole`] instead.
pub fn hole_marker(hash: &[u8; 32], length: u64) -> Value {
    let mut m = Map::new();
    m.insert("$hole".to_string(), Value::String(hash_text(hash)));
    m.insert("length".to_string(), Value::Number(Number::from(length)));
    Value::Object(m)
}

/// The hash text a [`hole_marker`] names, when `m` is one.
pub fn as_hole_marker(m: &Map<String, Value>) -> Option<&str> {
    match m.get("$hole") {
        Some(Value::String(h)) if m.len() == 2 && m.contains_key("length") => Some(h),
        _ => None,
    }
}

/// `v` with every reference to one of `holes` directly in it (not inside
/// the blobs it names) replaced by its [`hole_marker`].
pub fn mark_holes(v: Value, holes: &HashSet<[u8; 32]>) -> Value {
    if holes.is_empty() {
        return v;
    }
    match v {
        Value::Object(m) => match as_reference(&m) {
            Some(Ok((h, len))) if holes.contains(&h) => hole_marker(&h, len),
            Some(_) => Value::Object(m),
            None => Value::Object(
                m.into_iter()
                    .map(|(k, c)| (k, mark_holes(c, holes)))
                    .collect(),
            ),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(|c| mark_holes(c, holes)).collect()),
        other => other,
    }
}

/// If `m` is a reference, its hash and declared logical length; an object
/// with a `$blob` key that is not a well-formed reference is an error.
pub fn as_reference(m: &Map<String, Value>) -> Option<Result<([u8; 32], u64), String>> {
    let h = m.get("$blob")?;
    let parsed = (|| {
        if m.len() != 2 {
            return Err("a reference has exactly the keys $blob and length".to_string());
        }
        let hash = h
            .as_str()
            .and_then(parse_hash)
            .ok_or("a reference's $blob is not blake3:<hex>")?;
        let len = m
            .get("length")
            .and_then(Value::as_u64)
            .ok_or("a reference's length is not a count")?;
        Ok((hash, len))
    })();
    Some(parsed)
}

/// Every reference directly in `v` (not inside the blobs it names).
pub fn collect_refs(v: &Value, out: &mut Vec<([u8; 32], u64)>) -> Result<(), String> {
    match v {
        Value::Object(m) => match as_reference(m) {
            Some(r) => out.push(r?),
            None => {
                for c in m.values() {
                    collect_refs(c, out)?;
                }
            }
        },
        Value::Array(a) => {
            for c in a {
                collect_refs(c, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The logical canonical length of a stored value, counting each reference
/// as its declared length and each escaped key as its user key.
pub fn logical_len(v: &Value) -> Result<u64, String> {
    let mut scratch = String::new();
    ll(v, &mut scratch)
}

fn ll(v: &Value, scratch: &mut String) -> Result<u64, String> {
    Ok(match v {
        Value::Object(m) => match as_reference(m) {
            Some(r) => r?.1,
            None => {
                let mut n = 2 + m.len().saturating_sub(1) as u64;
                for (k, c) in m {
                    n += str_len(unescape_key(k), scratch) as u64 + 1 + ll(c, scratch)?;
                }
                n
            }
        },
        Value::Array(a) => {
            let mut n = 2 + a.len().saturating_sub(1) as u64;
            for c in a {
                n += ll(c, scratch)?;
            }
            n
        }
        s => {
            scratch.clear();
            write_canonical(s, scratch);
            scratch.len() as u64
        }
    })
}

/// Loads a logical value from its stored form: references are replaced by
/// their blobs (verified by `load`), keys unescaped.
pub fn expand(v: &Value, load: &mut dyn FnMut(&[u8; 32]) -> Result<Value>) -> Result<Value> {
    expand_owned(v.clone(), load)
}

/// [`expand`] of a value the caller owns: references are replaced and
/// escaped keys restored in place, so a value without either (most facts)
/// is handed back as it came, not copied.
pub fn expand_owned(v: Value, load: &mut dyn FnMut(&[u8; 32]) -> Result<Value>) -> Result<Value> {
    expand_owned_depth(v, load, 0)
}

fn expand_owned_depth(
    mut v: Value,
    load: &mut dyn FnMut(&[u8; 32]) -> Result<Value>,
    depth: usize,
) -> Result<Value> {
    if depth > MAX_DEPTH {
        return Err(Error::CorruptBlob {
            hash: String::new(),
            reason: "stored value nested too deeply".into(),
        });
    }
    match &mut v {
        Value::Object(m) => {
            if let Some(r) = as_reference(m) {
                let (hash, _) = r.map_err(|reason| Error::CorruptBlob {
                    hash: String::new(),
                    reason,
                })?;
                let stored = load(&hash)?;
                return expand_owned_depth(stored, load, depth + 1);
            }
            if m.keys().any(|k| unescape_key(k).len() != k.len()) {
                for (k, c) in std::mem::take(m) {
                    let c = expand_owned_depth(c, load, depth + 1)?;
                    m.insert(unescape_key(&k).to_string(), c);
                }
            } else {
                for c in m.values_mut() {
                    *c = expand_owned_depth(std::mem::take(c), load, depth + 1)?;
                }
            }
        }
        Value::Array(a) => {
            for c in a.iter_mut() {
                *c = expand_owned_depth(std::mem::take(c), load, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(v)
}

/// Checks blobs against their addresses: each value blob's bytes hash to its
/// address, are canonical JSON, their inner references verify recursively,
/// and their logical length is the one the reference declares. Each blob is
/// checked once per verifier.
#[derive(Default)]
pub struct BlobVerifier {
    values: HashMap<[u8; 32], u64>,
    sources: HashMap<[u8; 32], u64>,
    /// The run's holes (docs/custody.md "Holes"): a reference to one of
    /// them verifies without its blob, since the chain covers only the
    /// reference; a missing blob that is not a hole is still a failure.
    holes: HashSet<[u8; 32]>,
}

/// Reads a blob's bytes by hash; `None` when absent.
pub type BlobLoad<'a> = dyn FnMut(&[u8; 32]) -> Result<Option<Vec<u8>>> + 'a;

impl BlobVerifier {
    /// A verifier that accepts references to `holes` without their blobs.
    pub fn with_holes(holes: HashSet<[u8; 32]>) -> BlobVerifier {
        BlobVerifier {
            holes,
            ..BlobVerifier::default()
        }
    }

    /// Adds holes to accept (a reader that learns the run's holes late).
    pub fn add_holes(&mut self, holes: impl IntoIterator<Item = [u8; 32]>) {
        self.holes.extend(holes);
    }

    /// Verifies a value blob and everything it references. The error text
    /// names the blob; callers name the fact.
    pub fn verify_value(
        &mut self,
        hash: &[u8; 32],
        declared_len: u64,
        load: &mut BlobLoad<'_>,
    ) -> Result<Value, String> {
        let bytes = load(hash)
            .map_err(|e| format!("blob {} unreadable: {e}", hash_text(hash)))?
            .ok_or_else(|| format!("blob {} is missing", hash_text(hash)))?;
        self.verify_value_bytes(hash, declared_len, &bytes, load, 0)
    }

    fn verify_value_bytes(
        &mut self,
        hash: &[u8; 32],
        declared_len: u64,
        bytes: &[u8],
        load: &mut BlobLoad<'_>,
        depth: usize,
    ) -> Result<Value, String> {
        let name = hash_text(hash);
        if blob_hash(bytes) != *hash {
            return Err(format!("blob {name} does not match its hash"));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| format!("blob {name} is not UTF-8"))?;
        let (value, canonical) = flow_abi::json::parse_checking_canonical(text)
            .map_err(|e| format!("blob {name} is not JSON: {e}"))?;
        if !canonical {
            return Err(format!("blob {name} is not canonical"));
        }
        let known = self.values.get(hash).copied();
        let len = match known {
            Some(l) => l,
            None => {
                if depth > MAX_DEPTH {
                    return Err(format!("blob {name} nests too deeply"));
                }
                let mut refs = Vec::new();
                collect_refs(&value, &mut refs).map_err(|e| format!("blob {name}: {e}"))?;
                for (h, l) in refs {
                    if self.holes.contains(&h) {
                        continue;
                    }
                    if !self.values.contains_key(&h) {
                        let inner = load(&h)
                            .map_err(|e| format!("blob {} unreadable: {e}", hash_text(&h)))?
                            .ok_or_else(|| format!("blob {} is missing", hash_text(&h)))?;
                        self.verify_value_bytes(&h, l, &inner, load, depth + 1)?;
                    } else if self.values.get(&h) != Some(&l) {
                        return Err(format!(
                            "blob {} is referenced with a wrong length",
                            hash_text(&h)
                        ));
                    }
                }
                let l = logical_len(&value).map_err(|e| format!("blob {name}: {e}"))?;
                self.values.insert(*hash, l);
                l
            }
        };
        if len != declared_len {
            return Err(format!(
                "blob {name} is referenced with length {declared_len}, its value has {len}"
            ));
        }
        Ok(value)
    }

    /// Verifies every reference in a stored value.
    pub fn verify_refs_in(&mut self, v: &Value, load: &mut BlobLoad<'_>) -> Result<(), String> {
        let mut refs = Vec::new();
        collect_refs(v, &mut refs)?;
        for (h, l) in refs {
            if self.holes.contains(&h) {
                continue;
            }
            match self.values.get(&h) {
                Some(known) if *known == l => {}
                Some(_) => {
                    return Err(format!(
                        "blob {} is referenced with a wrong length",
                        hash_text(&h)
                    ));
                }
                None => {
                    self.verify_value(&h, l, load)?;
                }
            }
        }
        Ok(())
    }

    /// Verifies a source blob: the exact text, `length` in code points.
    pub fn verify_source(
        &mut self,
        hash: &[u8; 32],
        declared_len: u64,
        load: &mut BlobLoad<'_>,
    ) -> Result<(), String> {
        let name = hash_text(hash);
        let len = match self.sources.get(hash) {
            Some(l) => *l,
            None => {
                let bytes = load(hash)
                    .map_err(|e| format!("source blob {name} unreadable: {e}"))?
                    .ok_or_else(|| format!("source blob {name} is missing"))?;
                if blob_hash(&bytes) != *hash {
                    return Err(format!("source blob {name} does not match its hash"));
                }
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| format!("source blob {name} is not UTF-8"))?;
                let l = text.chars().count() as u64;
                self.sources.insert(*hash, l);
                l
            }
        };
        if len != declared_len {
            return Err(format!(
                "source blob {name} has {len} code points, Start says {declared_len}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod props;
