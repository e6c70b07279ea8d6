//! Run archives (docs/custody.md): `flow export RUN DIR` writes a run's
//! archive, `flow import PATH` stores one (a directory or a tar), here or,
//! with `--server`, by `GET /v1/runs/{run}/archive` and `POST
//! /v1/archives` — the same text either way; `flow runs --runs DIR` lists
//! the archives under a directory without importing them.

use super::{Global, RunLine, RunsFilter, RunsMore, open_existing, open_store, print_import};
use super::{print_runs, run_id};
use crate::client::Client;
use crate::error::{Error, Result};
use flow_store::{DiscoveryQuery, ProblemStatus, RunState};
use serde_json::{Value as Json, json};
use std::path::Path;

/// `flow runs --runs DIR`: the archives under `dir`, by id and state.
pub(super) fn discover(
    g: &Global,
    dir: &Path,
    limit: Option<u32>,
    after: Option<String>,
    state: Option<String>,
    filter: &RunsFilter,
) -> Result<u8> {
    if *filter != RunsFilter::default() {
        return Err(Error::Refused(
            "--runs discovers archives by id and state only: leave out the run query's filters, or import the archives and query the store".into(),
        ));
    }
    let state = match state.as_deref() {
        None => None,
        Some(s) => {
            Some(RunState::parse(s).ok_or_else(|| Error::Refused(format!("unknown state {s:?}")))?)
        }
    };
    let q = DiscoveryQuery {
        limit,
        after,
        state,
    };
    let page = flow_store::inspect_archives(dir, &q)?;
    let v = serde_json::to_value(&page).unwrap_or(Json::Null);
    if g.json {
        out!("{v}");
    } else {
        let rows = page
            .runs
            .iter()
            .zip(v["runs"].as_array().into_iter().flatten())
            .map(|(row, r)| RunLine {
                run: row.run.to_string(),
                state: row.state().map_or("-", RunState::as_str).to_string(),
                record: r["record"].as_str().unwrap_or("").to_string(),
                module: r["entry"]["module"].as_str().unwrap_or("").to_string(),
            });
        let more = RunsMore {
            next: v["nextAfter"].as_str(),
            state: state.map(RunState::as_str),
            limit,
            runs: Some(dir),
        };
        print_runs(
            g,
            rows,
            v["problems"].as_array().map_or(&[][..], |p| p),
            more,
        );
    }
    // DISC-25: "The CLI exits 0 for an inspected page or missing
    // root and 2 for another root problem."
    let root_problem = page
        .problems
        .iter()
        .any(|p| p.component == "root" && p.status != ProblemStatus::NotCreated);
    Ok(if root_problem { 2 } else { 0 })
}

/// `flow export RUN DIR` from the store under `--data`.
pub(super) fn export(g: &Global, run: &str, out: &Path) -> Result<u8> {
    let run = run_id(run)?;
    let store = open_existing(g, &run)?;
    let s = flow_store::export_run(&*store, &run, out)?;
    let v = json!({"run": run.as_str(), "out": out.display().to_string(), "facts": s.facts, "blobs": s.blobs});
    if g.json {
        out!("{v}");
    } else {
        out!(
            "exported {run} to {} ({} facts, {} blobs)",
            out.display(),
            s.facts,
            s.blobs
        );
    }
    Ok(0)
}

/// `flow --server URL export RUN DIR`: the server's archive, unpacked.
pub(super) async fn export_remote(g: &Global, c: &Client, run: &str, out: &Path) -> Result<u8> {
    let tar = c.export_archive(run).await?;
    std::fs::create_dir_all(out).map_err(|e| Error::Refused(format!("{}: {e}", out.display())))?;
    crate::tarball::unpack(&tar[..], out)
        .map_err(|e| Error::Refused(format!("the server's archive: {e}")))?;
    let facts = std::fs::read_to_string(out.join("history.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let blobs = std::fs::read_dir(out.join("blobs")).map_or(0, |d| d.count());
    let v = json!({"run": run, "out": out.display().to_string(), "facts": facts, "blobs": blobs});
    if g.json {
        out!("{v}");
    } else {
        out!(
            "exported {run} to {} ({facts} facts, {blobs} blobs)",
            out.display()
        );
    }
    Ok(0)
}

/// `flow import PATH` into the store under `--data`.
pub(super) fn import(g: &Global, dir: &Path) -> Result<u8> {
    // Opened (a tar unpacked) before the store: a path that is not
    // an archive changes nothing.
    let source =
        crate::tarball::ImportSource::open(dir).map_err(|e| Error::Refused(e.to_string()))?;
    let store = open_store(g)?;
    let unpacked = source.dir();
    let refused = |e: flow_store::Error| match Error::from(e) {
        // A refusal names the private directory: name the file.
        Error::Refused(m) => {
            Error::Refused(m.replace(&unpacked.display().to_string(), &dir.display().to_string()))
        }
        e => e,
    };
    let archive = flow_store::read_archive(&unpacked).map_err(refused)?;
    let torn = archive.torn().cloned();
    let o = flow_store::ImportRuns::import_verified(&*store, archive).map_err(refused)?;
    let (run, fresh) = match &o {
        flow_store::ImportOutcome::Imported { run, .. } => (run.clone(), true),
        flow_store::ImportOutcome::AlreadyPresent { run } => (run.clone(), false),
    };
    let torn = torn.as_ref().map(|t| (t.fact, t.reason.as_str()));
    print_import(g, run.as_str(), fresh, torn);
    Ok(0)
}

/// `flow --server URL import PATH`: the archive sent as a tar.
pub(super) async fn import_remote(g: &Global, c: &Client, dir: &Path) -> Result<u8> {
    let body = if dir.is_dir() {
        crate::tarball::pack(dir)
    } else {
        std::fs::read(dir)
    }
    .map_err(|e| Error::Refused(format!("{}: {e}", dir.display())))?;
    let a = c.import_archive(body).await?;
    let torn = a.truncated.as_ref().map(|t| (t.fact, t.reason.as_str()));
    print_import(g, &a.run, a.imported, torn);
    Ok(0)
}
