//! The `flow` command line (DESIGN §6). Every command computes structured
//! data; the human text is a rendering of it, `--json` prints the data.

use crate::error::{Error, Result};
use crate::service::bind::Bindings;
use crate::service::store::StoreRef;
use crate::service::{Accepted, Progress, RunResult, RunService, ServiceOptions};
use crate::source::Sources;
use clap::{Args, Parser, Subcommand, ValueEnum};
use flow_engine::replay::Verdict;
use flow_store::{DiscoveryQuery, HistoryQuery, RunId, RunState, SqliteOptions, SqliteStore};
use serde_json::{Value as Json, json};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "flow",
    version,
    about = "Run, resume, replay, fork and inspect FlowSpec runs"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Where the embedded store lives.
    #[arg(long, global = true, env = "FLOW_DATA", default_value = ".flow")]
    pub data: PathBuf,
    /// Print structured JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// ANSI styling: auto styles only a terminal, with NO_COLOR unset and
    /// TERM not dumb.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a flow to completion or to a pause.
    Run {
        flow: PathBuf,
        /// The input JSON object, or - to read it from standard input.
        #[arg(long)]
        input: String,
        /// Start the Tool commands flow.toml names without asking.
        #[arg(long)]
        allow: bool,
    },
    /// Admit a reply for an open call and continue; with no reply, continue
    /// a crashed or halted run, settling its open calls.
    Resume {
        run: String,
        #[arg(long, requires = "reply")]
        call: Option<String>,
        /// The outcome, e.g. '{"Ok": {...}}', or - for standard input.
        #[arg(long, requires = "call")]
        reply: Option<String>,
        #[arg(long)]
        allow: bool,
        /// flow.toml files that bind the run's Tools (repeatable, first
        /// match wins), before the flow.toml recorded at Start. An imported
        /// run has only these: it never binds from a directory its archive
        /// names.
        #[arg(long = "tools")]
        tools: Vec<PathBuf>,
    },
    /// Replay a run against its recorded program: matched, incomplete or
    /// diverged.
    Replay { run: String },
    /// Start a new run from a checkpoint of another.
    Fork {
        run: String,
        #[arg(long)]
        checkpoint: u64,
        /// Replace a state field: field=JSON (repeatable).
        #[arg(long = "set")]
        set: Vec<String>,
        #[arg(long)]
        allow: bool,
    },
    /// Show a run's history.
    History {
        run: String,
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        search: Option<String>,
        /// Show one fact in full.
        #[arg(long)]
        fact: Option<u64>,
        #[arg(long)]
        summary: bool,
        /// Show a recorded source text (4096 code points from --offset).
        #[arg(long)]
        source: Option<String>,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long, default_value_t = 200)]
        limit: u32,
    },
    /// Discover stored runs (or, with --runs, a directory of archives).
    Runs {
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        after: Option<String>,
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        runs: Option<PathBuf>,
    },
    /// Check a flow: diagnostics.
    Check { flow: PathBuf },
    /// The `flow tools` document: every declaration, fingerprint and type.
    Tools {
        flow: PathBuf,
        #[arg(long)]
        entry: Option<String>,
    },
    /// Export a run as an archive directory.
    Export {
        run: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Import an archive directory (verified first; idempotent).
    Import { dir: PathBuf },
    /// Run every `*.test.json` fixture under DIR against its fakes and
    /// replay every saved archive against the current program.
    Test { dir: PathBuf },
    /// The HTTP server (docs/http.md).
    Serve(crate::http::cli::ServeArgs),
    /// The MCP server over standard input and output (docs/mcp.md).
    Mcp(crate::mcp::stdio::McpArgs),
}

/// Runs the CLI; returns the process exit code.
pub fn main_with(cli: Cli) -> u8 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flow: cannot start the runtime: {e}");
            return 2;
        }
    };
    let json = cli.global.json;
    let r = rt.block_on(dispatch(cli));
    // Background work (a blocked read of standard input, say) must not
    // keep the process after the command is done.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match r {
        Ok(code) => code,
        Err(e) => {
            if json {
                println!("{}", json!({"error": e.to_string(), "exit": e.exit_code()}));
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
            r.and_then(|r| show_result(g, &r, allow))
        }
        None => {
            let _ = service.halt(&run, json!({"reason": "interrupt"})).await;
            clear_progress(g);
            halted(g, &run)
        }
    };
    service.shutdown(std::time::Duration::from_secs(5)).await;
    code
}

/// Reports a halted run: exit 130 (DESIGN §6).
fn halted(g: &Global, run: &RunId) -> Result<u8> {
    if g.json {
        println!("{}", json!({"run": run.as_str(), "state": "halted"}));
    } else {
        eprintln!("{run} halted; continue it with: flow resume {run}");
    }
    Ok(130)
}

/// Clears the progress line before the result is printed.
fn clear_progress(g: &Global) {
    if !g.json && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
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
    match cli.command {
        Command::Check { flow } => check(&g, &flow),
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
            allow,
            tools,
        } => {
            let run = run_id(&run)?;
            let reply = match (call, reply) {
                (Some(c), Some(r)) => Some((c, read_arg(&r)?)),
                _ => None,
            };
            let mut manifests = Vec::new();
            for p in &tools {
                manifests.push(
                    flow_tools::manifest::Manifest::read(p)
                        .map_err(|e| Error::Refused(e.to_string()))?,
                );
            }
            let service = service_with(&g, open_store(&g)?, allow, manifests);
            let accepted = service.resume(&run, reply).await?;
            finish(&g, &service, accepted, allow).await
        }
        Command::Fork {
            run,
            checkpoint,
            set,
            allow,
        } => {
            let run = run_id(&run)?;
            let mut sets = Vec::new();
            for s in &set {
                let (k, v) = s
                    .split_once('=')
                    .ok_or_else(|| Error::Refused(format!("--set {s}: expected field=JSON")))?;
                sets.push((k.to_string(), v.to_string()));
            }
            let service = service(&g, open_store(&g)?, allow);
            let accepted = service.fork(&run, checkpoint, &sets).await?;
            finish(&g, &service, accepted, allow).await
        }
        Command::Replay { run } => {
            let run = run_id(&run)?;
            let service = service(&g, open_store(&g)?, false);
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
                println!("{v}");
            } else {
                println!("{verdict}");
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
            if let Some(module) = source {
                let run = run_id(&run)?;
                let store = open_store(&g)?;
                let page = store.source_page(&run, &module, offset)?;
                if g.json {
                    println!(
                        "{}",
                        json!({"module": page.module, "hash": page.hash, "offset": page.offset,
                            "text": page.text, "nextOffset": page.next_offset})
                    );
                } else {
                    print!("{}", page.text);
                    if let Some(next) = page.next_offset {
                        eprintln!("\n(more: flow history {run} --source {module} --offset {next})");
                    }
                }
                return Ok(0);
            }
            history(&g, &run, kind, search, fact, summary, offset, limit)
        }
        Command::Runs {
            limit,
            after,
            state,
            runs,
        } => {
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
            let page = match runs {
                Some(dir) => flow_store::inspect_archives(&dir, &q)?,
                None => {
                    let store = open_store(&g)?;
                    flow_store::Discover::discover(&*store, &q)?
                }
            };
            let v = serde_json::to_value(&page).unwrap_or(Json::Null);
            if g.json {
                println!("{v}");
            } else {
                print_runs(&v);
            }
            Ok(0)
        }
        Command::Export { run, out } => {
            let run = run_id(&run)?;
            let store = open_store(&g)?;
            let s = flow_store::export_run(&*store, &run, &out)?;
            let v = json!({"run": run.as_str(), "out": out.display().to_string(), "facts": s.facts, "blobs": s.blobs});
            if g.json {
                println!("{v}");
            } else {
                println!(
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
        Command::Test { dir } => {
            let results = crate::testing::run_dir(&dir)?;
            let failed = results.iter().filter(|r| r.failure.is_some()).count();
            let broken = results.iter().any(|r| r.broken);
            if g.json {
                let rows: Vec<Json> = results
                    .iter()
                    .map(|r| json!({"test": r.name, "passed": r.failure.is_none(), "failure": r.failure, "broken": r.broken}))
                    .collect();
                println!(
                    "{}",
                    json!({"tests": rows, "passed": results.len() - failed, "failed": failed})
                );
            } else {
                for r in &results {
                    match &r.failure {
                        None => println!("ok    {}", r.name),
                        Some(why) => println!("FAIL  {}: {why}", r.name),
                    }
                }
                println!(
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
            let store = open_store(&g)?;
            let o = flow_store::import_run(&*store, &dir)?;
            let (run, fresh) = match &o {
                flow_store::ImportOutcome::Imported { run, .. } => (run.clone(), true),
                flow_store::ImportOutcome::AlreadyPresent { run } => (run.clone(), false),
            };
            if g.json {
                println!("{}", json!({"run": run.as_str(), "imported": fresh}));
            } else if fresh {
                println!("imported {run}");
            } else {
                println!("{run} is already stored; nothing changed");
            }
            Ok(0)
        }
    }
}

/// Whether to style diagnostics on standard output (running-a-program.txt:
/// "auto styles only when the specific output destination is a terminal,
/// NO_COLOR is absent or empty, and TERM is not dumb"; `always` overrides
/// those conditions; JSON is never styled).
fn styled(g: &Global) -> bool {
    match g.color {
        Color::Always => !g.json,
        Color::Never => false,
        Color::Auto => {
            !g.json
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    }
}

/// A severity label, in red or yellow when styled.
fn label(severity: &str, style: bool) -> String {
    match (style, severity) {
        (true, "error") => format!("\x1b[1;31m{severity}\x1b[0m"),
        (true, _) => format!("\x1b[1;33m{severity}\x1b[0m"),
        (false, _) => severity.to_string(),
    }
}

fn check(g: &Global, flow: &Path) -> Result<u8> {
    let sources = Sources::read(flow)?;
    let (all, errors) = sources.diagnostics();
    if g.json {
        println!("{}", json!({"diagnostics": all, "errors": errors}));
    } else {
        let style = styled(g);
        for d in &all {
            println!(
                "{}[{}] {}#{}: {}",
                label(d["severity"].as_str().unwrap_or("error"), style),
                d["code"].as_str().unwrap_or("-"),
                d["module"].as_str().unwrap_or(""),
                d["pointer"].as_str().unwrap_or(""),
                d["message"].as_str().unwrap_or("")
            );
        }
        if errors == 0 {
            println!("{}: checks ({} warnings)", flow.display(), all.len());
        }
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
    let program = sources.program()?;
    println!("{}", flow_abi::json::canonical(&program.tools_document()));
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn history(
    g: &Global,
    run: &str,
    kind: Option<String>,
    search: Option<String>,
    fact: Option<u64>,
    summary: bool,
    offset: u64,
    limit: u32,
) -> Result<u8> {
    let run = run_id(run)?;
    let store = open_store(g)?;
    if let Some(n) = fact {
        let h = store.read_history(&run)?;
        let f = h
            .facts
            .iter()
            .find(|f| f.n == n)
            .ok_or_else(|| Error::NotFound(format!("{run} has no fact {n}")))?;
        let mut v = store.expand(&f.fact)?;
        if f.kind == flow_store::FactKind::Checkpoint
            && let Json::Object(m) = &mut v
        {
            m.remove("delta");
            m.insert("state".into(), store.checkpoint_state(&run, n)?);
        }
        println!("{}", flow_abi::json::canonical(&v));
        return Ok(0);
    }
    let q = HistoryQuery {
        kind,
        search,
        offset: Some(offset),
        limit: Some(limit.min(200)),
    };
    let page = store.history_page(&run, &q)?;
    let v = serde_json::to_value(&page).unwrap_or(Json::Null);
    if g.json {
        println!("{v}");
        return Ok(0);
    }
    let info = store.run_info(&run)?;
    println!(
        "{}  {}  {} facts  entry {}",
        run,
        info.state.as_str(),
        info.last_fact.n,
        info.entry.module
    );
    for f in v["facts"].as_array().into_iter().flatten() {
        let text = f["text"].as_str().unwrap_or("");
        if summary {
            println!("{:>5}  {}", f["n"], f["kind"].as_str().unwrap_or(""));
        } else {
            println!(
                "{:>5}  {:<10}  {}",
                f["n"],
                f["kind"].as_str().unwrap_or(""),
                text
            );
        }
    }
    let total = v["page"]["total"].as_u64().unwrap_or(0);
    let shown = v["facts"].as_array().map_or(0, Vec::len) as u64;
    println!("{shown} of {total} facts shown");
    Ok(0)
}

fn print_runs(v: &Json) {
    let rows = v["runs"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        println!("no runs");
    }
    for r in &rows {
        println!(
            "{}  {:<10}  {:<10}  {}",
            r["run"].as_str().unwrap_or(""),
            r["record"].as_str().unwrap_or(""),
            r["ending"].as_str().unwrap_or("-"),
            r["entry"]["module"].as_str().unwrap_or("")
        );
    }
    for p in v["problems"].as_array().into_iter().flatten() {
        eprintln!("problem: {p}");
    }
    if let Some(next) = v["nextAfter"].as_str() {
        println!("more: flow runs --after {next}");
    }
}

fn show_result(g: &Global, r: &RunResult, allow: bool) -> Result<u8> {
    if g.json {
        println!("{}", r.to_json());
        return Ok(r.exit_code());
    }
    match r {
        RunResult::Completed { output, exit, run } => {
            println!("{}", flow_abi::json::canonical(output));
            if exit != "success" {
                eprintln!("{run} completed with exit code {exit}");
            }
        }
        RunResult::Faulted { run, why } => eprintln!("{run} faulted: {why}"),
        RunResult::Paused { run, open } => {
            println!("{run} paused; pending calls:");
            for c in open {
                println!("  {}  {}  at node {}", c.call, c.tool, c.node);
                if c.tool == crate::host::HUMAN {
                    let allow = if allow { " --allow" } else { "" };
                    println!(
                        "    flow resume {run} --call '{}' --reply '{{\"Ok\": …}}'{allow}",
                        c.call
                    );
                }
            }
        }
    }
    Ok(r.exit_code())
}
