//! Master keys: the operator's key file (docs/custody.md "Keys"). They
//! never enter the database; they only wrap the store's data keys.
//!
//! The file is text, one entry a line, `#` starting a comment:
//!
//! ```text
//! # flowd master keys: keep this file out of the database and its backups
//! key k-3f9a0c1d 6b1e…(64 hex digits)
//! key k-77d2e410 0c4f…
//! active k-77d2e410
//! ```
//!
//! `active` names the key that wraps new data keys and that `flow keys
//! rotate` re-wraps every data key under.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// One 256-bit master key. Its bytes never appear in a `Debug` or a log.
#[derive(Clone)]
pub struct MasterKey(pub(crate) [u8; 32]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(…)")
    }
}

/// The master keys of a key file, by id, and which one is active.
#[derive(Clone, Debug)]
pub struct Keyring {
    keys: BTreeMap<String, MasterKey>,
    active: String,
    /// Where the keys came from (a path), for messages.
    source: String,
}

fn key_error(source: &str, line: usize, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("key file {source}, line {line}: {what}"))
}

/// A key id: 1 to 64 of `A-Z a-z 0-9 . _ -`.
fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Keyring {
    /// Reads a key file.
    pub fn load(path: &Path) -> Result<Keyring> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot read the key file {}: {e} (make one with `flow keys new {}`)",
                path.display(),
                path.display()
            ))
        })?;
        Keyring::parse(&text, &path.display().to_string())
    }

    /// Parses a key file's text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Keyring> {
        let mut keys = BTreeMap::new();
        let mut active = None;
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let words: Vec<&str> = line
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            match words.as_slice() {
                [] => {}
                ["key", id, hex_key] => {
                    if !valid_id(id) {
                        return Err(key_error(
                            source,
                            line_no,
                            format!("{id:?} is not a key id (1 to 64 of A-Z a-z 0-9 . _ -)"),
                        ));
                    }
                    let mut k = [0u8; 32];
                    hex::decode_to_slice(hex_key, &mut k).map_err(|_| {
                        key_error(
                            source,
                            line_no,
                            format!("key {id} is not 64 hex digits (32 bytes)"),
                        )
                    })?;
                    if keys.insert(id.to_string(), MasterKey(k)).is_some() {
                        return Err(key_error(
                            source,
                            line_no,
                            format!("key {id} is listed twice"),
                        ));
                    }
                }
                ["active", id] => {
                    if active.replace(id.to_string()).is_some() {
                        return Err(key_error(source, line_no, "a second `active` line"));
                    }
                }
                _ => {
                    return Err(key_error(
                        source,
                        line_no,
                        "expected `key ID HEX64` or `active ID`",
                    ));
                }
            }
        }
        let active = active.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "key file {source}: no `active ID` line says which key wraps new data keys"
            ))
        })?;
        if !keys.contains_key(&active) {
            return Err(Error::InvalidArgument(format!(
                "key file {source}: the active key {active} is not listed (`key {active} HEX64`)"
            )));
        }
        Ok(Keyring {
            keys,
            active,
            source: source.to_string(),
        })
    }

    /// A key file with one fresh random key, active.
    pub fn generate(source: &str) -> Result<Keyring> {
        let mut ring = Keyring {
            keys: BTreeMap::new(),
            active: String::new(),
            source: source.to_string(),
        };
        ring.add_generated()?;
        Ok(ring)
    }

    /// Adds a fresh random key and makes it active; its id.
    pub fn add_generated(&mut self) -> Result<String> {
        let mut k = [0u8; 32];
        crate::seal::random(&mut k)?;
        let mut tag = [0u8; 4];
        crate::seal::random(&mut tag)?;
        let id = format!("k-{}", hex::encode(tag));
        if self.keys.contains_key(&id) {
            // 32 bits of chance: try once more rather than overwrite.
            return self.add_generated();
        }
        self.keys.insert(id.clone(), MasterKey(k));
        self.active = id.clone();
        Ok(id)
    }

    /// The file's text (what `load` reads back).
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# flowd master keys (docs/custody.md \"Encryption at rest\").\n# Keep this file out of the database, its backups and version control.\n",
        );
        for (id, k) in &self.keys {
            s.push_str(&format!("key {id} {}\n", hex::encode(k.0)));
        }
        s.push_str(&format!("active {}\n", self.active));
        s
    }

    pub fn active(&self) -> &str {
        &self.active
    }

    pub(crate) fn active_key(&self) -> &MasterKey {
        // `parse`, `generate` and `add_generated` keep the active id listed.
        &self.keys[&self.active]
    }

    pub(crate) fn get(&self, id: &str) -> Option<&MasterKey> {
        self.keys.get(id)
    }

    /// The ids of the keys, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Where the keys came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let mut ring = Keyring::generate("t").unwrap();
        let first = ring.active().to_string();
        let second = ring.add_generated().unwrap();
        let back = Keyring::parse(&ring.to_text(), "t").unwrap();
        assert_eq!(back.active(), second);
        assert_eq!(back.ids().count(), 2);
        assert!(back.get(&first).is_some());
        for (text, says) in [
            ("key a 00\nactive a\n", "64 hex digits"),
            ("active a\n", "not listed"),
            (&format!("key a {}\n", "00".repeat(32)), "no `active"),
            ("keys a b\n", "expected"),
            (
                &format!("key a/b {}\nactive a/b\n", "00".repeat(32)),
                "not a key id",
            ),
        ] {
            let e = Keyring::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
