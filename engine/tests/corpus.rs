//! The real FlowSpec files of `../shared/flowspec-corpus/` check with no
//! errors (issue 4 item 6; FS-API-5: "the reference flows in flows/*.json
//! form our validator conformance corpus"; FS-TOP-2). The files are read in
//! place, never copied into the repository.

use flow_engine::{Severity, check};
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLOWSPEC_CORPUS") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let manifest = manifest.canonicalize().unwrap_or(manifest);
    manifest.join("../../shared/flowspec-corpus")
}

fn corpus_files() -> Vec<PathBuf> {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| p.file_name().is_some_and(|n| n != "flowspec.schema.json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_flow_checks_without_errors() {
    let files = corpus_files();
    assert_eq!(
        files.len(),
        12,
        "expected the 12 corpus flows, found {files:?}"
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let doc =
            flow_abi::json::parse(&text).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        let report = check(&doc);
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for d in &report.diagnostics {
            eprintln!("{name}: {d}");
            if d.severity == Severity::Error {
                failures.push(format!("{name}: {d}"));
            }
        }
        if failures.is_empty() {
            assert!(report.flow().is_some());
        }
    }
    assert!(
        failures.is_empty(),
        "errors in the corpus:\n{}",
        failures.join("\n")
    );
}

#[test]
fn checking_is_deterministic() {
    for path in corpus_files() {
        let doc = flow_abi::json::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(check(&doc).diagnostics, check(&doc).diagnostics);
    }
}
