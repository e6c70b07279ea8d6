//! `flow diff RUN_A RUN_B`: two runs side by side (issue 39, item 4;
//! `service/diff.rs`), on the store under `--data` or, with `--server`,
//! through `GET /v1/runs/{a}/diff/{b}`. Both print the same text; `--json`
//! prints the typed diff. Exit 0 when the histories agree from the
//! alignment on, 1 when they differ, 2 when a run is not there.

use super::{Global, open_existing, run_id};
use crate::client::Client;
use crate::error::Result;
use crate::service::diff::{Alignment, CallSide, EndingView, FactPair, FieldDiff, RunDiff};

/// `flow diff`'s arguments.
#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// The first run (a fork's parent, say).
    pub a: String,
    /// The second run (the fork, say).
    pub b: String,
}

/// `flow diff` on the store under `--data`.
pub(super) async fn local(g: &Global, d: DiffArgs) -> Result<u8> {
    let (a, b) = (run_id(&d.a)?, run_id(&d.b)?);
    let service = super::service(g, open_existing(g, &a)?, false);
    let diff = service.diff(&a, &b).await?;
    print(g, &diff);
    Ok(exit(&diff))
}

/// `flow --server URL diff`.
pub(super) async fn remote(g: &Global, c: &Client, d: DiffArgs) -> Result<u8> {
    let (a, b) = (run_id(&d.a)?, run_id(&d.b)?);
    let diff = c.diff_runs(a.as_str(), b.as_str()).await?;
    print(g, &diff);
    Ok(exit(&diff))
}

fn exit(d: &RunDiff) -> u8 {
    if d.same { 0 } else { 1 }
}

fn fact(n: Option<u64>) -> String {
    n.map_or_else(|| "(none: the record ends)".into(), |n| format!("fact {n}"))
}

fn pair(p: &FactPair) -> String {
    format!("A {} / B {}", fact(p.a), fact(p.b))
}

fn value(v: &Option<serde_json::Value>) -> String {
    v.as_ref()
        .map_or_else(|| "(absent)".into(), flow_abi::json::canonical)
}

fn fields(fs: &[FieldDiff]) {
    for f in fs {
        out!("      {}: {} → {}", f.path, value(&f.a), value(&f.b));
    }
}

fn side(c: &Option<CallSide>) -> String {
    c.as_ref().map_or_else(
        || "(no such call)".into(),
        |c| format!("{} {} at node {} (fact {})", c.call, c.tool, c.node, c.fact),
    )
}

fn ending(e: &Option<EndingView>) -> String {
    match e {
        None => "not ended".into(),
        Some(e) => match (&e.exit, &e.fault) {
            (Some(exit), _) => format!("completed ({exit}) at fact {}", e.fact),
            (_, Some(why)) => format!("faulted at fact {}: {why}", e.fact),
            _ => format!("{} at fact {}", e.ending, e.fact),
        },
    }
}

/// The diff as text (or, with `--json`, as it is).
fn print(g: &Global, d: &RunDiff) {
    if g.json {
        out!("{}", serde_json::to_string(d).unwrap_or_default());
        return;
    }
    out!("A {}  ({} facts)", d.a, d.facts.a.unwrap_or(0));
    out!("B {}  ({} facts)", d.b, d.facts.b.unwrap_or(0));
    match d.alignment {
        Alignment::Fork { checkpoint } => {
            out!(
                "B is a fork of A from A's checkpoint at fact {checkpoint}: aligned from there (B's fact 2)"
            )
        }
        Alignment::Parent { checkpoint } => {
            out!(
                "A is a fork of B from B's checkpoint at fact {checkpoint}: aligned from there (A's fact 2)"
            )
        }
        Alignment::Start => out!("aligned fact by fact from Start"),
    }
    match &d.shared {
        Some(s) => out!("shared through {}", pair(s)),
        None => out!("nothing shared from the alignment on"),
    }
    match &d.parted {
        Some(p) => out!("parted at {}", pair(p)),
        None => out!("the histories agree from the alignment on"),
    }
    if !d.input.is_empty() {
        out!("input:");
        fields(&d.input);
    }
    for c in &d.calls {
        out!("call {}: A {}  |  B {}", c.index, side(&c.a), side(&c.b));
        fields(&c.fields);
    }
    for c in &d.checkpoints {
        let node = |n: &Option<String>| n.clone().unwrap_or_else(|| "-".into());
        out!(
            "checkpoint {}: {} (A at {}, B at {})",
            c.index,
            pair(&c.facts),
            node(&c.node_a),
            node(&c.node_b)
        );
        fields(&c.fields);
    }
    out!(
        "ending: A {}  |  B {}",
        ending(&d.ending_a),
        ending(&d.ending_b)
    );
}
