//! Run archives as tar streams (DESIGN §6 "Run archives": "over HTTP the
//! same as a tar stream"), one form for both doors: `GET
//! /v1/runs/{run}/archive` packs an exported archive directory, and
//! `POST /v1/archives` and `flow import FILE.tar` unpack one into a private
//! temporary directory before importing it.
//!
//! Tar is read and written by the `tar` crate. The writer makes ustar
//! entries with fixed metadata (mode, owner 0, mtime 0), so one archive
//! directory always packs to the same bytes. The reader streams: it accepts
//! only regular files with the archive's own names (`history.jsonl`,
//! `host.jsonl`, `blobs/<hex>`, and `signature.json` when signed) and the
//! `blobs/` directory — or, for an archive of several runs, the same names
//! under one directory per run (`<run id>/history.jsonl`, …), never both
//! forms in one stream; links, other entry types and any other path are
//! refused, an entry larger than the
//! import limit is refused by its header, and a stream that ends before its
//! entries or without the end-of-archive blocks is refused as truncated.
//!
//! The reader is strict where the `tar` crate is lenient (issue 36: a
//! malformed pax record was skipped and the archive imported): entries are
//! read raw, and pax extended headers are checked here — every record
//! well formed (`LEN key=value\n`, its length its own, UTF-8), none that
//! would change what the next entry is (`path`, `linkpath`, `size`,
//! `hdrcharset`, sparse maps), each followed by the entry it describes. A
//! well-formed one (another tar tool's times, owner names) is ignored. GNU
//! long-name entries are refused with the other entry types: no name of a
//! run archive needs one. Header checksums are the crate's to check.

use flow_store::archive::IMPORT_FILE_LIMIT;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

/// Tar's block size: the end-of-archive marker is a zero block.
const BLOCK: usize = 512;

/// The largest pax extended header taken: times and names fit many times
/// over.
const PAX_LIMIT: u64 = 64 << 10;

/// Checks a pax extended header's records (module documentation).
fn check_pax(data: &[u8]) -> Result<(), String> {
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        i += 1;
        let bad = |why: &str| format!("pax record {i} is malformed: {why}");
        let space = rest
            .iter()
            .position(|b| *b == b' ')
            .ok_or_else(|| bad("no length"))?;
        let digits = &rest[..space];
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || digits.len() > 6 {
            return Err(bad("its length is not a decimal number"));
        }
        let len: usize = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| bad("its length is not a decimal number"))?;
        if len <= space + 1 || len > rest.len() {
            return Err(bad("its length does not fit the header"));
        }
        let (record, next) = rest.split_at(len);
        let Some(kv) = record[space + 1..].strip_suffix(b"\n") else {
            return Err(bad("its length does not end it at a newline"));
        };
        let kv = std::str::from_utf8(kv).map_err(|_| bad("not UTF-8"))?;
        let (key, _) = kv.split_once('=').ok_or_else(|| bad("no key=value"))?;
        if key.is_empty() || key.contains('\n') {
            return Err(bad("an empty key"));
        }
        if matches!(key, "path" | "linkpath" | "size" | "hdrcharset")
            || key.starts_with("GNU.sparse.")
        {
            return Err(format!(
                "pax record {i} sets {key}, which a run archive's entries never need"
            ));
        }
        rest = next;
    }
    Ok(())
}

/// Why an unpack failed: the stream is not a run archive (the client's
/// fault), or the temporary directory could not be written.
#[derive(Debug)]
pub enum UnpackError {
    Refused(String),
    Io(std::io::Error),
}

impl std::fmt::Display for UnpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpackError::Refused(d) => f.write_str(d),
            UnpackError::Io(e) => write!(f, "cannot unpack the archive: {e}"),
        }
    }
}

/// A private temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> std::io::Result<TempDir> {
        let mut r = [0u8; 12];
        getrandom::fill(&mut r).map_err(std::io::Error::other)?;
        let p = std::env::temp_dir().join(format!("flowd-archive-{}", hex::encode(r)));
        std::fs::create_dir(&p)?;
        Ok(TempDir(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A ustar header with fixed metadata, so packing is deterministic.
fn header(kind: EntryType, size: u64) -> Header {
    let mut h = Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(if kind == EntryType::Directory {
        0o755
    } else {
        0o644
    });
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

fn sorted_names(dir: &Path, files_only: bool) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if !files_only || e.file_type()?.is_file() {
            names.push(e.file_name().to_string_lossy().to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Packs one run's archive directory (files at the top and in `blobs/`),
/// each name after `prefix`.
fn pack_run(tar: &mut tar::Builder<Vec<u8>>, dir: &Path, prefix: &str) -> std::io::Result<()> {
    for n in sorted_names(dir, true)? {
        let data = std::fs::read(dir.join(&n))?;
        tar.append_data(
            &mut header(EntryType::Regular, data.len() as u64),
            format!("{prefix}{n}"),
            &data[..],
        )?;
    }
    let blobs = dir.join("blobs");
    if blobs.is_dir() {
        tar.append_data(
            &mut header(EntryType::Directory, 0),
            format!("{prefix}blobs/"),
            std::io::empty(),
        )?;
        for n in sorted_names(&blobs, false)? {
            let data = std::fs::read(blobs.join(&n))?;
            tar.append_data(
                &mut header(EntryType::Regular, data.len() as u64),
                format!("{prefix}blobs/{n}"),
                &data[..],
            )?;
        }
    }
    Ok(())
}

/// Packs an archive directory: one run's (files at the top and in
/// `blobs/`), or a root of several (its `signature.json`, then each run's
/// directory in id order).
pub fn pack(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    match flow_store::archive_layout(dir).map_err(std::io::Error::other)? {
        flow_store::Layout::One => pack_run(&mut tar, dir, "")?,
        flow_store::Layout::Several(runs) => {
            for n in sorted_names(dir, true)? {
                let data = std::fs::read(dir.join(&n))?;
                tar.append_data(
                    &mut header(EntryType::Regular, data.len() as u64),
                    &n,
                    &data[..],
                )?;
            }
            for run in runs {
                tar.append_data(
                    &mut header(EntryType::Directory, 0),
                    format!("{run}/"),
                    std::io::empty(),
                )?;
                pack_run(&mut tar, &dir.join(run.as_str()), &format!("{run}/"))?;
            }
        }
    }
    // Writes the end-of-archive blocks.
    tar.into_inner()
}

/// What an entry's name is in a run archive (module documentation), or
/// `None` for a name no archive holds.
#[derive(Debug, PartialEq, Eq)]
enum Name<'a> {
    /// `signature.json`, at the top of either form.
    Signature,
    /// `blobs/` of a run (`run` is `None` at the top of an archive of one).
    BlobDir { run: Option<&'a str> },
    /// A run's directory in an archive of several.
    RunDir { run: &'a str },
    /// A run's file: `history.jsonl`, `host.jsonl` or `blobs/<hex>`.
    File { run: Option<&'a str> },
}

fn classify(name: &str, dir: bool) -> Option<Name<'_>> {
    if !dir && name == flow_store::archive::SIGNATURE_FILE {
        return Some(Name::Signature);
    }
    let (run, rest) = match name.split_once('/') {
        Some((r, rest)) if flow_store::RunId::parse(r).is_ok() => (Some(r), rest),
        _ => (None, name),
    };
    if dir {
        return match (run, rest) {
            (_, "blobs/" | "blobs") => Some(Name::BlobDir { run }),
            (Some(run), "") => Some(Name::RunDir { run }),
            _ => None,
        };
    }
    let ok = match rest.strip_prefix("blobs/") {
        Some(h) => h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => {
            rest == "history.jsonl"
                || rest == "host.jsonl"
                || rest == flow_store::archive::holes::HOLES_FILE
        }
    };
    ok.then_some(Name::File { run })
}

/// A reader that remembers the last block's worth of bytes read through
/// it: the tar reader stops at the first zero block or at the end of the
/// stream, and only the former is a whole archive.
struct Tail<R> {
    inner: R,
    last: Vec<u8>,
}

impl<R: Read> Read for Tail<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.last.extend_from_slice(&buf[..n]);
        if self.last.len() > BLOCK {
            self.last.drain(..self.last.len() - BLOCK);
        }
        Ok(n)
    }
}

/// Unpacks a tar stream into `dir`, refusing anything but the archive's own
/// files.
pub fn unpack(reader: impl Read, dir: &Path) -> Result<(), UnpackError> {
    let bad = |d: String| UnpackError::Refused(format!("not a run archive tar: {d}"));
    // The form the first run entry chose (of several runs, or not), and
    // the run directories made so far.
    let mut several: Option<bool> = None;
    let mut runs = std::collections::BTreeSet::new();
    let mut archive = tar::Archive::new(Tail {
        inner: reader,
        last: Vec::with_capacity(2 * BLOCK),
    });
    // Raw: pax and GNU extension entries come to us, not to the crate's
    // lenient handling.
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?.raw(true);
    // A pax header waits for the entry it describes.
    let mut described = false;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_pax_local_extensions() || kind.is_pax_global_extensions() {
            if described {
                return Err(bad("a pax header follows another".into()));
            }
            let size = entry.size();
            if size > PAX_LIMIT {
                return Err(bad(format!(
                    "a pax header of {size} bytes (at most {PAX_LIMIT})"
                )));
            }
            let mut data = Vec::new();
            (&mut entry)
                .take(size)
                .read_to_end(&mut data)
                .map_err(|e| bad(format!("a pax header: {e}")))?;
            if data.len() as u64 != size {
                return Err(bad("a pax header is truncated".into()));
            }
            check_pax(&data).map_err(bad)?;
            described = kind.is_pax_local_extensions();
            continue;
        }
        described = false;
        let what = match kind {
            EntryType::Directory => classify(&name, true),
            EntryType::Regular => classify(&name, false),
            _ => None,
        };
        let Some(what) = what else {
            return Err(bad(format!(
                "entry {name:?} is not one of history.jsonl, host.jsonl, holes.json, blobs/<hex>, signature.json (or those under <run id>/)"
            )));
        };
        let run = match what {
            Name::Signature => None,
            Name::BlobDir { run } | Name::File { run } => Some(run),
            Name::RunDir { run } => Some(Some(run)),
        };
        if let Some(run) = run {
            if *several.get_or_insert(run.is_some()) != run.is_some() {
                return Err(bad(format!(
                    "entry {name:?}: an archive holds one run at its top or one directory per run, not both"
                )));
            }
            let sub = match run {
                Some(r) => {
                    if runs.insert(r.to_string()) && runs.len() > flow_store::archive::MAX_RUNS {
                        return Err(bad(format!(
                            "more than {} runs in one archive",
                            flow_store::archive::MAX_RUNS
                        )));
                    }
                    dir.join(r)
                }
                None => dir.to_path_buf(),
            };
            std::fs::create_dir_all(sub.join("blobs")).map_err(UnpackError::Io)?;
        }
        match what {
            Name::BlobDir { .. } | Name::RunDir { .. } => {}
            Name::Signature | Name::File { .. } => {
                let size = entry.size();
                if size > IMPORT_FILE_LIMIT {
                    return Err(bad(format!(
                        "{name} is larger than the import limit ({IMPORT_FILE_LIMIT} bytes)"
                    )));
                }
                let mut out = std::fs::File::create(dir.join(&name)).map_err(UnpackError::Io)?;
                let copied = std::io::copy(&mut (&mut entry).take(size), &mut out)
                    .map_err(|e| bad(format!("{name}: {e}")))?;
                if copied != size {
                    return Err(bad(format!("{name}: truncated")));
                }
                out.flush().map_err(UnpackError::Io)?;
            }
        }
    }
    if described {
        return Err(bad("a pax header describes no entry".into()));
    }
    let tail = archive.into_inner();
    if tail.last.len() < BLOCK || tail.last.iter().any(|b| *b != 0) {
        return Err(bad("it ends without the end-of-archive blocks".into()));
    }
    Ok(())
}

/// What `flow import PATH` is given, ready for `flow_store::import_run`: an
/// archive directory as it is, or a tar file unpacked into a private
/// temporary directory. Only a directory or a regular file is opened (a
/// FIFO would block the open, a device never ends): anything else is
/// refused at once.
pub enum ImportSource {
    Dir(PathBuf),
    Unpacked(TempDir),
}

impl ImportSource {
    pub fn open(path: &Path) -> Result<ImportSource, UnpackError> {
        let meta = std::fs::metadata(path)
            .map_err(|e| UnpackError::Refused(format!("{}: {e}", path.display())))?;
        if meta.is_dir() {
            return Ok(ImportSource::Dir(path.to_path_buf()));
        }
        let not_archive = || {
            UnpackError::Refused(format!(
                "{} is neither an archive directory nor a tar file",
                path.display()
            ))
        };
        if !meta.is_file() {
            return Err(not_archive());
        }
        let f = std::fs::File::open(path)
            .map_err(|e| UnpackError::Refused(format!("{}: {e}", path.display())))?;
        if !f.metadata().map_err(UnpackError::Io)?.is_file() {
            return Err(not_archive());
        }
        let tmp = TempDir::new().map_err(UnpackError::Io)?;
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).map_err(UnpackError::Io)?;
        unpack(std::io::BufReader::new(f), &dir).map_err(|e| match e {
            UnpackError::Refused(d) => UnpackError::Refused(format!("{}: {d}", path.display())),
            e => e,
        })?;
        Ok(ImportSource::Unpacked(tmp))
    }

    /// The archive directory to import.
    pub fn dir(&self) -> PathBuf {
        match self {
            ImportSource::Dir(d) => d.clone(),
            ImportSource::Unpacked(t) => t.path().join("run"),
        }
    }
}

#[cfg(test)]
mod tests;
