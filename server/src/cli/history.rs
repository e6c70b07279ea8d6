//! `flow history RUN`: the history inspection view (running-a-program,
//! "The CLI and MCP surface"). The view is data (`--json`); the text is a
//! rendering of it (CLI-26):
//!
//! * `facts` and `page`, the store's history page (`--kind`, `--search`,
//!   `--offset`, `--limit`; `--fact N` prints one fact whole);
//! * `verdict`: the program re-run as replay does, serving every recorded
//!   reply and calling nothing (HIST-1);
//! * `pending`: the pending calls from that re-run's run state, or
//!   `"unknown"` when the re-run cannot say (it diverged) (HIST-9);
//! * `rounds`: each recorded Checkpoint, the places a fork can start, with
//!   its fact number, task, node and state (HIST-2);
//! * `tools`: the declarations reachable from the recorded entry, by
//!   identity and fingerprint (CLI-20);
//! * the footer: how many facts the run has and how many the selection
//!   hides (HIST-4); `--summary` bounds the text to the run's state, its
//!   pending calls and the next inspection commands (HIST-5).
//!
//! With `--server`, the view is the server's `GET /v1/runs/{run}/inspect`
//! (the same data: `RunService::inspect`), rendered the same.

use super::query::duration;
use super::{Global, open_existing, out_text, run_id, service};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::facts::FactsQuery;
use crate::http::inspect::InspectQuery;
use flow_store::{FactKind, HistoryQuery};
use serde_json::{Value as Json, json};

/// What `flow history` was asked.
#[derive(clap::Args, Debug, Clone)]
pub struct Ask {
    /// The run id.
    pub run: String,
    /// Only facts of this kind: Start, Call, Reply, Close, Checkpoint or End.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only facts whose text contains this.
    #[arg(long)]
    pub search: Option<String>,
    /// Show one fact in full.
    #[arg(long)]
    pub fact: Option<u64>,
    /// Only the run's state, its pending calls and the next commands.
    #[arg(long)]
    pub summary: bool,
    /// Show a recorded source text (4096 code points from --offset).
    #[arg(long)]
    pub source: Option<String>,
    /// Where a page of facts (or of --source text) starts.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Facts on a page, at most.
    #[arg(long, default_value_t = 200)]
    pub limit: u32,
}

pub(super) async fn history(g: &Global, ask: Ask) -> Result<u8> {
    let run = run_id(&ask.run)?;
    let store = open_existing(g, &run)?;
    if let Some(module) = &ask.source {
        let page = store.source_page(&run, module, ask.offset)?;
        if g.json {
            out!(
                "{}",
                json!({"module": page.module, "hash": page.hash, "offset": page.offset,
                    "text": page.text, "nextOffset": page.next_offset})
            );
        } else {
            out_text(&page.text);
            if let Some(next) = page.next_offset {
                eprintln!(
                    "\n(more: {} history {run} --source {} --offset {next})",
                    super::flow_cmd(g),
                    super::shell_quote(module)
                );
            }
        }
        return Ok(0);
    }
    if let Some(n) = ask.fact {
        let h = store.read_history(&run)?;
        let f = h
            .facts
            .iter()
            .find(|f| f.n == n)
            .ok_or_else(|| Error::NotFound(format!("{run} has no fact {n}")))?;
        let mut fact = store.expand_fact(&run, f)?;
        if let flow_store::Fact::Checkpoint { state, .. } = &mut fact {
            *state = store.checkpoint_state(&run, n)?;
        }
        out!("{}", flow_abi::json::canonical(&fact.into_json()));
        return Ok(0);
    }
    let q = HistoryQuery {
        kind: ask.kind.clone(),
        search: ask.search.clone(),
        offset: Some(ask.offset),
        limit: Some(ask.limit.min(200)),
    };
    let svc = service(g, store, false);
    let v = svc.inspect(&run, &q)?;
    if g.json {
        out!("{v}");
    } else {
        render(g, &run.to_string(), &v, &ask, &svc.resume_tools(&run));
    }
    Ok(0)
}

/// The human rendering of the view (the same locally and with
/// `--server`). `tools`: the manifests a printed resume or fork carries
/// Whether a shown fact holds a hole's marker (docs/custody.md "Holes").
fn has_hole(v: &Json) -> bool {
    match v {
        Json::Object(m) => {
            flow_store::merkle::as_hole_marker(m).is_some() || m.values().any(has_hole)
        }
        Json::Array(a) => a.iter().any(has_hole),
        _ => false,
    }
}

/// ([`super::print::tools_flags`]; none with `--server`).
pub(super) fn render(g: &Global, run: &str, v: &Json, ask: &Ask, tools: &[String]) {
    let state = v["state"].as_str().unwrap_or("");
    let total = v["page"]["factsTotal"].as_u64().unwrap_or(0);
    let verdict = match (&v["verdict"]["reason"], &v["verdict"]["fact"]) {
        (Json::String(r), Json::Number(n)) if r == "hole" => {
            format!("incomplete (fact {n} holds a redacted value)")
        }
        _ => v["verdict"]["verdict"].as_str().unwrap_or("").to_string(),
    };
    out!(
        "{run}  {state}  ({})  {total} facts  entry {}  replay {verdict}",
        v["record"].as_str().unwrap_or(""),
        v["entry"]["module"].as_str().unwrap_or("")
    );
    let timeline = &v["timeline"];
    if let Some(total) = timeline["durationMs"].as_i64() {
        out!("took {}", duration(total));
    }
    let pending = match &v["pending"] {
        Json::Array(calls) => calls.clone(),
        _ => {
            out!("pending calls: unknown (the re-run cannot say: {verdict})");
            Vec::new()
        }
    };
    if !pending.is_empty() {
        out!("pending calls:");
        for c in &pending {
            let inner = c["run"].as_str().filter(|r| *r != run);
            out!(
                "  {}  {}  at node {} (task {}){}",
                c["call"].as_str().unwrap_or(""),
                c["tool"].as_str().unwrap_or(""),
                c["node"].as_str().unwrap_or(""),
                c["task"].as_str().unwrap_or(""),
                inner
                    .map(|r| format!("  in nested run {r}"))
                    .unwrap_or_default()
            );
        }
    }
    if ask.summary {
        // Each next command runs as printed: the same store or server, and
        // this run's own numbers and calls.
        let cmd = super::flow_cmd(g);
        let tools = super::print::tools_flags(tools);
        let next = |c: String, what: &str| out!("  {c}  # {what}");
        out!("next:");
        next(
            format!("{cmd} history {run} --kind Call"),
            "the calls and their ids",
        );
        if total > 0 {
            next(
                format!("{cmd} history {run} --fact {total}"),
                "the last fact in full",
            );
        }
        next(format!("{cmd} replay {run}"), "the replay verdict");
        let rounds = v["rounds"].as_array().map_or(&[][..], |r| r);
        match (
            pending.first(),
            rounds.iter().rev().find(|r| r["task"] == "root"),
        ) {
            (Some(c), _) => {
                let reply = match &c["exampleReply"] {
                    Json::Null => "-".to_string(),
                    e => super::shell_quote(&flow_abi::json::canonical(e)),
                };
                next(
                    format!(
                        "{cmd} resume {} --call {}{tools} --reply {reply}",
                        c["run"].as_str().unwrap_or(run),
                        super::shell_quote(c["call"].as_str().unwrap_or(""))
                    ),
                    "answer the first pending call",
                );
            }
            (None, Some(r)) => next(
                format!("{cmd} fork {run} --checkpoint {}{tools}", r["fact"]),
                "a new run from the last round",
            ),
            (None, None) => {}
        }
        return;
    }
    out!("tools:");
    for t in v["tools"].as_array().into_iter().flatten() {
        out!(
            "  {}  {}",
            t["tool"].as_str().unwrap_or(""),
            t["fingerprint"].as_str().unwrap_or("-")
        );
    }
    out!("rounds (fork with --checkpoint FACT):");
    for r in v["rounds"].as_array().into_iter().flatten() {
        out!(
            "  fact {:>4}  task {}  at {}  {}",
            r["fact"].as_u64().unwrap_or(0),
            r["task"].as_str().unwrap_or(""),
            r["node"].as_str().unwrap_or(""),
            flow_abi::json::canonical(&r["state"])
        );
    }
    calls(timeline);
    out!("facts:");
    let facts = v["facts"].as_array().cloned().unwrap_or_default();
    for f in &facts {
        out!(
            "{:>5}  {:<10}  {}{}",
            f["n"].as_u64().unwrap_or(0),
            f["kind"].as_str().unwrap_or(""),
            f["text"].as_str().unwrap_or(""),
            if has_hole(&f["fact"]) {
                "  [redacted]"
            } else {
                ""
            }
        );
    }
    let shown = facts.len() as u64;
    let hidden = total.saturating_sub(shown);
    let mut footer = format!("{shown} of {total} facts shown");
    if hidden > 0 {
        footer.push_str(&format!("; the selection hides {hidden}"));
    }
    if let Some(next) = v["page"]["nextOffset"].as_u64() {
        footer.push_str(&format!(" (more: --offset {next})"));
    }
    out!("{footer}");
}

/// Each call with its route, outcome and duration, and the end of a
/// crashed Tool's stderr (issue 38 §3, §4). A call with no recorded times
/// (a run from before timings, an imported archive) shows `-`, never a
/// guess.
fn calls(timeline: &Json) {
    let calls = timeline["calls"].as_array().map_or(&[][..], |c| c);
    if calls.is_empty() {
        return;
    }
    out!("calls:");
    for c in calls {
        let text = |k: &str| c[k].as_str().unwrap_or("-").to_string();
        let took = match c["durationMs"].as_i64() {
            Some(ms) => duration(ms),
            None if c["sentMs"].is_i64() && c["outcome"].is_null() => "out".to_string(),
            None => "-".to_string(),
        };
        let attempt = match c["attempt"].as_u64() {
            Some(a) if a > 1 => format!("  attempt {a}"),
            _ => String::new(),
        };
        let via = match c["via"].as_str() {
            Some(v) => format!(" via {v}"),
            None => String::new(),
        };
        // A worker's call names the worker that answered it.
        let route = match c["worker"].as_str() {
            Some(w) => format!("{} {w}", text("route")),
            None => text("route"),
        };
        out!(
            "  fact {:>4}  {}  {}  at node {}  {}  {}{via}  {took}{attempt}",
            c["fact"].as_u64().unwrap_or(0),
            text("call"),
            text("tool"),
            text("node"),
            route,
            text("outcome"),
        );
        if let Some(reason) = c["reason"].as_str() {
            out!("        reason: {reason}");
        }
        if let Some(stderr) = c["stderr"].as_str() {
            out!("        the end of its stderr:");
            for line in stderr.lines() {
                out!("          {line}");
            }
        }
    }
}

/// `flow --server URL history RUN`: the server's inspection view
/// (`GET /v1/runs/{run}/inspect`), printed as the local command prints
/// its own.
pub(super) async fn remote(g: &Global, c: &Client, ask: Ask) -> Result<u8> {
    if ask.source.is_some() {
        return Err(Error::Refused(
            "flow history --source reads the store itself: run it without --server where the store is, or read GET /v1/runs/RUN/sources/MODULE"
                .into(),
        ));
    }
    if let Some(n) = ask.fact {
        return one_fact(c, &ask.run, n).await;
    }
    let q = InspectQuery {
        kind: ask.kind.clone(),
        search: ask.search.clone(),
        offset: Some(ask.offset),
        limit: Some(ask.limit.min(200)),
    };
    let v = c.inspect_run(&ask.run, &q).await?;
    if g.json {
        out!("{v}");
    } else {
        render(g, v["run"].as_str().unwrap_or(&ask.run), &v, &ask, &[]);
    }
    Ok(0)
}

/// `flow --server URL history RUN --fact N`: the fact whole, a Checkpoint
/// with its state instead of its delta, as the local command prints it.
async fn one_fact(c: &Client, run: &str, n: u64) -> Result<u8> {
    let q = FactsQuery {
        fact: Some(n),
        ..FactsQuery::default()
    };
    let page = c.list_facts(run, &q).await?;
    let Some(f) = page.facts.into_iter().next() else {
        return Err(Error::NotFound(format!("{run} has no fact {n}")));
    };
    let mut fact = f.fact;
    if f.kind == FactKind::Checkpoint
        && let Json::Object(m) = &mut fact
    {
        let cp = c.get_checkpoint(run, n).await?;
        m.remove("delta");
        m.insert("state".into(), cp.state);
    }
    out!("{}", flow_abi::json::canonical(&fact));
    if f.values_omitted {
        eprintln!("(values over 4 KiB are shown by hash: GET /v1/blobs/HASH reads one)");
    }
    Ok(0)
}
