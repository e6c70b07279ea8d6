//! `flow redact RUN --path PTR… [--yes]` (issue 40 item 2, docs/custody.md
//! "Holes"): makes the values the paths reach holes of the run, in the
//! store under `--data` or, with `--server`, by `POST
//! /v1/runs/{run}/redact` (a token of scope `admin`). Permanent: without
//! `--yes` the command asks on a terminal and refuses otherwise.

use super::{Global, confirm, open_existing, run_id};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::redact::{RedactAnswer, RedactRequest};
use flow_store::Redaction;
use flow_store::redact::ValuePath;

/// What `flow redact` was asked.
pub(super) struct Ask {
    pub run: String,
    pub paths: Vec<String>,
    pub yes: bool,
}

/// The paths, parsed before anything is asked or changed.
fn targets(ask: &Ask) -> Result<Vec<ValuePath>> {
    ask.paths
        .iter()
        .map(|p| ValuePath::parse(p).map_err(Error::Refused))
        .collect()
}

/// Confirms a permanent redaction ([`confirm`]).
fn confirmed(g: &Global, ask: &Ask) -> Result<()> {
    confirm::confirmed(
        g,
        confirm::Question {
            yes: ask.yes,
            gerund: "redacting",
            what: format!("make {} of {} holes", ask.paths.join(" "), ask.run),
            preposition: "in",
            detail: " (their content is deleted)",
            declined: "redacted",
        },
    )
}

/// The answer, the same locally and from a server (`--json`: one line).
fn print(g: &Global, a: &RedactAnswer) {
    if g.json {
        out!("{}", serde_json::to_string(a).unwrap_or_default());
    } else {
        out!(
            "redacted {} of {}: {} holes ({}), {} blobs removed",
            a.paths.join(" "),
            a.run,
            a.hashes.len(),
            a.hashes.join(" "),
            a.blobs_removed
        );
    }
}

/// In the store under `--data`.
pub(super) async fn local(g: &Global, ask: Ask) -> Result<u8> {
    let run = run_id(&ask.run)?;
    let how = Redaction {
        who: "cli".into(),
        targets: targets(&ask)?,
    };
    confirmed(g, &ask)?;
    let store = open_existing(g, &run)?;
    let done = store.redact(&run, &how).map_err(|e| match e {
        flow_store::Error::InvalidArgument(m) => Error::Refused(m),
        e => e.into(),
    })?;
    print(g, &RedactAnswer::from(done));
    Ok(0)
}

/// With `--server`.
pub(super) async fn remote(g: &Global, c: &Client, ask: Ask) -> Result<u8> {
    run_id(&ask.run)?;
    targets(&ask)?;
    confirmed(g, &ask)?;
    let a = c
        .redact_run(
            &ask.run,
            &RedactRequest {
                paths: ask.paths.clone(),
            },
        )
        .await?;
    print(g, &a);
    Ok(0)
}
