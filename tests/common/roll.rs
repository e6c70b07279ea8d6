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
    /// A server with the counter's Tools as its children.
    pub fn start(db: &Schema, log: &Path, extra: &[&str]) -> Server {
        let env = [
            ("COUNT_DELAY_MS", "300"),
            ("COUNT_LOG", log.to_str().unwrap()),
        ];
        Server::spawn(db, Some(&fixture().join("flow.toml")), &env, extra)
    }

    /// A server that sends the counter's calls to `flow worker`s
    /// (`--workers count.json --worker-wait`), listening on `listen`
    /// (`127.0.0.1:0` for any port; a restarted server takes its old port
    /// again, as a service keeps its address across a restart).
    pub fn for_workers(db: &Schema, listen: &str) -> Server {
        // A worker pinned to a server is silent while that server
        // restarts: the other server must not judge it lost meanwhile
        // (docs/deploy.md: `--worker-timeout` above a restart's time; a
        // debug build's restart on a loaded machine takes seconds).
        let extra = [
            "--listen",
            listen,
            "--workers",
            "count.json",
            "--worker-wait",
            "--worker-timeout",
            "15",
        ];
        Server::spawn(db, None, &[], &extra)
    }

    /// `flow serve` on `db` with a 2 s lease and a 30 s drain, then `extra`.
    fn spawn(db: &Schema, tools: Option<&Path>, env: &[(&str, &str)], extra: &[&str]) -> Server {
        let data = tempfile::tempdir().unwrap();
        let base_args = [
            "--postgres",
            &db.url,
            "--postgres-schema",
            &db.name,
            "--lease-seconds",
            "2",
            "--drain-seconds",
            "30",
        ];
        let args = [&base_args[..], extra].concat();
        let (child, base) = super::serve_args(data.path(), tools, env, &args);
        Server {
            child,
            base,
            _data: data,
        }
    }

    /// The `host:port` the server listens on.
    pub fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_string()
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

/// A `flow worker` serving the counter fixture to `server`, in its own
/// process group; killed with its Tools on drop unless it stopped.
pub struct Worker {
    pub child: Child,
}

impl Worker {
    /// Starts the worker and waits for its first line (it is serving).
    pub fn start(server: &str, log: &Path) -> Worker {
        use std::io::{BufRead, BufReader};
        use std::os::unix::process::CommandExt;
        let mut child = super::flow()
            .args(["worker", "--server", server, "--tools"])
            .arg(fixture().join("flow.toml"))
            .args(["--drain-seconds", "30"])
            .env("COUNT_DELAY_MS", "300")
            .env("COUNT_LOG", log)
            .env_remove("FLOW_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("flow worker "), "{line:?}");
        Worker { child }
    }

    pub async fn stop(mut self) {
        stop(&mut self.child, "a worker").await;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}
