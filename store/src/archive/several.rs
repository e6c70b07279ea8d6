//! Archives of several runs (docs/custody.md "Signed archives and archives
//! of several runs"): a root holding one archive directory per run, each
//! named by its run id — the layout `flow runs --runs DIR` already reads
//! as a root of archives — and, when signed, `signature.json` beside
//! them. A run's lineage (the run, its forks and its nested runs,
//! recursively) exports into one such root and imports all or nothing.
//!
//! Each run keeps its own `blobs/`: a blob two runs share is stored twice
//! in the file, and every run directory stays a whole archive that
//! `flow import DIR/<run>` and `flow runs --runs DIR` read alone.

use super::*;
use crate::api::{ImportRuns, ListRuns};

/// The detached signature's file name, at the top of an archive (beside
/// `history.jsonl`, or beside the run directories).
pub const SIGNATURE_FILE: &str = "signature.json";

/// The most runs one archive carries (a lineage past this is refused at
/// export; an archive with more at import).
pub const MAX_RUNS: usize = 1_000;

/// The form of an archive directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One run: `history.jsonl`, `host.jsonl`, `blobs/` at the top.
    One,
    /// Several runs: a directory per run, by id, in id order.
    Several(Vec<RunId>),
}

fn refuse(reason: String) -> Error {
    Error::ArchiveRefused {
        component: "archive".into(),
        fact: None,
        reason,
    }
}

/// Tells an archive of one run from a root of several. Anything at the top
/// of a root but run directories and `signature.json` refuses it (a file
/// named like neither is not ours to ignore when it may be signed over).
pub fn archive_layout(dir: &Path) -> Result<Layout> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(refuse(format!(
                "{} is not an archive directory",
                dir.display()
            )));
        }
        Err(e) => return Err(Error::io(dir, e)),
    }
    if fs::symlink_metadata(dir.join("history.jsonl")).is_ok() {
        return Ok(Layout::One);
    }
    let mut runs = Vec::new();
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let kind = e.file_type().map_err(io(dir))?;
        if name == SIGNATURE_FILE && kind.is_file() {
            continue;
        }
        match RunId::parse(&name) {
            Ok(run) if kind.is_dir() => runs.push(run),
            _ => {
                return Err(refuse(format!(
                    "{name:?} is neither a run directory (named by its run id) nor {SIGNATURE_FILE}: an archive holds history.jsonl, host.jsonl and blobs/, or one such directory per run"
                )));
            }
        }
        if runs.len() > MAX_RUNS {
            return Err(refuse(format!("more than {MAX_RUNS} runs in one archive")));
        }
    }
    if runs.is_empty() {
        return Err(refuse(format!(
            "{} holds no history.jsonl and no run directory",
            dir.display()
        )));
    }
    runs.sort();
    Ok(Layout::Several(runs))
}

/// Reads and verifies every run of an archive, one or several ([`read_archive`]
/// each); nothing is written. A root's runs come in id order.
pub fn read_archives(dir: &Path) -> Result<Vec<VerifiedArchive>> {
    match archive_layout(dir)? {
        Layout::One => Ok(vec![read_archive(dir)?]),
        Layout::Several(runs) => runs
            .iter()
            .map(|r| {
                read_archive(&dir.join(r.as_str())).map_err(|e| match e {
                    // Say which run of the root.
                    Error::ArchiveRefused {
                        component,
                        fact,
                        reason,
                    } => Error::ArchiveRefused {
                        component: format!("{r}/{component}"),
                        fact,
                        reason,
                    },
                    e => e,
                })
            })
            .collect(),
    }
}

/// Imports every run of an archive: all are verified before anything is
/// written, then written in one transaction (all or none); idempotent.
pub fn import_runs<S: ImportRuns + ?Sized>(store: &S, dir: &Path) -> Result<Vec<ImportOutcome>> {
    store.import_verified_all(read_archives(dir)?)
}

/// Refuses a run given twice to one import.
pub(crate) fn check_distinct(archives: &[VerifiedArchive]) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for a in archives {
        if !seen.insert(a.run.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "run {} is given twice to one import",
                a.run
            )));
        }
    }
    Ok(())
}

/// A run and its descendants: its forks and nested runs, theirs, and so on,
/// in id order (a run is created after the run it comes from, so its
/// parent's id sorts first).
pub fn lineage_runs<S: ListRuns + ReadHistory + ?Sized>(
    store: &S,
    run: &RunId,
) -> Result<Vec<RunId>> {
    store.run_info(run)?;
    let mut seen = std::collections::BTreeSet::from([run.clone()]);
    let mut todo = vec![run.clone()];
    while let Some(r) = todo.pop() {
        let page = store.children(&r, MAX_RUNS as u32)?;
        if page.truncated {
            return Err(Error::InvalidArgument(format!(
                "{r} has more than {MAX_RUNS} forks and nested runs: export them one by one"
            )));
        }
        for c in page.children {
            let c = RunId::parse(&c.run)?;
            if seen.insert(c.clone()) {
                todo.push(c);
            }
        }
        if seen.len() > MAX_RUNS {
            return Err(Error::InvalidArgument(format!(
                "the lineage of {run} has more than {MAX_RUNS} runs: export them one by one"
            )));
        }
    }
    Ok(seen.into_iter().collect())
}

/// Exports several runs into `root`, each as `root/<run>` ([`export_run`]).
pub fn export_runs<S: ReadHistory + HostRecords + Redact + ?Sized>(
    store: &S,
    runs: &[RunId],
    root: &Path,
) -> Result<ExportSummary> {
    let mut total = ExportSummary { facts: 0, blobs: 0 };
    for r in runs {
        let s = super::export_run(store, r, &root.join(r.as_str()))?;
        total.facts += s.facts;
        total.blobs += s.blobs;
    }
    Ok(total)
}

/// A run's `host.jsonl` as export writes it: the text a signature covers
/// (import accepts only canonical lines, so the verified records give back
/// the file's bytes).
pub fn host_jsonl(records: &[HostRecordRow]) -> String {
    let mut out = String::new();
    for r in records {
        out.push_str(&canonical(&super::export::host_line(r)));
        out.push('\n');
    }
    out
}
