//! A run driven by this process (`flow run`, `resume`, `fork` without
//! `--server`): the run service with its Tools and progress line, waiting
//! for the run to end or pause (or halting it on Ctrl-C), and showing its
//! result — and a faulted run's failing call, the same with `--server`.

use super::{Global, flow_cmd, print, print_resume_line};
use crate::error::Result;
use crate::service::bind::Bindings;
use crate::service::store::StoreRef;
use crate::service::{Accepted, Progress, RunResult, RunService, ServiceOptions};
use flow_store::RunId;
use serde_json::json;
use std::io::IsTerminal;
use std::sync::Arc;

/// The run service for one command: Tools bound from the program's
/// flow.toml after approval, living as long as this process's drive; with
/// a live progress line on stderr when stderr is a terminal and the output
/// is not JSON.
pub(super) fn service(g: &Global, store: StoreRef, allow: bool) -> RunService {
    service_with(g, store, allow, Vec::new())
}

/// [`service`], with `--tools` manifests binding declarations before (and
/// without the approval of) the program's own flow.toml.
pub(super) fn service_with(
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
            progress,
            ..ServiceOptions::local(Bindings::local(allow, manifests))
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
pub(super) async fn finish(
    g: &Global,
    service: &RunService,
    accepted: Accepted,
    allow: bool,
) -> Result<u8> {
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
pub(super) fn print_resume(
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
        c.call.as_str(),
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
pub(super) fn clear_progress(g: &Global) {
    if !g.json && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
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
