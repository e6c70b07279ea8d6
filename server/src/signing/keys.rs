//! Signing keys and trusted keys (docs/custody.md "Signed archives and
//! archives of several runs"): their text forms, read and written.
//!
//! * A secret key file (`flow keys new-signing FILE`, mode 0600): three
//!   lines, `flowd-signing-key/1`, `signer NAME`, `secret ed25519:<base64
//!   of the 32-byte seed>`.
//! * A public key line, as printed for a trusted-keys file:
//!   `ed25519:<base64 of the 32-byte key> NAME`.
//! * A trusted-keys file (`flow import --trust`, `flow serve
//!   --trusted-keys`): public key lines; blank lines and `#` comments are
//!   ignored; any other line refuses the file, naming it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// A secret key file's first line.
pub const KEY_FILE_FORMAT: &str = "flowd-signing-key/1";

/// The most bytes a signer's name has.
pub const MAX_NAME: usize = 128;

/// Checks a signer's name: 1 to [`MAX_NAME`] bytes, no control character,
/// no leading or trailing space (it ends a line of the signed message and
/// of a trusted-keys file).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || name.chars().any(char::is_control)
        || name.trim() != name
    {
        return Err(format!(
            "the signer's name {name:?} must be 1 to {MAX_NAME} bytes, without control characters or surrounding spaces"
        ));
    }
    Ok(())
}

/// A public key's text: `ed25519:<base64>`.
pub fn key_text(key: &VerifyingKey) -> String {
    format!("ed25519:{}", STANDARD.encode(key.as_bytes()))
}

/// A public key's fingerprint, as refusals name it: `SHA256:<base64>` of
/// its 32 bytes (the form ssh prints).
pub fn fingerprint(key: &VerifyingKey) -> String {
    let d = Sha256::digest(key.as_bytes());
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(d)
    )
}

/// Reads `ed25519:<base64>` as 32 bytes.
fn key_bytes(text: &str) -> Result<[u8; 32], String> {
    let b64 = text
        .strip_prefix("ed25519:")
        .ok_or_else(|| format!("{text:?} is not ed25519:<base64>"))?;
    let bytes = STANDARD
        .decode(b64)
        .map_err(|_| format!("{text:?} is not ed25519:<base64>"))?;
    bytes
        .try_into()
        .map_err(|_| format!("{text:?} does not hold 32 bytes"))
}

/// Parses a public key's text.
pub fn parse_key(text: &str) -> Result<VerifyingKey, String> {
    VerifyingKey::from_bytes(&key_bytes(text)?)
        .map_err(|_| format!("{text:?} is not an Ed25519 public key"))
}

/// A secret signing key and the name it signs as.
pub struct KeyFile {
    pub signer: String,
    pub key: SigningKey,
}

impl KeyFile {
    /// A new key from 32 random bytes.
    pub fn generate(signer: &str) -> Result<KeyFile, String> {
        check_name(signer)?;
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
        Ok(KeyFile {
            signer: signer.to_string(),
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The file's text.
    pub fn text(&self) -> String {
        format!(
            "{KEY_FILE_FORMAT}\nsigner {}\nsecret ed25519:{}\n",
            self.signer,
            STANDARD.encode(self.key.to_bytes())
        )
    }

    /// The public key line for a trusted-keys file.
    pub fn public_line(&self) -> String {
        format!("{} {}", key_text(&self.key.verifying_key()), self.signer)
    }

    /// Parses a key file's text.
    pub fn parse(text: &str) -> Result<KeyFile, String> {
        let mut lines = text.lines();
        if lines.next() != Some(KEY_FILE_FORMAT) {
            return Err(format!(
                "not a signing key file (its first line is not {KEY_FILE_FORMAT}): make one with flow keys new-signing FILE --signer NAME"
            ));
        }
        let signer = lines
            .next()
            .and_then(|l| l.strip_prefix("signer "))
            .ok_or("its second line is not `signer NAME`")?;
        check_name(signer)?;
        let secret = lines
            .next()
            .and_then(|l| l.strip_prefix("secret "))
            .ok_or("its third line is not `secret ed25519:<base64>`")?;
        if lines.any(|l| !l.is_empty()) {
            return Err("it has lines after the secret".into());
        }
        Ok(KeyFile {
            signer: signer.to_string(),
            key: SigningKey::from_bytes(&key_bytes(secret)?),
        })
    }

    /// Reads a key file, refusing one that others may read (as ssh does):
    /// a secret key readable by the group or the world is not kept.
    pub fn read(path: &Path) -> Result<KeyFile, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} is readable by others (mode {mode:o}): a secret key must be 0600 (chmod 600 {})",
                    path.display(),
                    path.display()
                ));
            }
        }
        if meta.len() > 4096 {
            return Err(format!("{} is not a signing key file", path.display()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        KeyFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes a new key file with mode 0600; an existing file is never
    /// overwritten.
    pub fn write_new(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!(
                "{} exists: a key file is never overwritten; choose another path",
                path.display()
            ),
            _ => format!("{}: {e}", path.display()),
        })?;
        f.write_all(self.text().as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The keys an import trusts, by their 32 bytes, with their names.
#[derive(Clone, Debug, Default)]
pub struct TrustedKeys {
    /// Where they were read (refusals name it).
    pub source: String,
    keys: BTreeMap<[u8; 32], String>,
}

impl TrustedKeys {
    /// Parses a trusted-keys file's text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<TrustedKeys, String> {
        let mut keys = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| format!("{source} line {}: {why}", i + 1);
            let (key, name) = line
                .split_once(' ')
                .ok_or_else(|| bad("expected `ed25519:<base64> NAME`".into()))?;
            let name = name.trim();
            check_name(name).map_err(bad)?;
            let k = parse_key(key).map_err(bad)?;
            if keys.insert(k.to_bytes(), name.to_string()).is_some() {
                return Err(bad("this key is listed twice".into()));
            }
        }
        if keys.is_empty() {
            return Err(format!(
                "{source} lists no key: add lines `ed25519:<base64> NAME` (flow keys new-signing prints one)"
            ));
        }
        Ok(TrustedKeys {
            source: source.to_string(),
            keys,
        })
    }

    /// Reads a trusted-keys file.
    pub fn read(path: &Path) -> Result<TrustedKeys, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        TrustedKeys::parse(&text, &path.display().to_string())
    }

    /// The same keys, named otherwise in refusals (a server names its
    /// flag, not its file's path, to clients).
    pub fn named(self, source: &str) -> TrustedKeys {
        TrustedKeys {
            source: source.to_string(),
            ..self
        }
    }

    /// The name a trusted key is listed with.
    pub fn name_of(&self, key: &VerifyingKey) -> Option<&str> {
        self.keys.get(key.as_bytes()).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_and_public_line_round_trip() {
        let k = KeyFile::generate("alice").unwrap();
        let back = KeyFile::parse(&k.text()).unwrap();
        assert_eq!(back.key.to_bytes(), k.key.to_bytes());
        assert_eq!(back.signer, "alice");
        let trusted = TrustedKeys::parse(&format!("# team\n\n{}\n", k.public_line()), "t").unwrap();
        assert_eq!(trusted.name_of(&k.key.verifying_key()), Some("alice"));
        let other = KeyFile::generate("bob").unwrap();
        assert_eq!(trusted.name_of(&other.key.verifying_key()), None);
    }

    #[test]
    fn malformed_files_are_refused() {
        for (text, why) in [
            ("", "lists no key"),
            ("ed25519:AAAA alice\n", "32 bytes"),
            ("rsa:AAAA alice\n", "ed25519:<base64>"),
            ("ed25519:!!!! alice\n", "ed25519:<base64>"),
            ("justakey\n", "NAME"),
        ] {
            let e = TrustedKeys::parse(text, "t").unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        let k = KeyFile::generate("alice").unwrap();
        let twice = format!("{}\n{}\n", k.public_line(), k.public_line());
        assert!(
            TrustedKeys::parse(&twice, "t")
                .unwrap_err()
                .contains("twice")
        );
        assert!(KeyFile::parse("hello\n").is_err());
        assert!(KeyFile::generate("").is_err());
        assert!(KeyFile::generate("a\nb").is_err());
    }
}
