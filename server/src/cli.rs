//! The `flow` command line (DESIGN §6). Every command computes structured
//! data; the human text is a rendering of it, `--json` prints the data.

use crate::error::{Error, Result};
use crate::service::ForkAt;
use crate::source::Sources;
use flow_engine::replay::Verdict;
use flow_store::RunId;
use serde_json::{Value as Json, json};
use std::io::Read;

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

mod archive;
mod args;
mod confirm;
mod delete;
mod diff;
mod drive;
mod gate;
mod history;
mod keys;
mod print;
mod program;
mod query;
mod recover;
mod recoveries;
mod redact;
mod remote;
mod store;
mod watch;

use drive::{clear_progress, finish, print_resume, service, service_with};
use store::{located, open_existing, open_postgres, open_store};

pub(crate) use drive::{halted, print_fault};
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
            | Command::Keys(_)
            | Command::Runs { runs: Some(_), .. }
    );
    if let (Some(server), false) = (g.server.clone(), local) {
        return remote::run(&g, &server, cli.command).await;
    }
    match cli.command {
        Command::Check { flow } => program::check(&g, &flow),
        Command::Gate(a) => gate::local(&g, a).await,
        Command::Recover(a) => recover::local(&g, a).await,
        Command::Recoveries(a) => recoveries::local(&g, a).await,
        Command::Diff(d) => diff::local(&g, d).await,
        Command::Tools { flow, entry } => program::tools(&flow, entry.as_deref()),
        Command::Run {
            flow,
            input,
            allow,
            namespace,
        } => {
            let namespace = match namespace {
                Some(n) => flow_store::Namespace::parse(&n)
                    .map_err(|e| Error::Refused(format!("--namespace: {e}")))?,
                None => flow_store::Namespace::default(),
            };
            let sources = Sources::read(&flow)?;
            let input = read_arg(&input)?;
            let service = service(&g, open_store(&g)?, allow);
            let accepted = service.start(&namespace, sources, &input).await?;
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
        Command::Redact { run, paths, yes } => {
            redact::local(&g, redact::Ask { run, paths, yes }).await
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
                let (name, fact, reason) = verdict.parts();
                let mut v = json!({"run": run.as_str(), "verdict": name});
                if let (Some(fact), Some(reason)) = (fact, reason) {
                    v["fact"] = json!(fact);
                    v["reason"] = json!(reason);
                }
                out!("{v}");
            } else {
                out!("{verdict}");
            }
            Ok(if verdict == Verdict::Matched { 0 } else { 1 })
        }
        Command::History(ask) => history::history(&g, ask).await,
        Command::Watch { run, after } => watch::watch(&g, &run, after).await,
        Command::Runs {
            limit,
            after,
            state,
            runs: None,
            filter,
        } => query::local(&g, limit, after, state, &filter),
        Command::Runs {
            limit,
            after,
            state,
            runs: Some(dir),
            filter,
        } => archive::discover(&g, &dir, limit, after, state, &filter),
        Command::Export {
            run,
            out,
            lineage,
            sign,
            redact,
        } => archive::export(&g, &run, &out, lineage, sign.as_deref(), &redact),
        Command::Serve(args) => {
            let store = match &args.postgres {
                Some(url) => open_postgres(&g, url, &args.postgres_schema)?,
                None => open_store(&g)?,
            };
            crate::http::cli::serve(store, args).await
        }
        Command::Mcp(args) => crate::mcp::stdio::serve(open_store(&g)?, args).await,
        Command::Worker(args) => crate::worker::run(g.server.clone(), g.token.clone(), args).await,
        Command::Test { dir } => program::test(&g, &dir),
        Command::Import {
            dir,
            trust,
            namespace,
        } => archive::import(&g, &dir, trust.as_deref(), &namespace.unwrap_or_default()),
        Command::Keys(k) => keys::run(&g, k),
    }
}
