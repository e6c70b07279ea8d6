//! Run archives: a run exported as its tar stream, and an archive
//! imported (`/v1/runs/{run}/archive`, `/v1/archives`).

use super::{Client, Result, segment};
use crate::http::answers::ImportAnswer;
use reqwest::Method;

impl Client {
    /// `GET /v1/runs/{run}/archive`: the tar's bytes.
    pub async fn export_archive(
        &self,
        run: &str,
        lineage: bool,
        redact: &[String],
    ) -> Result<Vec<u8>> {
        let path = format!("/v1/runs/{}/archive", segment(run));
        let mut query: Vec<(&str, String)> = Vec::new();
        if lineage {
            query.push(("lineage", "true".into()));
        }
        if !redact.is_empty() {
            query.push(("redact", redact.join(",")));
        }
        let r = self
            .send(self.request(Method::GET, &path).query(&query))
            .await?;
        let tar = r.bytes().await.map_err(|e| self.broken(&e))?;
        Ok(tar.to_vec())
    }

    /// `POST /v1/archives` with a tar body.
    pub async fn import_archive(
        &self,
        tar: Vec<u8>,
        namespace: Option<&flow_store::Namespace>,
    ) -> Result<ImportAnswer> {
        // A namespace is `a-z0-9-_.` only: nothing to escape in a query.
        let path = match namespace {
            Some(ns) => format!("/v1/archives?namespace={ns}"),
            None => "/v1/archives".to_string(),
        };
        let req = self
            .request(Method::POST, &path)
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(tar);
        self.read(req).await
    }
}
