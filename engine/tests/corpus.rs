//! Every FlowSpec file of a corpus checks with no errors, the same way
//! twice (but the shared corpus's two that can never run, refused with
//! FS0901: `fixtures::SHARED_REFUSED`) (FS-API-5: "the reference flows … form our validator conformance
//! corpus"; FS-TOP-2). The repository's corpus (`tests/fixtures/flowspec/`)
//! always runs; the real upstream files of the shared corpus are an extra
//! conformance pass (`shared_*`, run by `.ci/run` when `../shared` exists).

#[path = "../../tests/fixtures/fixtures.rs"]
mod fixtures;

use flow_engine::{Severity, check};
use std::path::Path;

/// Checks every file of `dir`; returns how many there were.
fn check_corpus(dir: &Path) -> usize {
    let files = fixtures::flowspec_files(dir);
    let mut failures = Vec::new();
    for (name, doc) in &files {
        let report = check(doc);
        // The shared corpus's files that can never run are refused with
        // FS0901 at their pointer (issue 41 item 2), and nothing else.
        let refused = fixtures::SHARED_REFUSED
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, pointer)| *pointer);
        for d in &report.diagnostics {
            eprintln!("{name}: {d}");
            let expected = refused.is_some_and(|p| d.code.code() == "FS0901" && d.pointer == p);
            if d.severity == Severity::Error && !expected {
                failures.push(format!("{name}: {d}"));
            }
        }
        if let Some(p) = refused {
            assert!(
                report
                    .diagnostics
                    .iter()
                    .any(|d| d.code.code() == "FS0901" && d.pointer == p),
                "{name}: refused with FS0901 at {p}: {:?}",
                report.diagnostics
            );
            continue;
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
    let n = check_corpus(&fixtures::flowspec_corpus());
    assert!(n >= 10, "the repository corpus shrank to {n} files");
}

#[test]
#[ignore = "shared conformance: run by .ci/run when ../shared exists"]
fn shared_corpus_checks_without_errors() {
    let Some(dir) = fixtures::shared("flowspec-corpus") else {
        return;
    };
    assert_eq!(
        check_corpus(&dir),
        12,
        "expected the 12 shared corpus flows"
    );
}
