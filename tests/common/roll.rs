//! The rolling-restart cluster (issue 36): `flow serve --postgres` servers
//! serving the counter fixture
//! (`tests/fixtures/flows/rolling`, a Tool call of 300 ms a step that logs
//! each call it starts), each stopped with SIGTERM and waited for. Used by
//! `tests/rolling.rs`.

use super::Schema;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flows/rolling")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A `flow serve --postgres` process, killed on drop unless it stopped.
pub struct Server {
    pub child: Child,
    pub base: String,
    _data: tempfile::TempDir,
}

impl Server {
    pub fn start(db: &Schema, log: &Path, extra: &[&str]) -> Server {
        let data = tempfile::tempdir().unwrap();
        let args = [
            &[
                "--postgres",
                &db.url,
                "--postgres-schema",
                &db.name,
                "--lease-seconds",
                "2",
                "--drain-seconds",
                "30",
            ],
            extra,
        ]
        .concat();
        let (child, base) = super::serve_args(
            data.path(),
            Some(&fixture().join("flow.toml")),
            &[
                ("COUNT_DELAY_MS", "300"),
                ("COUNT_LOG", log.to_str().unwrap()),
            ],
            &args,
        );
        Server {
            child,
            base,
            _data: data,
        }
    }

    pub async fn stop(mut self) {
        stop(&mut self.child, &self.base).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM, then waits for the process to exit on its own (drained).
pub async fn stop(child: &mut Child, what: &str) {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    for _ in 0..600 {
        if let Some(s) = child.try_wait().unwrap() {
            assert!(s.success(), "{what} exited with {s}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not exit within 30 s of SIGTERM");
}

pub async fn start_run(c: &reqwest::Client, base: &str, steps: u64) -> String {
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("count.json")).unwrap())
            .unwrap();
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "count.json", "input": {"count": 0, "limit": steps}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    r.json::<Value>().await.unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string()
}
