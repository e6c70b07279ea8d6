//! Run archives over HTTP (DESIGN §6 "Run archives"): `GET
//! /v1/runs/{run}/archive` exports the store's archive directory as a tar
//! stream; `POST /v1/archives` takes one — the body streamed to a private
//! temporary file under its own limit (`--archive-limit`, not the JSON
//! body limit, so a server accepts its own exports of large runs), unpacked
//! ([`crate::tarball`]) and imported: verified before anything is written,
//! idempotent. `flow import` takes the same tar.
//!
//! `?lineage=true` exports the run with its forks and nested runs in one
//! tar (a directory per run); `POST /v1/archives` takes either form, all
//! runs or none, and checks a signature against `--trusted-keys`
//! (docs/custody.md "Signed archives and archives of several runs").

use super::AppState;
use super::answers::ImportAnswer;
use super::error::{ApiError, ApiResult, PathArgs, QueryArgs, run_id};
use crate::signing::import::{ImportError, import_archive as import_checked};
use crate::tarball::{TempDir, UnpackError, pack, unpack};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flow_store::Namespace;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use utoipa::IntoParams;

/// `GET /v1/runs/{run}/archive?lineage=true`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// Also the run's forks and nested runs, recursively: one directory
    /// per run (by id) in the tar. Default false: the run alone, its files
    /// at the top.
    #[serde(default)]
    pub lineage: Option<bool>,
    /// Values to leave out as holes, comma-separated (the paths of `POST
    /// …/redact`): their blobs are not in the tar and `holes.json` lists
    /// them, so it still verifies on import; the store keeps them. Not
    /// with `lineage`.
    #[serde(default)]
    pub redact: Option<String>,
}

#[utoipa::path(get, path = "/v1/runs/{run}/archive", operation_id = "export_archive", tag = "archives",
    params(("run" = String, Path, description = "A run id"), ExportParams),
    responses(
        (status = 200, description = "The run archive as a tar stream (history.jsonl, host.jsonl, blobs/<hex>); with `lineage=true` one such directory per run, named by its id", body = Vec<u8>, content_type = "application/x-tar"),
        (status = 400, description = "A malformed run id, `lineage` (true or false) or `redact` path, a `redact` path that reaches no blob of the run, or `redact` with `lineage`", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The lineage has more runs than one archive carries (1,000)", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn export_archive(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    QueryArgs(params): QueryArgs<ExportParams>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let name = run.to_string();
    let lineage = params.lineage.unwrap_or(false);
    let redact = params
        .redact
        .as_deref()
        .map(|r| {
            r.split(',')
                .map(flow_store::redact::ValuePath::parse)
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(ApiError::bad_request)?
        .unwrap_or_default();
    if lineage && !redact.is_empty() {
        return Err(ApiError::bad_request(
            "redact names values of one run: export the run without lineage",
        ));
    }
    let bytes = tokio::task::spawn_blocking(move || -> ApiResult<Vec<u8>> {
        state.store().run_info(&run)?;
        let tmp = TempDir::new().map_err(ApiError::internal)?;
        let out = tmp.path().join("run");
        if lineage {
            let runs = flow_store::lineage_runs(&**state.store(), &run).map_err(|e| match e {
                flow_store::Error::InvalidArgument(m) => ApiError::unprocessable(m),
                e => ApiError::from(e),
            })?;
            flow_store::export_runs(&**state.store(), &runs, &out)?;
        } else {
            flow_store::export_run_redacted(&**state.store(), &run, &out, &redact).map_err(
                |e| match e {
                    flow_store::Error::InvalidArgument(m) => ApiError::bad_request(m),
                    e => ApiError::from(e),
                },
            )?;
        }
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

/// `POST /v1/archives` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// The namespace the archive's new runs go to (default `default`): one
    /// of the token's.
    pub namespace: Option<String>,
}

#[utoipa::path(post, path = "/v1/archives", operation_id = "import_archive", tag = "archives", params(ImportQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A run archive tar, as exported (application/x-tar or application/octet-stream)"),
    responses(
        (status = 201, description = "Imported: `{run, imported: true, facts}`; with `truncated: {fact, reason}` when the history ended in a torn last fact, left out (CRASH-7); `runs` for an archive of several runs (all written in one transaction); `signature` naming who signed a signed one", body = super::answers::ImportAnswer),
        (status = 200, description = "The same history (every run's) was already stored: `{run, imported: false}`", body = super::answers::ImportAnswer),
        (status = 400, description = "Not a run archive tar", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token may not import into the namespace asked for", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than --archive-limit", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not sent as application/x-tar or application/octet-stream", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The archive does not verify (a missing history.jsonl included), another history has one of its run ids, its signature does not verify, or (with --trusted-keys) it is unsigned or signed by a key not trusted; nothing was written", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn import_archive(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    QueryArgs(q): QueryArgs<ImportQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let namespace = match &q.namespace {
        Some(n) => Namespace::parse(n).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Namespace::default(),
    };
    if !super::auth::Caller::seen(caller.as_deref()).contains(&namespace) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this token may not import into namespace {namespace}; name one of its namespaces in `namespace`"
            ),
        ));
    }
    let tmp = TempDir::new().map_err(ApiError::internal)?;
    let upload = tmp.path().join("upload.tar");
    receive(&headers, body, &upload, state.options().archive_limit).await?;
    let imported = tokio::task::spawn_blocking(move || -> ApiResult<_> {
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).map_err(ApiError::internal)?;
        let file = std::fs::File::open(&upload).map_err(ApiError::internal)?;
        unpack(std::io::BufReader::new(file), &dir).map_err(|e| match e {
            UnpackError::Refused(d) => ApiError::bad_request(d),
            UnpackError::Io(e) => ApiError::internal(e),
        })?;
        let trust = state.options().trusted_keys.as_deref();
        import_checked(&**state.store(), &dir, trust, &namespace).map_err(|e| {
            // Archive refusals name the temporary directory: keep only
            // what the client sent.
            let hide = |m: String| m.replace(&dir.display().to_string(), "<archive>");
            match e {
                ImportError::Signature(r) => ApiError::unprocessable(hide(r.0)),
                ImportError::Store(
                    e @ (flow_store::Error::ArchiveRefused { .. }
                    | flow_store::Error::RunExists(_)
                    | flow_store::Error::InvalidArgument(_)),
                ) => ApiError::unprocessable(hide(e.to_string())),
                ImportError::Store(e) => ApiError::from(e),
            }
        })
    })
    .await
    .map_err(ApiError::internal)??;
    let status = if imported.any_written() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    if let Some(s) = &imported.signed {
        tracing::info!(
            signer = %s.signer,
            key.fingerprint = %s.fingerprint,
            trusted = s.trusted_as.is_some(),
            "imported a signed archive"
        );
    }
    super::respond::typed_response(status, &ImportAnswer::from(&imported))
}
