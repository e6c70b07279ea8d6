//! Run archives over HTTP (DESIGN §6 "Run archives": "over HTTP the same as
//! a tar stream"): `GET /v1/runs/{run}/archive` exports the store's archive
//! directory as a ustar stream; `POST /v1/archives` takes one, unpacks it
//! into a private temporary directory (only `history.jsonl`, `host.jsonl`
//! and `blobs/<hex>` are accepted; no links, no other paths) and imports
//! it — verified before anything is written, idempotent.
//!
//! The tar reader and writer are the few lines of ustar this needs: regular
//! files and directories, names under 100 bytes.

use super::AppState;
use super::error::{ApiError, ApiResult, PathArgs, run_id};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use flow_store::ImportOutcome;
use serde_json::json;
use std::path::{Path, PathBuf};

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

fn octal(out: &mut [u8], v: u64) {
    let s = format!("{:0width$o}", v, width = out.len() - 1);
    let b = s.as_bytes();
    let n = b.len().min(out.len() - 1);
    out[..n].copy_from_slice(&b[b.len() - n..]);
    out[out.len() - 1] = 0;
}

fn header(name: &str, size: u64, dir: bool) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    let nb = name.as_bytes();
    h[..nb.len().min(100)].copy_from_slice(&nb[..nb.len().min(100)]);
    octal(&mut h[100..108], if dir { 0o755 } else { 0o644 });
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = if dir { b'5' } else { b'0' };
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn append(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    out.extend_from_slice(&header(name, data.len() as u64, false));
    out.extend_from_slice(data);
    let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
    out.extend(std::iter::repeat_n(0u8, pad));
}

/// Packs an archive directory (files at the top and in `blobs/`).
fn pack(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            names.push(e.file_name().to_string_lossy().to_string());
        }
    }
    names.sort();
    for n in &names {
        append(&mut out, n, &std::fs::read(dir.join(n))?);
    }
    let blobs = dir.join("blobs");
    if blobs.is_dir() {
        out.extend_from_slice(&header("blobs/", 0, true));
        let mut bn: Vec<String> = Vec::new();
        for e in std::fs::read_dir(&blobs)? {
            bn.push(e?.file_name().to_string_lossy().to_string());
        }
        bn.sort();
        for n in &bn {
            append(
                &mut out,
                &format!("blobs/{n}"),
                &std::fs::read(blobs.join(n))?,
            );
        }
    }
    out.extend(std::iter::repeat_n(0u8, 2 * BLOCK));
    Ok(out)
}

fn parse_octal(b: &[u8]) -> Option<u64> {
    let s: String = b
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as char)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

/// The only names an archive may hold.
fn allowed(name: &str) -> bool {
    match name.strip_prefix("blobs/") {
        Some(h) => h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => name == "history.jsonl" || name == "host.jsonl",
    }
}

/// Unpacks a ustar stream into `dir`, refusing anything but the archive's
/// own files.
fn unpack(bytes: &[u8], dir: &Path) -> ApiResult<()> {
    let bad = |d: String| ApiError::bad_request(format!("not a run archive tar: {d}"));
    std::fs::create_dir(dir.join("blobs")).map_err(ApiError::internal)?;
    let mut at = 0usize;
    loop {
        let Some(h) = bytes.get(at..at + BLOCK) else {
            return Err(bad("it ends without the end-of-archive blocks".into()));
        };
        if h.iter().all(|b| *b == 0) {
            return Ok(());
        }
        let stored = parse_octal(&h[148..156]).ok_or_else(|| bad("bad checksum field".into()))?;
        let sum: u64 = h
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
        if sum != stored {
            return Err(bad(format!("header at byte {at}: checksum mismatch")));
        }
        let name: String = String::from_utf8_lossy(&h[..100])
            .trim_end_matches('\0')
            .to_string();
        let size = parse_octal(&h[124..136]).ok_or_else(|| bad("bad size field".into()))?;
        let size = usize::try_from(size).map_err(|_| bad("size too large".into()))?;
        at += BLOCK;
        let data = bytes
            .get(at..at.saturating_add(size))
            .ok_or_else(|| bad(format!("{name}: truncated")))?;
        at += size.div_ceil(BLOCK) * BLOCK;
        match h[156] {
            b'5' if name == "blobs/" || name == "blobs" => {}
            b'0' | 0 if allowed(&name) => {
                std::fs::write(dir.join(&name), data).map_err(ApiError::internal)?;
            }
            _ => {
                return Err(bad(format!(
                    "entry {name:?} is not one of history.jsonl, host.jsonl, blobs/<hex>"
                )));
            }
        }
    }
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
