//! Shared by the tests that start the real `flow serve` process.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `flow serve` on `data` with `args` after `serve` (binding
/// submitted flows' Tools with `tools`, with `env` set for the Tool
/// processes it starts) and reads the address it prints. `flow-llm` and
/// the other workspace binaries are found beside `flow`.
pub fn serve_args(
    data: &Path,
    tools: Option<&Path>,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, String) {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_flow"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(&bin);
    cmd.args([
        "--data",
        data.to_str().unwrap(),
        "serve",
        "--listen",
        "127.0.0.1:0",
    ])
    .args(args)
    .env("PATH", path)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(t) = tools {
        cmd.arg("--tools").arg(t);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("flowd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, base)
}

/// [`serve_args`] with no extra flags.
pub fn serve_with(data: &Path, tools: Option<&Path>, env: &[(&str, &str)]) -> (Child, String) {
    serve_args(data, tools, env, &[])
}

/// The review example (pauses at a hitl), as a submitted flow.
pub fn review_flow() -> serde_json::Value {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}
