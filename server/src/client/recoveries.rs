//! Work over many runs: the replay gate, bulk recovery (both answered as
//! NDJSON streams, a line per run and then the report) and the record of
//! recoveries (`/v1/gate`, `/v1/recover`, `/v1/recoveries`).

use super::{Client, Lines, Result, segment};
use crate::http::gate::{GateLine, GateRequest};
use crate::http::listing::RunsQuery;
use crate::http::recover::{RecoverLine, RecoverRequest};
use crate::http::recoveries::RecoveriesParams;
use crate::service::recoveries::{RecoveryDetail, RecoveryList};
use reqwest::Method;

impl Client {
    /// `POST /v1/gate` over the runs `q` selects, streamed.
    pub async fn gate_runs(&self, req: &GateRequest, q: &RunsQuery) -> Result<Lines<GateLine>> {
        let req = self.request(Method::POST, "/v1/gate").query(q).json(req);
        self.lines(req).await
    }

    /// `POST /v1/recover` over the runs `q` selects, streamed.
    pub async fn recover_runs(
        &self,
        req: &RecoverRequest,
        q: &RunsQuery,
    ) -> Result<Lines<RecoverLine>> {
        let req = self.request(Method::POST, "/v1/recover").query(q).json(req);
        self.lines(req).await
    }

    /// `GET /v1/recoveries`.
    pub async fn list_recoveries(&self, params: &RecoveriesParams) -> Result<RecoveryList> {
        self.get("/v1/recoveries", params).await
    }

    /// `GET /v1/recoveries/{id}`.
    pub async fn get_recovery(&self, id: &str) -> Result<RecoveryDetail> {
        self.get(&format!("/v1/recoveries/{}", segment(id)), &())
            .await
    }
}
