//! Run archives (DESIGN §6 "Run archives"): "A directory per run:
//! `history.jsonl` (one stored fact per line, with its hash) and
//! `blobs/<hash>` ... Import verifies the chain and every blob before
//! anything is written, and is idempotent. `flow runs --runs DIR` inspects a
//! directory of archives with the seed's discovery rules and bounds."
//!
//! Layout of one archive directory (named by its run id when it sits in a
//! root of archives):
//!
//! * `history.jsonl`: one canonical line `{"fact":F,"hash":"blake3:<hex>"}`
//!   per fact, each ending in `\n`; F is the stored fact, the hash is h_n.
//! * `blobs/<hex>`: each blob the history uses (value blobs, innermost ones
//!   included, and source blobs), named by the hex of its blake3 (no
//!   `blake3:` prefix: `:` is not portable in file names).
//! * `host.jsonl`: the run's host records, one canonical line each
//!   `{"at":ms,"details":D,"head":{"hash":H,"n":N},"kind":K,"seq":S}`.
//!
//! Torn tails (REQUIREMENTS GAP-HIST-9): "a last line without `\n`, or one
//! that does not parse or breaks the chain, is truncation ... A bad line
//! anywhere else makes the record unreadable."

use crate::api::*;
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::hash::{chain_next, chain_start, hash_text, parse_hash};
use crate::merkle::{BlobVerifier, NewBlob};
use crate::verify::check_stored_fact;
use flow_abi::fact::RunId;
use flow_abi::json::canonical;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

mod inspect;

pub use inspect::inspect_archives;

/// Seed: "Component payloads are limited to 4 MiB with one additional
/// overflow-probe byte".
pub const COMPONENT_LIMIT: u64 = 4 << 20;
/// Seed: "included in the cumulative 16 MiB page-read ceiling".
pub const PAGE_READ_CEILING: u64 = 16 << 20;
/// Seed: "Directory scanning examines at most 10,000 non-dot entries before
/// interpreting their names."
pub const MAX_ENTRIES: usize = 10_000;
/// Import is not presentation and has no seed bound; this only keeps a
/// hostile archive from exhausting memory.
pub const IMPORT_FILE_LIMIT: u64 = 1 << 30;

/// One fact read from an archive, checked: its stored text, not its
/// parsed value (a value tree is several times its text; issue 36: an
/// import held ~15× the archive). The first and last facts' values are
/// kept beside ([`VerifiedArchive`]).
#[derive(Clone, Debug)]
pub struct ArchivedFact {
    pub n: u64,
    pub kind: FactKind,
    pub hash: [u8; 32],
    pub body: String,
}

/// An archive whose chain and every blob were verified. Only
/// [`read_archive`] makes one, so a backend's `import_verified` gets checked
/// content only.
#[derive(Clone, Debug)]
pub struct VerifiedArchive {
    pub(crate) run: RunId,
    pub(crate) facts: Vec<ArchivedFact>,
    /// The Start's value (the runs index reads its entry, parent, outer).
    pub(crate) first: Value,
    /// The last fact's value (an End's ending).
    pub(crate) last: Value,
    pub(crate) blobs: Vec<NewBlob>,
    pub(crate) host: Vec<HostRecordRow>,
    /// The blobs that are holes of the run (`holes.json`, docs/custody.md
    /// "Holes"): referenced by its facts, their content not in the archive.
    pub(crate) holes: Vec<[u8; 32]>,
    /// The torn last fact left out (CRASH-7), when there was one.
    pub(crate) torn: Option<TornTail>,
}

/// A torn last fact an import removed, keeping the checked facts before
/// it (REQUIREMENTS CRASH-7: "A torn last fact is truncation and is
/// removed before anything is appended"; GAP-HIST-9: a last line without
/// `\n`, or one that does not parse or breaks the chain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The number the torn fact would have had.
    pub fact: u64,
    /// Why the last line is torn.
    pub reason: String,
}

impl VerifiedArchive {
    pub fn run(&self) -> &RunId {
        &self.run
    }
    pub fn facts(&self) -> &[ArchivedFact] {
        &self.facts
    }
    pub fn blobs(&self) -> &[NewBlob] {
        &self.blobs
    }
    pub fn host_records(&self) -> &[HostRecordRow] {
        &self.host
    }
    /// The run's holes: blobs its facts reference whose content the
    /// archive does not carry.
    pub fn holes(&self) -> &[[u8; 32]] {
        &self.holes
    }
    /// The torn last fact the archive's history ended in, left out.
    pub fn torn(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }
    /// The last fact's number and hash.
    pub fn last(&self) -> (u64, [u8; 32]) {
        self.facts
            .last()
            .map(|f| (f.n, f.hash))
            .unwrap_or((0, chain_start(self.run.as_str())))
    }
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportSummary {
    pub facts: u64,
    pub blobs: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

fn parse_host_line(line: &str) -> Result<HostRecordRow, String> {
    let (v, canonical) =
        flow_abi::json::parse_checking_canonical(line).map_err(|e| format!("not JSON: {e}"))?;
    if !canonical {
        return Err("not in canonical form".into());
    }
    let kind = v
        .get("kind")
        .and_then(Value::as_str)
        .and_then(HostRecordKind::parse)
        .ok_or("unknown kind")?;
    let hash = v
        .pointer("/head/hash")
        .and_then(Value::as_str)
        .filter(|h| parse_hash(h).is_some())
        .ok_or("malformed head")?;
    Ok(HostRecordRow {
        seq: v
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or("malformed seq")?,
        at_ms: v.get("at").and_then(Value::as_i64).ok_or("malformed at")?,
        head: FactRef {
            n: v.pointer("/head/n")
                .and_then(Value::as_u64)
                .ok_or("malformed head")?,
            hash: hash.to_string(),
        },
        details: HostDetails::from_json(kind, v.get("details").cloned().ok_or("no details")?),
    })
}

/// The checked prefix of a `history.jsonl`.
#[derive(Debug, Default)]
pub(crate) struct HistoryScan {
    pub facts: Vec<ArchivedFact>,
    /// The first and last checked facts' values.
    pub first: Option<Value>,
    pub last: Option<Value>,
    /// The fact `see` refused (see [`scan_history`]), and why.
    pub refused: Option<(u64, String)>,
    /// An unfinished physical tail (seed: "truncated reports an unfinished
    /// physical tail").
    pub truncated: bool,
    /// Why the tail counts as truncated, naming the fact.
    pub tail_reason: Option<(u64, String)>,
    /// A bad line before the tail: the record is unreadable.
    pub error: Option<(u64, String)>,
}

fn check_line(
    line: &str,
    n: u64,
    prev: &[u8; 32],
    run: &mut Option<String>,
) -> Result<(ArchivedFact, Value), String> {
    let text = std::str::from_utf8(line.as_bytes()).map_err(|_| "not UTF-8".to_string())?;
    let (w, is_canonical) =
        flow_abi::json::parse_checking_canonical(text).map_err(|e| format!("not JSON: {e}"))?;
    if !is_canonical {
        return Err("not in canonical form".into());
    }
    let ArchiveLine { fact, hash } = serde_json::from_value(w)
        .map_err(|_| "a line is {\"fact\":{…},\"hash\":\"blake3:<hex>\"}")?;
    let hash = parse_hash(&hash).ok_or("a line's hash is not blake3:<hex>")?;
    let fact = &Value::Object(fact);
    let body = canonical(fact);
    let run_id = match run {
        Some(r) => r.clone(),
        None => fact
            .get("run")
            .and_then(Value::as_str)
            .ok_or("the first fact is not a Start")?
            .to_string(),
    };
    let (fact, kind) = check_stored_fact(&run_id, n, &body)?;
    let start = chain_start(&run_id);
    let h = chain_next(if n == 1 { &start } else { prev }, &body);
    if h != hash {
        return Err("the chain hash does not match".into());
    }
    *run = Some(run_id);
    Ok((
        ArchivedFact {
            n,
            kind,
            hash: h,
            body,
        },
        fact,
    ))
}

/// One line of `history.jsonl`, exactly its two members.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveLine {
    fact: Map<String, Value>,
    hash: String,
}

/// Checks a history file's bytes. `dir_run`: the run id the directory
/// names (seed: "A Start whose run identity differs from the directory ID
/// is unreadable"). `see` is shown each checked fact with its value while
/// the value is at hand (import verifies its blobs there), and may refuse
/// it: the scan stops, [`HistoryScan::refused`] saying why. Only the first
/// and last values are kept.
pub(crate) fn scan_history(
    bytes: &[u8],
    dir_run: Option<&str>,
    see: &mut dyn FnMut(&ArchivedFact, &Value) -> Result<(), String>,
) -> HistoryScan {
    // Reading a slice cannot fail.
    scan_lines(bytes, dir_run, see).unwrap_or_else(|e| HistoryScan {
        error: Some((1, e.to_string())),
        ..HistoryScan::default()
    })
}

/// [`scan_history`] over a reader, a line at a time (import reads the file
/// so: only one line's bytes are held, beside the facts' texts). A line is
/// checked once the next one is read, which tells whether it is the last
/// complete line and whether an unfinished tail follows.
pub(crate) fn scan_lines(
    mut r: impl std::io::BufRead,
    dir_run: Option<&str>,
    see: &mut dyn FnMut(&ArchivedFact, &Value) -> Result<(), String>,
) -> std::io::Result<HistoryScan> {
    let mut scan = HistoryScan::default();
    // The next complete line (without its newline), read ahead.
    let read = |r: &mut dyn std::io::BufRead| -> std::io::Result<Option<(Vec<u8>, bool)>> {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(None);
        }
        let complete = line.last() == Some(&b'\n');
        if complete {
            line.pop();
        }
        Ok(Some((line, complete)))
    };
    let mut next = read(&mut r)?;
    let mut run: Option<String> = None;
    let mut prev = [0u8; 32];
    let mut n = 0u64;
    while let Some((line, true)) = next {
        n += 1;
        next = read(&mut r)?;
        let tail = matches!(next, Some((_, false)));
        let last_complete = !matches!(next, Some((_, true)));
        let Ok(line) = std::str::from_utf8(&line) else {
            scan.error = Some((n, "not UTF-8".into()));
            return Ok(scan);
        };
        let result = if scan.facts.last().is_some_and(|f| f.kind == FactKind::End) {
            Err("a fact follows End".to_string())
        } else {
            check_line(line, n, &prev, &mut run)
        };
        match result {
            Ok((f, value)) => {
                if n == 1
                    && let Some(d) = dir_run
                    && run.as_deref() != Some(d)
                {
                    scan.error = Some((
                        1,
                        format!(
                            "Start names run {}, the directory {d}",
                            run.as_deref().unwrap_or("?")
                        ),
                    ));
                    return Ok(scan);
                }
                if let Err(reason) = see(&f, &value) {
                    scan.refused = Some((n, reason));
                    return Ok(scan);
                }
                prev = f.hash;
                if n == 1 {
                    scan.first = Some(value.clone());
                }
                scan.last = Some(value);
                scan.facts.push(f);
            }
            // A torn tail needs a valid prefix (GAP-HIST-9): a history
            // whose only complete line is bad is unreadable, not a run
            // torn before its Start.
            Err(reason) if last_complete && !tail && !scan.facts.is_empty() => {
                scan.truncated = true;
                scan.tail_reason = Some((n, reason));
            }
            Err(reason) => {
                scan.error = Some((n, reason));
                return Ok(scan);
            }
        }
    }
    if next.is_some() {
        // An unfinished physical tail.
        scan.truncated = true;
        if scan.tail_reason.is_none() {
            scan.tail_reason = Some((n + 1, "the last line has no newline".into()));
        }
    }
    Ok(scan)
}

/// One file of an archive directory, read for import; `None` when it is
/// absent. Only a regular file is opened: a FIFO would block the open and a
/// device such as `/dev/zero` never ends, so both are refused before any
/// byte is read, as is a file larger than [`IMPORT_FILE_LIMIT`] (by its
/// size). The opened file is checked again (it may have been swapped).
pub(crate) fn read_import_file(path: &Path, component: &str) -> Result<Option<Vec<u8>>> {
    let Some((f, len)) = open_import_file(path, component)? else {
        return Ok(None);
    };
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(IMPORT_FILE_LIMIT + 1)
        .read_to_end(&mut buf)
        .map_err(io(path))?;
    if buf.len() as u64 > IMPORT_FILE_LIMIT {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return Err(Error::ArchiveRefused {
            component: component.into(),
            fact: None,
            reason: format!("{name} is larger than the import limit ({IMPORT_FILE_LIMIT} bytes)"),
        });
    }
    Ok(Some(buf))
}

/// [`read_import_file`]'s checks, the file opened and its length, for a
/// caller that reads it as it goes (at most [`IMPORT_FILE_LIMIT`] bytes).
fn open_import_file(path: &Path, component: &str) -> Result<Option<(fs::File, u64)>> {
    let refuse = |reason: String| Error::ArchiveRefused {
        component: component.into(),
        fact: None,
        reason,
    };
    let meta = match fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
        Ok(m) => m,
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if !meta.is_file() {
        return Err(refuse(format!("{name} is not a regular file")));
    }
    if meta.len() > IMPORT_FILE_LIMIT {
        return Err(refuse(format!(
            "{name} is larger than the import limit ({IMPORT_FILE_LIMIT} bytes)"
        )));
    }
    let f = fs::File::open(path).map_err(io(path))?;
    if !f.metadata().map_err(io(path))?.is_file() {
        return Err(refuse(format!("{name} is not a regular file")));
    }
    Ok(Some((f, meta.len())))
}

/// Reads and verifies an archive directory: every line, the chain, every
/// blob (innermost included) and every source. Nothing is written. A torn
/// last fact is left out ([`VerifiedArchive::torn`]); a bad line anywhere
/// else refuses the archive.
pub fn read_archive(dir: &Path) -> Result<VerifiedArchive> {
    let refuse = |component: &str, fact: Option<u64>, reason: String| Error::ArchiveRefused {
        component: component.into(),
        fact,
        reason,
    };
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(refuse(
                "archive",
                None,
                format!("{} is not an archive directory", dir.display()),
            ));
        }
        Err(e) => return Err(Error::io(dir, e)),
    }
    let hp = dir.join("history.jsonl");
    let Some((history, _)) = open_import_file(&hp, "history.jsonl")? else {
        return Err(refuse(
            "history.jsonl",
            None,
            "the archive has no history.jsonl (a run archive holds history.jsonl, host.jsonl and blobs/)".into(),
        ));
    };
    let dir_run = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| RunId::parse(n).is_ok());
    // Every blob a fact names is verified (and loaded for the import)
    // while the fact's value is at hand; only its text is kept.
    let blob_dir = dir.join("blobs");
    let mut loaded: BTreeMap<[u8; 32], Vec<u8>> = BTreeMap::new();
    // A hole whose blob the archive carries after all is no hole: the
    // blob is verified as any other (content that does not hash to the
    // reference refuses the archive; the original content restores it).
    let holes: Vec<[u8; 32]> = holes::read_holes(dir)?
        .into_iter()
        .filter(|h| fs::symlink_metadata(blob_dir.join(hex::encode(h))).is_err())
        .collect();
    let mut verifier = BlobVerifier::with_holes(holes.iter().copied().collect());
    // Which file a refusal of `see` is about.
    let mut refused_in = "blobs";
    let scan = {
        let mut see = |f: &ArchivedFact, fact: &Value| -> std::result::Result<(), String> {
            let mut load = |h: &[u8; 32]| -> Result<Option<Vec<u8>>> {
                let b = read_import_file(&blob_dir.join(hex::encode(h)), "blobs")?;
                if let Some(b) = &b {
                    loaded.insert(*h, b.clone());
                }
                Ok(b)
            };
            verifier.verify_refs_in(fact, &mut load)?;
            if f.kind == FactKind::Start {
                for s in fact
                    .get("sources")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let (Some(h), Some(l)) = (
                        s.get("hash").and_then(Value::as_str).and_then(parse_hash),
                        s.get("length").and_then(Value::as_u64),
                    ) else {
                        refused_in = "history.jsonl";
                        return Err("a source entry is malformed".into());
                    };
                    verifier.verify_source(&h, l, &mut load)?;
                }
            }
            Ok(())
        };
        // Read a line at a time: the file's bytes are never all held.
        let reader = std::io::BufReader::new(history.take(IMPORT_FILE_LIMIT));
        scan_lines(reader, dir_run, &mut see).map_err(io(&hp))?
    };
    if let Some((n, reason)) = scan.error {
        return Err(refuse("history.jsonl", Some(n), reason));
    }
    if let Some((n, reason)) = scan.refused {
        return Err(refuse(refused_in, Some(n), reason));
    }
    // A torn tail is truncation (CRASH-7): the checked facts before it
    // are imported and the torn one is left out, said in the outcome.
    let torn = scan
        .tail_reason
        .map(|(fact, reason)| TornTail { fact, reason });
    let (Some(first), Some(last)) = (scan.first, scan.last) else {
        return Err(refuse("history.jsonl", None, "the history is empty".into()));
    };
    let run_text = first.get("run").and_then(Value::as_str).unwrap_or_default();
    let run =
        RunId::parse(run_text).map_err(|e| refuse("history.jsonl", Some(1), e.to_string()))?;
    let mut host = Vec::new();
    let hostp = dir.join("host.jsonl");
    if let Some(b) = read_import_file(&hostp, "host.jsonl")? {
        let text =
            String::from_utf8(b).map_err(|_| refuse("host.jsonl", None, "not UTF-8".into()))?;
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(refuse(
                "host.jsonl",
                None,
                "the last line has no newline".into(),
            ));
        }
        for (i, line) in text.lines().enumerate() {
            let r = parse_host_line(line)
                .map_err(|e| refuse("host.jsonl", None, format!("line {}: {e}", i + 1)))?;
            if !scan
                .facts
                .iter()
                .any(|f| f.n == r.head.n && hash_text(&f.hash) == r.head.hash)
            {
                return Err(refuse(
                    "host.jsonl",
                    None,
                    format!("line {}: its head is not a fact of this history", i + 1),
                ));
            }
            host.push(r);
        }
    }
    let blobs = loaded
        .into_iter()
        .map(|(hash, body)| NewBlob { hash, body })
        .collect();
    Ok(VerifiedArchive {
        run,
        facts: scan.facts,
        first,
        last,
        blobs,
        host,
        holes,
        torn,
    })
}

/// Imports an archive directory: verified first, then written in one
/// transaction. Importing the same history again is a no-op; a different
/// history under the same run id is refused.
pub fn import_run<S: ImportRuns + ?Sized>(store: &S, dir: &Path) -> Result<ImportOutcome> {
    let archive = read_archive(dir)?;
    store.import_verified(archive)
}

mod export;
pub use export::{export_run, export_run_redacted};
pub mod holes;
mod several;
pub(crate) use several::check_distinct;
pub use several::{
    Layout, MAX_RUNS, SIGNATURE_FILE, archive_layout, export_runs, host_jsonl, import_runs,
    lineage_runs, read_archives,
};
