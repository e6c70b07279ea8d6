//! `flow --server URL` gives the same output as the embedded store, and
//! every command the CLI prints runs as printed (issue 41 §6–7).
//!
//! One SQLite store, served by a real `flow serve` and read by the real
//! `flow` binary directly: each scenario runs once locally (`--data DIR`)
//! on one run and once over the server (`--server URL`) on another, and
//! the outputs — stdout, stderr and the exit code — must be identical once
//! the run ids and the store/server prefix are written the same way. Then
//! every command a scenario printed (resume lines, `next:` lines, `more:`
//! lines, the halted line) is executed with `sh -c`, exactly as printed,
//! and must not be refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn review() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/review/review.json")
}

/// What one `flow` command printed.
#[derive(Debug, PartialEq)]
struct Printed {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `flow PREFIX ARGS` (PREFIX `--data DIR` or `--server URL`).
fn flow(prefix: &[&str], args: &[&str]) -> Printed {
    let out = common::flow()
        .env_remove("FLOW_DATA")
        .env_remove("FLOW_SERVER")
        .env("NO_COLOR", "1")
        .args(prefix)
        .args(args)
        .output()
        .unwrap();
    Printed {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The output with every run id written `RUN` and the prefix `flow @`.
fn normal(p: &Printed, prefix: &str) -> Printed {
    let norm = |s: &str| {
        let s = s.replace(prefix, "flow @");
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(i) = rest.find("run-") {
            out.push_str(&rest[..i]);
            let id = &rest[i..];
            let len = 4 + id[4..]
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
            out.push_str("RUN");
            rest = &id[len..];
        }
        out.push_str(rest);
        out
    };
    Printed {
        code: p.code,
        stdout: norm(&p.stdout),
        stderr: norm(&p.stderr),
    }
}

/// The run id a `flow run` / `fork` printed first.
fn run_of(p: &Printed) -> String {
    p.stdout
        .split_whitespace()
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("no run id in {p:?}"))
        .to_string()
}

/// Every command a text printed: from `flow ` to the end of the line (a
/// `# what` comment is shell syntax and stays).
fn printed_commands(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let i = l.find("flow --")?;
            Some(l[i..].to_string())
        })
        .collect()
}

/// Runs `cmd` with `sh -c` (the `flow` under test first on PATH): it must
/// not be refused (exit 2) nor fail to reach its store or server.
fn runs_as_printed(cmd: &str, cwd: &Path) -> Printed {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_flow"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .env("PATH", path)
        .env_remove("FLOW_DATA")
        .env_remove("FLOW_SERVER")
        .output()
        .unwrap();
    let p = Printed {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        p.code != 2 && !p.stderr.contains("cannot reach"),
        "printed command did not run: {cmd}\n{p:?}"
    );
    p
}

#[test]
fn every_command_prints_the_same_locally_and_over_a_server_and_what_it_prints_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    std::fs::create_dir_all(&data).unwrap();
    let server = common::serve(&data, &[]);
    let data_arg = data.to_str().unwrap().to_string();
    let local_prefix = ["--data", data_arg.as_str()];
    let remote_prefix = ["--server", server.base.as_str()];
    let local_text = format!("flow --data {data_arg}");
    let remote_text = format!("flow --server {}", server.base);
    let review = review();
    let review = review.to_str().unwrap();
    // A second directory to run printed commands from: they must not
    // depend on the working directory.
    let elsewhere = tempfile::tempdir().unwrap();

    let mut printed = Vec::new();
    let mut same = |what: &str, local: &Printed, remote: &Printed| {
        assert_eq!(
            normal(local, &local_text),
            normal(remote, &remote_text),
            "{what}: local and --server differ"
        );
        printed.extend(printed_commands(&local.stdout));
        printed.extend(printed_commands(&local.stderr));
        printed.extend(printed_commands(&remote.stdout));
        printed.extend(printed_commands(&remote.stderr));
    };

    let input = r#"{"text": "the same either way"}"#;
    let (l, r) = (
        flow(&local_prefix, &["run", review, "--input", input]),
        flow(&remote_prefix, &["run", review, "--input", input]),
    );
    assert_eq!(l.code, 3, "{l:?}");
    same("run", &l, &r);
    let (a, b) = (run_of(&l), run_of(&r));
    for args in [
        vec!["history", "RUN"],
        vec!["history", "RUN", "--summary"],
        vec!["history", "RUN", "--kind", "Call"],
        vec!["history", "RUN", "--fact", "4"],
        vec!["history", "RUN", "--limit", "2", "--offset", "1"],
        vec!["watch", "RUN"],
        vec!["replay", "RUN"],
    ] {
        let with = |run: &str| -> Vec<String> {
            args.iter()
                .map(|a| {
                    if *a == "RUN" {
                        run.to_string()
                    } else {
                        a.to_string()
                    }
                })
                .collect()
        };
        let la = with(&a);
        let ra = with(&b);
        let l = flow(
            &local_prefix,
            &la.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let r = flow(
            &remote_prefix,
            &ra.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        same(&args.join(" "), &l, &r);
    }
    let (l, r) = (
        flow(&local_prefix, &["check", review]),
        flow(&remote_prefix, &["check", review]),
    );
    assert!(l.stdout.contains("checks (0 warnings)"), "{l:?}");
    same("check", &l, &r);
    // Listing: one store, so the same rows; a page of one prints `more:`.
    let (l, r) = (
        flow(
            &local_prefix,
            &["runs", "--limit", "1", "--state", "paused"],
        ),
        flow(
            &remote_prefix,
            &["runs", "--limit", "1", "--state", "paused"],
        ),
    );
    assert!(l.stdout.contains("more: "), "{l:?}");
    same("runs", &l, &r);
    // The run query's flags (issue 38 item 1): the same rows, header,
    // counts and `more:` line locally and over the server, and the `more:`
    // line carries every flag.
    let query = [
        "runs",
        "--limit",
        "1",
        "--newest",
        "--state",
        "paused,halted",
        "--flow",
        "review-flow",
        "--entry",
        "review.json",
        "--started-from",
        "1",
        "--counts",
    ];
    let (l, r) = (flow(&local_prefix, &query), flow(&remote_prefix, &query));
    assert!(l.stdout.starts_with("RUN "), "a header: {l:?}");
    assert!(l.stdout.contains("total: "), "{l:?}");
    let more = l.stdout.lines().find(|x| x.starts_with("more: ")).unwrap();
    for flag in [
        "--before",
        "--newest",
        "--state paused,halted",
        "--flow review-flow",
        "--entry review.json",
        "--started-from 1",
        "--counts",
        "--limit 1",
    ] {
        assert!(more.contains(flag), "{flag} in {more}");
    }
    // `same` gathers the printed commands (the more: line among them).
    same(&query.join(" "), &l, &r);
    let attr = ["runs", "--attr", "customer=acme", "--fault", "boom"];
    let (l, r) = (flow(&local_prefix, &attr), flow(&remote_prefix, &attr));
    assert_eq!(l.stdout.trim(), "no runs", "{l:?}");
    same(&attr.join(" "), &l, &r);
    let bad = ["runs", "--started-from", "5", "--started-to", "5"];
    let (l, r) = (flow(&local_prefix, &bad), flow(&remote_prefix, &bad));
    assert_eq!(l.code, 2, "{l:?}");
    assert!(l.stderr.contains("range is empty"), "{l:?}");
    same(&bad.join(" "), &l, &r);

    // Every printed command runs as printed, from another directory; the
    // resume lines go last (they change the runs).
    printed.sort_by_key(|c| c.contains(" resume "));
    printed.dedup();
    assert!(
        printed.iter().any(|c| c.contains(" resume ")),
        "a resume line was printed: {printed:?}"
    );
    assert!(printed.iter().any(|c| c.contains(" runs --after ")));
    // A call is answered once: of the resume lines for one run (printed
    // by run, watch and history --summary alike) the first is run.
    let mut answered = std::collections::BTreeSet::new();
    for cmd in &printed {
        if cmd.contains(" resume ") {
            let run = cmd
                .split_whitespace()
                .find(|w| w.starts_with("run-"))
                .unwrap();
            if !answered.insert(run.to_string()) {
                continue;
            }
        }
        runs_as_printed(cmd, elsewhere.path());
    }
    for run in [&a, &b] {
        let v = flow(&local_prefix, &["--json", "history", run]);
        assert!(
            v.stdout.contains(r#""state":"completed""#),
            "{run} was resumed to its end: {v:?}"
        );
    }
}

/// Issue 41 §7: a run a server started binds its Tools from the server's
/// `--tools`; the commands a local `flow watch` and `flow history
/// --summary` print for it carry that `--tools` (the resume line was
/// refused `triage.json#classify is unbound`), and run as printed: the
/// resume answers the call and the run completes, and the fork line
/// printed once it has ended starts a fork (binding every Tool the
/// program reaches, as any start does) that completes.
#[test]
fn printed_commands_for_a_run_a_server_started_carry_its_tools() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let tools = std::fs::canonicalize(repo.join("examples/flows/triage/flow.toml")).unwrap();
    let triage = repo.join("examples/flows/triage/triage.json");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    std::fs::create_dir_all(&data).unwrap();
    let server = common::serve_bound(&data, Some(&tools), &[]);
    let elsewhere = tempfile::tempdir().unwrap();
    let input = r#"{"ticket": "the site is down", "customer": "c-1"}"#;
    let started = flow(
        &["--server", server.base.as_str()],
        &["run", triage.to_str().unwrap(), "--input", input],
    );
    assert_eq!(started.code, 3, "{started:?}");
    let run = run_of(&started);
    let local = ["--data", data.to_str().unwrap()];
    let with_tools = format!("--tools {}", tools.display());

    let mut printed = Vec::new();
    for args in [vec!["watch", &run], vec!["history", &run, "--summary"]] {
        let p = flow(&local, &args);
        assert_eq!(p.code, if args[0] == "watch" { 3 } else { 0 }, "{p:?}");
        printed.extend(printed_commands(&p.stdout));
    }
    let resumes: Vec<&String> = printed.iter().filter(|c| c.contains(" resume ")).collect();
    assert_eq!(resumes.len(), 2, "watch's and the summary's: {printed:?}");
    for c in &resumes {
        assert!(c.contains(&with_tools), "{c}");
    }
    for c in printed.iter().filter(|c| !c.contains(" resume ")) {
        runs_as_printed(c, elsewhere.path());
    }
    let resumed = runs_as_printed(resumes[0], elsewhere.path());
    assert_eq!(resumed.code, 0, "the run completes: {resumed:?}");

    let summary = flow(&local, &["history", &run, "--summary"]);
    let fork = printed_commands(&summary.stdout)
        .into_iter()
        .find(|c| c.contains(" fork "))
        .unwrap_or_else(|| panic!("no fork line: {summary:?}"));
    assert!(fork.contains(&with_tools), "{fork}");
    let forked = runs_as_printed(&fork, elsewhere.path());
    assert_eq!(forked.code, 0, "the fork completes: {forked:?}");
}
