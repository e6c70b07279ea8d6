//! `flow delete RUN… [--yes] [--force]` (issue 40 item 1, docs/custody.md):
//! deletes runs from the store under `--data`, or, with `--server`, by
//! `DELETE /v1/runs/{run}` (a token of scope `admin`). Deleting is
//! permanent: without `--yes` the command asks on a terminal and refuses
//! otherwise. Each run is deleted on its own; the exit code is 0 when every
//! one was, 2 when any was refused (the others are still deleted).

use super::{Global, confirm, open_existing, run_id};
use crate::client::Client;
use crate::error::Result;
use crate::http::delete::{DeleteAnswer, DeleteParams};
use flow_store::{Deletion, RunId};

/// What `flow delete` was asked.
pub(super) struct Ask {
    pub runs: Vec<String>,
    pub yes: bool,
    pub force: bool,
}

/// Confirms a permanent deletion ([`confirm`]).
fn confirmed(g: &Global, ask: &Ask) -> Result<()> {
    confirm::confirmed(
        g,
        confirm::Question {
            yes: ask.yes,
            gerund: "deleting",
            what: format!("delete {}", ask.runs.join(" ")),
            preposition: "from",
            detail: ", with the blobs no other run uses",
            declined: "deleted",
        },
    )
}

/// One deletion, the same locally and from a server's answer (`--json`:
/// one line each).
fn print(g: &Global, line: &DeleteAnswer) {
    if g.json {
        out!("{}", serde_json::to_string(line).unwrap_or_default());
    } else {
        let state = serde_json::to_value(line.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out!(
            "deleted {} ({state}, {} facts, head {} {}; {} blobs removed)",
            line.run,
            line.facts,
            line.head.n,
            line.head.hash,
            line.blobs_removed
        );
    }
}

/// Deletes each run in turn; says why each refused one was refused.
async fn each(
    g: &Global,
    ask: &Ask,
    mut one: impl AsyncFnMut(&RunId) -> Result<DeleteAnswer>,
) -> Result<u8> {
    confirmed(g, ask)?;
    let ids = ask
        .runs
        .iter()
        .map(|r| run_id(r))
        .collect::<Result<Vec<_>>>()?;
    let mut failed = None;
    for run in &ids {
        match one(run).await {
            Ok(line) => print(g, &line),
            Err(e) => {
                eprintln!("flow: {run} not deleted: {e}");
                failed = Some(e);
            }
        }
    }
    match (failed, ids.len()) {
        (Some(e), 1) => Err(e),
        (Some(_), _) => Ok(2),
        (None, _) => Ok(0),
    }
}

/// In the store under `--data`.
pub(super) async fn local(g: &Global, ask: Ask) -> Result<u8> {
    let how = Deletion {
        who: "cli".into(),
        force: ask.force,
    };
    each(g, &ask, async |run: &RunId| {
        let store = open_existing(g, run)?;
        Ok(DeleteAnswer::from(store.delete_run(run, &how)?))
    })
    .await
}

/// With `--server`.
pub(super) async fn remote(g: &Global, c: &Client, ask: Ask) -> Result<u8> {
    let params = DeleteParams {
        force: Some(ask.force),
    };
    each(g, &ask, async |run: &RunId| {
        Ok(c.delete_run(run.as_str(), &params).await?)
    })
    .await
}
