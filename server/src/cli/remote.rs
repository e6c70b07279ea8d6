//! `flow --server URL …`: the commands that have an HTTP equivalent
//! (DESIGN §6), spoken to a running flowd instead of the embedded store —
//! the same arguments, output and exit codes. `--token` (env
//! `FLOW_TOKEN`) is sent as `Authorization: Bearer`.
//!
//! A command that starts or continues a run asks the server to wait (its
//! longest `wait`), then follows the run's view until it ends or pauses.
//! A refusal is the server's problem+json `detail` (exit 2); a storage
//! failure (503) exits 5; a server that cannot be reached exits 2 and says
//! so.

use super::{Command, Global, read_arg};
use crate::error::{Error, Result};
use crate::source::Sources;
use serde_json::{Map, Value as Json, json};
use std::time::Duration;

/// The server's longest `wait` (seconds).
const WAIT: u64 = 30;

pub(crate) struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    fn new(base: &str, token: Option<String>) -> Result<Client> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(WAIT + 30))
            .build()
            .map_err(|e| Error::Refused(format!("--server: {e}")))?;
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// A request to `path`, with the token.
    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Json>,
    ) -> Result<Json> {
        let mut req = self.request(method, path);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        self.answer(req).await
    }

    /// The answer to `req` when it succeeded, else the error its
    /// problem+json says.
    pub(super) async fn response(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let r = req
            .send()
            .await
            .map_err(|e| Error::Refused(format!("cannot reach {}: {e}", self.base)))?;
        let status = r.status();
        if status.is_success() {
            return Ok(r);
        }
        let text = r
            .text()
            .await
            .map_err(|e| Error::Refused(format!("{}: {e}", self.base)))?;
        let v: Json = serde_json::from_str(&text).unwrap_or(Json::String(text));
        let detail = v
            .get("detail")
            .and_then(Json::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("HTTP {status}"));
        // A check or binding refusal keeps its diagnostics, so `--json`
        // prints them structured as the embedded store's refusal does.
        let diagnostics = v["diagnostics"].as_array().cloned().unwrap_or_default();
        Err(match (status.as_u16(), v["type"].as_str()) {
            (404, _) => Error::NotFound(detail),
            (409, _) => Error::Conflict(detail),
            (503, _) => Error::Store(std::sync::Arc::new(flow_store::Error::CommitFailed(detail))),
            (422, Some("urn:flowd:problem:check")) if !diagnostics.is_empty() => {
                Error::Check(diagnostics)
            }
            (422, Some("urn:flowd:problem:unbound")) if !diagnostics.is_empty() => Error::Bind(
                diagnostics
                    .iter()
                    .map(|d| d["message"].as_str().unwrap_or_default().to_string())
                    .collect(),
            ),
            _ => Error::Refused(detail),
        })
    }

    /// The JSON answer to `req`.
    async fn answer(&self, req: reqwest::RequestBuilder) -> Result<Json> {
        let text = self
            .response(req)
            .await?
            .text()
            .await
            .map_err(|e| Error::Refused(format!("{}: {e}", self.base)))?;
        Ok(serde_json::from_str(&text).unwrap_or(Json::String(text)))
    }

    pub(super) async fn get(&self, path: &str) -> Result<Json> {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub(super) async fn post(&self, path: &str, body: Json) -> Result<Json> {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    /// `POST path` with a tar body.
    async fn post_tar(&self, path: &str, tar: Vec<u8>) -> Result<Json> {
        let req = self
            .request(reqwest::Method::POST, path)
            .header("content-type", "application/x-tar")
            .body(tar);
        self.answer(req).await
    }

    /// `GET path`'s body as bytes (an archive).
    async fn bytes(&self, path: &str) -> Result<Vec<u8>> {
        let r = self
            .response(self.request(reqwest::Method::GET, path))
            .await?;
        let b = r
            .bytes()
            .await
            .map_err(|e| Error::Refused(format!("{}: {e}", self.base)))?;
        Ok(b.to_vec())
    }

    /// Follows a run's view until it is no longer running.
    async fn settle(&self, mut view: Json) -> Result<Json> {
        while view["state"] == "running" {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let run = view["run"].as_str().unwrap_or_default().to_string();
            view = self.get(&format!("/v1/runs/{run}")).await?;
        }
        Ok(view)
    }
}

/// Whether `command` runs against `--server`; the others (serve, mcp,
/// tools, test, `runs --runs`) run locally or are refused.
pub(super) async fn run(g: &Global, base: &str, command: Command) -> Result<u8> {
    let c = Client::new(base, g.token.clone())?;
    match command {
        Command::Run { flow, input, .. } => {
            let sources = Sources::read(&flow)?;
            let input = parse(&read_arg(&input)?, "--input")?;
            let (flow, modules) = documents(&sources);
            let v = c
                .post(
                    "/v1/runs",
                    json!({"flow": flow, "modules": modules, "name": sources.root,
                        "input": input, "wait": WAIT}),
                )
                .await?;
            show(g, &c, c.settle(v).await?).await
        }
        Command::Resume {
            run,
            call,
            reply,
            open,
            ..
        } => {
            let mut body = json!({"wait": WAIT});
            if let (Some(call), Some(reply)) = (call, reply) {
                body["call"] = json!(call);
                body["reply"] = parse(&read_arg(&reply)?, "--reply")?;
            }
            if let Some(o) = open {
                body["open"] = json!(o.as_str());
            }
            let v = c.post(&format!("/v1/runs/{run}/resume"), body).await?;
            show(g, &c, c.settle(v).await?).await
        }
        Command::Fork {
            run,
            checkpoint,
            call,
            reply,
            set,
            flow,
            ..
        } => {
            let at = crate::service::ForkAt::new(checkpoint, call, reply)?;
            let mut sets = Map::new();
            for s in &set {
                let (k, v) = s
                    .split_once('=')
                    .ok_or_else(|| Error::Refused(format!("--set {s}: expected field=JSON")))?;
                sets.insert(k.to_string(), parse(v, &format!("--set {k}"))?);
            }
            let mut body = json!({"set": sets, "wait": WAIT});
            match at {
                crate::service::ForkAt::Checkpoint(n) => body["checkpoint"] = json!(n),
                crate::service::ForkAt::WhatIf { call, reply } => {
                    body["call"] = json!(call);
                    body["reply"] = parse(&reply, "--reply")?;
                }
            }
            if let Some(f) = flow {
                let sources = Sources::read(&f)?;
                let (flow, modules) = documents(&sources);
                body["flow"] = flow;
                body["modules"] = modules;
                body["name"] = json!(sources.root);
            }
            let v = c.post(&format!("/v1/runs/{run}/fork"), body).await?;
            show(g, &c, c.settle(v).await?).await
        }
        Command::Gate(a) => super::gate::remote(g, &c, a).await,
        Command::Recover(a) => super::recover::remote(g, &c, a).await,
        Command::Recoveries(a) => super::recoveries::remote(g, &c, a).await,
        Command::Diff(d) => super::diff::remote(g, &c, d).await,
        Command::Delete { runs, yes, force } => {
            super::delete::remote(g, &c, super::delete::Ask { runs, yes, force }).await
        }
        Command::Halt { run, force } => {
            let v = c
                .post(&format!("/v1/runs/{run}/halt"), json!({"force": force}))
                .await?;
            if g.json {
                out!("{v}");
            } else {
                eprintln!(
                    "{run} halted; continue it with: {} resume {run}",
                    super::flow_cmd(g)
                );
            }
            Ok(0)
        }
        Command::Replay { run } => {
            let v = c.post(&format!("/v1/runs/{run}/replay"), json!({})).await?;
            if g.json {
                out!("{v}");
            } else {
                match v["verdict"].as_str() {
                    Some("diverged") => out!(
                        "diverged at fact {}: {}",
                        v["fact"],
                        v["reason"].as_str().unwrap_or("")
                    ),
                    other => out!("{}", other.unwrap_or("")),
                }
            }
            Ok(if v["verdict"] == "matched" { 0 } else { 1 })
        }
        Command::History {
            run,
            kind,
            search,
            fact,
            summary,
            source,
            offset,
            limit,
        } => {
            if source.is_some() {
                return Err(Error::Refused(
                    "flow history --source reads the store itself: run it without --server where the store is, or read GET /v1/runs/RUN/sources/MODULE"
                        .into(),
                ));
            }
            if let Some(n) = fact {
                return one_fact(&c, &run, n).await;
            }
            let mut q = format!("?offset={offset}&limit={}", limit.min(200));
            if let Some(k) = &kind {
                q.push_str(&format!("&kind={}", encode(k)));
            }
            if let Some(s) = &search {
                q.push_str(&format!("&search={}", encode(s)));
            }
            let v = c.get(&format!("/v1/runs/{run}/inspect{q}")).await?;
            if g.json {
                out!("{v}");
            } else {
                let ask = super::history::Ask {
                    run: run.clone(),
                    kind,
                    search,
                    fact,
                    summary,
                    source,
                    offset,
                    limit,
                };
                super::history::render(g, v["run"].as_str().unwrap_or(&run), &v, &ask, &[]);
            }
            Ok(0)
        }
        Command::Runs {
            limit,
            after,
            state,
            runs: None,
            filter,
        } => {
            // Checked here as the store checks it: the same refusal as
            // without --server, before anything is sent.
            super::query::query(limit, after.clone(), state.as_deref(), &filter)?;
            let q =
                super::query::params(limit, after.as_deref(), state.as_deref(), &filter, encode);
            let v = c.get(&format!("/v1/runs?{q}")).await?;
            if g.json {
                out!("{v}");
            } else {
                super::query::print(g, &v, limit, state.as_deref(), &filter);
            }
            Ok(0)
        }
        Command::Check { flow } => {
            let flow_path = flow.clone();
            let sources = Sources::read(&flow)?;
            let (flow, modules) = documents(&sources);
            let v = c
                .post(
                    "/v1/check",
                    json!({"flow": flow, "modules": modules, "name": sources.root}),
                )
                .await?;
            if g.json {
                out!("{v}");
            } else {
                let ds = v["diagnostics"].as_array().cloned().unwrap_or_default();
                let errors = v["errors"].as_u64().unwrap_or(0) as usize;
                super::print_check(g, &flow_path, &ds, errors);
            }
            Ok(if v["ok"] == true { 0 } else { 2 })
        }
        Command::Watch { run, after } => watch(g, &c, &run, after).await,
        Command::Export { run, out } => {
            let tar = c.bytes(&format!("/v1/runs/{run}/archive")).await?;
            std::fs::create_dir_all(&out)
                .map_err(|e| Error::Refused(format!("{}: {e}", out.display())))?;
            crate::tarball::unpack(&tar[..], &out)
                .map_err(|e| Error::Refused(format!("the server's archive: {e}")))?;
            let facts = std::fs::read_to_string(out.join("history.jsonl"))
                .map(|t| t.lines().count())
                .unwrap_or(0);
            let blobs = std::fs::read_dir(out.join("blobs")).map_or(0, |d| d.count());
            let v = json!({"run": run, "out": out.display().to_string(), "facts": facts, "blobs": blobs});
            if g.json {
                out!("{v}");
            } else {
                out!(
                    "exported {run} to {} ({facts} facts, {blobs} blobs)",
                    out.display()
                );
            }
            Ok(0)
        }
        Command::Import { dir } => {
            let body = if dir.is_dir() {
                crate::tarball::pack(&dir)
            } else {
                std::fs::read(&dir)
            }
            .map_err(|e| Error::Refused(format!("{}: {e}", dir.display())))?;
            let v = c.post_tar("/v1/archives", body).await?;
            let run = v["run"].as_str().unwrap_or_default();
            let torn = &v["truncated"];
            let torn = torn["fact"]
                .as_u64()
                .map(|n| (n, torn["reason"].as_str().unwrap_or("")));
            super::print_import(g, run, v["imported"] == true, torn);
            Ok(0)
        }
        other => Err(Error::Refused(format!(
            "{} has no HTTP equivalent here; run it without --server",
            name(&other)
        ))),
    }
}

/// `flow --server URL watch RUN`: the run's SSE feed (with its state
/// changes), each fact printed as `flow watch` prints it, until the run
/// ends, pauses or is halted; then the run as `flow run` shows it, with
/// its exit code.
async fn watch(g: &Global, c: &Client, run: &str, after: u64) -> Result<u8> {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let view = c.get(&format!("/v1/runs/{run}")).await?;
    let run = view["run"].as_str().unwrap_or(run).to_string();
    let req = c
        .request(
            reqwest::Method::GET,
            &format!("/v1/runs/{run}/events?states=true&after={after}"),
        )
        // A feed lasts as long as the run: no overall deadline.
        .timeout(Duration::from_secs(365 * 24 * 3600));
    let stream = c.response(req).await?;
    let mut events = stream.bytes_stream().eventsource();
    while let Some(e) = events.next().await {
        let e = e.map_err(|e| Error::Refused(format!("{}: the feed broke: {e}", c.base)))?;
        let data: Json = serde_json::from_str(&e.data).unwrap_or(Json::Null);
        match (e.event.as_str(), flow_store::FactKind::parse(&e.event)) {
            ("state", _) if data["state"] == "halted" => {
                return Ok(super::watch::halted(g, &run, &[]));
            }
            ("state", _) if data["state"] == "paused" => return paused(g, c, &run).await,
            ("error", _) => return Err(Error::Unreadable(e.data)),
            (_, Some(_)) => {
                let f = flow_store::fact::parse_stored(&e.data)
                    .map_err(|err| {
                        Error::Unreadable(format!("{}: a fact in the feed: {err}", c.base))
                    })?
                    .fact;
                if g.json {
                    out!("{}", e.data);
                } else {
                    out!("{}", super::watch::line(&f));
                }
                if let flow_store::Fact::End { ending, .. } = &f {
                    return super::watch::ended(g, &run, Some(ending));
                }
            }
            _ => {}
        }
    }
    Err(Error::Refused(format!(
        "{}: the feed of {run} closed before the run ended, paused or halted",
        c.base
    )))
}

/// `flow history RUN --fact N`: the fact whole, a Checkpoint with its
/// state instead of its delta, as the local command prints it.
async fn one_fact(c: &Client, run: &str, n: u64) -> Result<u8> {
    let page = c.get(&format!("/v1/runs/{run}/facts?fact={n}")).await?;
    let Some(f) = page["facts"].get(0) else {
        return Err(Error::NotFound(format!("{run} has no fact {n}")));
    };
    let mut fact = f["fact"].clone();
    if f["kind"] == "Checkpoint"
        && let Json::Object(m) = &mut fact
    {
        let cp = c.get(&format!("/v1/runs/{run}/checkpoints/{n}")).await?;
        m.remove("delta");
        m.insert("state".into(), cp["state"].clone());
    }
    out!("{}", flow_abi::json::canonical(&fact));
    if f["valuesOmitted"] == true {
        eprintln!("(values over 4 KiB are shown by hash: GET /v1/blobs/HASH reads one)");
    }
    Ok(0)
}

/// A paused run, as `flow watch` prints it: the resume command of each
/// pending call.
async fn paused(g: &Global, c: &Client, run: &str) -> Result<u8> {
    let v = c.get(&format!("/v1/runs/{run}")).await?;
    let pending = v["pending"].as_array().cloned().unwrap_or_default();
    if g.json {
        let calls: Vec<Json> = pending
            .iter()
            .map(|p| json!({"run": p["run"], "call": p["call"], "tool": p["tool"], "node": p["node"]}))
            .collect();
        out!(
            "{}",
            json!({"run": run, "state": "paused", "pending": calls})
        );
    } else {
        out!("{run} paused; answer with:");
        for p in &pending {
            let example = Some(p["exampleReply"].clone()).filter(|e| !e.is_null());
            let of = p["run"].as_str().unwrap_or(run);
            let call = p["call"].as_str().unwrap_or_default();
            super::print_resume_line(g, of, call, &p["args"]["schema"], example, false, &[]);
        }
    }
    Ok(3)
}

/// The command's name, for the refusal.
fn name(c: &Command) -> &'static str {
    match c {
        Command::Runs { .. } => "flow runs --runs",
        Command::Tools { .. } => "flow tools",
        Command::Test { .. } => "flow test",
        Command::Serve(_) => "flow serve",
        Command::Mcp(_) => "flow mcp",
        _ => "this command",
    }
}

/// The root document and the other modules, as texts (the server reads
/// them exactly as the CLI would).
pub(super) fn documents(s: &Sources) -> (Json, Json) {
    let root = json!(s.texts.get(&s.root).cloned().unwrap_or_default());
    let modules: Map<String, Json> = s
        .texts
        .iter()
        .filter(|(m, _)| **m != s.root)
        .map(|(m, t)| (m.clone(), json!(t)))
        .collect();
    (root, Json::Object(modules))
}

fn parse(text: &str, what: &str) -> Result<Json> {
    flow_abi::json::parse(text).map_err(|e| Error::Refused(format!("{what} is not JSON: {e}")))
}

/// Percent-encodes a query value.
pub(super) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Prints a run's view as `flow run` prints a result (the same text:
/// a paused run's pending calls and the resume command for each person's
/// call, with its example reply); its exit code.
async fn show(g: &Global, c: &Client, mut v: Json) -> Result<u8> {
    let run = v["run"].as_str().unwrap_or_default().to_string();
    let code = match v["state"].as_str().unwrap_or_default() {
        "completed" if v["exit"] == "success" || v["exit"].is_null() => 0,
        "completed" => 4,
        "paused" => 3,
        "halted" => 130,
        _ => 1,
    };
    if g.json {
        out!("{v}");
        return Ok(code);
    }
    match code {
        0 | 4 => {
            out!("{}", flow_abi::json::canonical(&v["output"]));
            if code == 4 {
                eprintln!(
                    "{run} completed with exit code {}",
                    v["exit"].as_str().unwrap_or_default()
                );
            }
        }
        3 => {
            // The run view's pending calls carry their example replies.
            if v["pending"]
                .get(0)
                .is_some_and(|p| p.get("exampleReply").is_none())
            {
                v = c.get(&format!("/v1/runs/{run}")).await?;
            }
            out!("{run} paused; pending calls:");
            for p in v["pending"].as_array().into_iter().flatten() {
                let text = |k: &str| p[k].as_str().unwrap_or_default();
                let inner = if text("run") == run || text("run").is_empty() {
                    String::new()
                } else {
                    format!("  in nested run {}", text("run"))
                };
                out!(
                    "  {}  {}  at node {}{inner}",
                    text("call"),
                    text("tool"),
                    text("node")
                );
                if text("tool") == crate::host::HUMAN {
                    let example = Some(p["exampleReply"].clone()).filter(|e| !e.is_null());
                    let run = if text("run").is_empty() {
                        run.as_str()
                    } else {
                        text("run")
                    };
                    super::print_resume_line(
                        g,
                        run,
                        text("call"),
                        &p["args"]["schema"],
                        example,
                        false,
                        &[],
                    );
                }
            }
        }
        130 => {
            let id = flow_store::RunId::parse(&run).map_err(|e| Error::Refused(e.to_string()))?;
            return super::halted(g, &id, &[]);
        }
        _ => {
            eprintln!("{run} faulted: {}", v["fault"].as_str().unwrap_or_default());
            // Pinpointed as a local run is (issue 38 §4).
            if let Ok(t) = c.get(&format!("/v1/runs/{run}/timeline")).await
                && let Ok(t) = serde_json::from_value::<crate::service::timeline::Timeline>(t)
            {
                super::print_fault(t.fault.as_ref());
            }
        }
    }
    Ok(code)
}
