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
//! `host.jsonl`, `blobs/<hex>`) and the `blobs/` directory; links, other
//! entry types and any other path are refused, an entry larger than the
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

/// Packs an archive directory (files at the top and in `blobs/`).
pub fn pack(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for n in sorted_names(dir, true)? {
        let data = std::fs::read(dir.join(&n))?;
        tar.append_data(
            &mut header(EntryType::Regular, data.len() as u64),
            &n,
            &data[..],
        )?;
    }
    let blobs = dir.join("blobs");
    if blobs.is_dir() {
        tar.append_data(
            &mut header(EntryType::Directory, 0),
            "blobs/",
            std::io::empty(),
        )?;
        for n in sorted_names(&blobs, false)? {
            let data = std::fs::read(blobs.join(&n))?;
            tar.append_data(
                &mut header(EntryType::Regular, data.len() as u64),
                format!("blobs/{n}"),
                &data[..],
            )?;
        }
    }
    // Writes the end-of-archive blocks.
    tar.into_inner()
}

/// The only names an archive may hold.
fn allowed(name: &str) -> bool {
    match name.strip_prefix("blobs/") {
        Some(h) => h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => name == "history.jsonl" || name == "host.jsonl",
    }
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
    std::fs::create_dir(dir.join("blobs")).map_err(UnpackError::Io)?;
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
        match kind {
            EntryType::Directory if name == "blobs/" || name == "blobs" => {}
            EntryType::Regular if allowed(&name) => {
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
            _ => {
                return Err(bad(format!(
                    "entry {name:?} is not one of history.jsonl, host.jsonl, blobs/<hex>"
                )));
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
mod tests {
    use super::*;

    const BLOB: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    /// The hand-written ustar writer flowd used before the `tar` crate: its
    /// archives must still import.
    mod old_form {
        use super::BLOCK;

        fn octal(out: &mut [u8], v: u64) {
            let s = format!("{:0width$o}", v, width = out.len() - 1);
            let b = s.as_bytes();
            let n = b.len().min(out.len() - 1);
            out[..n].copy_from_slice(&b[b.len() - n..]);
            out[out.len() - 1] = 0;
        }

        /// A header with any type flag, so hostile entries can be made too.
        pub fn header(name: &str, size: u64, flag: u8) -> [u8; BLOCK] {
            let mut h = [0u8; BLOCK];
            let nb = name.as_bytes();
            h[..nb.len().min(100)].copy_from_slice(&nb[..nb.len().min(100)]);
            octal(&mut h[100..108], if flag == b'5' { 0o755 } else { 0o644 });
            octal(&mut h[108..116], 0);
            octal(&mut h[116..124], 0);
            octal(&mut h[124..136], size);
            octal(&mut h[136..148], 0);
            h[156] = flag;
            h[257..263].copy_from_slice(b"ustar\0");
            h[263..265].copy_from_slice(b"00");
            h[148..156].copy_from_slice(b"        ");
            let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
            let s = format!("{sum:06o}\0 ");
            h[148..156].copy_from_slice(s.as_bytes());
            h
        }

        pub fn append(out: &mut Vec<u8>, name: &str, data: &[u8], flag: u8) {
            out.extend_from_slice(&header(name, data.len() as u64, flag));
            out.extend_from_slice(data);
            let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
            out.extend(std::iter::repeat_n(0u8, pad));
        }

        pub fn end(out: &mut Vec<u8>) {
            out.extend(std::iter::repeat_n(0u8, 2 * BLOCK));
        }
    }

    fn archive_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("history.jsonl"), "{\"n\":1}\n").unwrap();
        std::fs::write(d.path().join("host.jsonl"), "").unwrap();
        std::fs::create_dir(d.path().join("blobs")).unwrap();
        std::fs::write(d.path().join("blobs").join(BLOB), vec![7u8; 1500]).unwrap();
        d
    }

    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for n in sorted_names(dir, true).unwrap() {
            out.push((n.clone(), std::fs::read(dir.join(&n)).unwrap()));
        }
        for n in sorted_names(&dir.join("blobs"), false).unwrap() {
            out.push((
                format!("blobs/{n}"),
                std::fs::read(dir.join("blobs").join(&n)).unwrap(),
            ));
        }
        out
    }

    #[test]
    fn pack_then_unpack_round_trips_and_is_deterministic() {
        let src = archive_dir();
        let tar = pack(src.path()).unwrap();
        assert_eq!(tar, pack(src.path()).unwrap());
        let dst = tempfile::tempdir().unwrap();
        unpack(&tar[..], dst.path()).unwrap();
        assert_eq!(files(dst.path()), files(src.path()));
    }

    #[test]
    fn the_old_hand_written_form_still_unpacks() {
        let src = archive_dir();
        let mut tar = Vec::new();
        for (name, data) in files(src.path()) {
            if name.starts_with("blobs/") && !tar.windows(6).any(|w| w == b"blobs/") {
                old_form::append(&mut tar, "blobs/", &[], b'5');
            }
            old_form::append(&mut tar, &name, &data, b'0');
        }
        old_form::end(&mut tar);
        let dst = tempfile::tempdir().unwrap();
        unpack(&tar[..], dst.path()).unwrap();
        assert_eq!(files(dst.path()), files(src.path()));
    }

    /// A well-formed pax header of another tar tool (times, owner names) is
    /// ignored: the entry it describes unpacks.
    #[test]
    fn well_formed_pax_headers_are_ignored() {
        let mut tar = Vec::new();
        old_form::append(
            &mut tar,
            "PaxHeaders/history.jsonl",
            b"30 mtime=1700000000.123456789\n15 uname=alice\n",
            b'x',
        );
        old_form::append(&mut tar, "history.jsonl", b"{}\n", b'0');
        old_form::end(&mut tar);
        let dst = tempfile::tempdir().unwrap();
        unpack(&tar[..], dst.path()).unwrap();
        assert_eq!(
            std::fs::read(dst.path().join("history.jsonl")).unwrap(),
            b"{}\n"
        );
    }

    /// Path traversal, links, other entry types, entries claiming more than
    /// the stream, a cut stream and a bad checksum: each is refused, and nothing
    /// is written outside the private directory (which import then drops).
    #[test]
    fn hostile_archives_are_refused() {
        let entry = |name: &str, flag: u8| {
            let mut t = Vec::new();
            old_form::append(&mut t, name, b"{}\n", flag);
            old_form::end(&mut t);
            t
        };
        let mut oversize = old_form::header("history.jsonl", 1 << 32, b'0').to_vec();
        oversize.extend(std::iter::repeat_n(0u8, 4 * BLOCK));
        let mut short = old_form::header("history.jsonl", 1 << 20, b'0').to_vec();
        short.extend(std::iter::repeat_n(0u8, 4 * BLOCK));
        let mut cut = Vec::new();
        old_form::append(&mut cut, "history.jsonl", b"{}\n", b'0');
        let mut bad_sum = entry("history.jsonl", b'0');
        bad_sum[0] = b'H';
        let mut symlink = old_form::header("history.jsonl", 0, b'2');
        symlink[157..162].copy_from_slice(b"/etc/");
        let sum: u64 = symlink
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(*b)
                }
            })
            .sum();
        symlink[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let mut symlink = symlink.to_vec();
        old_form::end(&mut symlink);
        // A pax header (`x`, or `g`) with `records`, then history.jsonl.
        let pax = |flag: u8, records: &[u8]| {
            let mut t = Vec::new();
            old_form::append(&mut t, "PaxHeaders/history.jsonl", records, flag);
            old_form::append(&mut t, "history.jsonl", b"{}\n", b'0');
            old_form::end(&mut t);
            t
        };
        let mut pax_at_end = Vec::new();
        old_form::append(&mut pax_at_end, "history.jsonl", b"{}\n", b'0');
        old_form::append(&mut pax_at_end, "PaxHeaders/x", b"13 mtime=1.5\n", b'x');
        old_form::end(&mut pax_at_end);
        let mut two_pax = Vec::new();
        old_form::append(&mut two_pax, "PaxHeaders/a", b"13 mtime=1.5\n", b'x');
        old_form::append(&mut two_pax, "PaxHeaders/b", b"13 mtime=1.5\n", b'x');
        old_form::append(&mut two_pax, "history.jsonl", b"{}\n", b'0');
        old_form::end(&mut two_pax);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // Issue 36: the crate skipped a malformed record.
            (
                "pax record of the wrong length",
                pax(b'x', b"99 mtime=1.5\n"),
            ),
            ("pax record shorter than said", pax(b'x', b"12 mtime=1.5\n")),
            ("pax record without key=value", pax(b'x', b"11 mtime15\n")),
            ("pax record without a length", pax(b'x', b"mtime=1.5\n")),
            ("pax length not decimal", pax(b'x', b"1a mtime=1\n")),
            ("pax record with an empty key", pax(b'x', b"9 =value\n")),
            ("pax record not UTF-8", pax(b'x', b"10 key=\xff\xfe\n")),
            ("global pax record malformed", pax(b'g', b"99 comment=x\n")),
            ("pax path", pax(b'x', b"18 path=flow.json\n")),
            ("pax size", pax(b'x', b"12 size=999\n")),
            ("pax sparse map", pax(b'x', b"23 GNU.sparse.map=0,10\n")),
            ("pax header describing no entry", pax_at_end),
            ("two pax headers in a row", two_pax),
            ("GNU long name", entry("././@LongLink", b'L')),
            ("parent path", entry("../history.jsonl", b'0')),
            ("absolute path", entry("/tmp/history.jsonl", b'0')),
            (
                "blob path traversal",
                entry(&format!("blobs/../{}", &BLOB[..61]), b'0'),
            ),
            ("other name", entry("flow.json", b'0')),
            ("symlink", symlink),
            ("hard link", entry("host.jsonl", b'1')),
            ("fifo", entry("host.jsonl", b'6')),
            ("other directory", entry("etc/", b'5')),
            ("oversize entry", oversize),
            ("entry longer than the stream", short),
            ("no end-of-archive blocks", cut),
            ("bad checksum", bad_sum),
            ("not a tar", b"not a tar".to_vec()),
        ];
        for (what, tar) in cases {
            let parent = tempfile::tempdir().unwrap();
            let dst = parent.path().join("a");
            std::fs::create_dir(&dst).unwrap();
            let detail = match unpack(&tar[..], &dst) {
                Ok(()) => panic!("{what}: accepted"),
                Err(UnpackError::Refused(d)) => d,
                Err(e) => panic!("{what}: {e}"),
            };
            assert!(
                detail.starts_with("not a run archive tar"),
                "{what}: {detail}"
            );
            if what.contains("pax") {
                assert!(detail.contains("pax"), "{what}: {detail}");
            }
            let beside = sorted_names(parent.path(), false).unwrap();
            assert_eq!(beside, ["a"], "{what}: wrote outside the directory");
        }
    }
}
