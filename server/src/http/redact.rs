//! `POST /v1/runs/{run}/redact` (issue 40 item 2, docs/custody.md
//! "Holes"): scope `admin`. The blobs the paths reach become holes of the
//! run: their content goes (unless another run still references it), the
//! chain still verifies, reads show `{"$hole":…,"length":L}`; the
//! redaction is recorded in the audit log with the token's tag.

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, Body, PathArgs, run_id};
use super::respond::{blocking, typed_response};
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::redact::ValuePath;
use flow_store::{Redacted, Redaction};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/runs/{run}/redact`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactRequest {
    /// The values to make holes: JSON pointers under `/input`,
    /// `/state/FIELD`, `/output`, `/calls/CALL/args`, `/calls/CALL/reply`,
    /// `/facts/N`, or blob hashes (`blake3:<hex>`). Each must reach a
    /// value stored as a blob (over 1 KiB, or declared in the flow's
    /// `runtime_hints.sensitive`).
    pub paths: Vec<String>,
}

/// What a redaction did (also its row of the audit log).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedactAnswer {
    pub run: String,
    /// The audit log's sequence number of this redaction.
    pub seq: u64,
    /// Who redacted: `http` (a server without tokens) or `token:<tag>`.
    pub who: String,
    /// When (unix ms).
    pub at_ms: i64,
    /// The paths asked for.
    pub paths: Vec<String>,
    /// The blobs that are holes of the run now (`blake3:<hex>`).
    pub hashes: Vec<String>,
    /// Blobs removed (those no other run referenced).
    pub blobs_removed: u64,
}

impl From<Redacted> for RedactAnswer {
    fn from(d: Redacted) -> RedactAnswer {
        RedactAnswer {
            run: d.run,
            seq: d.seq,
            who: d.who,
            at_ms: d.at_ms,
            paths: d.paths,
            hashes: d.hashes,
            blobs_removed: d.blobs_removed,
        }
    }
}

#[utoipa::path(post, path = "/v1/runs/{run}/redact", operation_id = "redact_run", tag = "runs",
    request_body(content = RedactRequest, description = "`{\"paths\": [\"/input/ssn\", …]}`"),
    params(("run" = String, Path, description = "A run id")),
    responses(
        (status = 200, description = "Redacted: the values are holes of the run; the chain still verifies; the audit log has the redaction", body = RedactAnswer),
        (status = 400, description = "Malformed JSON, a malformed path, or a path that reaches no blob of the run (a value under 1 KiB is inline in a chained fact: declare it in `runtime_hints.sensitive`)", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or one this server does not know", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token's scope is not `admin`", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is running or leased; halt it first", body = super::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A body of the wrong shape: `paths`, a list of strings", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn redact_run(
    State(state): State<AppState>,
    PathArgs(run): PathArgs<String>,
    caller: Option<Extension<Caller>>,
    Body(req): Body<RedactRequest>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let targets = req
        .paths
        .iter()
        .map(|p| ValuePath::parse(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::bad_request)?;
    let how = Redaction {
        who: Caller::who(caller),
        targets,
    };
    let d = blocking(&state, move |s| match s.store().redact(&run, &how) {
        Ok(d) => Ok(d),
        Err(flow_store::Error::InvalidArgument(m)) => Err(ApiError::bad_request(m)),
        Err(e) => Err(e.into()),
    })
    .await?;
    typed_response(StatusCode::OK, &RedactAnswer::from(d))
}
