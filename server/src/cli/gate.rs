//! `flow gate CANDIDATE.json [run filters]`: the replay gate (issue 39,
//! item 1; `service/gate.rs`), on the store under `--data` or, with
//! `--server`, through `POST /v1/gate`. Both print the same report: one
//! line per group of runs with a verdict and reason (with an example run),
//! then the totals. Exit 0 when no run diverged, 1 when one did, 2 when
//! the candidate is refused (it does not check: its diagnostics are
//! printed).

use super::query::{self, RunsFilter};
use super::{Global, open_store, shell_quote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::gate::{GateLine, GateRequest};
use crate::service::gate::{GateReport, GateVerdict};
use crate::source::Sources;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// `flow gate`'s arguments.
#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// The candidate program: a FlowSpec document. Its flow id selects the
    /// runs (only runs of that flow are replayed).
    pub candidate: PathBuf,
    /// A directory to read the candidate's other modules (its subgraphs'
    /// `flow_ref` files) from, besides the candidate's own directory.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Only runs in these states (running, paused, completed, faulted,
    /// halted; several separated by commas).
    #[arg(long)]
    pub state: Option<String>,
    #[command(flatten)]
    pub filter: RunsFilter,
}

/// The candidate's sources: the document and the FlowSpec files beside it,
/// and those of `--modules` the program names that are not beside it.
pub(super) fn candidate(path: &Path, modules: Option<&Path>) -> Result<Sources> {
    let mut s = Sources::read(path)?;
    let Some(dir) = modules else {
        return Ok(s);
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::Refused(format!("--modules {}: {e}", dir.display())))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .collect();
    names.sort();
    for name in names {
        if s.texts.contains_key(&name) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(dir.join(&name)) else {
            continue;
        };
        let is_flow = flow_abi::json::parse(&text)
            .ok()
            .is_some_and(|v| v.get("spec_version").is_some() && v.get("nodes").is_some());
        if is_flow {
            s.texts.insert(name, text);
        }
    }
    // Keep only what the program reaches (when it checks; else the check
    // reports what is missing).
    if let Ok(p) = s.program() {
        s.texts.retain(|m, _| p.modules.contains_key(m));
    }
    Ok(s)
}

/// The run query of a gate: the run query's filters; paging and counts
/// are not the gate's (it takes every run the filters select).
fn selection(a: &GateArgs) -> Result<flow_store::RunListQuery> {
    if a.filter.newest || a.filter.before.is_some() || a.filter.counts {
        return Err(Error::Refused(
            "flow gate replays every run the filters select: leave out --newest, --before and --counts".into(),
        ));
    }
    query::query(None, None, a.state.as_deref(), &a.filter)
}

/// `flow gate` on the store under `--data`.
pub(super) async fn local(g: &Global, a: GateArgs) -> Result<u8> {
    let sources = candidate(&a.candidate, a.modules.as_deref())?;
    let q = selection(&a)?;
    // Refused before any store is opened when it does not check.
    sources.program()?;
    if !g.data.join("flow.db").exists() {
        return Err(Error::NotFound(format!(
            "no store at {} (--data): nothing has run there to gate; give the --data of the runs, or --server",
            g.data.display()
        )));
    }
    let service = super::service(g, open_store(g)?, false);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shown = progress(g);
    let counting = tokio::spawn(async move {
        let mut done = 0u64;
        while rx.recv().await.is_some() {
            done += 1;
            shown(done);
        }
    });
    let report = service.gate(sources, q, Some(tx)).await;
    let _ = counting.await;
    super::clear_progress(g);
    let report = report?;
    print(g, &report);
    Ok(report.exit_code())
}

/// A progress line on stderr when it is a terminal and the output is not
/// JSON: how many runs have been replayed.
fn progress(g: &Global) -> impl Fn(u64) + Send + 'static {
    let show = !g.json && std::io::stderr().is_terminal();
    move |done| {
        if show {
            eprint!("\r\x1b[2K{done} runs replayed");
        }
    }
}

/// `flow --server URL gate`: `POST /v1/gate` with the same filters, read
/// as its NDJSON stream (a line per run, then the report), so a gate
/// longer than the server's request timeout still answers, with progress.
pub(super) async fn remote(g: &Global, c: &Client, a: GateArgs) -> Result<u8> {
    let sources = candidate(&a.candidate, a.modules.as_deref())?;
    selection(&a)?;
    let q = query::runs_query(None, None, a.state.as_deref(), &a.filter)?;
    let (flow, modules) = super::remote::documents(&sources);
    let request = GateRequest {
        flow,
        modules,
        name: Some(sources.root.clone()),
    };
    let mut lines = c.gate_runs(&request, &q).await?;
    let shown = progress(g);
    let (mut done, mut report) = (0u64, None);
    while let Some(line) = lines.next().await? {
        match line {
            GateLine::Run(_) => {
                done += 1;
                shown(done);
            }
            GateLine::Report(r) => report = Some(r),
            GateLine::Error(detail) => {
                super::clear_progress(g);
                return Err(Error::Store(std::sync::Arc::new(
                    flow_store::Error::CommitFailed(detail),
                )));
            }
        }
    }
    super::clear_progress(g);
    let report = report.ok_or_else(|| {
        Error::Refused(
            "the server's gate answer does not read: the stream ended before the report".into(),
        )
    })?;
    print(g, &report);
    Ok(report.exit_code())
}

/// The report: `--json` as it is; else one line per group, then the
/// totals and the verdict.
fn print(g: &Global, r: &GateReport) {
    if g.json {
        out!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    for grp in &r.groups {
        let what = match (grp.verdict, grp.fact, &grp.reason) {
            (GateVerdict::Diverged, Some(n), Some(why)) => format!("diverged at fact {n}: {why}"),
            (GateVerdict::Diverged, _, _) => "diverged".to_string(),
            (GateVerdict::Incomplete, _, _) => {
                "incomplete (every recorded fact matched; the record ends first)".to_string()
            }
            (GateVerdict::Matched, _, _) => "matched".to_string(),
        };
        let runs = if grp.runs == 1 { "run" } else { "runs" };
        out!("{:>6} {runs:<4}  {what}", grp.runs);
        if grp.verdict == GateVerdict::Diverged {
            let at = grp.fact.map(|n| format!(" --fact {n}")).unwrap_or_default();
            out!(
                "             e.g. {}  (its fact: {} history {}{at})",
                grp.example,
                super::flow_cmd(g),
                shell_quote(&grp.example)
            );
        }
    }
    out!(
        "flow {}: {} {} replayed against the candidate ({} facts): {} matched, {} incomplete, {} diverged",
        r.flow,
        r.runs,
        if r.runs == 1 { "run" } else { "runs" },
        r.facts,
        r.matched,
        r.incomplete,
        r.diverged
    );
    out!(
        "{}",
        if r.passed {
            "gate passed: no stored run diverges under the candidate"
        } else {
            "gate FAILED: stored runs diverge under the candidate"
        }
    );
}
