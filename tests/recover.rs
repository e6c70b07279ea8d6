//! Bulk recovery (issue 39, item 2) end to end: the real `flow` binary and
//! the real server, on SQLite and on Postgres. A flow with no Tool whose
//! small branch writes a text to an integer field and faults
//! (tests/fixtures/flows/recover/fault.json); fixed.json fixes that node.
//! `flow recover --flow fixed.json` forks each faulted run from its
//! Checkpoint at the faulting node onto the fixed program: each fork
//! starts at that Checkpoint (its history holds nothing from before it,
//! so nothing before it is done again), completes, and replays matched;
//! the dry run changes nothing; a second recovery, over HTTP or on the
//! store itself, finds every run `already recovered` by its fork's
//! lineage and forks nothing; a program that no checkpoint fits leaves
//! the runs `unrecoverable` (exit 1).

mod common;

use common::{flow, post_json, serve};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs seeded: n = 0..RUNS, those below SMALL fault.
const RUNS: u64 = 8;
const SMALL: u64 = 4;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/flows/recover")
        .join(name)
}

fn path(name: &str) -> String {
    fixture(name).to_str().unwrap().to_string()
}

/// Where the `flow` commands go.
enum At {
    Server(String),
    Data(PathBuf),
}

/// `flow [--server URL | --data DIR] --json ARGS`: exit code and JSON.
fn cli(at: &At, args: &[&str]) -> (i32, Json) {
    let mut c = flow();
    match at {
        At::Server(url) => c.args(["--server", url]),
        At::Data(dir) => c.arg("--data").arg(dir),
    };
    let out = c.arg("--json").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// `flow recover --flow FIXED ARGS`.
fn recover(at: &At, fixed: &str, args: &[&str]) -> (i32, Json) {
    let mut a = vec!["recover", "--flow", fixed];
    a.extend_from_slice(args);
    cli(at, &a)
}

fn runs(at: &At) -> usize {
    let (code, v) = cli(at, &["runs", "--limit", "200"]);
    assert_eq!(code, 0, "{v}");
    v["runs"].as_array().unwrap().len()
}

/// The report's runs with this outcome: run → the line.
fn outcome(report: &Json, which: &str) -> BTreeMap<String, Json> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == which)
        .map(|r| (r["run"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

/// Starts the runs over HTTP: the faulted ones (n below SMALL), by id.
async fn seed(base: &str) -> Vec<String> {
    let client = reqwest::Client::new();
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("fault.json")).unwrap()).unwrap();
    let mut faulted = Vec::new();
    for n in 0..RUNS {
        let body = json!({"flow": doc, "name": "fault.json", "input": {"n": n, "small": "x", "big": 7}, "wait": 30});
        let (status, v) = post_json(&client, format!("{base}/v1/runs"), &body).await;
        assert_eq!(status, 201, "{v}");
        let want = if n < SMALL { "faulted" } else { "completed" };
        assert_eq!(v["state"], want, "{v}");
        if n < SMALL {
            faulted.push(v["run"].as_str().unwrap().to_string());
        }
    }
    faulted.sort();
    faulted
}

/// A fork of `parent` made by the recovery: its Start names the parent and
/// the checkpoint and records the fixed program; its history starts at
/// that Checkpoint (the small_label node, the parent's state) and holds
/// no Call; it completed, and replays matched.
fn check_fork(at: &At, parent: &str, fork: &str, checkpoint: u64) {
    let (code, h) = cli(at, &["history", fork, "--limit", "200"]);
    assert_eq!(code, 0, "{h}");
    let facts = h["facts"].as_array().unwrap();
    let start = &facts[0]["fact"];
    assert_eq!(start["parent"]["run"], parent, "{start}");
    assert_eq!(start["parent"]["checkpoint"], checkpoint, "{start}");
    assert_eq!(start["entry"]["module"], "fixed.json", "{start}");
    let first = &facts[1]["fact"];
    assert_eq!(
        (first["fact"].as_str(), first["node"].as_str()),
        (Some("Checkpoint"), Some("small_label")),
        "{first}"
    );
    assert!(
        facts.iter().all(|f| f["kind"] != "Call"),
        "no call made: {h}"
    );
    let (code, p) = cli(at, &["history", parent, "--fact", &checkpoint.to_string()]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(
        p["state"], first["state"],
        "the parent's state at the fork point"
    );
    let last = &facts[facts.len() - 1]["fact"];
    assert!(last["ending"]["Completed"].is_object(), "{last}");
    let (code, v) = cli(at, &["replay", fork]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("matched")), "{v}");
}

/// Waits until every fork has ended (a server drives them).
async fn ended(base: &str, forks: &[String]) {
    let client = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs(30);
    for fork in forks {
        loop {
            let v = common::get_json(&client, format!("{base}/v1/runs/{fork}")).await;
            if v["state"] == "completed" {
                break;
            }
            assert!(Instant::now() < until, "{fork} did not complete: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The dry run, a program no checkpoint fits, the recovery and a second
/// one, over `flow --server`; returns each faulted run's fork.
async fn check_server(base: &str, faulted: &[String]) -> BTreeMap<String, String> {
    let at = At::Server(base.to_string());
    let before = runs(&at);
    assert_eq!(before, RUNS as usize);

    // The dry run: the fork point and no call made again, per faulted run.
    let (code, dry) = recover(&at, &path("fixed.json"), &["--dry-run"]);
    assert_eq!(code, 0, "{dry}");
    assert_eq!(dry["dryRun"], true, "{dry}");
    let would = outcome(&dry, "recoverable");
    assert_eq!(would.keys().cloned().collect::<Vec<_>>(), faulted, "{dry}");
    assert_eq!(dry["notNeeded"], RUNS - SMALL, "{dry}");
    for line in would.values() {
        assert_eq!(line["node"], "small_label", "{line}");
        assert!(line["checkpoint"].as_u64().unwrap() < line["diverged"].as_u64().unwrap());
        assert!(line.get("again").is_none(), "no Tool, no call: {line}");
    }
    assert_eq!(runs(&at), before, "the dry run forks nothing");

    // The same over the HTTP API itself, unstreamed.
    let client = reqwest::Client::new();
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("fixed.json")).unwrap()).unwrap();
    let (status, v) = post_json(
        &client,
        format!("{base}/v1/recover?state=faulted"),
        &json!({"flow": doc, "name": "fixed.json", "dryRun": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["runs"].as_u64(), v["recoverable"].as_u64()),
        (Some(SMALL), Some(SMALL)),
        "{v}"
    );
    let (status, v) = post_json(
        &client,
        format!("{base}/v1/recover?limit=5"),
        &json!({"flow": doc, "dryRun": true}),
    )
    .await;
    assert_eq!(status, 400, "paging is refused: {v}");

    // No checkpoint fits: exit 1, each faulted run says why.
    let (code, v) = recover(&at, &path("misfit.json"), &["--state", "faulted"]);
    assert_eq!(code, 1, "{v}");
    let cannot = outcome(&v, "unrecoverable");
    assert_eq!(cannot.len(), SMALL as usize, "{v}");
    for line in cannot.values() {
        assert!(line["why"].as_str().unwrap().contains("extra"), "{line}");
    }
    assert_eq!(runs(&at), before, "nothing forked");

    // A program that does not check: refused, exit 2.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("fixed.json");
    std::fs::write(
        &broken,
        r#"{"spec_version": "1.0.0", "id": "recover-fault", "nodes": []}"#,
    )
    .unwrap();
    let out = flow()
        .args(["--server", base, "recover", "--flow"])
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // The recovery.
    let (code, done) = recover(&at, &path("fixed.json"), &["--rate", "50"]);
    assert_eq!(code, 0, "{done}");
    let recovered = outcome(&done, "recovered");
    assert_eq!(
        recovered.keys().cloned().collect::<Vec<_>>(),
        faulted,
        "{done}"
    );
    let forks: BTreeMap<String, String> = recovered
        .iter()
        .map(|(run, l)| (run.clone(), l["fork"].as_str().unwrap().to_string()))
        .collect();
    // The recovery is recorded: its id on the report and on each line, the
    // forks it made listed by it, and each fork's lineage names it.
    let id = done["recovery"]
        .as_str()
        .expect("a recovery id")
        .to_string();
    assert!(id.starts_with("rec-"), "{done}");
    for line in recovered.values() {
        assert_eq!(line["recovery"], id.as_str(), "{line}");
    }
    let (code, rec) = cli(&at, &["recoveries", &id]);
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["status"], "ended", "{rec}");
    assert_eq!(rec["ended"]["counts"]["recovered"], SMALL, "{rec}");
    let listed: BTreeMap<String, String> = rec["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let (run, fork) = (f["run"].as_str().unwrap(), f["fork"].as_str().unwrap());
            assert_eq!(f["checkpoint"], recovered[run]["checkpoint"], "{f}");
            (run.to_string(), fork.to_string())
        })
        .collect();
    assert_eq!(listed, forks, "{rec}");
    for fork in forks.values() {
        let v = common::get_json(&client, format!("{base}/v1/runs/{fork}")).await;
        assert_eq!(v["parent"]["recovery"], id.as_str(), "{v}");
    }
    let (code, v) = cli(&at, &["recoveries", "rec-nope"]);
    assert_eq!(code, 2, "{v}");
    ended(base, &forks.values().cloned().collect::<Vec<_>>()).await;
    for (run, fork) in &forks {
        let cp = recovered[run]["checkpoint"].as_u64().unwrap();
        check_fork(&at, run, fork, cp);
    }
    assert_eq!(runs(&at), before + SMALL as usize);

    // Again: nothing new, each run's fork found by its lineage.
    let (code, again) = recover(&at, &path("fixed.json"), &[]);
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["recovered"], 0, "{again}");
    let already = outcome(&again, "alreadyRecovered");
    let found: BTreeMap<String, String> = already
        .iter()
        .map(|(run, l)| (run.clone(), l["fork"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(found, forks, "{again}");
    for line in already.values() {
        assert_eq!(line["recovery"], id.as_str(), "made by the first: {line}");
    }
    // Recorded newest first: this one, the first, the misfit (dry runs and
    // refusals record nothing).
    let (code, list) = cli(&at, &["recoveries"]);
    assert_eq!(code, 0, "{list}");
    let ids: Vec<&str> = list["recoveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{list}");
    assert_eq!(ids[0], again["recovery"].as_str().unwrap(), "{list}");
    assert_eq!(ids[1], id, "{list}");
    // The forks are runs of the flow too: they need no recovery.
    assert_eq!(again["notNeeded"], RUNS, "{again}");
    assert_eq!(runs(&at), before + SMALL as usize);
    forks
}

#[tokio::test]
async fn recovery_on_sqlite_over_http_and_locally() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let faulted = seed(&s.base).await;
    let forks = check_server(&s.base, &faulted).await;
    drop(s);

    // On the store itself, the server gone: already recovered, the same
    // forks; one more faulted run is recovered here, its fork driven and
    // waited for by the CLI.
    let local = At::Data(dir.path().to_path_buf());
    let (code, v) = recover(&local, &path("fixed.json"), &["--state", "faulted"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(outcome(&v, "alreadyRecovered").len(), forks.len(), "{v}");
    let (code, run) = cli(
        &local,
        &[
            "run",
            &path("fault.json"),
            "--input",
            r#"{"n": 1, "small": "x", "big": 7}"#,
        ],
    );
    assert_eq!(code, 1, "faulted: {run}");
    let run = run["run"].as_str().unwrap().to_string();
    let before = runs(&local);
    let (code, v) = recover(&local, &path("fixed.json"), &["--state", "faulted"]);
    assert_eq!(code, 0, "{v}");
    let recovered = outcome(&v, "recovered");
    assert_eq!(recovered.keys().collect::<Vec<_>>(), vec![&run], "{v}");
    let line = &recovered[&run];
    check_fork(
        &local,
        &run,
        line["fork"].as_str().unwrap(),
        line["checkpoint"].as_u64().unwrap(),
    );
    assert_eq!(runs(&local), before + 1);
    let (code, v) = recover(&local, &path("fixed.json"), &["--state", "faulted"]);
    assert_eq!((code, v["recovered"].as_u64()), (0, Some(0)), "{v}");
    assert_eq!(v["alreadyRecovered"], SMALL + 1, "{v}");
    assert_eq!(runs(&local), before + 1);
}

#[tokio::test]
async fn recovery_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        dir.path(),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    );
    let faulted = seed(&s.base).await;
    check_server(&s.base, &faulted).await;
}

/// Issue 39: "a kill -9 in the middle of a recovery resumes it without
/// double forks". The server is killed (SIGKILL) once the first fork is
/// made, with the rest waiting on the rate limit; started again on the
/// same store, the recovery run again forks only the runs still without a
/// fork: every faulted run ends with exactly one.
#[tokio::test]
async fn a_killed_recovery_resumes_without_double_forks() {
    let dir = tempfile::tempdir().unwrap();
    killed_recovery(dir.path(), &[]).await;
}

/// The same on Postgres: the killed server's lock, on the database's
/// clock, expires as on SQLite.
#[tokio::test]
async fn a_killed_recovery_resumes_without_double_forks_on_postgres() {
    let Some(db) = common::Schema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    killed_recovery(
        dir.path(),
        &["--postgres", &db.url, "--postgres-schema", &db.name],
    )
    .await;
}

async fn killed_recovery(dir: &std::path::Path, store: &[&str]) {
    use std::io::BufRead;
    let s = serve(dir, store);
    let faulted = seed(&s.base).await;
    let mut cli_child = flow()
        .args([
            "--server",
            &s.base,
            "recover",
            "--flow",
            &path("fixed.json"),
            "--rate",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(cli_child.stderr.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("a recovered line").unwrap();
        if line.contains("recovered: fork") {
            break;
        }
    }
    // While it goes (the next fork is a second away) it holds the flow's
    // lock: a second recovery of the flow is refused, naming it.
    let second = |base: &str| {
        flow()
            .args(["--server", base, "recover", "--flow", &path("fixed.json")])
            .args(["--rate", "0"])
            .output()
            .unwrap()
    };
    let out = second(&s.base);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("is running") && said.contains("rec-"),
        "{said}"
    );
    // SIGKILL, mid-recovery.
    drop(s);
    let _ = cli_child.wait();
    let s = serve(dir, store);
    let at = At::Server(s.base.clone());
    // The killed recovery's lock lasts until it expires (its server does
    // not renew it): until then a recovery is refused as above.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, v) = cli(&at, &["recoveries"]);
        assert_eq!(code, 0, "{v}");
        let first = &v["recoveries"][0];
        if first["status"] == "interrupted" {
            break;
        }
        assert_eq!(first["status"], "running", "{v}");
        assert!(Instant::now() < deadline, "the lock never expired: {v}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (_, v) = cli(&at, &["recoveries"]);
    let killed = v["recoveries"][0]["id"].as_str().unwrap().to_string();
    let client = reqwest::Client::new();
    // Each run's forks, and which of them a kill cut short right after its
    // Start (nothing else recorded).
    let forks_of = |run: &str| {
        let (code, v) = cli(&at, &["runs", "--fork-of", run]);
        assert_eq!(code, 0, "{v}");
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let mut stubs = std::collections::BTreeSet::new();
    let mut made = 0usize;
    for run in &faulted {
        for fork in forks_of(run) {
            let v = common::get_json(&client, format!("{}/v1/runs/{fork}", s.base)).await;
            if v["lastFact"]["n"] == 1 && v["ending"].is_null() {
                stubs.insert(fork);
            } else {
                made += 1;
            }
        }
    }
    assert!(made + stubs.len() >= 1, "a fork was made before the kill");
    assert!(made < faulted.len(), "interrupted after {made} forks");
    // A fork the kill cut short right after its Start counts as the run's
    // recovery and is continued (it starts as the fork would have).
    let (code, v) = recover(&at, &path("fixed.json"), &["--rate", "0"]);
    assert_eq!(code, 0, "{v}");
    let before = made + stubs.len();
    assert_eq!(v["alreadyRecovered"].as_u64(), Some(before as u64), "{v}");
    assert_eq!(
        v["recovered"].as_u64(),
        Some((faulted.len() - before) as u64),
        "{v}"
    );
    let forks: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["fork"].as_str().map(String::from))
        .collect();
    assert_eq!(forks.len(), faulted.len(), "{v}");
    for run in &faulted {
        let all = forks_of(run);
        assert_eq!(all.len(), 1, "{run}: exactly one fork: {all:?}");
    }
    // The record: the killed recovery's forks and this one's are the
    // faulted runs' forks, each once; the runs recovered before the kill
    // say which recovery made their fork.
    let made_by = |id: &str| {
        let (code, r) = cli(&at, &["recoveries", id]);
        assert_eq!(code, 0, "{r}");
        r["forks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["fork"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let this = v["recovery"].as_str().unwrap();
    let mut all = [made_by(&killed), made_by(this)].concat();
    all.sort();
    let mut want = forks.clone();
    want.sort();
    assert_eq!(all, want, "{v}");
    assert_eq!(made_by(&killed).len(), before, "{v}");
    for line in outcome(&v, "alreadyRecovered").values() {
        assert_eq!(line["recovery"], killed.as_str(), "{line}");
    }
    // Every fork ends, a continued stub among them.
    ended(&s.base, &forks).await;
}

/// With a Tool: the rolling tests' counter, whose COUNT_LOG gets a line
/// per call it serves. Runs that made their calls and then faulted are
/// recovered from their Checkpoint after the last call: the Tool is not
/// called again (the log has the same lines, none of a fork), each fork
/// completes and replays matched, and a second recovery forks nothing.
#[test]
fn a_recovery_makes_no_call_before_the_fork_point_again() {
    let data = tempfile::tempdir().unwrap();
    let at = At::Data(data.path().to_path_buf());
    let log = data.path().join("calls.log");
    let counted =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flows/recover-count");
    let fault = counted.join("count.json");
    // FIXED: the same file name (the Tool binds by module), labelling with
    // the count instead of the tag.
    let dir = tempfile::tempdir().unwrap();
    let fixed = dir.path().join("count.json");
    let text = std::fs::read_to_string(&fault).unwrap();
    std::fs::write(&fixed, text.replace("\"$.state.tag\"", "\"$.state.count\"")).unwrap();
    let toml = counted.join("flow.toml");
    let with_log = |args: &[&str]| {
        let out = flow()
            .env("COUNT_LOG", &log)
            .arg("--data")
            .arg(data.path())
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        let v: Json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap_or(-1), v)
    };
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut faulted = Vec::new();
    for tag in [r#""x""#, "5", r#""y""#] {
        let input = format!(r#"{{"count": 0, "limit": 2, "tag": {tag}}}"#);
        let (code, v) = with_log(&["run", fault.to_str().unwrap(), "--allow", "--input", &input]);
        if tag == "5" {
            assert_eq!(code, 0, "{v}");
        } else {
            assert_eq!(code, 1, "{v}");
            faulted.push(v["run"].as_str().unwrap().to_string());
        }
    }
    let before = calls();
    assert_eq!(before.lines().count(), 6, "two calls a run: {before}");
    let fixed = fixed.to_str().unwrap();
    let tools = toml.to_str().unwrap();
    // The completed run diverges too (FIXED labels it with its count, not
    // its tag): only the faulted runs are recovered.
    let (code, v) = with_log(&[
        "recover", "--flow", fixed, "--state", "faulted", "--allow", "--tools", tools,
    ]);
    assert_eq!(code, 0, "{v}");
    let recovered = outcome(&v, "recovered");
    let mut runs: Vec<String> = recovered.keys().cloned().collect();
    faulted.sort();
    runs.sort();
    assert_eq!(runs, faulted, "{v}");
    assert_eq!(calls(), before, "no Tool call made again");
    for (run, line) in &recovered {
        assert_eq!(line["node"], "label", "after the last call: {line}");
        assert!(line.get("again").is_none(), "{line}");
        let fork = line["fork"].as_str().unwrap();
        let (code, r) = cli(&at, &["replay", fork]);
        assert_eq!((code, r["verdict"].as_str()), (0, Some("matched")), "{r}");
        let (code, h) = cli(&at, &["history", fork, "--limit", "200"]);
        assert_eq!(code, 0, "{h}");
        let facts = h["facts"].as_array().unwrap();
        assert!(facts.iter().all(|f| f["kind"] != "Call"), "{h}");
        assert_eq!(facts[0]["fact"]["parent"]["run"], run.as_str(), "{h}");
    }
    let (code, v) = with_log(&[
        "recover", "--flow", fixed, "--state", "faulted", "--allow", "--tools", tools,
    ]);
    assert_eq!((code, v["alreadyRecovered"].as_u64()), (0, Some(2)), "{v}");
    assert_eq!(v["recovered"], 0, "{v}");
    assert_eq!(calls(), before);
}

/// `POST /v1/recover` with `runs` (the dashboard's multi-select): only
/// the named runs are looked at — two of the faulted runs, a completed
/// one (not needed), a run of another flow, a malformed id and an unknown
/// one (each `unrecoverable` with why; the request itself succeeds), a
/// name given twice taken once; the other faulted runs are not forked.
/// Empty, over 1,000 ids, or beside filters: refused.
#[tokio::test]
async fn recover_only_the_named_runs_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let faulted = seed(&s.base).await;
    let client = reqwest::Client::new();
    let completed = common::get_json(
        &client,
        format!("{}/v1/runs?state=completed&limit=1", s.base),
    )
    .await["runs"][0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, other) = post_json(
        &client,
        format!("{}/v1/runs", s.base),
        &json!({"flow": common::review_flow(), "input": {"text": "x"}, "wait": 10}),
    )
    .await;
    assert_eq!(status, 201, "{other}");
    let other = other["run"].as_str().unwrap().to_string();
    let unknown = "run-01aaaaaaaaaaaaaaaaaaaaaaaa";
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("fixed.json")).unwrap()).unwrap();
    let named = json!([
        faulted[0], faulted[1], completed, other, "nonsense", unknown, faulted[0]
    ]);
    let url = format!("{}/v1/recover", s.base);

    let (status, dry) = post_json(
        &client,
        &url,
        &json!({"flow": doc, "name": "fixed.json", "dryRun": true, "runs": named}),
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    let order: Vec<&str> = dry["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            &faulted[0],
            &faulted[1],
            &completed,
            &other,
            "nonsense",
            unknown
        ],
        "in the order named, each once: {dry}"
    );
    let would = outcome(&dry, "recoverable");
    assert_eq!(
        would.keys().collect::<Vec<_>>(),
        [&faulted[0], &faulted[1]],
        "{dry}"
    );
    assert_eq!(
        outcome(&dry, "notNeeded").keys().collect::<Vec<_>>(),
        [&completed]
    );
    let cannot = outcome(&dry, "unrecoverable");
    let why = |run: &str| cannot[run]["why"].as_str().unwrap().to_string();
    assert!(why(&other).contains("\"review-flow\""), "{}", why(&other));
    assert!(
        why("nonsense").contains("not a run id"),
        "{}",
        why("nonsense")
    );
    assert!(why(unknown).contains("no run"), "{}", why(unknown));
    assert_eq!(dry["runs"], 6, "{dry}");

    // Refused: none, too many, or names beside filters.
    for (q, runs) in [
        ("", json!([])),
        ("", json!(vec![unknown; 1001])),
        ("?state=faulted", json!([faulted[0]])),
    ] {
        let (status, v) = post_json(
            &client,
            format!("{url}{q}"),
            &json!({"flow": doc, "dryRun": true, "runs": runs}),
        )
        .await;
        assert_eq!(status, 400, "{q}: {v}");
    }

    // The recovery, streamed: a line per named run, then the report; only
    // the two named faulted runs are forked.
    let r = client
        .post(&url)
        .header("accept", "application/x-ndjson")
        .json(&json!({"flow": doc, "name": "fixed.json", "rate": 0, "runs": [faulted[0], faulted[1]]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let lines: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    let report = &lines[2]["report"];
    assert_eq!(report["recovered"], 2, "{report}");
    let at = At::Server(s.base.clone());
    let recovered = outcome(report, "recovered");
    let forks: Vec<String> = recovered
        .values()
        .map(|l| l["fork"].as_str().unwrap().to_string())
        .collect();
    ended(&s.base, &forks).await;
    for (run, line) in &recovered {
        check_fork(
            &at,
            run,
            line["fork"].as_str().unwrap(),
            line["checkpoint"].as_u64().unwrap(),
        );
    }
    for run in &faulted[2..] {
        let (code, v) = cli(&at, &["runs", "--fork-of", run]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(
            v["runs"].as_array().unwrap().len(),
            0,
            "{run} not named, not forked: {v}"
        );
    }
}
