//! Encryption at rest (issue 40 item 3; docs/custody.md "Encryption at
//! rest"): the physical bytes of the columns that hold values — blob
//! bodies, fact bodies, host-record details, memory values, the remote
//! worker queue's arguments and outcomes — sealed with
//! XChaCha20-Poly1305, never the logical stored text. Every hash (blob,
//! chain), every read's verification and every archive stay exactly as
//! without encryption: a row is opened as it is read, before anything
//! checks it, and sealed as it is written, after everything was decided.
//!
//! Keys come in two levels (envelope encryption). A master key is the
//! operator's, from a key file ([`Keyring`]), never in the database. A
//! data key is 32 random bytes made by the store, kept in `data_keys`
//! (migration 0017) only wrapped — sealed — by a master key. Rows are
//! sealed under a data key; so rotating the master key (`flow keys
//! rotate`) re-wraps the few data keys and leaves every row where it is.
//!
//! A sealed row's bytes: `FF 01`, the data key's 8-byte id, a random
//! 24-byte nonce, then the ciphertext and its 16-byte tag. `FF` begins no
//! UTF-8 text, so a plaintext blob (canonical JSON or a source text: UTF-8)
//! is never taken for a sealed one. The associated data binds a row to its
//! place — a blob to its hash, a fact to its chain hash, a host record to
//! its head, sequence and kind, a memory value to its store and key — so a
//! sealed row copied onto another row does not open. Text columns hold
//! `~` and the bytes in base64 (a stored fact or a host record's details
//! begins with `{`, a memory value is canonical JSON, so `~` is never
//! plaintext).

mod keys;
pub(crate) mod read;

pub use keys::{Keyring, MasterKey};

use crate::error::{Error, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

const MAGIC: [u8; 2] = [0xFF, 0x01];
const ID_LEN: usize = 8;
const NONCE_LEN: usize = 24;
const HEADER: usize = MAGIC.len() + ID_LEN + NONCE_LEN;
/// The first character of a sealed text column.
const TEXT_MARK: char = '~';

/// A data key's id, as its `data_keys.id` column and every sealed row's
/// header hold it.
pub type DataKeyId = [u8; ID_LEN];

pub(crate) fn random(buf: &mut [u8]) -> Result<()> {
    getrandom::fill(buf)
        .map_err(|e| Error::Sealed(format!("no randomness for a nonce or key: {e}")))
}

/// The rows of `data_keys`: `(id, master, wrapped)`, oldest first.
pub(crate) type DataKeyRow = (Vec<u8>, String, Vec<u8>);

fn wrap_aad(id: &[u8], master: &str) -> Vec<u8> {
    let mut aad = b"flowd/data-key\0".to_vec();
    aad.extend_from_slice(id);
    aad.extend_from_slice(master.as_bytes());
    aad
}

fn cipher(key: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.into())
}

/// A fresh data key wrapped by the keyring's active master key: the row
/// to insert into `data_keys`.
pub(crate) fn new_data_key(ring: &Keyring) -> Result<DataKeyRow> {
    let mut id = [0u8; ID_LEN];
    random(&mut id)?;
    let mut key = [0u8; 32];
    random(&mut key)?;
    let wrapped = wrap(ring, &id, &key)?;
    Ok((id.to_vec(), ring.active().to_string(), wrapped))
}

fn wrap(ring: &Keyring, id: &[u8], key: &[u8; 32]) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    random(&mut nonce)?;
    let aad = wrap_aad(id, ring.active());
    let sealed = cipher(&ring.active_key().0)
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: key,
                aad: &aad,
            },
        )
        .map_err(|_| Error::Sealed("could not wrap a data key".into()))?;
    Ok([&nonce[..], &sealed].concat())
}

fn unwrap(ring: &Keyring, (id, master, wrapped): &DataKeyRow) -> Result<[u8; 32]> {
    let name = hex::encode(id);
    let Some(mk) = ring.get(master) else {
        return Err(Error::Sealed(format!(
            "this store is encrypted: its data key {name} is wrapped by master key {master}, which the key file {} does not hold; pass a --key-file (or FLOW_KEY_FILE) that lists {master}",
            ring.source()
        )));
    };
    let refused = || {
        Error::Sealed(format!(
            "master key {master} of the key file {} does not open this store's data key {name}: it is another key under the same id",
            ring.source()
        ))
    };
    if wrapped.len() < NONCE_LEN {
        return Err(refused());
    }
    let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
    let aad = wrap_aad(id, master);
    let plain = cipher(&mk.0)
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: sealed,
                aad: &aad,
            },
        )
        .map_err(|_| refused())?;
    <[u8; 32]>::try_from(plain.as_slice()).map_err(|_| refused())
}

/// Each data key re-wrapped by the keyring's active master key (`flow
/// keys rotate`): `(id, master, wrapped)` of those wrapped by another.
pub(crate) fn rewrap(ring: &Keyring, rows: &[DataKeyRow]) -> Result<Vec<DataKeyRow>> {
    let mut out = Vec::new();
    for row in rows.iter().filter(|r| r.1 != ring.active()) {
        let key = unwrap(ring, row)?;
        out.push((
            row.0.clone(),
            ring.active().to_string(),
            wrap(ring, &row.0, &key)?,
        ));
    }
    Ok(out)
}

/// What seals and opens a store's rows: off (a plaintext store), or its
/// data keys, the newest of which seals new rows. Cheap to clone.
#[derive(Clone, Default)]
pub struct Sealer(Option<Arc<DataKeys>>);

struct DataKeys {
    keys: HashMap<DataKeyId, XChaCha20Poly1305>,
    active: DataKeyId,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Sealer(off)"),
            Some(k) => write!(f, "Sealer(data key {})", hex::encode(k.active)),
        }
    }
}

/// Where a sealed row sits: what its associated data is made of.
pub(crate) enum Place<'a> {
    Blob(&'a [u8; 32]),
    /// A fact, by its chain hash.
    Fact(&'a [u8; 32]),
    /// A host record: its head's chain hash, sequence and kind.
    Host(&'a [u8], i64, &'a str),
    /// A memory value: its store and key.
    Memory(&'a str, &'a str),
    /// A remote worker's call (`worker_calls`): its run, call, and which
    /// column (`args`, `outcome`).
    Worker(&'a str, &'a str, &'a str),
}

impl Place<'_> {
    fn aad(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(64);
        match self {
            Place::Blob(h) => {
                a.extend_from_slice(b"flowd/blob\0");
                a.extend_from_slice(&h[..]);
            }
            Place::Fact(h) => {
                a.extend_from_slice(b"flowd/fact\0");
                a.extend_from_slice(&h[..]);
            }
            Place::Host(head, seq, kind) => {
                a.extend_from_slice(b"flowd/host\0");
                a.extend_from_slice(head);
                a.extend_from_slice(&seq.to_be_bytes());
                a.extend_from_slice(kind.as_bytes());
            }
            Place::Memory(store, key) => {
                a.extend_from_slice(b"flowd/memory\0");
                a.extend_from_slice(&(store.len() as u64).to_be_bytes());
                a.extend_from_slice(store.as_bytes());
                a.extend_from_slice(key.as_bytes());
            }
            Place::Worker(run, call, column) => {
                a.extend_from_slice(b"flowd/worker\0");
                for part in [run, call, column] {
                    a.extend_from_slice(&(part.len() as u64).to_be_bytes());
                    a.extend_from_slice(part.as_bytes());
                }
            }
        }
        a
    }
}

impl Sealer {
    /// The sealer of a store whose `data_keys` rows are `rows` (oldest
    /// first), opened with `ring`. A store with data keys needs a keyring
    /// holding the master key of each; a store without any and no keyring
    /// is a plaintext store. (With a keyring and no data key, the caller
    /// makes one first: [`new_data_key`].)
    pub(crate) fn load(rows: &[DataKeyRow], ring: Option<&Keyring>) -> Result<Sealer> {
        let Some(ring) = ring else {
            return match rows.last() {
                None => Ok(Sealer(None)),
                Some((id, master, _)) => Err(Error::Sealed(format!(
                    "this store is encrypted with master key {master} (data key {}); pass --key-file FILE (or FLOW_KEY_FILE) with the key file that holds {master}",
                    hex::encode(id)
                ))),
            };
        };
        let mut keys = HashMap::new();
        let mut active = None;
        for row in rows {
            let id = DataKeyId::try_from(row.0.as_slice()).map_err(|_| {
                Error::Sealed(format!(
                    "data_keys row {} has a malformed id",
                    hex::encode(&row.0)
                ))
            })?;
            keys.insert(id, cipher(&unwrap(ring, row)?));
            active = Some(id);
        }
        let Some(active) = active else {
            return Err(Error::Sealed("no data key to seal with".into()));
        };
        Ok(Sealer(Some(Arc::new(DataKeys { keys, active }))))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// `plain` sealed for `place` under the active data key; as it is when
    /// the sealer is off.
    pub(crate) fn seal<'a>(&self, place: Place<'_>, plain: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        let Some(k) = &self.0 else {
            return Ok(Cow::Borrowed(plain));
        };
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce)?;
        let aad = place.aad();
        let sealed = k.keys[&k.active]
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: &aad,
                },
            )
            .map_err(|_| Error::Sealed("could not seal a row".into()))?;
        let mut out = Vec::with_capacity(HEADER + sealed.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&k.active);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(Cow::Owned(out))
    }

    /// A text column's value sealed for `place` (`~` and base64).
    pub(crate) fn seal_text<'a>(&self, place: Place<'_>, plain: &'a str) -> Result<Cow<'a, str>> {
        if self.0.is_none() {
            return Ok(Cow::Borrowed(plain));
        }
        let bytes = self.seal(place, plain.as_bytes())?;
        let mut s = String::with_capacity(1 + bytes.len().div_ceil(3) * 4);
        s.push(TEXT_MARK);
        B64.encode_string(&bytes, &mut s);
        Ok(Cow::Owned(s))
    }

    /// Whether stored bytes are sealed.
    pub(crate) fn is_sealed(stored: &[u8]) -> bool {
        stored.starts_with(&MAGIC)
    }

    /// Whether a stored text column is sealed.
    pub(crate) fn is_sealed_text(stored: &str) -> bool {
        stored.starts_with(TEXT_MARK)
    }

    /// Stored bytes opened for `place`: as they are when not sealed (a
    /// row written before encryption was turned on); the reason it cannot
    /// be opened otherwise, naming the data key.
    pub(crate) fn open(&self, place: Place<'_>, stored: Vec<u8>) -> Result<Vec<u8>, String> {
        if !Sealer::is_sealed(&stored) {
            return Ok(stored);
        }
        if stored.len() < HEADER {
            return Err("sealed row is shorter than its header".into());
        }
        let id: DataKeyId = stored[MAGIC.len()..MAGIC.len() + ID_LEN]
            .try_into()
            .map_err(|_| "malformed sealed header".to_string())?;
        let Some(k) = &self.0 else {
            return Err(format!(
                "the row is sealed with data key {}, and the store was opened without a key file (--key-file)",
                hex::encode(id)
            ));
        };
        let Some(c) = k.keys.get(&id) else {
            return Err(format!(
                "the row is sealed with data key {}, which this store's data_keys table does not hold (was it made by another store, or the table edited?)",
                hex::encode(id)
            ));
        };
        let nonce = XNonce::from_slice(&stored[MAGIC.len() + ID_LEN..HEADER]);
        let aad = place.aad();
        c.decrypt(nonce, Payload { msg: &stored[HEADER..], aad: &aad })
            .map_err(|_| {
                format!(
                    "the row sealed with data key {} does not open: it was altered, or moved from another row",
                    hex::encode(id)
                )
            })
    }

    /// A remote worker call's `args` or `outcome` column, sealed.
    pub(crate) fn seal_worker(
        &self,
        run: &str,
        call: &str,
        column: &str,
        text: String,
    ) -> Result<String> {
        if self.0.is_none() {
            return Ok(text);
        }
        Ok(self
            .seal_text(Place::Worker(run, call, column), &text)?
            .into_owned())
    }

    /// A remote worker call's `args` or `outcome` column, opened and parsed.
    pub(crate) fn open_worker(
        &self,
        run: &str,
        call: &str,
        column: &str,
        stored: String,
    ) -> Result<serde_json::Value> {
        let text = self
            .open_text(Place::Worker(run, call, column), stored)
            .map_err(|e| {
                Error::Sealed(format!("worker queue: the {column} of {run} {call}: {e}"))
            })?;
        flow_abi::json::parse(&text).map_err(|e| {
            Error::Schema(format!(
                "worker queue: a stored {column} does not parse: {e}"
            ))
        })
    }

    /// A merge write's value: `value`'s fields over those of the row's
    /// `old` value (opened; one that does not parse as an object is
    /// replaced whole, as before encryption).
    pub(crate) fn merged_memory(
        &self,
        store: &str,
        key: &str,
        old: Option<String>,
        value: serde_json::Value,
    ) -> crate::error::Result<serde_json::Value> {
        let old = old
            .map(|t| self.open_text(Place::Memory(store, key), t))
            .transpose()
            .map_err(|e| {
                crate::error::Error::Sealed(format!("memory {store}: a stored value: {e}"))
            })?;
        Ok(
            match (old.and_then(|t| flow_abi::json::parse(&t).ok()), value) {
                (Some(serde_json::Value::Object(mut o)), serde_json::Value::Object(n)) => {
                    o.extend(n);
                    serde_json::Value::Object(o)
                }
                (_, value) => value,
            },
        )
    }

    /// A `std/memory` value as read from its row (`None`: no row), opened
    /// and parsed; a value that does not open or parse is a named failure.
    pub(crate) fn open_memory(
        &self,
        store: &str,
        key: &str,
        stored: Option<String>,
    ) -> crate::error::Result<Option<serde_json::Value>> {
        let Some(t) = stored else {
            return Ok(None);
        };
        let t = self.open_text(Place::Memory(store, key), t).map_err(|e| {
            crate::error::Error::Sealed(format!("memory {store}: a stored value: {e}"))
        })?;
        flow_abi::json::parse(&t).map(Some).map_err(|e| {
            crate::error::Error::Schema(format!(
                "memory {store}: a stored value does not parse: {e}"
            ))
        })
    }

    /// A stored text column opened for `place` (see [`Sealer::open`]).
    pub(crate) fn open_text(&self, place: Place<'_>, stored: String) -> Result<String, String> {
        let Some(b64) = stored.strip_prefix(TEXT_MARK) else {
            return Ok(stored);
        };
        let bytes = B64
            .decode(b64)
            .map_err(|_| "sealed text is not base64".to_string())?;
        if !Sealer::is_sealed(&bytes) {
            return Err("sealed text lacks its header".into());
        }
        String::from_utf8(self.open(place, bytes)?)
            .map_err(|_| "sealed text opens to bytes that are not UTF-8".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(ring: &Keyring) -> (Sealer, Vec<DataKeyRow>) {
        let rows = vec![new_data_key(ring).unwrap()];
        (Sealer::load(&rows, Some(ring)).unwrap(), rows)
    }

    #[test]
    fn seals_opens_and_refuses_a_moved_row() {
        let ring = Keyring::generate("t").unwrap();
        let (s, _) = sealer(&ring);
        let h = [7u8; 32];
        let sealed = s
            .seal_text(Place::Fact(&h), "{\"fact\":\"Start\"}")
            .unwrap()
            .into_owned();
        assert!(sealed.starts_with('~') && !sealed.contains("Start"));
        assert_eq!(
            s.open_text(Place::Fact(&h), sealed.clone()).unwrap(),
            "{\"fact\":\"Start\"}"
        );
        let e = s.open_text(Place::Fact(&[8u8; 32]), sealed).unwrap_err();
        assert!(e.contains("moved from another row"), "{e}");
        // Plaintext passes through (a row from before encryption).
        assert_eq!(s.open(Place::Blob(&h), b"{}".to_vec()).unwrap(), b"{}");
        let b = s.seal(Place::Blob(&h), b"hello").unwrap().into_owned();
        assert!(Sealer::is_sealed(&b));
        // Another store's data key: named, not garbage.
        let (other, _) = sealer(&ring);
        let e = other.open(Place::Blob(&h), b).unwrap_err();
        assert!(e.contains("does not hold"), "{e}");
    }

    #[test]
    fn rotation_rewraps_and_a_missing_master_key_is_named() {
        let mut ring = Keyring::generate("t").unwrap();
        let old = ring.active().to_string();
        let (s, rows) = sealer(&ring);
        let h = [1u8; 32];
        let b = s.seal(Place::Blob(&h), b"value").unwrap().into_owned();
        let e = Sealer::load(&rows, None).unwrap_err().to_string();
        assert!(e.contains(&old) && e.contains("--key-file"), "{e}");
        ring.add_generated().unwrap();
        let rewrapped = rewrap(&ring, &rows).unwrap();
        assert_eq!(rewrapped.len(), 1);
        assert_eq!(rewrapped[0].1, ring.active());
        // The old master key gone, the re-wrapped data key still opens the row.
        let only_new = Keyring::parse(
            &ring
                .to_text()
                .lines()
                .filter(|l| !l.contains(&old))
                .collect::<Vec<_>>()
                .join("\n"),
            "t",
        )
        .unwrap();
        let s2 = Sealer::load(&rewrapped, Some(&only_new)).unwrap();
        assert_eq!(s2.open(Place::Blob(&h), b).unwrap(), b"value");
        let e = Sealer::load(&rows, Some(&only_new))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&old) && e.contains("does not hold"), "{e}");
    }
}
