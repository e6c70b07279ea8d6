//! `flow watch RUN`: follows a run live from the store — every fact as it
//! becomes durable, whichever process appends it (a server, another
//! `flow` command) — and ends when the run ends, pauses or is halted,
//! printing the exact next command. `--json` prints each stored fact as
//! one canonical line, then the final state as one object.
//!
//! With `--server`, the same from the run's SSE feed (`GET
//! /v1/runs/{run}/events?states=true`).
//!
//! Exit codes: 0 completed with exit_code success, 4 another exit_code,
//! 1 faulted, 3 paused, 130 halted, 2 no such run (as `flow run`).

use super::{Global, open_existing, print_resume, run_id, service};
use crate::client::{Client, RunEvent};
use crate::error::{Error, Result};
use crate::http::sse::EventsQuery;
use flow_abi::fact::{Ending, Fact};
use flow_store::{RunState, TailEvent};
use serde_json::{Value as Json, json};
use std::time::Duration;

/// How long one wait on the tail lasts before the run's state is checked.
const POLL: Duration = Duration::from_millis(250);

pub(super) async fn watch(g: &Global, run: &str, after: u64) -> Result<u8> {
    let run = run_id(run)?;
    let store = open_existing(g, &run)?;
    store.run_info(&run)?;
    let mut tail = store.subscribe(&run, after)?;
    let mut last = after;
    loop {
        let (t, event) = {
            let mut t = tail;
            tokio::task::spawn_blocking(move || {
                let e = t.next_event(POLL);
                (t, e)
            })
            .await
            .map_err(|e| Error::Unreadable(format!("the tail task ended: {e}")))?
        };
        tail = t;
        match event? {
            TailEvent::Fact(f) => {
                last = f.n;
                if g.json {
                    out!("{}", f.body);
                } else {
                    out!("{}", line(&f.fact));
                }
                if let Fact::End { ending, .. } = &f.fact {
                    return ended(g, run.as_str(), Some(ending));
                }
            }
            TailEvent::Ended => {
                let h = store.read_history(&run)?;
                let ending = match h.facts.last().map(|f| &f.fact) {
                    Some(Fact::End { ending, .. }) => Some(ending),
                    _ => None,
                };
                return ended(g, run.as_str(), ending);
            }
            TailEvent::Idle => {
                let info = store.run_info(&run)?;
                if info.last_fact.n > last {
                    continue;
                }
                match info.state {
                    RunState::Paused => {
                        let service = service(g, store.clone(), false);
                        // A call that drives a nested run stands for that
                        // run's calls (each answered by its run id).
                        let open = service.pending(&run)?.open;
                        if g.json {
                            let calls: Vec<Json> = open
                                .iter()
                                .map(|p| {
                                    let c = &p.open;
                                    json!({"run": p.run.as_str(), "call": c.call, "tool": c.tool, "node": c.node})
                                })
                                .collect();
                            out!(
                                "{}",
                                json!({"run": run.as_str(), "state": "paused", "pending": calls})
                            );
                        } else {
                            out!("{run} paused; answer with:");
                            for p in &open {
                                print_resume(g, &service, &p.run, &p.open, false);
                            }
                        }
                        return Ok(3);
                    }
                    RunState::Halted => {
                        let tools = service(g, store.clone(), false).resume_tools(&run);
                        return Ok(halted(g, run.as_str(), &tools));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// One fact as a line: number, kind and what identifies it.
pub(super) fn line(f: &Fact) -> String {
    let what = match f {
        Fact::Call {
            call, tool, node, ..
        } => format!("{call}  {tool}  at {node}"),
        Fact::Reply { call, outcome, .. } => format!("{call}  {}", outcome.tag()),
        Fact::Close { call, reason, .. } => format!("{call}  {reason}"),
        Fact::Checkpoint { task, node, .. } => format!("{task}  at {node}"),
        Fact::Start { entry, .. } => entry.module.clone(),
        Fact::End { ending, .. } => match ending {
            Ending::Completed { .. } => "Completed".into(),
            Ending::Faulted(_) => "Faulted".into(),
        },
    };
    format!("{:>6}  {:<10}  {what}", f.n(), f.kind().as_str())
}

/// The run is halted: how to continue it (with `tools`, see
/// [`super::print::tools_flags`]); exit 130.
pub(super) fn halted(g: &Global, run: &str, tools: &[String]) -> u8 {
    if g.json {
        out!("{}", json!({"run": run, "state": "halted"}));
    } else {
        out!(
            "{run} halted; continue it with: {} resume {run}{}",
            super::flow_cmd(g),
            super::print::tools_flags(tools)
        );
    }
    130
}

/// The run ended: its ending (as recorded: its output may be a
/// reference), and the exit code `flow run` would give.
pub(super) fn ended(g: &Global, run: &str, ending: Option<&Ending>) -> Result<u8> {
    let code = match ending {
        Some(Ending::Completed { exit, .. }) if exit == "success" => 0,
        Some(Ending::Completed { .. }) => 4,
        _ => 1,
    };
    let ending = ending.map(Ending::to_json).unwrap_or(Json::Null);
    if g.json {
        out!(
            "{}",
            json!({"run": run, "state": if code == 1 { "faulted" } else { "completed" }, "ending": ending})
        );
    } else {
        out!("{run} ended: {}", flow_abi::json::canonical(&ending));
    }
    Ok(code)
}

/// `flow --server URL watch RUN`: the run's SSE feed (with its state
/// changes), each fact printed as `flow watch` prints it, until the run
/// ends, pauses or is halted; then the same last line and exit code.
pub(super) async fn remote(g: &Global, c: &Client, run: &str, after: u64) -> Result<u8> {
    let run = c.get_run(run).await?.run;
    let q = EventsQuery {
        after: Some(after),
        states: Some(true),
    };
    let mut feed = c.run_events(&run, &q).await?;
    while let Some(e) = feed.next().await? {
        match e {
            RunEvent::State(s) if s.state == "halted" => return Ok(halted(g, &run, &[])),
            RunEvent::State(s) if s.state == "paused" => return paused(g, c, &run).await,
            RunEvent::State(_) => {}
            RunEvent::Error(data) => return Err(Error::Unreadable(data)),
            RunEvent::Fact { text, fact } => {
                if g.json {
                    out!("{text}");
                } else {
                    out!("{}", line(&fact));
                }
                if let Fact::End { ending, .. } = &fact {
                    return ended(g, &run, Some(ending));
                }
            }
        }
    }
    Err(Error::Refused(format!(
        "{}: the feed of {run} closed before the run ended, paused or halted",
        c.base()
    )))
}

/// A paused run, as `flow watch` prints it: the resume command of each
/// pending call.
async fn paused(g: &Global, c: &Client, run: &str) -> Result<u8> {
    let pending = c.get_run(run).await?.pending;
    if g.json {
        let calls: Vec<Json> = pending
            .iter()
            .map(|p| json!({"run": p.run, "call": p.call, "tool": p.tool, "node": p.node}))
            .collect();
        out!(
            "{}",
            json!({"run": run, "state": "paused", "pending": calls})
        );
    } else {
        out!("{run} paused; answer with:");
        for p in &pending {
            let example = p.example_reply.clone().filter(|e| !e.is_null());
            super::print_resume_line(g, &p.run, &p.call, &p.args["schema"], example, false, &[]);
        }
    }
    Ok(3)
}
