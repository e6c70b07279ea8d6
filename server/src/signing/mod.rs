//! Signed archives (docs/custody.md "Signed archives and archives of
//! several runs"): a detached Ed25519 signature, `signature.json` at the
//! top of an archive, over its runs' heads and host records and the
//! signer's name. Signing and verifying read the archive through the
//! store's verified reader ([`flow_store::read_archives`]) first: what is
//! signed is what an import would write.
//!
//! The signed message, UTF-8, domain-separated by its first line:
//!
//! ```text
//! flowd-archive-signature/1
//! signer NAME
//! run RUN FACTS HEAD HOST        (one line per run, in run id order)
//! ```
//!
//! FACTS is the last fact's number, HEAD its chain hash h_n
//! (`blake3:<hex>`), HOST the blake3 of the run's `host.jsonl`. The chain
//! hash covers every fact and each fact's blob references cover the blobs'
//! bytes (import checks each blob against its hash), so the signature
//! covers every byte an import writes.
//!
//! Nothing here touches the store; the private key never leaves the
//! machine that signs (`flow --server … export --sign` signs the archive
//! the server sends, locally).

pub mod import;
pub mod keys;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer};
use flow_store::VerifiedArchive;
use keys::{KeyFile, TrustedKeys, check_name, fingerprint, key_text, parse_key};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// The message's first line and `signature.json`'s `format`.
pub const FORMAT: &str = "flowd-archive-signature/1";

/// The largest `signature.json` read (a thousand runs' lines fit).
const SIGNATURE_LIMIT: u64 = 1 << 20;

/// One run as signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedRun {
    pub run: String,
    /// The last fact's number.
    pub facts: u64,
    /// The last fact's chain hash, `blake3:<hex>`.
    pub head: String,
    /// The blake3 of the run's `host.jsonl`, `blake3:<hex>`.
    pub host: String,
}

/// `signature.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    pub format: String,
    pub signer: String,
    /// The public key, `ed25519:<base64>`.
    pub key: String,
    /// What was signed, for a reader and for a refusal that names the run
    /// that changed; verification rebuilds it from the archive itself.
    pub runs: Vec<SignedRun>,
    /// The Ed25519 signature of the message, base64.
    pub signature: String,
}

/// Who signed an archive that verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The name the archive gives.
    pub signer: String,
    /// `ed25519:<base64>`.
    pub key: String,
    pub fingerprint: String,
    /// The name the trusted-keys file lists the key with, when it does.
    pub trusted_as: Option<String>,
}

impl Signed {
    /// One line for the CLI: who signed, and whether the key is trusted.
    pub fn describe(&self) -> String {
        match &self.trusted_as {
            Some(name) => format!("signed by {name} (trusted key {})", self.fingerprint),
            None => format!(
                "signed by {:?} with key {} ({}), which is not trusted here (no trusted keys are configured)",
                self.signer, self.key, self.fingerprint
            ),
        }
    }
}

/// The runs of verified archives as signed.
fn signed_runs(archives: &[VerifiedArchive]) -> Vec<SignedRun> {
    let mut runs: Vec<SignedRun> = archives
        .iter()
        .map(|a| {
            let (n, h) = a.last();
            SignedRun {
                run: a.run().to_string(),
                facts: n,
                head: format!("blake3:{}", hex::encode(h)),
                host: format!(
                    "blake3:{}",
                    blake3::hash(flow_store::host_jsonl(a.host_records()).as_bytes()).to_hex()
                ),
            }
        })
        .collect();
    runs.sort_by(|a, b| a.run.cmp(&b.run));
    runs
}

/// The signed message (module documentation).
fn message(signer: &str, runs: &[SignedRun]) -> Vec<u8> {
    let mut m = format!("{FORMAT}\nsigner {signer}\n");
    for r in runs {
        m.push_str(&format!(
            "run {} {} {} {}\n",
            r.run, r.facts, r.head, r.host
        ));
    }
    m.into_bytes()
}

/// A refusal of a signed archive, or of an unsigned one where trust is
/// configured: the client's to fix; nothing was written.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A torn tail is never signed: an exporter writes none, so a signed
/// archive with one was changed after signing.
fn refuse_torn(archives: &[VerifiedArchive]) -> Result<(), Refused> {
    match archives.iter().find_map(|a| a.torn().map(|t| (a.run(), t))) {
        Some((run, t)) => Err(Refused(format!(
            "the signature does not cover {run}: its history.jsonl ends in a torn fact {} ({}), so it changed after signing",
            t.fact, t.reason
        ))),
        None => Ok(()),
    }
}

/// Signs the archive at `root` (one run or several), verified first, and
/// writes its `signature.json`.
pub fn sign_archive(root: &Path, key: &KeyFile) -> Result<Signed, String> {
    let archives = flow_store::read_archives(root).map_err(|e| e.to_string())?;
    refuse_torn(&archives).map_err(|e| e.0)?;
    let runs = signed_runs(&archives);
    let sig = key.key.sign(&message(&key.signer, &runs));
    let vk = key.key.verifying_key();
    let file = SignatureFile {
        format: FORMAT.into(),
        signer: key.signer.clone(),
        key: key_text(&vk),
        runs,
        signature: STANDARD.encode(sig.to_bytes()),
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    text.push('\n');
    let path = root.join(flow_store::archive::SIGNATURE_FILE);
    let tmp = root.join(".signature.json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Signed {
        signer: key.signer.clone(),
        key: key_text(&vk),
        fingerprint: fingerprint(&vk),
        trusted_as: None,
    })
}

/// Reads `signature.json` at `root`, when there is one.
fn read_signature(root: &Path) -> Result<Option<SignatureFile>, Refused> {
    let path = root.join(flow_store::archive::SIGNATURE_FILE);
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Refused(format!("signature.json: {e}"))),
        Ok(m) => m,
    };
    if !meta.is_file() || meta.len() > SIGNATURE_LIMIT {
        return Err(Refused(format!(
            "signature.json is not a regular file of at most {SIGNATURE_LIMIT} bytes"
        )));
    }
    // At most the limit is read, whatever the file became since.
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(SIGNATURE_LIMIT).read_to_string(&mut text))
        .map_err(|e| Refused(format!("signature.json: {e}")))?;
    let file: SignatureFile = serde_json::from_str(&text).map_err(|e| {
        Refused(format!(
            "signature.json is malformed ({e}): it holds format, signer, key, runs and signature"
        ))
    })?;
    if file.format != FORMAT {
        return Err(Refused(format!(
            "signature.json's format {:?} is not {FORMAT}",
            file.format
        )));
    }
    Ok(Some(file))
}

/// Checks the signature of verified `archives` read from `root`:
///
/// * trusted keys configured: an unsigned archive, a signature by a key
///   not listed, and a signature that does not verify are refused;
/// * none configured: a signed archive is still verified (a bad
///   signature is refused) and said to be signed by a key not trusted; an
///   unsigned one passes.
///
/// `None` for an unsigned archive that passes.
pub fn check_archive(
    root: &Path,
    archives: &[VerifiedArchive],
    trust: Option<&TrustedKeys>,
) -> Result<Option<Signed>, Refused> {
    let Some(file) = read_signature(root)? else {
        return match trust {
            Some(t) => Err(Refused(format!(
                "the archive is not signed, and only archives signed by a key in {} are accepted: export it with --sign KEYFILE",
                t.source
            ))),
            None => Ok(None),
        };
    };
    check_name(&file.signer).map_err(|e| Refused(format!("signature.json: {e}")))?;
    let vk = parse_key(&file.key).map_err(|e| Refused(format!("signature.json: key {e}")))?;
    refuse_torn(archives)?;
    let runs = signed_runs(archives);
    // Name what changed when the file's own list says what was signed.
    for r in &runs {
        match file.runs.iter().find(|s| s.run == r.run) {
            None => {
                return Err(Refused(format!(
                    "the signature does not cover {}: the run was added after signing",
                    r.run
                )));
            }
            Some(s) if s != r => {
                let what = if s.host == r.host {
                    "history"
                } else {
                    "host records"
                };
                return Err(Refused(format!(
                    "the signature does not cover {}: its {what} changed after signing",
                    r.run
                )));
            }
            Some(_) => {}
        }
    }
    if let Some(s) = file
        .runs
        .iter()
        .find(|s| !runs.iter().any(|r| r.run == s.run))
    {
        return Err(Refused(format!(
            "the signature covers {}, which the archive no longer holds",
            s.run
        )));
    }
    let sig = STANDARD
        .decode(&file.signature)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b))
        .ok_or_else(|| Refused("signature.json: the signature is not 64 bytes of base64".into()))?;
    vk.verify_strict(&message(&file.signer, &runs), &sig)
        .map_err(|_| {
            Refused(format!(
                "the signature does not verify: the archive, its signer's name or its signature changed after {:?} signed it with key {}",
                file.signer,
                fingerprint(&vk)
            ))
        })?;
    let signed = Signed {
        signer: file.signer.clone(),
        key: key_text(&vk),
        fingerprint: fingerprint(&vk),
        trusted_as: None,
    };
    match trust {
        None => Ok(Some(signed)),
        Some(t) => match t.name_of(&vk) {
            Some(name) => Ok(Some(Signed {
                trusted_as: Some(name.to_string()),
                ..signed
            })),
            None => Err(Refused(format!(
                "the archive is signed by {:?} with key {} ({}), which is not in the trusted keys {}: add its line there to accept it",
                file.signer,
                fingerprint(&vk),
                key_text(&vk),
                t.source
            ))),
        },
    }
}
