//! Run archives over HTTP (DESIGN §6 "Run archives": "over HTTP the same as
//! a tar stream"): `GET /v1/runs/{run}/archive` exports the store's archive
//! directory as a ustar stream; `POST /v1/archives` takes one, unpacks it
//! into a private temporary directory (only `history.jsonl`, `host.jsonl`
//! and `blobs/<hex>` are accepted; no links, no other paths) and imports
//! it — verified before anything is written, idempotent.
//!
//! Tar is read and written by the `tar` crate. The writer makes ustar
//! entries with fixed metadata (mode, owner 0, mtime 0), so one archive
//! directory always packs to the same bytes. The reader accepts only regular
//! files with the archive's own names and the `blobs/` directory; links,
//! other entry types and any other path are refused, and no entry may claim
//! more bytes than the body holds.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, run_id};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use flow_store::ImportOutcome;
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

/// Tar's block size: the end-of-archive marker is a zero block.
const BLOCK: usize = 512;

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> ApiResult<TempDir> {
        let mut r = [0u8; 12];
        getrandom::fill(&mut r).map_err(ApiError::internal)?;
        let p = std::env::temp_dir().join(format!("flowd-archive-{}", hex::encode(r)));
        std::fs::create_dir(&p).map_err(ApiError::internal)?;
        Ok(TempDir(p))
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
fn pack(dir: &Path) -> std::io::Result<Vec<u8>> {
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

/// Unpacks a tar stream into `dir`, refusing anything but the archive's own
/// files.
fn unpack(bytes: &[u8], dir: &Path) -> ApiResult<()> {
    let bad = |d: String| ApiError::bad_request(format!("not a run archive tar: {d}"));
    std::fs::create_dir(dir.join("blobs")).map_err(ApiError::internal)?;
    let mut archive = tar::Archive::new(bytes);
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        match entry.header().entry_type() {
            EntryType::Directory if name == "blobs/" || name == "blobs" => {}
            EntryType::Regular if allowed(&name) => {
                // The body is in memory, so an entry claiming more than it
                // holds is truncated: refuse it before allocating.
                let size = entry.size();
                if size > bytes.len() as u64 {
                    return Err(bad(format!("{name}: truncated")));
                }
                let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                (&mut entry)
                    .take(size)
                    .read_to_end(&mut data)
                    .map_err(|e| bad(format!("{name}: {e}")))?;
                if data.len() as u64 != size {
                    return Err(bad(format!("{name}: truncated")));
                }
                std::fs::write(dir.join(&name), data).map_err(ApiError::internal)?;
            }
            _ => {
                return Err(bad(format!(
                    "entry {name:?} is not one of history.jsonl, host.jsonl, blobs/<hex>"
                )));
            }
        }
    }
    // The reader stops at the first zero block, or at the end of the bytes:
    // only the former is a whole archive.
    let read = bytes.len() - archive.into_inner().len();
    let ends_with_marker = read >= BLOCK && bytes[read - BLOCK..read].iter().all(|b| *b == 0);
    if !ends_with_marker {
        return Err(bad("it ends without the end-of-archive blocks".into()));
    }
    Ok(())
}

#[utoipa::path(get, path = "/v1/runs/{run}/archive", operation_id = "export_archive",
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "The run archive as a tar stream (history.jsonl, host.jsonl, blobs/<hex>)", body = Vec<u8>, content_type = "application/x-tar"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn export_archive(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let name = run.to_string();
    let bytes = tokio::task::spawn_blocking(move || -> ApiResult<Vec<u8>> {
        state.store().run_info(&run)?;
        let tmp = TempDir::new()?;
        let out = tmp.0.join("run");
        flow_store::export_run(&**state.store(), &run, &out)?;
        pack(&out).map_err(ApiError::internal)
    })
    .await
    .map_err(ApiError::internal)??;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/x-tar".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}.tar\""),
            ),
        ],
        bytes,
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/archives", operation_id = "import_archive",
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A run archive tar, as exported"),
    responses(
        (status = 201, description = "Imported: `{run, imported: true, facts}`", body = Object),
        (status = 200, description = "The same history was already stored: `{run, imported: false}`", body = Object),
        (status = 400, description = "Not a run archive tar", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The archive does not verify, or another history has this run id; nothing was written", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn import_archive(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let outcome = tokio::task::spawn_blocking(move || -> ApiResult<ImportOutcome> {
        let tmp = TempDir::new()?;
        unpack(&body, &tmp.0)?;
        flow_store::import_run(&**state.store(), &tmp.0).map_err(|e| {
            // Archive refusals name the temporary directory: keep only
            // what the client sent.
            let msg = e
                .to_string()
                .replace(&tmp.0.display().to_string(), "<archive>");
            match e {
                flow_store::Error::ArchiveRefused { .. }
                | flow_store::Error::RunExists(_)
                | flow_store::Error::InvalidArgument(_) => ApiError::unprocessable(msg),
                e => ApiError::from(e),
            }
        })
    })
    .await
    .map_err(ApiError::internal)??;
    let (status, v) = match outcome {
        ImportOutcome::Imported { run, facts } => (
            StatusCode::CREATED,
            json!({"run": run.as_str(), "imported": true, "facts": facts}),
        ),
        ImportOutcome::AlreadyPresent { run } => (
            StatusCode::OK,
            json!({"run": run.as_str(), "imported": false}),
        ),
    };
    Ok((
        status,
        [(header::CONTENT_TYPE, "application/json")],
        flow_abi::json::canonical(&v),
    )
        .into_response())
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
        unpack(&tar, dst.path()).unwrap();
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
        unpack(&tar, dst.path()).unwrap();
        assert_eq!(files(dst.path()), files(src.path()));
    }

    /// Path traversal, links, other entry types, entries claiming more than
    /// the body, a cut stream and a bad checksum: each is a 400, and nothing
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
        let cases: Vec<(&str, Vec<u8>)> = vec![
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
            ("no end-of-archive blocks", cut),
            ("bad checksum", bad_sum),
            ("not a tar", b"not a tar".to_vec()),
        ];
        for (what, tar) in cases {
            let parent = tempfile::tempdir().unwrap();
            let dst = parent.path().join("a");
            std::fs::create_dir(&dst).unwrap();
            let err = match unpack(&tar, &dst) {
                Ok(()) => panic!("{what}: accepted"),
                Err(e) => e,
            };
            assert_eq!(
                err.status,
                StatusCode::BAD_REQUEST,
                "{what}: {}",
                err.detail
            );
            assert!(
                err.detail.starts_with("not a run archive tar"),
                "{what}: {}",
                err.detail
            );
            let beside = sorted_names(parent.path(), false).unwrap();
            assert_eq!(beside, ["a"], "{what}: wrote outside the directory");
        }
    }
}
