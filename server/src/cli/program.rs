//! A program's own commands: `flow check` (here or, with `--server`,
//! `POST /v1/check`: the same diagnostics and text), `flow tools` (the
//! reachable Tool declarations) and `flow test` (a directory of tests,
//! run on a virtual clock).

use super::remote::documents;
use super::{Global, print_check, shell_quote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::check::CheckRequest;
use crate::source::Sources;
use serde_json::{Value as Json, json};
use std::path::Path;

pub(super) fn check(g: &Global, flow: &Path) -> Result<u8> {
    let sources = Sources::read(flow)?;
    let (all, errors) = sources.diagnostics();
    if g.json {
        out!("{}", json!({"diagnostics": all, "errors": errors}));
    } else {
        print_check(g, flow, &all, errors);
    }
    Ok(if errors == 0 { 0 } else { 2 })
}

/// `flow --server URL check`.
pub(super) async fn check_remote(g: &Global, c: &Client, path: &Path) -> Result<u8> {
    let sources = Sources::read(path)?;
    let (flow, modules) = documents(&sources);
    let request = CheckRequest {
        flow,
        modules,
        name: Some(sources.root.clone()),
    };
    let a = c.check_flow(&request).await?;
    if g.json {
        out!("{}", json!(a));
    } else {
        print_check(g, path, &a.diagnostics, a.errors as usize);
    }
    Ok(if a.ok { 0 } else { 2 })
}

pub(super) fn tools(flow: &Path, entry: Option<&str>) -> Result<u8> {
    if let Some(e) = entry
        && e != flow_engine::program::ENTRY
    {
        return Err(Error::Refused(format!(
            "a FlowSpec program has one entry, {}, not {e}",
            flow_engine::program::ENTRY
        )));
    }
    let sources = Sources::read(flow)?;
    // CLI-21, CLI-25: the document is printed whether or not the program
    // checks; a program that does not check has its diagnostics in
    // `programs[].diagnostics`, and the exit code is 2.
    let (doc, checks) = sources.tools_document();
    out!("{}", flow_abi::json::canonical(&doc));
    if checks {
        return Ok(0);
    }
    eprintln!(
        "flow: {} does not check: its diagnostics are in programs[].diagnostics (`flow check {}` lists them)",
        flow.display(),
        shell_quote(&flow.to_string_lossy())
    );
    Ok(2)
}

/// `flow test DIR`: exit 0 when every test passed, 1 when one failed, 2
/// when one could not run.
pub(super) fn test(g: &Global, dir: &Path) -> Result<u8> {
    let results = crate::testing::run_dir(dir)?;
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    let broken = results.iter().any(|r| r.broken);
    if g.json {
        let rows: Vec<Json> = results
            .iter()
            .map(|r| json!({"test": r.name, "passed": r.failure.is_none(), "failure": r.failure, "broken": r.broken}))
            .collect();
        out!(
            "{}",
            json!({"tests": rows, "passed": results.len() - failed, "failed": failed})
        );
    } else {
        for r in &results {
            match &r.failure {
                None => out!("ok    {}", r.name),
                Some(why) => out!("FAIL  {}: {why}", r.name),
            }
        }
        out!(
            "flow test: {} passed, {failed} failed",
            results.len() - failed
        );
    }
    Ok(if broken {
        2
    } else if failed > 0 {
        1
    } else {
        0
    })
}
