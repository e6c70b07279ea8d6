//! The `flow` command line (DESIGN §6). Every command computes structured
//! data; the human text is a rendering of it, `--json` prints the data.

use crate::error::{Error, Result};
use crate::service::bind::Bindings;
use crate::service::store::StoreRef;
use crate::service::{Accepted, ForkAt, Progress, RunResult, RunService, ServiceOptions};
use crate::source::Sources;
use flow_engine::replay::Verdict;
use flow_store::{DiscoveryQuery, ProblemStatus, RunId, RunState, SqliteOptions, SqliteStore};
use serde_json::{Value as Json, json};
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::sync::Arc;

/// `println!` to standard output, ending quietly when the reader has gone
/// (`flow history RUN | head`): see [`out_text`].
macro_rules! out {
    ($($t:tt)*) => {
        $crate::cli::out_text(&format!("{}\n", format_args!($($t)*)))
    };
}

/// Writes `text` to standard output. A reader that closed the pipe ends
/// the command quietly with exit 0, as it asked for no more; `println!`
/// would panic. Any other write failure is said on stderr (exit 2).
pub(crate) fn out_text(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("flow: cannot write standard output: {e}");
            std::process::exit(2);
        }
    }
}

mod args;
mod delete;
mod diff;
mod gate;
mod history;
mod print;
mod query;
mod recover;
mod recoveries;
mod remote;
mod watch;

pub(crate) use print::{
    RunLine, RunsMore, flow_cmd, print_check, print_import, print_resume_line, print_runs,
    shell_quote,
};

pub use args::{Cli, Color, Command, Global};
pub use query::RunsFilter;

/// A multi-thread runtime whose workers are named `name`: one worker per
/// core, and never fewer than two (a step whose commit finds the store's
/// writer idle commits on its worker, one fsync, see `service::drive`; the
/// other worker keeps serving meanwhile).
pub(crate) fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(workers)
        .thread_name(name)
        .build()
}

/// Runs the CLI; returns the process exit code.
pub fn main_with(cli: Cli) -> u8 {
    let rt = match runtime("tokio-rt-worker") {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flow: cannot start the runtime: {e}");
            return 2;
        }
    };
    let json = cli.global.json;
    let g = cli.global.clone();
    let r = rt.block_on(dispatch(cli)).map_err(|e| located(&g, e));
    // Background work (a blocked read of standard input, say) must not
    // keep the process after the command is done.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match r {
        Ok(code) => code,
        Err(e) => {
            if json {
                // A refusal that has diagnostics carries them structured,
                // beside the text (issue 11, item 6).
                let mut v = json!({"error": e.to_string(), "exit": e.exit_code()});
                if let Some(ds) = e.diagnostics() {
                    v["diagnostics"] = Json::Array(ds);
                }
                out!("{v}");
            } else {
                eprintln!("flow: {e}");
            }
            e.exit_code()
        }
    }
}

/// The run service for one command: Tools bound from the program's
/// flow.toml after approval, living as long as this process's drive; with
/// a live progress line on stderr when stderr is a terminal and the output
/// is not JSON.
fn service(g: &Global, store: StoreRef, allow: bool) -> RunService {
    service_with(g, store, allow, Vec::new())
}

/// [`service`], with `--tools` manifests binding declarations before (and
/// without the approval of) the program's own flow.toml.
fn service_with(
    g: &Global,
    store: StoreRef,
    allow: bool,
    manifests: Vec<flow_tools::manifest::Manifest>,
) -> RunService {
    let progress: Option<Progress> = (!g.json && std::io::stderr().is_terminal()).then(|| {
        Arc::new(|run: &RunId, facts: u64, out: usize| {
            eprint!("\r\x1b[2K{run}: {facts} facts, {out} calls out");
        }) as Progress
    });
    RunService::new(
        store,
        ServiceOptions {
            bindings: Bindings::local(allow, manifests),
            progress,
            max_steps: None,
            lease: None,
            drives: None,
            otlp: None,
        },
        tokio_util::sync::CancellationToken::new(),
    )
}

/// Waits for an accepted run until it ends or pauses, or the user
/// interrupts (Ctrl-C): then the run is halted — a `halt` host record, no
/// End (running-a-program.txt: "Halted is the host ending a run ... The
/// host records that it halted the run; history does not") — and exit 130
/// is reported (DESIGN §6). In-flight calls are settled when the run is
/// resumed.
async fn finish(g: &Global, service: &RunService, accepted: Accepted, allow: bool) -> Result<u8> {
    let run = accepted.run.clone();
    let r = tokio::select! {
        r = accepted.finished() => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let code = match r {
        Some(r) => {
            clear_progress(g);
            r.and_then(|r| show_result(g, service, &r, allow))
        }
        None => {
            // The first interrupt waits for the calls out (their Replies
            // recorded, nothing new sent); a second halts at once.
            clear_progress(g);
            if !g.json {
                eprintln!("halting {run} once its calls out finish; Ctrl-C again to halt now");
            }
            let reason = flow_store::Halt {
                reason: Some("interrupt".into()),
                ..flow_store::Halt::default()
            };
            tokio::select! {
                _ = service.halt(&run, false, reason.clone()) => {}
                _ = tokio::signal::ctrl_c() => {
                    let _ = service.halt(&run, true, reason).await;
                }
            }
            halted(g, &run, &service.resume_tools(&run))
        }
    };
    service.shutdown(std::time::Duration::from_secs(5)).await;
    code
}

/// The resume command for a pending human call, runnable as printed: the
/// same `--data` (when it is not the default) and `--allow`, and a reply
/// that fits the call's type; when none can be built, `--reply -` with the
/// schema the reply must fit.
fn print_resume(
    g: &Global,
    service: &RunService,
    run: &RunId,
    c: &flow_engine::machine::OpenCall,
    allow: bool,
) {
    let example = service.example_reply(run, c);
    let tools = service.resume_tools(run);
    print_resume_line(
        g,
        run.as_str(),
        &c.call,
        &c.args["schema"],
        example,
        allow,
        &tools,
    );
}

/// Reports a halted run: exit 130 (DESIGN §6). `tools`: the manifests
/// the printed resume carries ([`print::tools_flags`]).
pub(crate) fn halted(g: &Global, run: &RunId, tools: &[String]) -> Result<u8> {
    if g.json {
        out!("{}", json!({"run": run.as_str(), "state": "halted"}));
    } else {
        eprintln!(
            "{run} halted; continue it with: {} resume {run}{}",
            flow_cmd(g),
            print::tools_flags(tools)
        );
    }
    Ok(130)
}

/// Clears the progress line before the result is printed.
fn clear_progress(g: &Global) {
    if !g.json && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// A run that is not there, said with the store it was looked for in:
/// the `--data` directory (and that no store is there, when none is) or
/// the `--server` URL (issue 41 §8).
fn located(g: &Global, e: Error) -> Error {
    match e {
        Error::NotFound(m) if m.starts_with("no run ") => {
            let at = match &g.server {
                Some(url) => format!("on the server at {url}"),
                None if !g.data.join("flow.db").exists() => format!(
                    "in the store at {} (--data): there is no store there; nothing has run with that --data",
                    g.data.display()
                ),
                None => format!("in the store at {} (--data)", g.data.display()),
            };
            Error::NotFound(format!("{m} {at}"))
        }
        e => e,
    }
}

/// The store under `--data` for a command about `run`, which must be in
/// it: when no store is there, "no run" — the directory is not created
/// (a read leaves nothing behind).
fn open_existing(g: &Global, run: &RunId) -> Result<StoreRef> {
    if !g.data.join("flow.db").exists() {
        return Err(Error::NotFound(format!("no run {run}")));
    }
    open_store(g)
}

/// The embedded store under `--data` (the binary's wiring: the one place
/// the CLI names a backend).
fn open_store(g: &Global) -> Result<StoreRef> {
    std::fs::create_dir_all(&g.data)
        .map_err(|e| Error::Refused(format!("{}: {e}", g.data.display())))?;
    Ok(Arc::new(SqliteStore::open(
        g.data.join("flow.db"),
        SqliteOptions::default(),
    )?))
}

/// `flow serve --postgres`: the store in `schema` of the database at
/// `url` (connected and migrated off the runtime).
fn open_postgres(url: &str, schema: &str) -> Result<StoreRef> {
    let opts = flow_store::PostgresOptions {
        url: url.to_string(),
        schema: schema.to_string(),
    };
    Ok(Arc::new(flow_store::PostgresStore::open(opts)?))
}

/// The `--tools` manifests of a resume or fork.
fn read_manifests(paths: &[std::path::PathBuf]) -> Result<Vec<flow_tools::manifest::Manifest>> {
    paths
        .iter()
        .map(|p| flow_tools::manifest::Manifest::read(p).map_err(|e| Error::Refused(e.to_string())))
        .collect()
}

fn run_id(s: &str) -> Result<RunId> {
    RunId::parse(s).map_err(|e| Error::Refused(e.to_string()))
}

fn read_arg(v: &str) -> Result<String> {
    if v == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Error::Refused(format!("standard input: {e}")))?;
        Ok(s)
    } else {
        Ok(v.to_string())
    }
}

async fn dispatch(cli: Cli) -> Result<u8> {
    let g = cli.global.clone();
    // With --server, what has an HTTP equivalent goes there; what needs no
    // store (tools, test, serve, mcp, a --runs directory) runs here, and a
    // worker serves the server it names.
    let local = matches!(
        cli.command,
        Command::Tools { .. }
            | Command::Test { .. }
            | Command::Serve(_)
            | Command::Mcp(_)
            | Command::Worker(_)
            | Command::Runs { runs: Some(_), .. }
    );
    if let (Some(server), false) = (g.server.clone(), local) {
        return remote::run(&g, &server, cli.command).await;
    }
    match cli.command {
        Command::Check { flow } => check(&g, &flow),
        Command::Gate(a) => gate::local(&g, a).await,
        Command::Recover(a) => recover::local(&g, a).await,
        Command::Recoveries(a) => recoveries::local(&g, a).await,
        Command::Diff(d) => diff::local(&g, d).await,
        Command::Tools { flow, entry } => tools(&flow, entry.as_deref()),
        Command::Run { flow, input, allow } => {
            let sources = Sources::read(&flow)?;
            let input = read_arg(&input)?;
            let service = service(&g, open_store(&g)?, allow);
            let accepted = service.start(sources, &input).await?;
            finish(&g, &service, accepted, allow).await
        }
        Command::Resume {
            run,
            call,
            reply,
            open,
            allow,
            tools,
        } => {
            let run = run_id(&run)?;
            let reply = match (call, reply) {
                (Some(c), Some(r)) => Some(crate::service::Reply::parse(c, &read_arg(&r)?)?),
                _ => None,
            };
            let manifests = read_manifests(&tools)?;
            let service = service_with(&g, open_existing(&g, &run)?, allow, manifests);
            let accepted = match reply {
                Some(reply) => service.resume(&run, Some(reply)).await?,
                None => service.continue_run(&run, open).await?,
            };
            finish(&g, &service, accepted, allow).await
        }
        Command::Delete { runs, yes, force } => {
            delete::local(&g, delete::Ask { runs, yes, force }).await
        }
        Command::Halt { .. } => Err(Error::Refused(
            "flow halt stops a run a server drives: pass --server URL; a run `flow run` drives here is halted by interrupting it (Ctrl-C)".into(),
        )),
        Command::Fork {
            run,
            checkpoint,
            call,
            reply,
            set,
            flow,
            allow,
            tools,
        } => {
            let at = ForkAt::new(checkpoint, call, reply)?;
            let run = run_id(&run)?;
            let mut sets = Vec::new();
            for s in &set {
                let (k, v) = s
                    .split_once('=')
                    .ok_or_else(|| Error::Refused(format!("--set {s}: expected field=JSON")))?;
                sets.push((k.to_string(), v.to_string()));
            }
            let onto = flow.as_deref().map(Sources::read).transpose()?;
            let service = service_with(&g, open_existing(&g, &run)?, allow, read_manifests(&tools)?);
            let (accepted, _) = service.fork(&run, at, &sets, onto).await?;
            finish(&g, &service, accepted, allow).await
        }
        Command::Replay { run } => {
            let run = run_id(&run)?;
            let service = service(&g, open_existing(&g, &run)?, false);
            let verdict = match service.replay(&run).await {
                Ok(v) => v,
                Err(e @ (Error::Unreadable(_) | Error::Check(_))) => {
                    return Err(Error::Unreadable(e.to_string()));
                }
                Err(e) => return Err(e),
            };
            if g.json {
                let v = match &verdict {
                    Verdict::Diverged { fact, reason } => {
                        json!({"run": run.as_str(), "verdict": "diverged", "fact": fact, "reason": reason})
                    }
                    v => json!({"run": run.as_str(), "verdict": v.to_string()}),
                };
                out!("{v}");
            } else {
                out!("{verdict}");
            }
            Ok(if verdict == Verdict::Matched { 0 } else { 1 })
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
            let ask = history::Ask {
                run,
                kind,
                search,
                fact,
                summary,
                source,
                offset,
                limit,
            };
            history::history(&g, ask).await
        }
        Command::Watch { run, after } => watch::watch(&g, &run, after).await,
        Command::Runs {
            limit,
            after,
            state,
            runs: None,
            filter,
        } => {
            let q = query::query(limit, after, state.as_deref(), &filter)?;
            // No store yet: no runs, and none is created (a read leaves
            // nothing behind).
            let v = if g.data.join("flow.db").exists() {
                let store = open_store(&g)?;
                query::local(&*store, &q, filter.counts)?
            } else {
                json!({"runs": [], "nextAfter": null, "nextBefore": null, "problems": [], "scanned": 0, "counts": null})
            };
            if g.json {
                out!("{v}");
            } else {
                query::print(&g, &v, limit, state.as_deref(), &filter);
            }
            Ok(0)
        }
        Command::Runs {
            limit,
            after,
            state,
            runs: Some(dir),
            filter,
        } => {
            if filter != RunsFilter::default() {
                return Err(Error::Refused(
                    "--runs discovers archives by id and state only: leave out the run query's filters, or import the archives and query the store".into(),
                ));
            }
            let state = match state.as_deref() {
                None => None,
                Some(s) => Some(
                    RunState::parse(s)
                        .ok_or_else(|| Error::Refused(format!("unknown state {s:?}")))?,
                ),
            };
            let q = DiscoveryQuery {
                limit,
                after,
                state,
            };
            let page = flow_store::inspect_archives(&dir, &q)?;
            let v = serde_json::to_value(&page).unwrap_or(Json::Null);
            if g.json {
                out!("{v}");
            } else {
                let rows = page.runs.iter().zip(v["runs"].as_array().into_iter().flatten()).map(
                    |(row, r)| RunLine {
                        run: row.run.to_string(),
                        state: row.state().map_or("-", RunState::as_str).to_string(),
                        record: r["record"].as_str().unwrap_or("").to_string(),
                        module: r["entry"]["module"].as_str().unwrap_or("").to_string(),
                    },
                );
                let more = RunsMore {
                    next: v["nextAfter"].as_str(),
                    state: state.map(RunState::as_str),
                    limit,
                    runs: Some(&dir),
                };
                print_runs(&g, rows, v["problems"].as_array().map_or(&[][..], |p| p), more);
            }
            // DISC-25: "The CLI exits 0 for an inspected page or missing
            // root and 2 for another root problem."
            let root_problem = page
                .problems
                .iter()
                .any(|p| p.component == "root" && p.status != ProblemStatus::NotCreated);
            Ok(if root_problem { 2 } else { 0 })
        }
        Command::Export { run, out } => {
            let run = run_id(&run)?;
            let store = open_existing(&g, &run)?;
            let s = flow_store::export_run(&*store, &run, &out)?;
            let v = json!({"run": run.as_str(), "out": out.display().to_string(), "facts": s.facts, "blobs": s.blobs});
            if g.json {
                out!("{v}");
            } else {
                out!(
                    "exported {run} to {} ({} facts, {} blobs)",
                    out.display(),
                    s.facts,
                    s.blobs
                );
            }
            Ok(0)
        }
        Command::Serve(args) => {
            let store = match &args.postgres {
                Some(url) => open_postgres(url, &args.postgres_schema)?,
                None => open_store(&g)?,
            };
            crate::http::cli::serve(store, args).await
        }
        Command::Mcp(args) => crate::mcp::stdio::serve(open_store(&g)?, args).await,
        Command::Worker(args) => crate::worker::run(g.server.clone(), g.token.clone(), args).await,
        Command::Test { dir } => {
            let results = crate::testing::run_dir(&dir)?;
            let failed = results.iter().filter(|r| r.failure.is_some()).count();
            let broken = results.iter().any(|r| r.broken);
            if g.json {
                let rows: Vec<Json> = results
                    .iter()
                    .map(|r| json!({"test": r.name, "passed": r.failure.is_none(), "failure": r.failure, "broken": r.broken}))
                    .collect();
                out!(
                    "{}",
                    json!({"tests": rows, "passed": results.len() - failed, "failed": failed})
                );
            } else {
                for r in &results {
                    match &r.failure {
                        None => out!("ok    {}", r.name),
                        Some(why) => out!("FAIL  {}: {why}", r.name),
                    }
                }
                out!(
                    "flow test: {} passed, {failed} failed",
                    results.len() - failed
                );
            }
            Ok(if broken {
                2
            } else if failed > 0 {
                1
            } else {
                0
            })
        }
        Command::Import { dir } => {
            // Opened (a tar unpacked) before the store: a path that is not
            // an archive changes nothing.
            let source = crate::tarball::ImportSource::open(&dir)
                .map_err(|e| Error::Refused(e.to_string()))?;
            let store = open_store(&g)?;
            let unpacked = source.dir();
            let refused = |e: flow_store::Error| match Error::from(e) {
                // A refusal names the private directory: name the file.
                Error::Refused(m) => Error::Refused(
                    m.replace(&unpacked.display().to_string(), &dir.display().to_string()),
                ),
                e => e,
            };
            let archive = flow_store::read_archive(&unpacked).map_err(refused)?;
            let torn = archive.torn().cloned();
            let o = flow_store::ImportRuns::import_verified(&*store, archive).map_err(refused)?;
            let (run, fresh) = match &o {
                flow_store::ImportOutcome::Imported { run, .. } => (run.clone(), true),
                flow_store::ImportOutcome::AlreadyPresent { run } => (run.clone(), false),
            };
            let torn = torn.as_ref().map(|t| (t.fact, t.reason.as_str()));
            print_import(&g, run.as_str(), fresh, torn);
            Ok(0)
        }
    }
}

fn check(g: &Global, flow: &Path) -> Result<u8> {
    let sources = Sources::read(flow)?;
    let (all, errors) = sources.diagnostics();
    if g.json {
        out!("{}", json!({"diagnostics": all, "errors": errors}));
    } else {
        print_check(g, flow, &all, errors);
    }
    Ok(if errors == 0 { 0 } else { 2 })
}

fn tools(flow: &Path, entry: Option<&str>) -> Result<u8> {
    if let Some(e) = entry
        && e != flow_engine::program::ENTRY
    {
        return Err(Error::Refused(format!(
            "a FlowSpec program has one entry, {}, not {e}",
            flow_engine::program::ENTRY
        )));
    }
    let sources = Sources::read(flow)?;
    // CLI-21, CLI-25: the document is printed whether or not the program
    // checks; a program that does not check has its diagnostics in
    // `programs[].diagnostics`, and the exit code is 2.
    let (doc, checks) = sources.tools_document();
    out!("{}", flow_abi::json::canonical(&doc));
    if checks {
        return Ok(0);
    }
    eprintln!(
        "flow: {} does not check: its diagnostics are in programs[].diagnostics (`flow check {}` lists them)",
        flow.display(),
        shell_quote(&flow.to_string_lossy())
    );
    Ok(2)
}

fn show_result(g: &Global, service: &RunService, r: &RunResult, allow: bool) -> Result<u8> {
    if g.json {
        out!("{}", r.to_json());
        return Ok(r.exit_code());
    }
    match r {
        RunResult::Completed { output, exit, run } => {
            out!("{}", flow_abi::json::canonical(output));
            if exit != "success" {
                eprintln!("{run} completed with exit code {exit}");
            }
        }
        RunResult::Faulted { run, why } => {
            eprintln!("{run} faulted: {why}");
            if let Ok(t) = service.timeline(run) {
                print_fault(t.fault.as_ref());
            }
        }
        RunResult::Paused { run, open } => {
            out!("{run} paused; pending calls:");
            for p in open {
                let c = &p.open;
                let inner = if p.run == *run {
                    String::new()
                } else {
                    format!("  in nested run {}", p.run)
                };
                out!("  {}  {}  at node {}{inner}", c.call, c.tool, c.node);
                if c.tool == crate::host::HUMAN {
                    print_resume(g, service, &p.run, c, allow);
                }
            }
        }
    }
    Ok(r.exit_code())
}

/// Where a faulted run failed (issue 38 §4), from its timeline's `fault`:
/// the failing call's node, call id, Tool, outcome and reason, and the end
/// of its Tool's stderr when the process ended before answering. The same
/// locally and with `--server`.
pub(crate) fn print_fault(fault: Option<&crate::service::timeline::Fault>) {
    let Some(c) = fault.and_then(|f| f.call.as_ref()) else {
        return;
    };
    let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    eprintln!(
        "  failed at node {}: call {} to {} answered {}{}",
        c.node,
        c.call,
        c.tool,
        text(&c.outcome),
        c.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    if let Some(stderr) = &c.stderr {
        eprintln!("  the end of its stderr:");
        for line in stderr.lines() {
            eprintln!("    {line}");
        }
    }
}
