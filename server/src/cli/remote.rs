//! `flow --server URL …`: the commands that have an HTTP equivalent
//! (DESIGN §6), spoken to a running flowd through the typed client
//! (`crate::client`) instead of the embedded store — the same arguments,
//! output and exit codes. `--token` (env `FLOW_TOKEN`) is sent as
//! `Authorization: Bearer`.
//!
//! A command that starts or continues a run asks the server to wait (its
//! longest `wait`), then follows the run's view until it ends or pauses.
//! A refusal is the server's problem+json `detail` (exit 2); a storage
//! failure (503) exits 5; a server that cannot be reached exits 2 and says
//! so (`client::Error`'s reading for the CLI). Each command's own module
//! holds its remote half beside its local one; this one dispatches, and
//! holds the commands about one run's drive.

use super::{Command, Global, read_arg};
use crate::client::{self, Client};
use crate::error::{Error, Result};
use crate::http::answers::{RunAnswer, RunView, VerdictName, WaitingCall};
use crate::http::fork::ForkRequest;
use crate::http::halt::HaltRequest;
use crate::http::listing::StateName;
use crate::http::resume::ResumeRequest;
use crate::http::start::StartRequest;
use crate::service::ForkAt;
use crate::source::Sources;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The server's longest `wait` (seconds).
const WAIT: u64 = crate::http::wait::MAX_WAIT;

/// Runs `command` against the server at `base`; the others (serve, mcp,
/// tools, test, `runs --runs`) run locally or are refused.
pub(super) async fn run(g: &Global, base: &str, command: Command) -> Result<u8> {
    let options = client::Options {
        // A waiting request is answered within WAIT; the rest is slack.
        timeout: Duration::from_secs(WAIT + 30),
        env_proxy: false,
    };
    let c = Client::new(base, g.token.clone(), options)?;
    match command {
        Command::Run {
            flow,
            input,
            namespace,
            ..
        } => {
            let sources = Sources::read(&flow)?;
            let (flow, modules) = documents(&sources);
            let request = StartRequest {
                flow,
                modules,
                name: Some(sources.root.clone()),
                input: parse(&read_arg(&input)?, "--input")?,
                wait: Some(WAIT),
                namespace,
            };
            let a = c.start_run(&request).await?;
            show(g, &c, settle(&c, a).await?).await
        }
        Command::Resume {
            run,
            call,
            reply,
            open,
            ..
        } => {
            let (call, reply) = match (call, reply) {
                (Some(call), Some(reply)) => {
                    (Some(call), Some(parse(&read_arg(&reply)?, "--reply")?))
                }
                _ => (None, None),
            };
            let request = ResumeRequest {
                call,
                reply,
                open,
                wait: Some(WAIT),
            };
            let a = c.resume_run(&run, &request).await?;
            show(g, &c, settle(&c, a).await?).await
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
            let request = fork_request(ForkAt::new(checkpoint, call, reply)?, &set, flow)?;
            let a = c.fork_run(&run, &request).await?;
            show(g, &c, settle(&c, a).await?).await
        }
        Command::Check { flow } => super::program::check_remote(g, &c, &flow).await,
        Command::Gate(a) => super::gate::remote(g, &c, a).await,
        Command::Recover(a) => super::recover::remote(g, &c, a).await,
        Command::Recoveries(a) => super::recoveries::remote(g, &c, a).await,
        Command::Diff(d) => super::diff::remote(g, &c, d).await,
        Command::Delete { runs, yes, force } => {
            super::delete::remote(g, &c, super::delete::Ask { runs, yes, force }).await
        }
        Command::Redact { run, paths, yes } => {
            super::redact::remote(g, &c, super::redact::Ask { run, paths, yes }).await
        }
        Command::Halt { run, force } => {
            let a = c.halt_run(&run, &HaltRequest { force }).await?;
            if g.json {
                out!("{}", json!(a));
            } else {
                eprintln!(
                    "{run} halted; continue it with: {} resume {run}",
                    super::flow_cmd(g)
                );
            }
            Ok(0)
        }
        Command::Replay { run } => {
            let a = c.replay_run(&run).await?;
            if g.json {
                out!("{}", json!(a));
            } else {
                match a.verdict {
                    VerdictName::Diverged => out!(
                        "diverged at fact {}: {}",
                        json!(a.fact),
                        a.reason.as_deref().unwrap_or("")
                    ),
                    VerdictName::Matched => out!("matched"),
                    VerdictName::Incomplete => out!("incomplete"),
                }
            }
            Ok(if matches!(a.verdict, VerdictName::Matched) {
                0
            } else {
                1
            })
        }
        Command::History(ask) => super::history::remote(g, &c, ask).await,
        Command::Runs {
            limit,
            after,
            state,
            runs: None,
            filter,
        } => super::query::remote(g, &c, limit, after, state, &filter).await,
        Command::Watch { run, after } => super::watch::remote(g, &c, &run, after).await,
        Command::Export {
            run,
            out,
            lineage,
            sign,
            redact,
        } => {
            super::archive::export_remote(g, &c, &run, &out, lineage, sign.as_deref(), &redact)
                .await
        }
        Command::Import { trust: Some(_), .. } => Err(Error::Refused(
            "--trust is for a local import: with --server the server's --trusted-keys decides which signatures it accepts".into(),
        )),
        Command::Import {
            dir,
            trust: None,
            namespace,
        } => super::archive::import_remote(g, &c, &dir, namespace.as_ref()).await,
        other => Err(Error::Refused(format!(
            "{} has no HTTP equivalent here; run it without --server",
            name(&other)
        ))),
    }
}

/// `POST /v1/runs/{run}/fork`'s body: where the fork starts, the `--set`
/// fields and the program it is forked onto (`--flow`).
fn fork_request(
    at: ForkAt,
    set: &[String],
    flow: Option<std::path::PathBuf>,
) -> Result<ForkRequest> {
    let mut sets = BTreeMap::new();
    for s in set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| Error::Refused(format!("--set {s}: expected field=JSON")))?;
        sets.insert(k.to_string(), parse(v, &format!("--set {k}"))?);
    }
    let (checkpoint, call, reply) = match at {
        ForkAt::Checkpoint(n) => (Some(n), None, None),
        ForkAt::WhatIf { call, reply } => (None, Some(call), Some(parse(&reply, "--reply")?)),
    };
    let onto = flow.as_deref().map(Sources::read).transpose()?;
    let (flow, modules, name) = match &onto {
        Some(sources) => {
            let (flow, modules) = documents(sources);
            (Some(flow), modules, Some(sources.root.clone()))
        }
        None => (None, None, None),
    };
    Ok(ForkRequest {
        checkpoint,
        call,
        reply,
        set: Some(sets),
        flow,
        modules,
        name,
        wait: Some(WAIT),
    })
}

/// Where a run the server drives stands once it no longer runs: the
/// answer to start, resume or fork when the run ended or paused within
/// the `wait`, else its view once it has.
enum Settled {
    Answer(Box<RunAnswer>),
    View(Box<RunView>),
}

impl Settled {
    fn run(&self) -> &str {
        match self {
            Settled::Answer(a) => &a.run,
            Settled::View(v) => &v.run,
        }
    }

    fn state(&self) -> StateName {
        match self {
            Settled::Answer(a) => a.state,
            Settled::View(v) => v.state,
        }
    }

    /// A completed run's exit code, `None` when it has none.
    fn exit(&self) -> Option<&str> {
        match self {
            Settled::Answer(a) => a.exit.as_deref(),
            Settled::View(v) => v.exit.as_str(),
        }
    }

    /// As the server answered it (`--json`).
    fn to_json(&self) -> Json {
        match self {
            Settled::Answer(a) => json!(a),
            Settled::View(v) => json!(v),
        }
    }
}

/// Follows the run `a` answers for until it is no longer running.
async fn settle(c: &Client, a: RunAnswer) -> Result<Settled> {
    Ok(match a.state {
        StateName::Running => Settled::View(Box::new(c.follow_run(&a.run).await?)),
        _ => Settled::Answer(Box::new(a)),
    })
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
/// them exactly as the CLI would), as a request's `flow` and `modules`.
pub(super) fn documents(s: &Sources) -> (Json, Option<BTreeMap<String, Json>>) {
    let root = json!(s.texts.get(&s.root).cloned().unwrap_or_default());
    let modules = s
        .texts
        .iter()
        .filter(|(m, _)| **m != s.root)
        .map(|(m, t)| (m.clone(), json!(t)))
        .collect();
    (root, Some(modules))
}

fn parse(text: &str, what: &str) -> Result<Json> {
    flow_abi::json::parse(text).map_err(|e| Error::Refused(format!("{what} is not JSON: {e}")))
}

/// Prints a run as `flow run` prints a result (the same text: a paused
/// run's pending calls and the resume command for each person's call,
/// with its example reply); its exit code.
async fn show(g: &Global, c: &Client, s: Settled) -> Result<u8> {
    let run = s.run().to_string();
    let code = match s.state() {
        StateName::Completed if s.exit().is_none_or(|e| e == "success") => 0,
        StateName::Completed => 4,
        StateName::Paused => 3,
        StateName::Halted => 130,
        _ => 1,
    };
    if g.json {
        out!("{}", s.to_json());
        return Ok(code);
    }
    match code {
        0 | 4 => {
            let output = match &s {
                Settled::Answer(a) => a.output.clone().unwrap_or(Json::Null),
                Settled::View(v) => v.output.clone(),
            };
            out!("{}", flow_abi::json::canonical(&output));
            if code == 4 {
                eprintln!(
                    "{run} completed with exit code {}",
                    s.exit().unwrap_or_default()
                );
            }
        }
        3 => {
            // The run view's pending calls carry their example replies.
            let pending = match s {
                Settled::View(v) => v.pending,
                Settled::Answer(a) if a.pending.as_ref().is_some_and(|p| !p.is_empty()) => {
                    c.get_run(&run).await?.pending
                }
                Settled::Answer(_) => Vec::new(),
            };
            out!("{run} paused; pending calls:");
            for p in &pending {
                print_pending(g, &run, p);
            }
        }
        130 => {
            let id = flow_store::RunId::parse(&run).map_err(|e| Error::Refused(e.to_string()))?;
            return super::halted(g, &id, &[]);
        }
        _ => {
            let fault = match &s {
                Settled::Answer(a) => a.fault.clone().unwrap_or_default(),
                Settled::View(v) => v.fault.as_str().unwrap_or_default().to_string(),
            };
            eprintln!("{run} faulted: {fault}");
            // Pinpointed as a local run is (issue 38 §4).
            if let Ok(t) = c.get_timeline(&run).await {
                super::print_fault(t.fault.as_ref());
            }
        }
    }
    Ok(code)
}

/// A pending call of `run` as `flow run` lists it, with the resume
/// command for a person's call.
fn print_pending(g: &Global, run: &str, p: &WaitingCall) {
    let inner = if p.run == run {
        String::new()
    } else {
        format!("  in nested run {}", p.run)
    };
    out!("  {}  {}  at node {}{inner}", p.call, p.tool, p.node);
    if p.tool == crate::host::HUMAN {
        let example = p.example_reply.clone().filter(|e| !e.is_null());
        super::print_resume_line(g, &p.run, &p.call, &p.args["schema"], example, false, &[]);
    }
}
