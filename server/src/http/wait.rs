//! A request's `wait`: how long a start, resume or fork holds its answer
//! for the run to end or pause.

use super::answers::RunAnswer;
use super::error::{ApiError, ApiResult};
use crate::service::Accepted;
use std::time::Duration;

/// The longest `wait` a request may ask for (seconds); below the request
/// timeout so a waiting request is never cut off by it.
pub const MAX_WAIT: u64 = 30;

/// Waits up to `wait` seconds for a drive's outcome (`None`: still going).
pub(super) async fn await_outcome(
    accepted: &mut Accepted,
    wait: Option<u64>,
) -> Option<ApiResult<RunAnswer>> {
    let secs = wait.unwrap_or(0).min(MAX_WAIT);
    accepted
        .within(Duration::from_secs(secs))
        .await
        .map(|r| r.map(|res| RunAnswer::of(&res)).map_err(ApiError::from))
}
