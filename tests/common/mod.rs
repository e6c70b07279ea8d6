//! The one harness of the end-to-end tests: the real `flow` binary on a
//! store of its own ([`TestApp`], which verifies every history it holds
//! when it drops) and the real `flow serve` process ([`serve`]).

#![allow(dead_code)]

pub mod roll;
pub mod tokens;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `flow serve` on `data` with `args` after `serve` (binding
/// submitted flows' Tools with `tools`, with `env` set for the Tool
/// processes it starts) and reads the address it prints. `flow-llm` and
/// the other workspace binaries are found beside `flow`.
pub fn serve_args(
    data: &Path,
    tools: Option<&Path>,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, String) {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_flow"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(&bin);
    cmd.args(["--data", data.to_str().unwrap(), "serve"]);
    if !args.contains(&"--listen") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    cmd.args(args)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = tools {
        cmd.arg("--tools").arg(t);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("flowd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, base)
}

/// A `flow serve` process, killed on drop; then, as [`TestApp`] does,
/// every history in its store is read back verified.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub port: u16,
    data: std::path::PathBuf,
    /// The `--key-file` it was started with (its store is then encrypted).
    keys: Option<std::path::PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let db = self.data.join("flow.db");
        if !std::thread::panicking() && db.exists() {
            verify_store_keyed(&db, self.keys.as_deref());
        }
    }
}

/// `flow serve` on `data` with `args` after `serve`, killed on drop.
pub fn serve(data: &Path, args: &[&str]) -> Server {
    serve_bound(data, None, args)
}

/// [`serve`], binding submitted flows' Tools with `tools`.
pub fn serve_bound(data: &Path, tools: Option<&Path>, args: &[&str]) -> Server {
    let (child, base) = serve_args(data, tools, &[], args);
    let port = base.rsplit(':').next().unwrap().parse().unwrap();
    let keys = args
        .iter()
        .position(|a| *a == "--key-file")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    Server {
        child,
        base,
        port,
        data: data.to_path_buf(),
        keys,
    }
}

/// [`serve_args`] with no extra flags.
pub fn serve_with(data: &Path, tools: Option<&Path>, env: &[(&str, &str)]) -> (Child, String) {
    serve_args(data, tools, env, &[])
}

/// The review example (pauses at a hitl), as a submitted flow.
pub fn review_flow() -> serde_json::Value {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The real `flow` binary, with no `FLOW_DATA` and no colour.
pub fn flow() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flow"));
    c.env_remove("FLOW_DATA").env("NO_COLOR", "1");
    c
}

/// `flow` on a store of its own (a temporary `--data`). When it drops (a
/// test that passed), every run its store holds is read back verified —
/// numbered from 1 with no gap, each fact chained to the one before, every
/// blob matching its hash, the runs index agreeing — so no test leaves a
/// history that does not verify.
pub struct TestApp {
    pub data: tempfile::TempDir,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let db = self.data.path().join("flow.db");
        if db.exists() {
            verify_store(&db);
        }
    }
}

/// Reads every run of the SQLite store at `db` back verified; panics
/// naming the first that does not verify.
pub fn verify_store(db: &Path) {
    verify_store_keyed(db, None)
}

/// [`verify_store`] of a store encrypted with the master keys of `keys`.
pub fn verify_store_keyed(db: &Path, keys: Option<&Path>) {
    use flow_store::{Discover, DiscoveryQuery, ReadHistory};
    let opts = flow_store::SqliteOptions {
        keys: keys.map(|k| std::sync::Arc::new(flow_store::Keyring::load(k).unwrap())),
        ..flow_store::SqliteOptions::default()
    };
    let store =
        flow_store::SqliteStore::open(db, opts).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    let mut after = None;
    loop {
        let page = store
            .discover(&DiscoveryQuery {
                limit: Some(DiscoveryQuery::MAX_LIMIT),
                after: after.clone(),
                state: None,
            })
            .unwrap_or_else(|e| panic!("{}: discovery: {e}", db.display()));
        for r in &page.runs {
            let run = flow_store::RunId::parse(&r.run).unwrap();
            if let Err(e) = store.read_history(&run) {
                panic!("{}: run {run} does not verify: {e}", db.display());
            }
        }
        match page.next_after {
            Some(n) => after = Some(n),
            None => break,
        }
    }
}

impl TestApp {
    pub fn new() -> TestApp {
        TestApp {
            data: tempfile::tempdir().unwrap(),
        }
    }

    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        flow()
            .arg("--data")
            .arg(self.data.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// `flow --json ARGS`: the exit code and the JSON printed.
    pub fn json(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.cmd(&a);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not JSON ({e}): {text}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), v)
    }

    /// `flow replay` says matched (exit 0).
    pub fn assert_matched(&self, run: &str) {
        let (code, v) = self.json(&["replay", run]);
        assert_eq!((code, v["verdict"].as_str()), (0, Some("matched")), "{v}");
    }

    /// How many facts the run has.
    pub fn facts(&self, run: &str) -> u64 {
        let (code, v) = self.json(&["history", run]);
        assert_eq!(code, 0, "{v}");
        v["page"]["total"].as_u64().unwrap()
    }

    /// How many runs the store holds.
    pub fn runs(&self) -> usize {
        let (code, v) = self.json(&["runs"]);
        assert_eq!(code, 0, "{v}");
        v["runs"].as_array().unwrap().len()
    }
}

/// `GET url` with `client`, the body as JSON (whatever the status).
pub async fn get_json(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> serde_json::Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// POSTs `body` as JSON: the status and the answer (`null` when it is not
/// JSON).
pub async fn post_json(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = client.post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// The replay verdict (`matched`, `incomplete`, `diverged`) of `run`.
pub async fn verdict(client: &reqwest::Client, base: &str, run: &str) -> serde_json::Value {
    let url = format!("{base}/v1/runs/{run}/replay");
    post_json(client, url, &serde_json::json!({})).await.1["verdict"].clone()
}

/// PostgreSQL for the tests that need it: `FLOW_TEST_POSTGRES`, or
/// database `test` at 127.0.0.1:5432; `skip` skips them.
pub fn pg_url() -> Option<String> {
    match std::env::var("FLOW_TEST_POSTGRES") {
        Ok(v) if v == "skip" => None,
        Ok(v) if !v.is_empty() => Some(v),
        _ => Some("postgres://postgres@127.0.0.1:5432/test".into()),
    }
}

/// Runs SQL on a connection of its own, on a thread of its own (the tests
/// are async; the guard drops inside them).
pub fn sql(url: &str, text: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let (url, text) = (url.to_string(), text.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("{e}"))?;
            let driver = tokio::spawn(conn);
            let rows = client
                .simple_query(&text)
                .await
                .map_err(|e| format!("{e}"))?;
            drop(client);
            let _ = driver.await;
            Ok(rows
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                    }
                    _ => None,
                })
                .collect())
        })
    })
    .join()
    .map_err(|_| "the SQL thread panicked".to_string())?
}

/// A fresh schema, dropped with the guard (also when the test fails).
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new() -> Option<Schema> {
        let Some(url) = pg_url() else {
            eprintln!("FLOW_TEST_POSTGRES=skip: Postgres test skipped");
            return None;
        };
        if let Err(e) = sql(&url, "SELECT 1") {
            panic!(
                "Postgres is not reachable at {url}: {e}\nStart it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
            );
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Some(Schema {
            url,
            name: format!("flow_test_{}_{nanos}", std::process::id()),
        })
    }

    /// `flow serve`'s arguments `before`, then the ones that put its store
    /// in this schema.
    pub fn serve_args<'a>(&'a self, before: &[&'a str]) -> Vec<&'a str> {
        let mut args = before.to_vec();
        args.extend([
            "--postgres",
            self.url.as_str(),
            "--postgres-schema",
            self.name.as_str(),
        ]);
        args
    }

    /// Rows of a query inside the schema.
    pub fn query(&self, text: &str) -> Vec<Vec<Option<String>>> {
        sql(
            &self.url,
            &format!("SET search_path = {}; {text}", self.name),
        )
        .expect("SQL")
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Err(e) = sql(
            &self.url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        ) {
            eprintln!("could not drop schema {}: {e}", self.name);
        }
    }
}
