//! The worker's side of `/v1/workers` (docs/http.md "Workers"): register,
//! long-poll for calls, send replies back, leave. Each has its own
//! deadline: a poll is held by the server up to its hold, the others are
//! short.

use super::{Client, Result, segment};
use crate::http::workers::{
    PollAnswer, PollRequest, RegisterAnswer, RegisterRequest, RepliesAnswer, RepliesRequest,
};
use reqwest::Method;
use std::time::Duration;

impl Client {
    /// `POST /v1/workers`.
    pub async fn register_worker(&self, req: &RegisterRequest) -> Result<RegisterAnswer> {
        let r = self.request(Method::POST, "/v1/workers");
        self.read(r.timeout(Duration::from_secs(30)).json(req))
            .await
    }

    /// `POST /v1/workers/{worker}/poll`: calls to run and calls to stop.
    /// `hold`: how long the server holds a poll with nothing to hand out.
    pub async fn poll_worker(
        &self,
        worker: &str,
        req: &PollRequest,
        hold: Duration,
    ) -> Result<PollAnswer> {
        let path = format!("/v1/workers/{}/poll", segment(worker));
        let r = self.request(Method::POST, &path);
        self.read(r.timeout(hold + Duration::from_secs(15)).json(req))
            .await
    }

    /// `POST /v1/workers/{worker}/replies`: which were admitted.
    pub async fn reply_worker(&self, worker: &str, req: &RepliesRequest) -> Result<RepliesAnswer> {
        let path = format!("/v1/workers/{}/replies", segment(worker));
        let r = self.request(Method::POST, &path);
        self.read(r.timeout(Duration::from_secs(60)).json(req))
            .await
    }

    /// `DELETE /v1/workers/{worker}`.
    pub async fn delete_worker(&self, worker: &str) -> Result<()> {
        let path = format!("/v1/workers/{}", segment(worker));
        let r = self.request(Method::DELETE, &path);
        self.send(r.timeout(Duration::from_secs(10))).await?;
        Ok(())
    }
}
