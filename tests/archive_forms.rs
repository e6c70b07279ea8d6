//! Run archives in both forms through both doors (issue 17): `flow import`
//! and `POST /v1/archives` take the tar the server exports, a default
//! server takes its own export of a 10,000-fact run, and `flow import`
//! opens only directories and regular files — a FIFO or `/dev/zero` is
//! refused at once, never read.

mod common;

use common::serve;
use flow_store::{AppendFacts, SqliteOptions, SqliteStore};
use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `flow --data DATA ARGS`, killed (and the test failed) if it takes
/// longer than `limit`.
fn flow(data: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flow {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A completed run of `facts` Checkpoints in `data`'s store, each state a
/// few hundred distinct bytes.
fn large_run(data: &Path, facts: u64) -> String {
    std::fs::create_dir_all(data).unwrap();
    let store = SqliteStore::open(data.join("flow.db"), SqliteOptions::default()).unwrap();
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows/review/review.json");
    let sources = flowd::source::Sources {
        dir: None,
        root: "review.json".into(),
        texts: [(
            "review.json".to_string(),
            std::fs::read_to_string(p).unwrap(),
        )]
        .into(),
    };
    let run = flowd::service::record_start(&store, &sources, "{\"text\": \"large\"}").unwrap();
    let pad = "x".repeat(600);
    let mut batch = Vec::new();
    for k in 0..facts {
        batch.push(fact(json!({"fact": "Checkpoint", "n": k + 2, "task": "root", "node": "draft", "state": {"text": format!("{k:08}{pad}"), "i": k}})).into());
        if batch.len() == 1000 {
            store.append_all(&run, std::mem::take(&mut batch)).unwrap();
        }
    }
    batch.push(fact(json!({"fact": "End", "n": facts + 2, "ending": {"Completed": {"exit": "success", "output": {}}}})).into());
    store.append_all(&run, batch).unwrap();
    run.to_string()
}

fn fact(v: serde_json::Value) -> flow_store::Fact {
    flow_store::Fact::from_value(v).unwrap()
}

/// The bytes of one entry of a tar.
fn tar_entry(tar: &[u8], name: &str) -> Vec<u8> {
    let mut a = tar::Archive::new(tar);
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path_bytes().as_ref() == name.as_bytes() {
            let mut out = Vec::new();
            e.read_to_end(&mut out).unwrap();
            return out;
        }
    }
    panic!("no {name} in the tar");
}

/// The server's export of a 10,000-fact run (larger than the JSON body
/// limit) imports into a default server and with `flow import FILE.tar`;
/// the CLI's directory export of the imported run holds the same history,
/// and the second server exports the same tar bytes.
#[tokio::test]
async fn a_large_server_export_imports_over_http_and_with_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let run = large_run(&tmp.path().join("a"), 10_000);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let a = serve(&tmp.path().join("a"), &[]);
    let tar = c
        .get(format!("{}/v1/runs/{run}/archive", a.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    assert!(
        tar.len() > 4 << 20,
        "the archive ({} bytes) is larger than the default JSON body limit",
        tar.len()
    );

    // Over HTTP, into a default server.
    let b = serve(&tmp.path().join("b"), &[]);
    let r = c
        .post(format!("{}/v1/archives", b.base))
        .header("content-type", "application/x-tar")
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["run"], run.as_str());
    assert_eq!(v["facts"], 10_002);
    let again = c
        .get(format!("{}/v1/runs/{run}/archive", b.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(again.as_ref() == tar.as_slice(), "round trip: the same tar");

    // With the CLI, from the tar file.
    let file = tmp.path().join("run.tar");
    std::fs::write(&file, &tar).unwrap();
    let cdata = tmp.path().join("c");
    let f = file.to_str().unwrap();
    let o = flow(&cdata, &["import", f], Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), format!("imported {run}"));
    let o = flow(&cdata, &["--json", "import", f], Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v, json!({"run": run, "imported": false}));
    let out = tmp.path().join("exported");
    let o = flow(
        &cdata,
        &["export", &run, "--out", out.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(out.join("history.jsonl")).unwrap(),
        tar_entry(&tar, "history.jsonl")
    );
    // And the directory form into another store.
    let o = flow(
        &tmp.path().join("d"),
        &["import", out.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// An archive past `--archive-limit` is 413, and one without
/// `history.jsonl` is a 422 naming it (it was a 503 "storage" failure);
/// neither records anything.
#[tokio::test]
async fn archive_refusals_over_http_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut no_history = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_size(0);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    no_history
        .append_data(&mut h, "host.jsonl", std::io::empty())
        .unwrap();
    let no_history = no_history.into_inner().unwrap();
    let big = vec![0u8; 8192];
    let s = serve(tmp.path(), &["--archive-limit", "4096"]);
    for (what, body, status, needle) in [
        ("no history.jsonl", no_history, 422, "history.jsonl"),
        ("past the limit", big, 413, "--archive-limit"),
    ] {
        let r = c
            .post(format!("{}/v1/archives", s.base))
            .header("content-type", "application/x-tar")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{what}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["detail"].as_str().unwrap().contains(needle),
            "{what}: {v}"
        );
        assert!(
            !v["detail"].as_str().unwrap().contains("flowd-archive-"),
            "{what}: no server path in {v}"
        );
    }
    let runs: Value = common::get_json(&c, format!("{}/v1/runs", s.base)).await;
    assert_eq!(runs["runs"], json!([]));
}

/// `flow import` on a FIFO, on `/dev/zero`, and on archive directories
/// whose `history.jsonl` is one of those: exit 2 at once (bounded time: a
/// read would block, or never end), nothing stored.
#[test]
fn import_refuses_fifos_and_devices_without_reading_them() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let fifo_dir = tmp.path().join("fifo-archive");
    std::fs::create_dir(&fifo_dir).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(fifo_dir.join("history.jsonl"))
            .status()
            .unwrap()
            .success()
    );
    let zero_dir = tmp.path().join("zero-archive");
    std::fs::create_dir(&zero_dir).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero_dir.join("history.jsonl")).unwrap();
    let data = tmp.path().join("data");
    for (path, needle) in [
        (
            fifo.as_path(),
            "neither an archive directory nor a tar file",
        ),
        (
            Path::new("/dev/zero"),
            "neither an archive directory nor a tar file",
        ),
        (fifo_dir.as_path(), "not a regular file"),
        (zero_dir.as_path(), "not a regular file"),
    ] {
        let o = flow(
            &data,
            &["import", path.to_str().unwrap()],
            Duration::from_secs(10),
        );
        assert_eq!(o.status.code(), Some(2), "{}", path.display());
        assert!(
            text(&o.stderr).contains(needle),
            "{}: {}",
            path.display(),
            text(&o.stderr)
        );
    }
    let o = flow(&data, &["--json", "runs"], Duration::from_secs(10));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"], json!([]), "{v}");
}

/// A process's peak resident set (`VmHWM`), in kB.
fn peak_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Issue 36: an import held ~15× the archive in memory (33 MiB → 536
/// MB). A 40,000-fact run's archive (~30 MB) imported over HTTP raises the
/// importing server's peak resident set by well under that (a generous
/// bound: five times the archive); the run is imported whole.
#[tokio::test]
async fn a_large_import_holds_a_bounded_multiple_of_the_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let run = large_run(&tmp.path().join("a"), 40_000);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let tar = {
        let a = serve(&tmp.path().join("a"), &[]);
        c.get(format!("{}/v1/runs/{run}/archive", a.base))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec()
    };
    let b = serve(&tmp.path().join("b"), &[]);
    let pid = b.child.id();
    // The server's own baseline: a request served, the store open.
    let _ = common::get_json(&c, format!("{}/v1/runs", b.base)).await;
    let before = peak_kb(pid);
    let r = c
        .post(format!("{}/v1/archives", b.base))
        .header("content-type", "application/x-tar")
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["facts"], 40_002, "{v}");
    let grew = peak_kb(pid) - before;
    let archive = tar.len() as u64 / 1024;
    eprintln!(
        "import of a {archive} kB archive: peak RSS +{grew} kB ({:.1}x)",
        grew as f64 / archive as f64
    );
    assert!(
        grew < 5 * archive,
        "peak RSS +{grew} kB for a {archive} kB archive"
    );
}

/// A pax extended header of `records` (type `x`).
fn pax_header(records: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_ustar();
    h.set_path("PaxHeaders/history.jsonl").unwrap();
    h.set_size(records.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::XHeader);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(records);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

/// Issue 36: a malformed pax record in an uploaded archive was skipped and
/// the archive imported. A real export with a malformed pax header in front
/// of its first entry is refused 400 naming the pax record, by the server
/// and by `flow import`, and nothing is imported; the same export with a
/// well-formed one (another tar tool's mtime) imports.
#[tokio::test]
async fn an_archive_with_a_malformed_pax_record_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = large_run(&tmp.path().join("a"), 3);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let tar = {
        let a = serve(&tmp.path().join("a"), &[]);
        c.get(format!("{}/v1/runs/{run}/archive", a.base))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec()
    };
    let with = |records: &[u8]| {
        let mut t = pax_header(records);
        t.extend_from_slice(&tar);
        t
    };
    let b = serve(&tmp.path().join("b"), &[]);
    for (what, bad) in [
        ("a record longer than said", with(b"99 mtime=1.5\n")),
        ("a record without key=value", with(b"11 mtime15\n")),
        ("a record renaming the entry", with(b"18 path=flow.json\n")),
    ] {
        let r = c
            .post(format!("{}/v1/archives", b.base))
            .header("content-type", "application/x-tar")
            .body(bad.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{what}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let v: Value = r.json().await.unwrap();
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("pax record 1"), "{what}: {v}");
        let file = tmp.path().join("bad.tar");
        std::fs::write(&file, &bad).unwrap();
        let o = flow(
            &tmp.path().join("c"),
            &["import", file.to_str().unwrap()],
            Duration::from_secs(60),
        );
        assert_eq!(o.status.code(), Some(2), "{what}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("pax record 1"), "{what}");
    }
    let runs: Value = common::get_json(&c, format!("{}/v1/runs", b.base)).await;
    assert_eq!(runs["runs"], json!([]), "nothing imported");
    let r = c
        .post(format!("{}/v1/archives", b.base))
        .header("content-type", "application/x-tar")
        .body(with(b"13 mtime=1.5\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "a well-formed pax header is ignored");
}

/// CRASH-7, GAP-HIST-9 (issue 41 §5): "A torn last fact is truncation and
/// is removed". An archive whose history's last line was cut mid-way
/// imports with the facts before it, and the answer says `truncated` —
/// `flow import` (text and `--json`), `POST /v1/archives` (201 with
/// `truncated: {fact, reason}`) and `flow --server … import`; a tampered
/// middle line is still refused, with nothing imported.
#[tokio::test]
async fn a_torn_last_fact_is_left_out_at_import_and_said() {
    let tmp = tempfile::tempdir().unwrap();
    let minute = Duration::from_secs(60);
    // Start, three Checkpoints and End: five facts.
    let run = large_run(&tmp.path().join("a"), 3);
    let dir = tmp.path().join("x").join(&run);
    let o = flow(
        &tmp.path().join("a"),
        &["export", &run, "--out", dir.to_str().unwrap()],
        minute,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let hp = dir.join("history.jsonl");
    let original = std::fs::read_to_string(&hp).unwrap();
    std::fs::write(&hp, &original[..original.len() - 10]).unwrap();
    let d = dir.to_str().unwrap();

    let o = flow(&tmp.path().join("c"), &["import", d], minute);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout).trim(),
        format!(
            "imported {run}; truncated: the history's torn last fact 5 was left out (the last line has no newline), the 4 facts before it kept"
        )
    );
    let o = flow(&tmp.path().join("c"), &["--json", "history", &run], minute);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["page"]["factsTotal"], 4, "{v}");
    let o = flow(&tmp.path().join("c2"), &["--json", "import", d], minute);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v,
        json!({"run": run, "imported": true, "truncated": {"fact": 5, "reason": "the last line has no newline"}})
    );

    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let s = serve(&tmp.path().join("s"), &[]);
    let r = c
        .post(format!("{}/v1/archives", s.base))
        .header("content-type", "application/x-tar")
        .body(flowd::tarball::pack(&dir).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"run": run, "imported": true, "facts": 4, "truncated": {"fact": 5, "reason": "the last line has no newline"}})
    );
    let s2 = serve(&tmp.path().join("s2"), &[]);
    let o = flow(
        &tmp.path().join("unused"),
        &["--server", &s2.base, "import", d],
        minute,
    );
    assert_eq!(
        text(&o.stdout).trim(),
        format!(
            "imported {run}; truncated: the history's torn last fact 5 was left out (the last line has no newline), the 4 facts before it kept"
        ),
        "{}",
        text(&o.stderr)
    );

    // A middle fact tampered with is not a torn tail: refused.
    let lines: Vec<&str> = original.lines().collect();
    let tampered = original.replacen(lines[2], &lines[2].replacen("\"n\":3", "\"n\":9", 1), 1);
    assert_ne!(tampered, original);
    std::fs::write(&hp, tampered).unwrap();
    let o = flow(&tmp.path().join("e"), &["import", d], minute);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let o = flow(&tmp.path().join("e"), &["--json", "runs"], minute);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"], json!([]), "nothing imported: {v}");
}
