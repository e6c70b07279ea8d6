//! Encryption at rest (issue 40 item 3, docs/custody.md "Encryption at
//! rest") with the real `flow` binary and `flow serve`, on SQLite and on
//! Postgres: a run whose input, Tool arguments, reply, output and source
//! carry a marker leaves no marker in the database files (SQLite: the
//! file, its WAL and shm; Postgres: every column of every table) — while a
//! plaintext store run the same way does; an encrypted store opened
//! without its key, or with a key file that lacks it, is a named storage
//! failure (exit 5) and never garbage; after `flow keys rotate` and the
//! old key removed from the file, every run still reads, replays matched
//! and resumes; `flow keys rotate` seals a plaintext store's rows.

mod common;

use common::{Schema, flow, serve};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// In every value of the test's runs; `-` is outside base64's alphabet,
/// so no sealed text can spell it by chance.
const MARK: &str = "quokka-7731-secret";

/// The review example with the marker in its description (not its `id`:
/// a flow's id is an index column kept in clear, docs/custody.md).
fn flow_file(dir: &Path) -> PathBuf {
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/review/review.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    doc["description"] = Value::String(format!("Reviewed drafts ({MARK})."));
    let p = dir.join("review.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    p
}

/// A text over 1 KiB (stored as a blob) that carries the marker.
fn input() -> String {
    serde_json::json!({"text": format!("{MARK} {}", "draft ".repeat(200))}).to_string()
}

fn reply() -> String {
    format!(r#"{{"Ok":{{"decision":"approved","notes":"{MARK}"}}}}"#)
}

/// `flow --json PREFIX ARGS`.
fn run(prefix: &[&str], args: &[&str]) -> Output {
    flow()
        .arg("--json")
        .args(prefix)
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Starts a run (it pauses at its review) and returns its id.
fn start(prefix: &[&str], flow_path: &Path) -> String {
    let out = run(
        prefix,
        &["run", flow_path.to_str().unwrap(), "--input", &input()],
    );
    assert_eq!(code(&out), 3, "{out:?}");
    json(&out)["run"].as_str().unwrap().to_string()
}

fn resume(prefix: &[&str], run_id: &str) {
    let out = run(
        prefix,
        &["resume", run_id, "--call", "c1:root#1", "--reply", &reply()],
    );
    assert_eq!(code(&out), 0, "{out:?}");
}

/// The run reads back with every marker (so it was stored and opens), and
/// replays matched.
fn reads_and_matches(prefix: &[&str], run_id: &str) {
    let out = run(prefix, &["history", run_id]);
    assert_eq!(code(&out), 0, "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.matches(MARK).count() >= 2, "{text}");
    let out = run(prefix, &["replay", run_id]);
    assert_eq!(
        (code(&out), json(&out)["verdict"].as_str()),
        (0, Some("matched")),
        "{out:?}"
    );
}

/// The files of the SQLite store under `data` that hold the marker.
fn files_with_mark(data: &Path) -> Vec<String> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir(data).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        if bytes.windows(MARK.len()).any(|w| w == MARK.as_bytes()) {
            hits.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    hits
}

fn new_key(file: &Path) -> String {
    let out = run(&[], &["keys", "new", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{out:?}");
    json(&out)["active"].as_str().unwrap().to_string()
}

/// The key file without the key `id`.
fn drop_key(file: &Path, id: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains(id)).collect();
    std::fs::write(file, kept.join("\n")).unwrap();
}

fn storage_failure(out: &Output, says: &[&str]) {
    assert_eq!(code(out), 5, "{out:?}");
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    for s in says {
        assert!(err.contains(s), "{s:?} not in {err}");
    }
    assert!(!err.contains(MARK), "{err}");
}

#[test]
fn sqlite_store_encrypted_at_rest_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let review = flow_file(tmp.path());
    let keys = tmp.path().join("keys");
    let key_a = new_key(&keys);
    let data = tmp.path().join("data");
    let k = keys.to_str().unwrap();
    let enc = ["--data", data.to_str().unwrap(), "--key-file", k];

    // One run completed, one left paused (to resume after the rotation).
    let done = start(&enc, &review);
    resume(&enc, &done);
    let paused = start(&enc, &review);
    reads_and_matches(&enc, &done);
    assert_eq!(files_with_mark(&data), Vec::<String>::new());

    // The same runs in clear do leave the marker: the grep can see it.
    let plain_data = tmp.path().join("plain");
    let plain = ["--data", plain_data.to_str().unwrap()];
    let plain_run = start(&plain, &review);
    resume(&plain, &plain_run);
    assert!(files_with_mark(&plain_data).contains(&"flow.db".to_string()));

    // No key: a named storage failure, nothing shown, nothing changed.
    let bare = ["--data", data.to_str().unwrap()];
    storage_failure(
        &run(&bare, &["history", &done]),
        &["encrypted", &key_a, "--key-file"],
    );
    // A key file without the store's key: named too.
    let other = tmp.path().join("other-keys");
    new_key(&other);
    let wrong = [
        "--data",
        data.to_str().unwrap(),
        "--key-file",
        other.to_str().unwrap(),
    ];
    storage_failure(&run(&wrong, &["replay", &done]), &[&key_a, "does not hold"]);
    // A key file that does not parse: refused (exit 2), saying where.
    let bad_keys = tmp.path().join("bad-keys");
    std::fs::write(&bad_keys, "key a 00\n").unwrap();
    let bad = [
        "--data",
        data.to_str().unwrap(),
        "--key-file",
        bad_keys.to_str().unwrap(),
    ];
    let out = run(&bad, &["history", &done]);
    assert_eq!(code(&out), 2, "{out:?}");

    // Rotation: a new active key B, every data key re-wrapped, A removed.
    let key_b = new_key(&keys);
    let out = run(&enc, &["keys", "rotate"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let r = json(&out);
    assert_eq!(
        (r["master"].as_str(), r["rewrapped"].as_u64()),
        (Some(key_b.as_str()), Some(1)),
        "{r}"
    );
    assert_eq!(r["sealedFacts"], 0, "{r}");
    drop_key(&keys, &key_a);
    reads_and_matches(&enc, &done);
    resume(&enc, &paused);
    reads_and_matches(&enc, &paused);
    // Rotating again finds nothing to do (safe to run twice).
    let r = json(&run(&enc, &["keys", "rotate"]));
    assert_eq!(
        (r["rewrapped"].as_u64(), r["sealedBlobs"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    assert_eq!(files_with_mark(&data), Vec::<String>::new());

    // A plaintext store opened with keys: `flow keys rotate` seals what
    // it held in clear, and the file keeps no copy of it.
    let sealed_plain = ["--data", plain_data.to_str().unwrap(), "--key-file", k];
    let r = json(&run(&sealed_plain, &["keys", "rotate"]));
    assert!(r["sealedFacts"].as_u64().unwrap() >= 6, "{r}");
    assert!(r["sealedBlobs"].as_u64().unwrap() >= 2, "{r}");
    assert!(r["sealedHostRecords"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(files_with_mark(&plain_data), Vec::<String>::new());
    reads_and_matches(&sealed_plain, &plain_run);
    common::verify_store_keyed(&data.join("flow.db"), Some(&keys));
    common::verify_store_keyed(&plain_data.join("flow.db"), Some(&keys));
}

/// `flow serve --key-file` on SQLite: runs driven through the server, the
/// server killed (its WAL left as it was), and neither file holds the marker.
#[test]
fn sqlite_server_encrypted_at_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let review = flow_file(tmp.path());
    let keys = tmp.path().join("keys");
    let key_a = new_key(&keys);
    let data = tmp.path().join("data");
    let mut server = serve(&data, &["--key-file", keys.to_str().unwrap()]);
    let remote = ["--server", server.base.as_str()];
    let a = start(&remote, &review);
    resume(&remote, &a);
    reads_and_matches(&remote, &a);
    let paused = start(&remote, &review);

    // `flow keys rotate` beside the running server, on the same file: the
    // server goes on (it keeps its data key), and once A is gone from the
    // file every run still reads.
    let key_b = new_key(&keys);
    let local = [
        "--data",
        data.to_str().unwrap(),
        "--key-file",
        keys.to_str().unwrap(),
    ];
    let out = run(&local, &["keys", "rotate"]);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(json(&out)["master"].as_str(), Some(key_b.as_str()));
    resume(&remote, &paused);
    let b = start(&remote, &review);
    resume(&remote, &b);
    let _ = server.child.kill();
    let _ = server.child.wait();
    let files = std::fs::read_dir(&data).unwrap().count();
    assert!(files >= 2, "the WAL is there to grep too");
    assert_eq!(files_with_mark(&data), Vec::<String>::new());
    drop_key(&keys, &key_a);
    for r in [&a, &paused, &b] {
        reads_and_matches(&local, r);
    }
    // Without a key file, rotation is refused (exit 2), nothing changed.
    let out = run(&["--data", data.to_str().unwrap()], &["keys", "rotate"]);
    assert_eq!(code(&out), 2, "{out:?}");
}

/// Every column of every table of the schema, as text, that holds the
/// marker: `table.column` names.
fn columns_with_mark(db: &Schema) -> Vec<String> {
    let cols = db.query(&format!(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = '{}' ORDER BY 1, 2",
        db.name
    ));
    let mut hits = Vec::new();
    for c in cols {
        let (t, col) = (c[0].clone().unwrap(), c[1].clone().unwrap());
        let n = db.query(&format!(
            "SELECT count(*) FROM {t} WHERE position('{MARK}' in (CASE WHEN pg_typeof({col}) = 'bytea'::regtype THEN encode({col}::text::bytea, 'escape') ELSE {col}::text END)) > 0"
        ));
        if n[0][0].as_deref() != Some("0") {
            hits.push(format!("{t}.{col}"));
        }
    }
    hits
}

#[test]
fn postgres_server_encrypted_at_rest() {
    let Some(db) = Schema::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let review = flow_file(tmp.path());
    let keys = tmp.path().join("keys");
    let key_a = new_key(&keys);
    let k = keys.to_str().unwrap();
    let pg = [
        "--postgres",
        db.url.as_str(),
        "--postgres-schema",
        db.name.as_str(),
    ];
    let args = |extra: &[&'static str]| -> Vec<String> {
        pg.iter()
            .map(|s| s.to_string())
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let with_keys: Vec<String> = args(&[])
        .into_iter()
        .chain(["--key-file".into(), k.into()])
        .collect();
    let with_keys: Vec<&str> = with_keys.iter().map(String::as_str).collect();
    let server = serve(tmp.path(), &with_keys);
    let remote = ["--server", server.base.as_str()];
    let done = start(&remote, &review);
    resume(&remote, &done);
    let paused = start(&remote, &review);
    reads_and_matches(&remote, &done);
    assert_eq!(columns_with_mark(&db), Vec::<String>::new());
    drop(server);

    // Without its key the server does not start: a named storage failure.
    let mut no_key = vec!["serve", "--listen", "127.0.0.1:0"];
    no_key.extend(pg);
    let out = flow().args(&no_key).output().unwrap();
    storage_failure(&out, &["encrypted", &key_a, "--key-file"]);

    // Rotation offline, the old key removed: every run reads, replays
    // matched, and the paused one resumes.
    let key_b = new_key(&keys);
    let mut rotate = vec!["--key-file", k, "keys", "rotate"];
    rotate.extend(pg);
    let out = run(&[], &rotate);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(json(&out)["master"].as_str(), Some(key_b.as_str()));
    drop_key(&keys, &key_a);
    let server = serve(tmp.path(), &with_keys);
    let remote = ["--server", server.base.as_str()];
    reads_and_matches(&remote, &done);
    resume(&remote, &paused);
    reads_and_matches(&remote, &paused);
    assert_eq!(columns_with_mark(&db), Vec::<String>::new());
    drop(server);

    // The same run in clear: the scan does see the marker.
    let Some(clear) = Schema::new() else { return };
    let pg = [
        "--postgres",
        clear.url.as_str(),
        "--postgres-schema",
        clear.name.as_str(),
    ];
    let server = serve(tmp.path(), &pg);
    let remote = ["--server", server.base.as_str()];
    let a = start(&remote, &review);
    resume(&remote, &a);
    let hits = columns_with_mark(&clear);
    for col in ["blobs.body", "facts.body"] {
        assert!(hits.contains(&col.to_string()), "{hits:?}");
    }
}

/// What `flow run` prints on an encrypted store names its key file, so the
/// printed `flow … resume …` line runs as printed (and opens the store).
#[test]
fn printed_commands_name_the_key_file_and_run_as_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let review = flow_file(tmp.path());
    let keys = tmp.path().join("keys");
    new_key(&keys);
    let data = tmp.path().join("data");
    let out = flow()
        .env_remove("FLOW_KEY_FILE")
        .args(["--data", data.to_str().unwrap(), "--key-file"])
        .arg(&keys)
        .args(["run", review.to_str().unwrap(), "--input", &input()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("flow ") && l.contains(" resume "))
        .unwrap_or_else(|| panic!("no resume line: {text}"));
    assert!(line.contains(" --key-file "), "{line}");
    let bin = Path::new(env!("CARGO_BIN_EXE_flow")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ran = std::process::Command::new("sh")
        .arg("-c")
        .arg(line)
        .env("PATH", path)
        .env_remove("FLOW_KEY_FILE")
        .env_remove("FLOW_DATA")
        .output()
        .unwrap();
    assert_eq!(code(&ran), 0, "{line}: {ran:?}");
}
