//! `flow recover --flow FIXED.json [run filters] [--dry-run]`: bulk
//! recovery (issue 39, item 2; `service/recover.rs`), on the store under
//! `--data` (the forks are driven here, and waited for) or, with
//! `--server`, through `POST /v1/recover`. A line per run on stderr as it
//! is done; the report on stdout. Exit 0 when every selected run is
//! recovered (or would be, dry), already recovered or needs no recovery;
//! 1 when one cannot be recovered; 2 refused (FIXED does not check: its
//! diagnostics are printed; a bad filter).

use super::query::{self, RunsFilter};
use super::{Global, open_store, shell_quote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::recover::{RecoverLine, RecoverRequest};
use crate::service::recover::{RATE, RecoverOptions, RecoverOutcome, RecoverReport, RecoverRun};
use crate::source::Sources;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// `flow recover`'s arguments. `--flow` (the run query's flow filter
/// elsewhere) names the FIXED program's file here: its flow id selects
/// the runs.
#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// A directory to read FIXED's other modules (its subgraphs'
    /// `flow_ref` files) from, besides FIXED's own directory.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Only runs in these states (running, paused, completed, faulted,
    /// halted; several separated by commas).
    #[arg(long)]
    pub state: Option<String>,
    /// List per run what would happen (fork point, calls made again, or
    /// why it cannot be recovered); fork nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// At most this many forks a second (0: no limit).
    #[arg(long, value_name = "N", default_value_t = RATE)]
    pub rate: f64,
    /// Start the Tool commands FIXED's flow.toml names without asking
    /// (here, without --server).
    #[arg(long)]
    pub allow: bool,
    /// flow.toml files that bind the forks' Tools (repeatable, first
    /// match wins), before FIXED's own flow.toml (here, without --server).
    #[arg(long = "tools")]
    pub tools: Vec<PathBuf>,
    #[command(flatten)]
    pub filter: RunsFilter,
}

/// FIXED's sources and the run query (the filters but `--flow`, which is
/// FIXED's file); paging and counts are refused.
fn prepare(a: &RecoverArgs) -> Result<(Sources, RunsFilter)> {
    let Some(file) = &a.filter.flow else {
        return Err(Error::Refused(
            "say which program the runs are recovered onto: --flow FIXED.json".into(),
        ));
    };
    let sources = super::gate::candidate(std::path::Path::new(file), a.modules.as_deref())?;
    let mut filter = a.filter.clone();
    filter.flow = None;
    if filter.newest || filter.before.is_some() || filter.counts {
        return Err(Error::Refused(
            "flow recover takes every run the filters select: leave out --newest, --before and --counts".into(),
        ));
    }
    if !(a.rate >= 0.0 && a.rate.is_finite()) {
        return Err(Error::Refused(format!(
            "--rate {}: give forks a second, 0 or more (0: no limit)",
            a.rate
        )));
    }
    Ok((sources, filter))
}

/// `flow recover` on the store under `--data`: the forks are driven by
/// this process, which waits for each to end or pause before it exits.
pub(super) async fn local(g: &Global, a: RecoverArgs) -> Result<u8> {
    let (sources, filter) = prepare(&a)?;
    let q = query::query(None, None, a.state.as_deref(), &filter)?;
    // Refused before any store is opened when it does not check.
    sources.program()?;
    if !g.data.join("flow.db").exists() {
        return Err(Error::NotFound(format!(
            "no store at {} (--data): nothing has run there to recover; give the --data of the runs, or --server",
            g.data.display()
        )));
    }
    let service = super::service_with(g, open_store(g)?, a.allow, super::read_manifests(&a.tools)?);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let showing = tokio::spawn(async move {
        while let Some(r) = rx.recv().await {
            eprintln!("{}", line(&r));
        }
    });
    let options = RecoverOptions {
        dry_run: a.dry_run,
        rate: a.rate,
    };
    let recovered = match service.begin_recovery(sources, q, options, "cli").await {
        Ok(recovery) => service.run_recovery(recovery, Some(tx)).await,
        Err(e) => Err(e),
    };
    let _ = showing.await;
    let (report, drives) = match recovered {
        Ok(r) => r,
        Err(e) => {
            service.shutdown(Duration::from_secs(5)).await;
            return Err(e);
        }
    };
    if !drives.is_empty() && !g.json {
        eprintln!("waiting for {} forks to end or pause", drives.len());
    }
    for d in drives {
        // A fork that faults again is the fork's own ending (flow runs
        // --fork-of shows it), not the recovery's failure.
        let _ = d.finished().await;
    }
    super::clear_progress(g);
    service.shutdown(Duration::from_secs(5)).await;
    print(g, &report);
    Ok(report.exit_code())
}

/// `flow --server URL recover`: `POST /v1/recover` with the same filters,
/// read as its NDJSON stream (a line per run, then the report).
pub(super) async fn remote(g: &Global, c: &Client, a: RecoverArgs) -> Result<u8> {
    let (sources, filter) = prepare(&a)?;
    if a.allow || !a.tools.is_empty() {
        return Err(Error::Refused(
            "--allow and --tools bind Tools here; a server binds the forks' Tools from its own --tools and approval: leave them out with --server".into(),
        ));
    }
    let q = query::runs_query(None, None, a.state.as_deref(), &filter)?;
    let (flow, modules) = super::remote::documents(&sources);
    let request = RecoverRequest {
        flow,
        modules,
        name: Some(sources.root.clone()),
        dry_run: a.dry_run,
        rate: Some(a.rate),
        runs: None,
    };
    let mut lines = c.recover_runs(&request, &q).await?;
    let mut report = None;
    while let Some(l) = lines.next().await? {
        match l {
            RecoverLine::Run(r) => eprintln!("{}", line(&r)),
            RecoverLine::Report(r) => report = Some(r),
            RecoverLine::Error(detail) => {
                return Err(Error::Store(std::sync::Arc::new(
                    flow_store::Error::CommitFailed(detail),
                )));
            }
        }
    }
    let report = report.ok_or_else(|| {
        Error::Refused(
            "the server's recovery answer does not read: the stream ended before the report".into(),
        )
    })?;
    print(g, &report);
    Ok(report.exit_code())
}

/// One run's line: what became of it.
fn line(r: &RecoverRun) -> String {
    let at = match (r.checkpoint, &r.node) {
        (Some(n), Some(node)) => format!("checkpoint {n} (node {node})"),
        (Some(n), None) => format!("checkpoint {n}"),
        _ => String::new(),
    };
    let diverged = r
        .diverged
        .map(|d| format!(", diverged at fact {d}"))
        .unwrap_or_default();
    let again = if r.again.is_empty() {
        "no call made again".to_string()
    } else {
        let calls: Vec<String> = r
            .again
            .iter()
            .map(|c| format!("{} {} (fact {})", c.call, c.tool, c.fact))
            .collect();
        format!("calls made again: {}", calls.join(", "))
    };
    let fork = r.fork.as_deref().unwrap_or("?");
    match r.outcome {
        RecoverOutcome::Recovered => {
            format!(
                "{}  recovered: fork {fork} from {at}{diverged}; {again}",
                r.run
            )
        }
        RecoverOutcome::Recoverable => {
            format!("{}  would fork from {at}{diverged}; {again}", r.run)
        }
        RecoverOutcome::NotNeeded => {
            format!("{}  not needed (replays under the fixed program)", r.run)
        }
        RecoverOutcome::AlreadyRecovered => {
            let by = r
                .recovery
                .as_deref()
                .map(|id| format!(" (by recovery {id})"))
                .unwrap_or_default();
            format!("{}  already recovered: fork {fork} from {at}{by}", r.run)
        }
        RecoverOutcome::Unrecoverable => format!(
            "{}  cannot be recovered: {}",
            r.run,
            r.why.as_deref().unwrap_or("no reason given")
        ),
    }
}

/// The report: `--json` as it is; else a line per run that needed
/// recovery, then the totals.
fn print(g: &Global, r: &RecoverReport) {
    if g.json {
        out!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    for run in r
        .results
        .iter()
        .filter(|x| x.outcome != RecoverOutcome::NotNeeded)
    {
        out!("{}", line(run));
    }
    let secs = r.elapsed_ms as f64 / 1000.0;
    out!(
        "flow {}: {} {} selected{}: {} {}, {} already recovered, {} not needed, {} cannot be recovered ({secs:.1}s)",
        r.flow,
        r.runs,
        if r.runs == 1 { "run" } else { "runs" },
        if r.dry_run {
            " (dry run: nothing forked)"
        } else {
            ""
        },
        if r.dry_run {
            r.recoverable
        } else {
            r.recovered
        },
        if r.dry_run {
            "would be recovered"
        } else {
            "recovered"
        },
        r.already_recovered,
        r.not_needed,
        r.unrecoverable
    );
    if let Some(id) = &r.recovery {
        out!(
            "recovery {id}: {} recoveries {id} lists the forks it made",
            super::flow_cmd(g)
        );
    }
    if let Some(x) = r.results.iter().find(|x| x.fork.is_some()) {
        let fork = x.fork.as_deref().unwrap_or_default();
        out!(
            "a fork's lineage: {} history {} --fact 1 (its parent and checkpoint)",
            super::flow_cmd(g),
            shell_quote(fork)
        );
    }
}
