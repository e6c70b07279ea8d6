//! An archive's import, the same for `flow import` and `POST /v1/archives`:
//! every run read and verified, then the signature checked against the
//! trusted keys, then all runs written in one transaction — nothing is
//! written unless every check passes (docs/custody.md).

use super::keys::TrustedKeys;
use super::{Refused, Signed, check_archive};
use flow_store::{ImportOutcome, ImportRuns, Namespace, RunId, TornTail};
use std::path::Path;

/// What an import did to one run.
#[derive(Clone, Debug)]
pub struct RunImported {
    pub run: RunId,
    /// Written now; `false` when the store already held this history.
    pub imported: bool,
    /// The run's fact count, when written.
    pub facts: Option<u64>,
    /// A torn last fact left out (CRASH-7).
    pub torn: Option<TornTail>,
}

/// What an import did: its runs in id order (an archive of one run has
/// one), and who signed it.
#[derive(Clone, Debug)]
pub struct Imported {
    pub runs: Vec<RunImported>,
    pub signed: Option<Signed>,
}

impl Imported {
    /// Whether any run was written now.
    pub fn any_written(&self) -> bool {
        self.runs.iter().any(|r| r.imported)
    }
}

/// Why an import refused: the store's refusal (or failure), or the
/// signature's.
#[derive(Debug)]
pub enum ImportError {
    Store(flow_store::Error),
    Signature(Refused),
}

impl From<flow_store::Error> for ImportError {
    fn from(e: flow_store::Error) -> ImportError {
        ImportError::Store(e)
    }
}

/// An archive whose every run and whose signature were checked, ready to
/// write.
pub struct Checked {
    archives: Vec<flow_store::VerifiedArchive>,
    signed: Option<Signed>,
}

/// Reads and checks the archive at `root` (one run or several): every run
/// verified, the signature checked against `trust`. Touches no store.
pub fn check(root: &Path, trust: Option<&TrustedKeys>) -> Result<Checked, ImportError> {
    let archives = flow_store::read_archives(root)?;
    let signed = check_archive(root, &archives, trust).map_err(ImportError::Signature)?;
    Ok(Checked { archives, signed })
}

/// Imports the archive at `root` ([`check`], then [`write`]) into
/// `namespace`.
pub fn import_archive<S: ImportRuns + ?Sized>(
    store: &S,
    root: &Path,
    trust: Option<&TrustedKeys>,
    namespace: &Namespace,
) -> Result<Imported, ImportError> {
    write(store, check(root, trust)?, namespace)
}

/// Writes a checked archive's runs in one transaction; new runs go to
/// `namespace` (issue 40 item 4).
pub fn write<S: ImportRuns + ?Sized>(
    store: &S,
    c: Checked,
    namespace: &Namespace,
) -> Result<Imported, ImportError> {
    let Checked { archives, signed } = c;
    let torn: Vec<Option<TornTail>> = archives.iter().map(|a| a.torn().cloned()).collect();
    let outcomes = store.import_verified_all_in(namespace, archives)?;
    let runs = outcomes
        .into_iter()
        .zip(torn)
        .map(|(o, torn)| match o {
            ImportOutcome::Imported { run, facts } => RunImported {
                run,
                imported: true,
                facts: Some(facts),
                torn,
            },
            ImportOutcome::AlreadyPresent { run } => RunImported {
                run,
                imported: false,
                facts: None,
                torn,
            },
        })
        .collect();
    Ok(Imported { runs, signed })
}
