//! One run's inspection view (running-a-program, "The CLI and MCP
//! surface"): what `flow history` prints, locally and with `--server`
//! (`GET /v1/runs/{run}/inspect`), from one implementation (CLI-26):
//!
//! * `facts` and `page`, the store's history page (kind, search, offset,
//!   limit);
//! * `record` and `entry`;
//! * `verdict`: the program re-run as replay does, serving every recorded
//!   reply and calling nothing (HIST-1);
//! * `pending`: the pending calls from that re-run's run state, or
//!   `"unknown"` when the re-run cannot say (it diverged) (HIST-9);
//! * `rounds`: each recorded Checkpoint, the places a fork can start, with
//!   its fact number, task, node and state (HIST-2);
//! * `tools`: the declarations reachable from the recorded entry, by
//!   identity and fingerprint (CLI-20);
//! * `timeline`: each call's wall-clock span and the run's
//!   ([`RunService::timeline`], issue 38 §3).

use super::RunService;
use crate::error::Result;
use flow_abi::fact::Fact;
use flow_store::{HistoryQuery, RunId};
use serde_json::{Value as Json, json};

impl RunService {
    /// The inspection view of `run` for the page `q` selects. Blocking: it
    /// reads the store and re-runs the program.
    pub fn inspect(&self, run: &RunId, q: &HistoryQuery) -> Result<Json> {
        let store = self.store();
        let page = store.history_page(run, q)?;
        let info = store.run_info(run)?;
        let mut v = serde_json::to_value(&page).unwrap_or(Json::Null);
        v["record"] = json!(if info.ending.is_some() {
            "complete"
        } else {
            "incomplete"
        });
        v["state"] = json!(info.state.as_str());
        v["entry"] = json!({"module": info.entry.module, "function": info.entry.function});
        let mut rounds = Vec::new();
        let (program, replayed) = self.replayed(run, &mut |f| {
            if let Fact::Checkpoint {
                n,
                task,
                node,
                state,
            } = f
            {
                rounds.push(json!({"fact": n, "task": task, "node": node, "state": state}));
            }
        })?;
        let (name, fact, reason) = replayed.verdict.parts();
        v["verdict"] = json!({"verdict": name});
        if let (Some(fact), Some(reason)) = (fact, reason) {
            v["verdict"]["fact"] = json!(fact);
            v["verdict"]["reason"] = json!(reason);
        }
        v["pending"] = match (&replayed.machine, info.ending.is_some()) {
            (_, true) => json!([]),
            // A call that drives a nested run stands for that run's calls.
            (Some(m), false) => Json::Array(
                self.pending_of(run, m.open_calls())?
                    .iter()
                    .map(|p| {
                        let c = &p.open;
                        json!({"run": p.run.as_str(), "call": c.call, "task": c.task, "node": c.node,
                            "tool": c.tool, "exampleReply": self.example_reply(&p.run, c)})
                    })
                    .collect(),
            ),
            (None, false) => json!("unknown"),
        };
        v["rounds"] = Json::Array(rounds);
        // Where the time went (issue 38 §3): what `flow history` prints
        // durations from, locally and with `--server`.
        v["timeline"] = serde_json::to_value(self.timeline(run)?).unwrap_or(Json::Null);
        v["tools"] = Json::Array(
            program
                .reachable()
                .iter()
                .map(|(module, tool)| {
                    let fp = program.module(module).and_then(|m| m.fingerprint(tool));
                    json!({"tool": tool, "module": module, "fingerprint": fp})
                })
                .collect(),
        );
        Ok(v)
    }
}
