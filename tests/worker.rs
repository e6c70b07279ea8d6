//! Remote workers (issue 12 §3, docs/deploy.md "Workers"): `flow serve
//! --workers triage.json` routes the quickstart's Python Tool to `flow
//! worker` processes, which long-poll the server over HTTP.
//!
//! Real parts: the `flow` binary as server and as worker, the triage
//! example's Python Tool and `flow-llm` as the worker's and the server's
//! children, SQLite files, and (last test) PostgreSQL with two servers.
//! Each worker runs in a process group of its own, so `kill -9` takes its
//! Tools with it, as when its host dies.

mod common;

use common::Schema;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CLASSIFY: &str = "triage.json#classify";

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows")
        .join(path)
}

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flow"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn triage_flow() -> Value {
    serde_json::from_str(&std::fs::read_to_string(example("triage/triage.json")).unwrap()).unwrap()
}

/// The server's own flow.toml: only `std/llm` (the classifier is the
/// workers').
fn server_tools(dir: &Path) -> PathBuf {
    let p = dir.join("server.toml");
    std::fs::write(
        &p,
        "[tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
    )
    .unwrap();
    p
}

/// A worker's flow.toml in `dir` binding the example's Python Tool with
/// `resend = true`, beside a copy of triage.json (a worker reads the
/// declarations from the flows its tables name).
fn resend_tools(dir: &Path) -> PathBuf {
    std::fs::copy(example("triage/triage.json"), dir.join("triage.json")).unwrap();
    let p = dir.join("flow.toml");
    std::fs::write(
        &p,
        format!(
            "[tools.\"triage.json\"]\ncommand = \"python3 {}\"\nresend = true\n",
            example("triage/triage_tools.py").display()
        ),
    )
    .unwrap();
    p
}

/// `flow serve` on a data dir of its own with the server's tools and
/// `args`.
struct Serve {
    server: common::Server,
    _data: tempfile::TempDir,
}

impl Serve {
    fn start(tools: &Path, args: &[&str]) -> Serve {
        let data = tempfile::tempdir().unwrap();
        Serve {
            server: common::serve_bound(data.path(), Some(tools), args),
            _data: data,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base)
    }

    /// The worker `run`'s calls were handed to, once one was (read from the
    /// server's SQLite file, as another process may).
    async fn claimed(&self, run: &str) -> String {
        let db = self._data.path().join("flow.db");
        for _ in 0..300 {
            let c = rusqlite::Connection::open_with_flags(
                &db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            let worker: Option<String> = c
                .query_row(
                    "SELECT worker FROM worker_calls WHERE run = ?1 AND worker IS NOT NULL",
                    [run],
                    |r| r.get(0),
                )
                .ok();
            if let Some(w) = worker {
                return w;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no call of {run} was handed to a worker");
    }
}

/// A `flow worker` process (its own process group), killed with the guard.
struct Worker {
    child: Child,
    id: String,
}

impl Worker {
    fn start(server: &str, tools: &Path, token: Option<&str>, env: &[(&str, &str)]) -> Worker {
        Worker::spawn(Worker::command(server, tools, token, env))
    }

    /// Starts `cmd` and waits for its first line, which names the worker.
    fn spawn(mut cmd: Command) -> Worker {
        let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let id = line
            .strip_prefix("flow worker ")
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Worker { child, id }
    }

    fn command(server: &str, tools: &Path, token: Option<&str>, env: &[(&str, &str)]) -> Command {
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = common::flow();
        cmd.args(["worker", "--server", server, "--tools"])
            .arg(tools)
            .env("PATH", path)
            .env_remove("FLOW_TOKEN")
            .stdout(Stdio::piped())
            .process_group(0);
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// SIGTERM to the worker's process alone (as `docker stop` sends it to
    /// a container's first process): its Tools get no signal.
    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the worker to exit (at most `secs`); its exit code.
    fn exited(&mut self, secs: u64) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the worker did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL to the worker and its Tools (the whole host gone).
    fn kill_9(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill_9();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn send(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = c.request(method, &url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    send(c, reqwest::Method::POST, url, None, Some(body)).await
}

fn start_body(ticket: &str, wait: Option<u64>) -> Value {
    let mut b = json!({"flow": triage_flow(), "name": "triage.json",
        "input": {"ticket": ticket, "customer": "Acme"}});
    if let Some(w) = wait {
        b["wait"] = json!(w);
    }
    b
}

/// Every fact of `run`, expanded.
async fn facts(c: &reqwest::Client, s: &Serve, run: &str) -> Vec<Value> {
    let page = common::get_json(c, s.url(&format!("/v1/runs/{run}/facts?limit=200"))).await;
    page["facts"].as_array().unwrap().clone()
}

/// The Reply facts of call `call`.
async fn replies(c: &reqwest::Client, s: &Serve, run: &str, call: &str) -> Vec<Value> {
    facts(c, s, run)
        .await
        .into_iter()
        .filter(|f| f["kind"] == "Reply" && f["fact"]["call"] == call)
        .map(|f| f["fact"]["outcome"].clone())
        .collect()
}

/// Polls the run's view until `done` holds (at most `secs`).
async fn until(
    c: &reqwest::Client,
    s: &Serve,
    run: &str,
    secs: u64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = common::get_json(c, s.url(&format!("/v1/runs/{run}"))).await;
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{run} never got there: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn paused_at_review(v: &Value) -> bool {
    v["state"] == "paused" && v["pending"][0]["tool"] == "std/human#input"
}

/// Waits until the classifier's Call is durable.
async fn classify_call_out(c: &reqwest::Client, s: &Serve, run: &str) -> String {
    for _ in 0..200 {
        if let Some(f) = facts(c, s, run)
            .await
            .into_iter()
            .find(|f| f["kind"] == "Call" && f["fact"]["tool"] == CLASSIFY)
        {
            return f["fact"]["call"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no Call to {CLASSIFY} in {run}");
}

/// Answers the review and checks the run completes and replays matched.
async fn finish(c: &reqwest::Client, s: &Serve, run: &str, review: &str) {
    let (status, v) = post(
        c,
        s.url(&format!("/v1/runs/{run}/resume")),
        json!({"call": review, "reply": {"Ok": {"decision": "send"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (202, Some("completed")),
        "{v}"
    );
    let (_, verdict) = post(c, s.url(&format!("/v1/runs/{run}/replay")), json!({})).await;
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
}

/// The fingerprint of the classifier, as `flow tools` gives it.
fn classify_fingerprint() -> String {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(example("triage/tools.json")).unwrap())
            .unwrap();
    doc["programs"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == CLASSIFY)
        .unwrap()["fingerprint"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Issue 12 §3: the quickstart's Python Tool served by a `flow worker`
/// from the example's own flow.toml: the run classifies the ticket through
/// the worker, pauses at its review, completes, and replays matched.
#[tokio::test]
async fn a_worker_serves_the_python_tool_and_the_run_replays_matched() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&server_tools(dir.path()), &["--workers", "triage.json"]);
    let w = Worker::start(&s.server.base, &example("triage/flow.toml"), None, &[]);
    let c = client();

    let listed = common::get_json(&c, s.url("/v1/workers")).await;
    let me = &listed["workers"][0];
    assert_eq!(me["worker"], w.id.as_str(), "{listed}");
    assert!(
        me["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tool"] == CLASSIFY && t["fingerprint"] == classify_fingerprint().as_str()),
        "registered by identity and describe's fingerprint: {listed}"
    );

    let (status, v) = post(
        &c,
        s.url("/v1/runs"),
        start_body("The site is down!", Some(10)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert!(paused_at_review(&v), "{v}");
    let run = v["run"].as_str().unwrap();
    assert_eq!(
        replies(&c, &s, run, "c1:root#1").await,
        vec![json!({"Ok": {"category": "outage", "severity": "high"}})]
    );
    finish(&c, &s, run, v["pending"][0]["call"].as_str().unwrap()).await;
    assert_answered_by(&c, &s, run, "c1:root#1", &w.id).await;
}

/// Issue 38 §3: the call's timing names the worker that answered it (a
/// reply admitted on the server that drives the run, or read from the
/// queue's row when another server admitted it).
async fn assert_answered_by(c: &reqwest::Client, s: &Serve, run: &str, call: &str, worker: &str) {
    let t = common::get_json(c, s.url(&format!("/v1/runs/{run}/timeline"))).await;
    let calls = t["calls"].as_array().unwrap();
    let span = calls.iter().find(|x| x["call"] == call).unwrap();
    assert_eq!(span["route"], "worker", "{t}");
    assert_eq!(span["worker"], worker, "{t}");
    assert!(span["durationMs"].is_i64(), "{t}");
}

/// Bind before start: with no live worker the run is refused (422, the
/// declaration named, nothing recorded); with `--worker-wait` it starts,
/// its classifier call is parked and the run pauses, and it continues on
/// its own once a worker connects.
#[tokio::test]
async fn without_a_worker_a_run_is_refused_or_parked_until_one_comes() {
    let dir = tempfile::tempdir().unwrap();
    let tools = server_tools(dir.path());
    let c = client();

    let strict = Serve::start(&tools, &["--workers", "triage.json"]);
    let (status, v) = post(
        &c,
        strict.url("/v1/runs"),
        start_body("Refund please", None),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["type"], "urn:flowd:problem:unbound", "{v}");
    let why = v["diagnostics"][0]["message"].as_str().unwrap();
    assert!(
        why.contains(CLASSIFY) && why.contains("no live worker"),
        "{v}"
    );
    let listed = common::get_json(&c, strict.url("/v1/runs")).await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 0, "{listed}");

    let waiting = Serve::start(&tools, &["--workers", "triage.json", "--worker-wait"]);
    let (status, v) = post(
        &c,
        waiting.url("/v1/runs"),
        start_body("Refund please", Some(5)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "paused", "parked: {v}");
    assert_eq!(v["pending"][0]["tool"], CLASSIFY, "{v}");
    let run = v["run"].as_str().unwrap().to_string();

    let _w = Worker::start(
        &waiting.server.base,
        &example("triage/flow.toml"),
        None,
        &[],
    );
    let v = until(&c, &waiting, &run, 15, paused_at_review).await;
    assert_eq!(
        replies(&c, &waiting, &run, "c1:root#1").await,
        vec![json!({"Ok": {"category": "billing", "severity": "medium"}})]
    );
    finish(
        &c,
        &waiting,
        &run,
        v["pending"][0]["call"].as_str().unwrap(),
    )
    .await;
}

/// A worker killed with SIGKILL while its call is out: once it is not
/// heard from for `--worker-timeout`, the call is settled Unknown (it
/// reached the worker) and the run faults, as the classifier's Unknown
/// makes it; a new worker then serves the next run.
#[tokio::test]
async fn kill_9_of_a_worker_mid_call_settles_the_call_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(
        &server_tools(dir.path()),
        &["--workers", "triage.json", "--worker-timeout", "2"],
    );
    let c = client();
    let mut slow = Worker::start(
        &s.server.base,
        &example("triage/flow.toml"),
        None,
        &[("TRIAGE_DELAY_MS", "60000")],
    );
    let (status, v) = post(&c, s.url("/v1/runs"), start_body("The site is down!", None)).await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = classify_call_out(&c, &s, &run).await;
    // Claimed at once (the worker's poll is woken by the queueing).
    tokio::time::sleep(Duration::from_millis(500)).await;
    slow.kill_9();
    let killed = Instant::now();

    let v = until(&c, &s, &run, 15, |v| v["state"] == "faulted").await;
    let settled = killed.elapsed();
    let outcome = replies(&c, &s, &run, &call).await;
    assert_eq!(outcome.len(), 1, "{outcome:?}");
    let why = outcome[0]["Unknown"].as_str().unwrap_or_default();
    assert!(why.contains("lost"), "settled Unknown: {outcome:?} ({v})");
    assert!(
        settled >= Duration::from_secs(1),
        "settled before the worker timed out: {settled:?}"
    );

    let _fresh = Worker::start(&s.server.base, &example("triage/flow.toml"), None, &[]);
    let (status, v) = post(
        &c,
        s.url("/v1/runs"),
        start_body("The site is down!", Some(10)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert!(
        paused_at_review(&v),
        "a new worker serves the next run: {v}"
    );
}

/// With `resend = true` in the worker's flow.toml, the call out at a
/// worker killed with SIGKILL goes back to the queue; with no worker left
/// it is parked (`--worker-wait`: the run pauses), and the next worker to
/// connect gets it, with the same `(run, call)`: one Call, one Reply.
#[tokio::test]
async fn with_resend_a_lost_workers_call_goes_to_the_next_worker() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(
        &server_tools(dir.path()),
        &[
            "--workers",
            "triage.json",
            "--worker-timeout",
            "2",
            "--worker-wait",
        ],
    );
    let tools = resend_tools(dir.path());
    let c = client();
    let mut slow = Worker::start(
        &s.server.base,
        &tools,
        None,
        &[("TRIAGE_DELAY_MS", "60000")],
    );
    let (status, v) = post(
        &c,
        s.url("/v1/runs"),
        start_body("I was charged twice", None),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = classify_call_out(&c, &s, &run).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    slow.kill_9();

    let v = until(&c, &s, &run, 15, |v| v["state"] == "paused").await;
    assert_eq!(v["pending"][0]["call"], call.as_str(), "parked again: {v}");
    assert!(replies(&c, &s, &run, &call).await.is_empty());

    let _next = Worker::start(&s.server.base, &tools, None, &[]);
    let v = until(&c, &s, &run, 15, paused_at_review).await;
    let all = facts(&c, &s, &run).await;
    let calls = all
        .iter()
        .filter(|f| f["kind"] == "Call" && f["fact"]["call"] == call.as_str())
        .count();
    assert_eq!(calls, 1, "sent again under the same call id");
    assert_eq!(
        replies(&c, &s, &run, &call).await,
        vec![json!({"Ok": {"category": "billing", "severity": "medium"}})]
    );
    finish(&c, &s, &run, v["pending"][0]["call"].as_str().unwrap()).await;
}

/// The worker protocol spoken by hand: a reply is admitted once, keyed by
/// `(run, call)`; a second reply, another worker's reply, and a reply for
/// a call never sent are dropped (200, `admitted: false`) and change
/// nothing; a malformed outcome is refused (422).
#[tokio::test]
async fn a_second_reply_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&server_tools(dir.path()), &["--workers", "triage.json"]);
    let c = client();
    let register = json!({"name": "by-hand", "tools": [{"tool": CLASSIFY, "fingerprint": classify_fingerprint()}]});
    let (status, me) = post(&c, s.url("/v1/workers"), register.clone()).await;
    assert_eq!(status, 201, "{me}");
    let me = me["worker"].as_str().unwrap().to_string();
    let (_, other) = post(&c, s.url("/v1/workers"), register).await;
    let other = other["worker"].as_str().unwrap().to_string();

    let (status, v) = post(
        &c,
        s.url("/v1/runs"),
        start_body("Where is my invoice?", None),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let (status, polled) = post(
        &c,
        s.url(&format!("/v1/workers/{me}/poll")),
        json!({"max": 8}),
    )
    .await;
    assert_eq!(status, 200, "{polled}");
    let got = &polled["calls"][0];
    assert_eq!(
        (got["run"].as_str(), got["tool"].as_str(), &got["args"]),
        (
            Some(run.as_str()),
            Some(CLASSIFY),
            &json!({"ticket": "Where is my invoice?"})
        ),
        "{polled}"
    );
    let call = got["call"].as_str().unwrap().to_string();

    let reply = |who: &str, outcome: Value| {
        let url = s.url(&format!("/v1/workers/{who}/replies"));
        let body = json!({"replies": [{"run": run, "call": call, "outcome": outcome}]});
        let c = c.clone();
        async move { post(&c, url, body).await }
    };
    let first = json!({"Ok": {"severity": "low", "category": "question"}});
    let (status, v) = reply(&me, first.clone()).await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(true)),
        "{v}"
    );
    let (status, v) = reply(
        &me,
        json!({"Ok": {"severity": "high", "category": "outage"}}),
    )
    .await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(false)),
        "a second reply: {v}"
    );
    let (status, v) = reply(&other, first.clone()).await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(false)),
        "another worker's: {v}"
    );
    let (status, v) = post(
        &c,
        s.url(&format!("/v1/workers/{me}/replies")),
        json!({"replies": [{"run": run, "call": "c1:root#9", "outcome": first}]}),
    )
    .await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(false)),
        "never sent: {v}"
    );
    let (status, v) = reply(&me, json!({"Fine": 1})).await;
    assert_eq!(status, 422, "{v}");

    until(&c, &s, &run, 10, paused_at_review).await;
    assert_eq!(replies(&c, &s, &run, &call).await, vec![first]);
    let (status, v) = send(
        &c,
        reqwest::Method::DELETE,
        s.url(&format!("/v1/workers/{me}")),
        None,
        None,
    )
    .await;
    assert_eq!(status, 204, "{v}");
    let (status, v) = post(
        &c,
        s.url(&format!("/v1/workers/{me}/poll")),
        json!({"max": 1}),
    )
    .await;
    assert_eq!(status, 404, "a worker that left polls no more: {v}");
}

/// Tokens: a worker's token (scope `worker`) serves and can do nothing
/// else — not start, read or list runs, not list workers; a `run` or
/// `read` token cannot act as a worker, an `admin` token can. A `flow
/// worker` with a run token is refused (exit 2); with its own token it
/// serves the runs a run token starts.
#[tokio::test]
async fn worker_tokens_serve_and_do_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (read, run_t, admin, worker_t) = (
        "read-token-0123456789",
        "run-token-0123456789",
        "admin-token-0123456789",
        "worker-token-0123456789",
    );
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("{read} read\n{run_t} run\n{admin} admin\n{worker_t} worker\n"),
    )
    .unwrap();
    let mixed = dir.path().join("mixed");
    std::fs::write(&mixed, format!("{worker_t} worker,read\n")).unwrap();
    let out = common::flow()
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["serve", "--tokens", mixed.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a worker token with another scope"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stands alone"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Serve::start(
        &server_tools(dir.path()),
        &[
            "--workers",
            "triage.json",
            "--tokens",
            tokens.to_str().unwrap(),
        ],
    );
    let c = client();
    let get = reqwest::Method::GET;
    let postm = reqwest::Method::POST;
    let register =
        json!({"name": "t", "tools": [{"tool": CLASSIFY, "fingerprint": classify_fingerprint()}]});

    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/runs"),
        Some(worker_t),
        Some(start_body("x", None)),
    )
    .await;
    assert_eq!(status, 403, "a worker token starts no run: {v}");
    for path in ["/v1/runs", "/v1/workers", "/v1/calls"] {
        let (status, v) = send(&c, get.clone(), s.url(path), Some(worker_t), None).await;
        assert_eq!(status, 403, "GET {path} with a worker token: {v}");
    }
    for t in [run_t, read] {
        let (status, v) = send(
            &c,
            postm.clone(),
            s.url("/v1/workers"),
            Some(t),
            Some(register.clone()),
        )
        .await;
        assert_eq!(status, 403, "{t} acts as a worker: {v}");
    }
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/workers"),
        Some(admin),
        Some(register.clone()),
    )
    .await;
    assert_eq!(status, 201, "admin may: {v}");
    let id = v["worker"].as_str().unwrap();
    let (status, _) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{id}/poll")),
        Some(run_t),
        Some(json!({"max": 1})),
    )
    .await;
    assert_eq!(status, 403, "a run token polls for calls");
    let (status, v) = send(
        &c,
        reqwest::Method::DELETE,
        s.url(&format!("/v1/workers/{id}")),
        Some(admin),
        None,
    )
    .await;
    assert_eq!(status, 204, "{v}");
    let (status, v) = send(&c, get.clone(), s.url("/v1/workers"), Some(read), None).await;
    assert_eq!(status, 200, "listing workers is a read: {v}");

    let refused = Worker::command(
        &s.server.base,
        &example("triage/flow.toml"),
        Some(run_t),
        &[],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("403") && err.contains("worker"), "{err}");

    let _w = Worker::start(
        &s.server.base,
        &example("triage/flow.toml"),
        Some(worker_t),
        &[],
    );
    let (status, v) = send(
        &c,
        postm,
        s.url("/v1/runs"),
        Some(run_t),
        Some(start_body("Site down", Some(10))),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert!(paused_at_review(&v), "{v}");
}

/// Two `flow serve --postgres` on `db`'s schema, the classifier served by
/// workers, with `extra` flags.
fn two_servers(db: &Schema, dir: &Path, extra: &[&str]) -> (Serve, Serve) {
    let tools = server_tools(dir);
    let mut args = vec![
        "--workers",
        "triage.json",
        "--postgres",
        &db.url,
        "--postgres-schema",
        &db.name,
    ];
    args.extend_from_slice(extra);
    (Serve::start(&tools, &args), Serve::start(&tools, &args))
}

/// Issue 12 §3 across a cluster: two `flow serve --postgres` on one
/// schema, the worker connected to server B only; a run started on server
/// A has its classifier call queued in the database, taken by the worker
/// through B, and its reply admitted by A, which drives the run on. The
/// run is then finished through B and replays matched on A.
///
/// Issue 36 §4: nobody polls for it. With `--worker-timeout 60` the
/// servers' safety look is 15 s, yet the run reaches its review within
/// the start's 10 s wait: B's held poll is woken by A's queuing, and A's
/// drive by B's admitting the reply, through Postgres NOTIFY.
#[tokio::test]
async fn a_worker_on_server_b_serves_a_run_started_on_server_a() {
    let Some(db) = Schema::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_servers(&db, dir.path(), &["--worker-timeout", "60"]);
    let w = Worker::start(&b.server.base, &example("triage/flow.toml"), None, &[]);
    let c = client();

    let (status, v) = post(
        &c,
        a.url("/v1/runs"),
        start_body("The site is down!", Some(10)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert!(paused_at_review(&v), "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    assert_eq!(
        replies(&c, &b, &run, "c1:root#1").await,
        vec![json!({"Ok": {"category": "outage", "severity": "high"}})]
    );
    assert_eq!(
        db.query(&format!(
            "SELECT count(*) FROM worker_calls WHERE run = '{run}' AND worker = '{}' AND outcome IS NOT NULL",
            w.id
        ))[0][0]
            .as_deref(),
        Some("1"),
        "the call went through the database's queue to the worker"
    );
    let review = v["pending"][0]["call"].as_str().unwrap().to_string();
    finish(&c, &b, &run, &review).await;
    let (_, verdict) = post(&c, a.url(&format!("/v1/runs/{run}/replay")), json!({})).await;
    assert_eq!(verdict["verdict"], "matched", "{verdict}");
    assert_answered_by(&c, &a, &run, "c1:root#1", &w.id).await;
}

/// Issue 12 §4, the compose topology as processes on this machine:
/// PostgreSQL, two servers and one worker (connected to server 2). The
/// quickstart starts through server 1 while server 2's SSE feed is
/// watched; server 1 is killed with SIGKILL while the classifier's call is
/// out at the worker; server 2 takes the run over when server 1's lease
/// expires, admits the worker's reply and drives the run to its review,
/// which is answered through server 2. The feed on server 2 saw every fact
/// once, in order, to End; every fact acknowledged before the kill is kept
/// byte for byte; the run replays matched.
#[tokio::test]
async fn the_compose_topology_survives_the_loss_of_a_server() {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let Some(db) = Schema::new() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut one, two) = two_servers(&db, dir.path(), &["--lease-seconds", "2"]);
    let _worker = Worker::start(
        &two.server.base,
        &example("triage/flow.toml"),
        None,
        &[("TRIAGE_DELAY_MS", "3000")],
    );
    let c = client();
    let (status, v) = post(
        &c,
        one.url("/v1/runs"),
        start_body("The site is down!", None),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let feed = {
        let url = two.url(&format!("/v1/runs/{run}/events"));
        tokio::spawn(async move {
            let r = client().get(url).send().await.unwrap();
            let mut events = r.bytes_stream().eventsource();
            let mut seen = Vec::new();
            while let Some(Ok(e)) = events.next().await {
                seen.push((e.id.parse::<u64>().unwrap_or(0), e.event.clone()));
                if e.event == "End" {
                    break;
                }
            }
            seen
        })
    };
    let call = classify_call_out(&c, &two, &run).await;
    // Out at the worker: queued and handed to it (a kill between the Call
    // and its queuing would rightly settle it Unknown).
    let handed = format!(
        "SELECT 1 FROM worker_calls WHERE run = '{run}' AND call = '{call}' AND worker IS NOT NULL"
    );
    for _ in 0..200 {
        if !db.query(&handed).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        !db.query(&handed).is_empty(),
        "the call never reached the worker"
    );
    let before = facts(&c, &two, &run).await;
    one.server.child.kill().unwrap();
    one.server.child.wait().unwrap();
    // Server 2 takes the run over and drives it to the review.
    let mut view = Value::Null;
    for _ in 0..600 {
        view = common::get_json(&c, two.url(&format!("/v1/runs/{run}"))).await;
        if paused_at_review(&view) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        paused_at_review(&view),
        "server 2 did not take the run over: {view}"
    );
    let after = facts(&c, &two, &run).await;
    assert_eq!(
        after[..before.len()],
        before[..],
        "a fact acknowledged before the kill changed"
    );
    assert_eq!(
        replies(&c, &two, &run, "c1:root#1").await,
        vec![json!({"Ok": {"category": "outage", "severity": "high"}})],
        "the worker's one reply"
    );
    let review = view["pending"][0]["call"].as_str().unwrap().to_string();
    finish(&c, &two, &run, &review).await;
    let seen = tokio::time::timeout(Duration::from_secs(30), feed)
        .await
        .expect("the feed on server 2 reaches End")
        .unwrap();
    let numbers: Vec<u64> = seen.iter().map(|s| s.0).collect();
    let total = facts(&c, &two, &run).await.len() as u64;
    assert_eq!(numbers, (1..=total).collect::<Vec<_>>(), "{seen:?}");
    assert_eq!(seen.last().map(|s| s.1.as_str()), Some("End"));
}

/// Issue 36 §3, worker identity: a worker is bound to the token that
/// registered it. Under another worker token, polling it (no call args
/// handed over), replying as it (the forged `{"i": 4242}` never becomes a
/// Reply) and deleting it are 403 problem+json and change nothing: the
/// call is still queued for its worker, which then gets it, answers it
/// and stays live. A worker token confined by its line
/// (`token worker KEY[,KEY]`) registering another declaration is 403,
/// naming it, and nothing is registered; an `admin` token may act for any
/// worker. (PRO-24: authority is the host's, around the call.)
#[tokio::test]
async fn forged_worker_actions_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (run_t, read, admin, mine, thief, confined) = (
        "run-token-0123456789",
        "read-token-0123456789",
        "admin-token-0123456789",
        "worker-mine-0123456789",
        "worker-thief-0123456789",
        "worker-confined-0123456789",
    );
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "{run_t} run\n{read} read\n{admin} admin\n{mine} worker triage.json\n{thief} worker\n{confined} worker other.json,std/llm\n"
        ),
    )
    .unwrap();
    let s = Serve::start(
        &server_tools(dir.path()),
        &[
            "--workers",
            "triage.json",
            "--tokens",
            tokens.to_str().unwrap(),
        ],
    );
    let c = client();
    let postm = reqwest::Method::POST;
    let register = json!({"name": "by-hand", "tools": [{"tool": CLASSIFY, "fingerprint": classify_fingerprint()}]});
    let live = |c: reqwest::Client, url: String| async move {
        let (_, v) = send(&c, reqwest::Method::GET, url, Some(read), None).await;
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["worker"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };

    // A confined token registering a declaration its line does not name.
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/workers"),
        Some(confined),
        Some(register.clone()),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert!(v["title"].is_string(), "problem+json: {v}");
    assert!(
        v["detail"].as_str().unwrap().contains(CLASSIFY),
        "names the declaration: {v}"
    );
    assert!(
        live(c.clone(), s.url("/v1/workers")).await.is_empty(),
        "nothing registered"
    );

    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/workers"),
        Some(mine),
        Some(register.clone()),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let me = v["worker"].as_str().unwrap().to_string();
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/workers"),
        Some(thief),
        Some(register.clone()),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let other = v["worker"].as_str().unwrap().to_string();

    let (status, v) = send(
        &c,
        postm.clone(),
        s.url("/v1/runs"),
        Some(run_t),
        Some(start_body("Where is my invoice?", None)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let history = |c: reqwest::Client| {
        let url = s.url(&format!("/v1/runs/{run}/facts?limit=200"));
        async move {
            let (_, v) = send(&c, reqwest::Method::GET, url, Some(read), None).await;
            v["facts"].as_array().unwrap().clone()
        }
    };
    // The classifier's Call is durable and queued.
    let mut before = Vec::new();
    for _ in 0..200 {
        before = history(c.clone()).await;
        if before.iter().any(|f| f["kind"] == "Call") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Polling as another worker: 403, no call handed over.
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{me}/poll")),
        Some(thief),
        Some(json!({"max": 8, "waitMs": 0})),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v.get("calls").is_none() && !v.to_string().contains("invoice"),
        "{v}"
    );
    assert!(
        v["detail"].as_str().unwrap().contains("another token"),
        "{v}"
    );

    // Its own token gets the call, once.
    let (status, polled) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{me}/poll")),
        Some(mine),
        Some(json!({"max": 8, "waitMs": 2000})),
    )
    .await;
    assert_eq!(status, 200, "{polled}");
    let got = &polled["calls"][0];
    assert_eq!(
        got["args"],
        json!({"ticket": "Where is my invoice?"}),
        "{polled}"
    );
    let call = got["call"].as_str().unwrap().to_string();

    // Replying as another worker: 403, no Reply.
    let forged = json!({"replies": [{"run": run, "call": call, "outcome": {"Ok": {"i": 4242}}}]});
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{me}/replies")),
        Some(thief),
        Some(forged.clone()),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    // Under its own id the thief's reply is for a call not sent to it.
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{other}/replies")),
        Some(thief),
        Some(forged),
    )
    .await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(false)),
        "{v}"
    );

    // Deleting another worker: 403, it stays live.
    let (status, v) = send(
        &c,
        reqwest::Method::DELETE,
        s.url(&format!("/v1/workers/{me}")),
        Some(thief),
        None,
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert!(live(c.clone(), s.url("/v1/workers")).await.contains(&me));
    assert_eq!(history(c.clone()).await, before, "the history is unchanged");

    // The real worker's reply is the one admitted.
    let real = json!({"Ok": {"severity": "low", "category": "question"}});
    let (status, v) = send(
        &c,
        postm.clone(),
        s.url(&format!("/v1/workers/{me}/replies")),
        Some(mine),
        Some(json!({"replies": [{"run": run, "call": call, "outcome": real}]})),
    )
    .await;
    assert_eq!(
        (status, &v["replies"][0]["admitted"]),
        (200, &json!(true)),
        "{v}"
    );
    let mut outcomes = Vec::new();
    for _ in 0..200 {
        outcomes = history(c.clone())
            .await
            .into_iter()
            .filter(|f| f["kind"] == "Reply" && f["fact"]["call"] == call.as_str())
            .map(|f| f["fact"]["outcome"].clone())
            .collect();
        if !outcomes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(outcomes, vec![real]);

    // An admin token acts for any worker.
    let (status, v) = send(
        &c,
        postm,
        s.url(&format!("/v1/workers/{me}/poll")),
        Some(admin),
        Some(json!({"max": 1, "waitMs": 0})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = send(
        &c,
        reqwest::Method::DELETE,
        s.url(&format!("/v1/workers/{me}")),
        Some(admin),
        None,
    )
    .await;
    assert_eq!(status, 204, "{v}");
}

/// No Reply of `run` says Unknown.
async fn no_unknown(c: &reqwest::Client, s: &Serve, run: &str) {
    let all = facts(c, s, run).await;
    assert!(
        !all.iter()
            .any(|f| f["kind"] == "Reply" && f["fact"]["outcome"].get("Unknown").is_some()),
        "a Reply says Unknown: {all:?}"
    );
}

/// Issue 36 §1, the worker's drain: SIGTERM to a worker (its process
/// alone, as `docker stop` sends it) while its slow call is out. It takes
/// no more calls but keeps polling for none, so the server does not judge
/// it lost although the call takes twice `--worker-timeout`; the call's
/// Tool gets no signal and finishes, its reply is sent, and the worker
/// leaves and exits 0. The run goes on with an Ok Reply: no Unknown
/// anywhere in the history.
#[tokio::test]
async fn sigterm_lets_a_workers_slow_call_finish_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(
        &server_tools(dir.path()),
        &["--workers", "triage.json", "--worker-timeout", "2"],
    );
    let c = client();
    let mut w = Worker::start(
        &s.server.base,
        &example("triage/flow.toml"),
        None,
        &[("TRIAGE_DELAY_MS", "4000")],
    );
    let (status, v) = post(&c, s.url("/v1/runs"), start_body("The site is down!", None)).await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    assert_eq!(s.claimed(&run).await, w.id);
    w.sigterm();

    let v = until(&c, &s, &run, 30, paused_at_review).await;
    assert_eq!(
        replies(&c, &s, &run, "c1:root#1").await,
        vec![json!({"Ok": {"category": "outage", "severity": "high"}})]
    );
    no_unknown(&c, &s, &run).await;
    assert_eq!(w.exited(30), Some(0), "a drained worker exits 0");
    let listed = common::get_json(&c, s.url("/v1/workers")).await;
    assert_eq!(listed["workers"], json!([]), "it left: {listed}");
    // Resuming needs a live worker for the classifier again (bind before
    // start), though the run calls it no more.
    let _next = Worker::start(&s.server.base, &example("triage/flow.toml"), None, &[]);
    finish(&c, &s, &run, v["pending"][0]["call"].as_str().unwrap()).await;
}

/// Issue 36 §1: a worker whose grace (`--drain-seconds 1`) is shorter than
/// its call hands the call back instead of answering it: with `resend =
/// true` the server queues it again at once (the worker left), a second
/// worker serves it under the same call id, and the run goes on — one
/// Call, one Ok Reply, no Unknown.
#[tokio::test]
async fn a_call_longer_than_the_grace_is_handed_back_and_served_by_another_worker() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&server_tools(dir.path()), &["--workers", "triage.json"]);
    let tools = resend_tools(dir.path());
    let c = client();
    let mut cmd = Worker::command(
        &s.server.base,
        &tools,
        None,
        &[("TRIAGE_DELAY_MS", "60000")],
    );
    cmd.args(["--drain-seconds", "1"]);
    let mut slow = Worker::spawn(cmd);
    let (status, v) = post(
        &c,
        s.url("/v1/runs"),
        start_body("I was charged twice", None),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    let call = classify_call_out(&c, &s, &run).await;
    assert_eq!(s.claimed(&run).await, slow.id);

    let next = Worker::start(&s.server.base, &tools, None, &[]);
    slow.sigterm();
    assert_eq!(slow.exited(30), Some(0));
    let v = until(&c, &s, &run, 30, paused_at_review).await;
    assert_eq!(s.claimed(&run).await, next.id, "served by the other worker");
    let calls = facts(&c, &s, &run)
        .await
        .iter()
        .filter(|f| f["kind"] == "Call" && f["fact"]["call"] == call.as_str())
        .count();
    assert_eq!(calls, 1, "sent again under the same call id");
    assert_eq!(
        replies(&c, &s, &run, &call).await,
        vec![json!({"Ok": {"category": "billing", "severity": "medium"}})]
    );
    no_unknown(&c, &s, &run).await;
    finish(&c, &s, &run, v["pending"][0]["call"].as_str().unwrap()).await;
}

/// Issue 36 §3, claims are spread: a poll takes at most what the worker
/// can start now (its free slots of `--concurrency`), so with two workers
/// of concurrency 2 and five slow calls queued, the first worker cannot
/// hold them all: both end up serving calls, and every run goes on.
#[tokio::test]
async fn two_workers_share_more_calls_than_one_can_start() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(&server_tools(dir.path()), &["--workers", "triage.json"]);
    let c = client();
    let worker = || {
        let mut cmd = Worker::command(
            &s.server.base,
            &example("triage/flow.toml"),
            None,
            &[("TRIAGE_DELAY_MS", "1500")],
        );
        cmd.args(["--concurrency", "2"]);
        Worker::spawn(cmd)
    };
    let (a, b) = (worker(), worker());
    let mut runs = Vec::new();
    for i in 0..5 {
        let (status, v) = post(
            &c,
            s.url("/v1/runs"),
            start_body(&format!("The site is down ({i})"), None),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        runs.push(v["run"].as_str().unwrap().to_string());
    }
    let mut served = std::collections::BTreeSet::new();
    for run in &runs {
        until(&c, &s, run, 30, paused_at_review).await;
        served.insert(s.claimed(run).await);
    }
    assert_eq!(
        served,
        [a.id.clone(), b.id.clone()].into_iter().collect(),
        "both workers served calls"
    );
}

/// Issue 40 item 4: workers are confined to their token's namespaces. A
/// worker of `team-a` is never handed a call of a `team-b` run — not while
/// that call waits for a worker, nor once a `team-b` worker serves it — and
/// does not count as serving it: the `team-b` run parks (pauses) until a
/// `team-b` worker comes, which is then handed the call. A confined token
/// lists only the workers of its namespaces.
async fn workers_by_namespace(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (wa, wb, reader, root) = (
        "worker-a-token-0123456789",
        "worker-b-token-0123456789",
        "reader-a-token-0123456789",
        "root-token-0123456789abc",
    );
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "{wa} worker ns=team-a\n{wb} worker ns=team-b\n{reader} read ns=team-a\n{root} admin ns=*\n"
        ),
    )
    .unwrap();
    let mut args = vec![
        "--workers",
        "triage.json",
        "--worker-wait",
        "--tokens",
        tokens.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let s = Serve::start(&server_tools(dir.path()), &args);
    let c = client();
    let register =
        json!({"name": "w", "tools": [{"tool": CLASSIFY, "fingerprint": classify_fingerprint()}]});
    let join = |token: &'static str| {
        let (c, url, body) = (c.clone(), s.url("/v1/workers"), register.clone());
        async move {
            let (status, v) = send(&c, reqwest::Method::POST, url, Some(token), Some(body)).await;
            assert_eq!(status, 201, "{v}");
            v["worker"].as_str().unwrap().to_string()
        }
    };
    // The runs each call of a poll of `worker` (as `token`) belongs to.
    let poll = |worker: String, token: &'static str, wait_ms: u64| {
        let (c, url) = (c.clone(), s.url(&format!("/v1/workers/{worker}/poll")));
        async move {
            let (status, v) = send(
                &c,
                reqwest::Method::POST,
                url,
                Some(token),
                Some(json!({"max": 8, "waitMs": wait_ms})),
            )
            .await;
            assert_eq!(status, 200, "{v}");
            v["calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["run"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let start = |namespace: &str, wait: u64| {
        let mut body = start_body("Refund please", Some(wait));
        body["namespace"] = json!(namespace);
        let (c, url) = (c.clone(), s.url("/v1/runs"));
        async move {
            let (status, v) = send(&c, reqwest::Method::POST, url, Some(root), Some(body)).await;
            assert_eq!(status, 201, "{v}");
            v
        }
    };

    let worker_a = join(wa).await;
    // Team-b's run: no worker of team-b, so its call is parked and the run
    // pauses at it, and team-a's worker is handed nothing.
    let v = start("team-b", 5).await;
    assert_eq!(
        (v["state"].as_str(), v["pending"][0]["tool"].as_str()),
        (Some("paused"), Some(CLASSIFY)),
        "no worker serves team-b: {v}"
    );
    let b1 = v["run"].as_str().unwrap().to_string();
    assert!(poll(worker_a.clone(), wa, 500).await.is_empty());
    // Team-a's run goes to team-a's worker.
    let a1 = start("team-a", 0).await["run"]
        .as_str()
        .unwrap()
        .to_string();
    let mut got = Vec::new();
    for _ in 0..20 {
        got = poll(worker_a.clone(), wa, 500).await;
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got, [a1]);

    // A worker of team-b comes: team-b's run is resumed and its call queued
    // again, served now — and still never handed to team-a's worker, which
    // polls first.
    let worker_b = join(wb).await;
    for _ in 0..4 {
        let got = poll(worker_a.clone(), wa, 500).await;
        assert!(got.is_empty(), "team-a's worker was handed {got:?}");
    }
    let got = poll(worker_b.clone(), wb, 3000).await;
    assert_eq!(got, [b1], "team-b's worker serves team-b's run");

    // The listing: a team-a token sees team-a's worker only.
    let listed = |token: &'static str| {
        let (c, url) = (c.clone(), s.url("/v1/workers"));
        async move {
            let (status, v) = send(&c, reqwest::Method::GET, url, Some(token), None).await;
            assert_eq!(status, 200, "{v}");
            let mut ids: Vec<String> = v["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["worker"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(listed(reader).await, [worker_a.as_str()]);
    let mut both = vec![worker_a, worker_b];
    both.sort();
    assert_eq!(listed(root).await, both);
}

#[tokio::test]
async fn sqlite_a_worker_serves_only_its_tokens_namespaces() {
    workers_by_namespace(&[]).await;
}

#[tokio::test]
async fn postgres_a_worker_serves_only_its_tokens_namespaces() {
    let Some(db) = Schema::new() else { return };
    workers_by_namespace(&["--postgres", &db.url, "--postgres-schema", &db.name]).await;
}
