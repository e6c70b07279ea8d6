//! Run archives over HTTP (DESIGN §6 "Run archives"): `GET
//! /v1/runs/{run}/archive` exports the store's archive directory as a tar
//! stream; `POST /v1/archives` takes one — the body streamed to a private
//! temporary file under its own limit (`--archive-limit`, not the JSON
//! body limit, so a server accepts its own exports of large runs), unpacked
//! ([`crate::tarball`]) and imported: verified before anything is written,
//! idempotent. `flow import` takes the same tar.

use super::AppState;
use super::answers::{ImportAnswer, TornAnswer};
use super::error::{ApiError, ApiResult, PathArgs, run_id};
use crate::tarball::{TempDir, UnpackError, pack, unpack};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flow_store::ImportOutcome;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

#[utoipa::path(get, path = "/v1/runs/{run}/archive", operation_id = "export_archive", tag = "archives",
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
        let tmp = TempDir::new().map_err(ApiError::internal)?;
        let out = tmp.path().join("run");
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

fn archive_too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too-large",
        format!("the archive exceeds the server's limit of {limit} bytes (--archive-limit)"),
    )
}

/// Streams the body into `path`, refusing it past `limit` bytes (by its
/// declared length first, then by what arrives).
async fn receive(
    headers: &HeaderMap,
    body: Body,
    path: &std::path::Path,
    limit: u64,
) -> ApiResult<()> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(archive_too_large(limit));
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(ApiError::internal)?;
    let mut stream = body.into_data_stream();
    let mut received = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        received += chunk.len() as u64;
        if received > limit {
            return Err(archive_too_large(limit));
        }
        file.write_all(&chunk).await.map_err(ApiError::internal)?;
    }
    file.flush().await.map_err(ApiError::internal)?;
    Ok(())
}

#[utoipa::path(post, path = "/v1/archives", operation_id = "import_archive", tag = "archives",
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A run archive tar, as exported (application/x-tar or application/octet-stream)"),
    responses(
        (status = 201, description = "Imported: `{run, imported: true, facts}`; with `truncated: {fact, reason}` when the history ended in a torn last fact, left out (CRASH-7)", body = super::answers::ImportAnswer),
        (status = 200, description = "The same history was already stored: `{run, imported: false}`", body = super::answers::ImportAnswer),
        (status = 400, description = "Not a run archive tar", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than --archive-limit", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not sent as application/x-tar or application/octet-stream", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The archive does not verify (a missing history.jsonl included), or another history has this run id; nothing was written", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn import_archive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let tmp = TempDir::new().map_err(ApiError::internal)?;
    let upload = tmp.path().join("upload.tar");
    receive(&headers, body, &upload, state.options().archive_limit).await?;
    let (outcome, torn) = tokio::task::spawn_blocking(move || -> ApiResult<_> {
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).map_err(ApiError::internal)?;
        let file = std::fs::File::open(&upload).map_err(ApiError::internal)?;
        unpack(std::io::BufReader::new(file), &dir).map_err(|e| match e {
            UnpackError::Refused(d) => ApiError::bad_request(d),
            UnpackError::Io(e) => ApiError::internal(e),
        })?;
        let refused = |e: flow_store::Error| {
            // Archive refusals name the temporary directory: keep only
            // what the client sent.
            let msg = e
                .to_string()
                .replace(&dir.display().to_string(), "<archive>");
            match e {
                flow_store::Error::ArchiveRefused { .. }
                | flow_store::Error::RunExists(_)
                | flow_store::Error::InvalidArgument(_) => ApiError::unprocessable(msg),
                e => ApiError::from(e),
            }
        };
        let archive = flow_store::read_archive(&dir).map_err(refused)?;
        let torn = archive.torn().map(|t| TornAnswer {
            fact: t.fact,
            reason: t.reason.clone(),
        });
        let outcome = state.store().import_verified(archive).map_err(refused)?;
        Ok((outcome, torn))
    })
    .await
    .map_err(ApiError::internal)??;
    let (status, answer) = match outcome {
        ImportOutcome::Imported { run, facts } => (
            StatusCode::CREATED,
            ImportAnswer {
                run: run.to_string(),
                imported: true,
                facts: Some(facts),
                truncated: torn,
            },
        ),
        ImportOutcome::AlreadyPresent { run } => (
            StatusCode::OK,
            ImportAnswer {
                run: run.to_string(),
                imported: false,
                facts: None,
                truncated: torn,
            },
        ),
    };
    super::respond::typed_response(status, &answer)
}
