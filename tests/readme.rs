//! The README's commands, run as printed (issue 15): the main job on the
//! embedded default, then every line of the block that answers its review
//! and looks at what was recorded. Two things differ from a user's shell,
//! and only these: the store is a temporary one (`FLOW_DATA`, which `flow`
//! reads as `--data`), so the checkout's own `./.flow` is left alone, and
//! `./target/debug/flow` is the binary this test was built with (the same
//! one, wherever the target directory is). The README's `cargo build
//! --workspace &&` prefix is the build this test runs after.

#[path = "fixtures/fixtures.rs"]
mod fixtures;

mod common;

use std::process::{Command, Output};

/// The ```sh blocks of README.md, each as its commands: continuation lines
/// joined, comments and blank lines dropped.
fn sh_blocks() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(fixtures::repo().join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in readme.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(cmds), l) => {
                let l = l.trim_start();
                if l.is_empty() || l.starts_with('#') {
                    continue;
                }
                match l.strip_suffix('\\') {
                    Some(head) => pending.push_str(head),
                    None => {
                        pending.push_str(l);
                        cmds.push(std::mem::take(&mut pending));
                    }
                }
            }
            _ => {}
        }
    }
    blocks
}

/// Runs `line` with `sh -c` at the repository's root on `data`, with
/// `./target/debug/flow` standing for this test's binary.
fn sh(line: &str, data: &std::path::Path) -> Output {
    let bin = env!("CARGO_BIN_EXE_flow");
    Command::new("sh")
        .arg("-c")
        .arg(line.replace("./target/debug/flow", bin))
        .current_dir(fixtures::repo())
        .env("FLOW_DATA", data)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_readme_commands_run_as_printed() {
    let llm = std::path::Path::new(env!("CARGO_BIN_EXE_flow"))
        .with_file_name("flow-llm")
        .is_file();
    assert!(
        llm,
        "the README's main job needs flow-llm beside flow: cargo build --workspace (bash .ci/run does)"
    );
    let app = common::TestApp::new();
    let blocks = sh_blocks();
    // The main job: the first block's first command, after its build.
    let main_job = blocks[0][0]
        .strip_prefix("cargo build --workspace && ")
        .unwrap_or_else(|| panic!("the README's first command changed: {}", blocks[0][0]));
    let out = sh(main_job, app.data.path());
    assert_eq!(
        out.status.code(),
        Some(3),
        "it pauses for review: {}",
        text(&out)
    );
    let printed = text(&out);
    assert!(printed.contains("resume"), "{printed}");
    let run = printed
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("no run id printed: {printed}"))
        .to_string();
    // The next block: a shell function, then each command with RUN named.
    let next = &blocks[1];
    let function = next[0].clone();
    assert!(function.starts_with("flow() {"), "{function}");
    let mut seen = Vec::new();
    for line in &next[1..] {
        let command = line.split(" #").next().unwrap().trim().replace("RUN", &run);
        let out = sh(&format!("{function}\n{command}"), app.data.path());
        let code = out.status.code();
        let verb = command.split_whitespace().nth(1).unwrap_or("").to_string();
        let expected: &[i32] = match verb.as_str() {
            // The fork re-runs the review with a new ticket: it pauses.
            "fork" => &[3],
            _ => &[0],
        };
        assert!(
            code.is_some_and(|c| expected.contains(&c)),
            "{command}: exit {code:?}: {}",
            text(&out)
        );
        if verb == "replay" {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "matched");
        }
        seen.push(verb);
    }
    for verb in ["resume", "history", "replay", "fork", "runs", "test"] {
        assert!(
            seen.iter().any(|v| v == verb),
            "the README no longer runs {verb}"
        );
    }
}
