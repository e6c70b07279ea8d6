//! `flow recoveries [ID]`: the record of bulk recoveries (`flow recover`),
//! newest first — who began each, its status and counts — or one recovery
//! and the forks it made; from the store under `--data`, or with
//! `--server` from `GET /v1/recoveries`. The same text either way.

use super::Global;
use super::query::{duration, utc};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::recoveries::RecoveriesParams;
use crate::service::recover::RecoveryEnd;
use crate::service::recoveries::{Reader, RecoveryDetail, RecoveryList, RecoveryView};

/// `flow recoveries`' arguments.
#[derive(clap::Args, Debug)]
pub struct RecoveriesArgs {
    /// A recovery id (`rec-…`): it and the forks it made.
    pub id: Option<String>,
    /// Only recoveries begun before this (unix ms): the next page's.
    #[arg(long, value_name = "MS")]
    pub before: Option<i64>,
    /// At most this many (1 to 200).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
}

/// From the store under `--data`.
pub(super) async fn local(g: &Global, a: RecoveriesArgs) -> Result<u8> {
    if !g.data.join("flow.db").exists() {
        return match a.id {
            Some(id) => Err(Error::NotFound(format!(
                "no recovery {id}: no store at {} (--data)",
                g.data.display()
            ))),
            None => {
                show_list(
                    g,
                    &a,
                    &RecoveryList {
                        recoveries: Vec::new(),
                        next_before: None,
                    },
                );
                Ok(0)
            }
        };
    }
    let service = super::service(g, super::open_store(g)?, false);
    match &a.id {
        Some(id) => show_one(g, &service.recovery(id, &Reader::LOCAL)?),
        None => show_list(
            g,
            &a,
            &service.recoveries(a.before, a.limit, &Reader::LOCAL)?,
        ),
    }
    Ok(0)
}

/// `flow --server URL recoveries`.
pub(super) async fn remote(g: &Global, c: &Client, a: RecoveriesArgs) -> Result<u8> {
    match &a.id {
        Some(id) => show_one(g, &c.get_recovery(id).await?),
        None => {
            let params = RecoveriesParams {
                before: a.before,
                limit: Some(a.limit),
            };
            show_list(g, &a, &c.list_recoveries(&params).await?);
        }
    }
    Ok(0)
}

/// A recovery's one line: id, status, when, who, flow, and its counts.
fn summary(r: &RecoveryView) -> String {
    let status = serde_json::to_value(r.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let took = r
        .ended_ms
        .map(|e| format!(" in {}", duration(e - r.started_ms)))
        .unwrap_or_default();
    let ended = match &r.ended {
        Some(RecoveryEnd::Counts(c)) => format!(
            ": {} runs, {} recovered, {} already recovered, {} not needed, {} cannot be recovered",
            c.runs, c.recovered, c.already_recovered, c.not_needed, c.unrecoverable
        ),
        Some(RecoveryEnd::Failed(why)) => format!(": stopped short: {why}"),
        None => String::new(),
    };
    format!(
        "{}  {status}  {}{took}  by {}  flow {}{ended}",
        r.id,
        utc(r.started_ms),
        r.who,
        r.flow
    )
}

fn show_list(g: &Global, a: &RecoveriesArgs, list: &RecoveryList) {
    if g.json {
        out!("{}", serde_json::to_string(list).unwrap_or_default());
        return;
    }
    if list.recoveries.is_empty() {
        out!("no recoveries");
    }
    for r in &list.recoveries {
        out!("{}", summary(r));
    }
    if let Some(b) = list.next_before {
        out!(
            "more: {} recoveries --before {b} --limit {}",
            super::flow_cmd(g),
            a.limit
        );
    }
}

fn show_one(g: &Global, d: &RecoveryDetail) {
    if g.json {
        out!("{}", serde_json::to_string(d).unwrap_or_default());
        return;
    }
    out!("{}", summary(&d.recovery));
    out!("program {}", d.recovery.program);
    if d.forks.is_empty() {
        out!("no forks");
    }
    for f in &d.forks {
        out!(
            "{}  recovered {} from checkpoint {}",
            f.fork,
            f.run,
            f.checkpoint
        );
    }
}
