//! Every FlowSpec file of a corpus checks with no errors, the same way
//! twice (FS-API-5: "the reference flows … form our validator conformance
//! corpus"; FS-TOP-2), but the shared corpus's two that can never run,
//! refused with FS0901 (`fixtures::SHARED_REFUSED`). The repository's corpus (`tests/fixtures/flowspec/`)
//! always runs; the real upstream files of the shared corpus are an extra
//! conformance pass (`shared_*`, run by `.ci/run` when `../shared` exists).

#[path = "../../tests/fixtures/fixtures.rs"]
mod fixtures;
#[path = "../../tests/fixtures/refused.rs"]
mod refused;

use flow_engine::{Severity, check};
use std::collections::BTreeMap;
use std::path::Path;

/// Checks every file of `files` (read from `dir`); returns how many
/// there were.
fn check_corpus(dir: &Path, files: BTreeMap<String, serde_json::Value>) -> usize {
    let mut failures = Vec::new();
    for (name, doc) in &files {
        let report = check(doc);
        for d in &report.diagnostics {
            eprintln!("{name}: {d}");
            if d.severity == Severity::Error {
                failures.push(format!("{name}: {d}"));
            }
        }
        if !report
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
        {
            assert!(report.flow().is_some(), "{name}: no model without errors");
        }
        assert_eq!(report.diagnostics, check(doc).diagnostics, "{name}");
    }
    assert!(
        failures.is_empty(),
        "errors in {}:\n{}",
        dir.display(),
        failures.join("\n")
    );
    files.len()
}

#[test]
fn every_repo_corpus_flow_checks_without_errors() {
    let dir = fixtures::flowspec_corpus();
    let n = check_corpus(&dir, fixtures::flowspec_files(&dir));
    assert!(n >= 10, "the repository corpus shrank to {n} files");
}

#[test]
#[ignore = "shared conformance: run by .ci/run when ../shared exists"]
fn shared_corpus_checks_without_errors() {
    let Some(dir) = fixtures::shared("flowspec-corpus") else {
        return;
    };
    assert_eq!(
        check_corpus(
            &dir,
            refused::without_refused(fixtures::flowspec_files(&dir))
        ),
        10,
        "expected the 12 shared corpus flows, 2 of them refused"
    );
}
