//! Run archives (docs/custody.md): `flow export RUN DIR` writes a run's
//! archive, `flow import PATH` stores one (a directory or a tar), here or,
//! with `--server`, by `GET /v1/runs/{run}/archive` and `POST
//! /v1/archives` — the same text either way; `flow runs --runs DIR` lists
//! the archives under a directory without importing them. `--lineage`
//! exports a run with its forks and nested runs, `--sign` signs, `flow
//! keys new-signing` makes a key (docs/custody.md).

use super::{Global, RunLine, RunsFilter, RunsMore, open_existing, open_store, print_import};
use super::{print_runs, run_id};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::answers::ImportAnswer;
use crate::signing::Signed;
use crate::signing::import::{ImportError, check, write};
use crate::signing::keys::{KeyFile, TrustedKeys};
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

/// Signs the archive just written at `out` with the key file at `key`
/// (read first by the caller, so a refused key writes nothing).
fn sign(out: &Path, key: Option<&KeyFile>) -> Result<Option<Signed>> {
    key.map(|k| crate::signing::sign_archive(out, k).map_err(Error::Refused))
        .transpose()
}

/// Readies `out` for an export: an archive of several runs goes to a new
/// or empty directory (a run directory left from another export would be
/// carried, and signed, with it); a `signature.json` left from an earlier
/// signed export is removed (it would not cover the new one).
fn prepare_out(out: &Path, lineage: bool) -> Result<()> {
    let refuse = |m: String| Error::Refused(format!("{}: {m}", out.display()));
    match std::fs::read_dir(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(e.to_string())),
        Ok(mut entries) => {
            if lineage && entries.next().is_some() {
                return Err(refuse(
                    "--lineage writes a directory per run: give a new or empty directory".into(),
                ));
            }
        }
    }
    let stale = out.join(flow_store::archive::SIGNATURE_FILE);
    match std::fs::remove_file(&stale) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(refuse(e.to_string())),
        _ => Ok(()),
    }
}

fn read_key(path: Option<&Path>) -> Result<Option<KeyFile>> {
    path.map(|p| KeyFile::read(p).map_err(|e| Error::Refused(format!("--sign: {e}"))))
        .transpose()
}

/// What `flow export` prints, local or remote.
fn print_export(
    g: &Global,
    run: &str,
    out: &Path,
    runs: usize,
    facts: u64,
    blobs: u64,
    signed: Option<&Signed>,
) {
    let mut v =
        json!({"run": run, "out": out.display().to_string(), "facts": facts, "blobs": blobs});
    if runs > 1 {
        v["runs"] = json!(runs);
    }
    if let Some(s) = signed {
        v["signer"] = json!(s.signer);
        v["key"] = json!(s.key);
        v["fingerprint"] = json!(s.fingerprint);
    }
    if g.json {
        out!("{v}");
        return;
    }
    let several = if runs > 1 {
        format!("{runs} runs, ")
    } else {
        String::new()
    };
    let signed = signed
        .map(|s| format!("; signed by {} with key {}", s.signer, s.fingerprint))
        .unwrap_or_default();
    out!(
        "exported {run} to {} ({several}{facts} facts, {blobs} blobs){signed}",
        out.display()
    );
}

/// `--redact` paths, parsed (refused with `--lineage`: a path names the
/// values of one run).
fn redactions(paths: &[String], lineage: bool) -> Result<Vec<flow_store::redact::ValuePath>> {
    if lineage && !paths.is_empty() {
        return Err(Error::Refused(
            "--redact names values of one run: export the run without --lineage (or redact the other runs one by one)".into(),
        ));
    }
    paths
        .iter()
        .map(|p| flow_store::redact::ValuePath::parse(p).map_err(Error::Refused))
        .collect()
}

/// A path the run does not hold as a blob is the caller's mistake.
fn refused(e: flow_store::Error) -> Error {
    match e {
        flow_store::Error::InvalidArgument(m) => Error::Refused(m),
        e => e.into(),
    }
}

/// `flow export RUN DIR` from the store under `--data`; with `--lineage`
/// the run's forks and nested runs too, with `--sign` signed.
pub(super) fn export(
    g: &Global,
    run: &str,
    out: &Path,
    lineage: bool,
    key: Option<&Path>,
    redact: &[String],
) -> Result<u8> {
    let run = run_id(run)?;
    let redact = redactions(redact, lineage)?;
    let key = read_key(key)?;
    let store = open_existing(g, &run)?;
    if !redact.is_empty() {
        // Refused before anything is written: a path that reaches no blob.
        store.reached(&run, &redact).map_err(refused)?;
    }
    prepare_out(out, lineage)?;
    let (runs, s) = if lineage {
        let runs = flow_store::lineage_runs(&*store, &run)?;
        (runs.len(), flow_store::export_runs(&*store, &runs, out)?)
    } else {
        let s = flow_store::export_run_redacted(&*store, &run, out, &redact).map_err(refused)?;
        (1, s)
    };
    let signed = sign(out, key.as_ref())?;
    print_export(
        g,
        run.as_str(),
        out,
        runs,
        s.facts,
        s.blobs,
        signed.as_ref(),
    );
    Ok(0)
}

/// `flow --server URL export RUN DIR`: the server's archive, unpacked
/// (and signed here: the key never leaves this machine).
pub(super) async fn export_remote(
    g: &Global,
    c: &Client,
    run: &str,
    out: &Path,
    lineage: bool,
    key: Option<&Path>,
    redact: &[String],
) -> Result<u8> {
    redactions(redact, lineage)?;
    let key = read_key(key)?;
    let tar = c.export_archive(run, lineage, redact).await?;
    prepare_out(out, lineage)?;
    std::fs::create_dir_all(out).map_err(|e| Error::Refused(format!("{}: {e}", out.display())))?;
    crate::tarball::unpack(&tar[..], out)
        .map_err(|e| Error::Refused(format!("the server's archive: {e}")))?;
    let dirs = match flow_store::archive_layout(out)? {
        flow_store::Layout::One => vec![out.to_path_buf()],
        flow_store::Layout::Several(runs) => runs.iter().map(|r| out.join(r.as_str())).collect(),
    };
    let mut facts = 0;
    let mut blobs = 0;
    for d in &dirs {
        facts += std::fs::read_to_string(d.join("history.jsonl"))
            .map(|t| t.lines().count() as u64)
            .unwrap_or(0);
        blobs += std::fs::read_dir(d.join("blobs")).map_or(0, |d| d.count() as u64);
    }
    let signed = sign(out, key.as_ref())?;
    print_export(g, run, out, dirs.len(), facts, blobs, signed.as_ref());
    Ok(0)
}

/// `flow keys new-signing FILE --signer NAME`: a new signing key.
pub(super) fn new_signing(g: &Global, file: &Path, signer: &str) -> Result<u8> {
    let key = KeyFile::generate(signer).map_err(Error::Refused)?;
    key.write_new(file).map_err(Error::Refused)?;
    let line = key.public_line();
    if g.json {
        let vk = key.key.verifying_key();
        out!(
            "{}",
            json!({"file": file.display().to_string(), "signer": signer, "key": crate::signing::keys::key_text(&vk), "fingerprint": crate::signing::keys::fingerprint(&vk), "line": line})
        );
    } else {
        out!("{line}");
        eprintln!(
            "wrote the secret key {} (mode 0600); add the line above to a trusted-keys file",
            file.display()
        );
    }
    Ok(0)
}

/// `flow import PATH` into the store under `--data`: every run verified
/// and the signature checked (against `--trust` when given) before
/// anything is written; all runs or none.
pub(super) fn import(
    g: &Global,
    dir: &Path,
    trust: Option<&Path>,
    namespace: &flow_store::Namespace,
) -> Result<u8> {
    let trust = trust
        .map(|p| TrustedKeys::read(p).map_err(|e| Error::Refused(format!("--trust: {e}"))))
        .transpose()?;
    // Opened (a tar unpacked) before the store: a path that is not
    // an archive changes nothing.
    let source =
        crate::tarball::ImportSource::open(dir).map_err(|e| Error::Refused(e.to_string()))?;
    let unpacked = source.dir();
    // A refusal names the private directory: name the file.
    let name = |m: String| m.replace(&unpacked.display().to_string(), &dir.display().to_string());
    let refused = |e: ImportError| match e {
        ImportError::Signature(r) => Error::Refused(name(r.0)),
        ImportError::Store(e) => match Error::from(e) {
            Error::Refused(m) => Error::Refused(name(m)),
            e => e,
        },
    };
    // Every run and the signature checked before the store is opened: a
    // refused archive does not even create one.
    let checked = check(&unpacked, trust.as_ref()).map_err(refused)?;
    let store = open_store(g)?;
    let imported = write(&*store, checked, namespace).map_err(refused)?;
    print_imported(g, &ImportAnswer::from(&imported));
    Ok(0)
}

/// `flow --server URL import PATH`: the archive sent as a tar, into
/// `namespace` when given (else the server's `default`).
pub(super) async fn import_remote(
    g: &Global,
    c: &Client,
    dir: &Path,
    namespace: Option<&flow_store::Namespace>,
) -> Result<u8> {
    let body = if dir.is_dir() {
        crate::tarball::pack(dir)
    } else {
        std::fs::read(dir)
    }
    .map_err(|e| Error::Refused(format!("{}: {e}", dir.display())))?;
    let a = c.import_archive(body, namespace).await?;
    print_imported(g, &a);
    Ok(0)
}

/// What `flow import` prints, local or remote: each run, then who signed.
fn print_imported(g: &Global, a: &ImportAnswer) {
    if g.json {
        // The one-run shape flow import has always printed (no `facts`),
        // with `runs` and `signature` when the archive has them.
        let mut v = json!(a);
        if let Some(m) = v.as_object_mut() {
            m.remove("facts");
        }
        out!("{v}");
        return;
    }
    let one = [crate::http::answers::RunImportAnswer {
        run: a.run.clone(),
        imported: a.imported,
        facts: a.facts,
        truncated: a.truncated.clone(),
    }];
    for r in a.runs.as_deref().unwrap_or(&one) {
        let torn = r.truncated.as_ref().map(|t| (t.fact, t.reason.as_str()));
        print_import(g, &r.run, r.imported, torn);
    }
    if let Some(s) = &a.signature {
        match &s.trusted_as {
            Some(name) => out!("signed by {name} (trusted key {})", s.fingerprint),
            None => out!(
                "signed by {:?} with key {} ({}), not a trusted key: no trusted keys are configured",
                s.signer,
                s.fingerprint,
                s.key
            ),
        }
    }
}
