//! Archives a team can share (issue 40 item 5; docs/custody.md "Signed
//! archives and archives of several runs"), through the real `flow`
//! binary and the real `flow serve` on both store backends: a run and its
//! fork exported in one archive, signed, imported with trusted keys and
//! replayed `matched`; and every attack — a history changed after
//! signing, a tampered blob, a tampered host record, a signature taken
//! from another archive, a signer's name changed, an untrusted key, an
//! unsigned archive where trust is configured, a torn tail appended, an
//! archive of several runs with one bad run — refused with a clear
//! message and nothing written: no run, no fact, no blob, no host record.

mod common;

use common::{Schema, TestApp, flow, serve};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn review() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/review/review.json")
}

/// The fixture every test shares: a store with a review run and a fork
/// of it, both approved, signing keys for alice (trusted) and mallory (not), and
/// archives made from them.
struct Team {
    dir: tempfile::TempDir,
    app: TestApp,
    parent: String,
    fork: String,
}

impl Team {
    fn new() -> Team {
        let app = TestApp::new();
        let (code, v) = app.json(&[
            "run",
            review().to_str().unwrap(),
            "--input",
            r#"{"text": "share me"}"#,
        ]);
        assert_eq!(code, 3, "{v}");
        let parent = v["run"].as_str().unwrap().to_string();
        let (code, v) = app.json(&["fork", &parent, "--checkpoint", "2"]);
        assert_eq!(code, 3, "{v}");
        let fork = v["run"].as_str().unwrap().to_string();
        // Both approved: completed runs replay `matched`; the parent keeps
        // its pause's host record.
        for run in [&parent, &fork] {
            let (code, v) = app.json(&[
                "resume",
                run,
                "--call",
                "c1:root#1",
                "--reply",
                r#"{"Ok":{"decision":"approved"}}"#,
            ]);
            assert_eq!(code, 0, "{v}");
        }
        let dir = tempfile::tempdir().unwrap();
        let t = Team {
            dir,
            app,
            parent,
            fork,
        };
        let mut trusted = String::from("# the team's keys\n");
        for who in ["alice", "mallory"] {
            let o = flow()
                .args(["keys", "new-signing"])
                .arg(t.path(&format!("{who}.key")))
                .args(["--signer", who])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o));
            let line = String::from_utf8(o.stdout).unwrap();
            assert!(line.starts_with("ed25519:") && line.trim().ends_with(who));
            if who == "alice" {
                trusted.push_str(&line);
            }
        }
        std::fs::write(t.path("team.keys"), trusted).unwrap();
        t
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `flow export PARENT --out NAME [--lineage] [--sign KEY]`.
    fn export(&self, name: &str, lineage: bool, key: Option<&str>) -> PathBuf {
        let out = self.path(name);
        let mut args = vec!["export", &self.parent, "--out", out.to_str().unwrap()];
        if lineage {
            args.push("--lineage");
        }
        let key = key.map(|k| self.path(&format!("{k}.key")));
        if let Some(k) = &key {
            args.extend(["--sign", k.to_str().unwrap()]);
        }
        let o = self.app.cmd(&args);
        assert!(o.status.success(), "{}", text(&o));
        out
    }

    /// A copy of an archive directory, to tamper with.
    fn copy(&self, from: &Path, name: &str) -> PathBuf {
        let to = self.path(name);
        copy_dir(from, &to);
        to
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Rows of each table an import writes, in a SQLite store.
fn sqlite_rows(db: &Path) -> Vec<i64> {
    if !db.exists() {
        return vec![0; 4];
    }
    let c = rusqlite::Connection::open(db).unwrap();
    ["runs", "facts", "blobs", "host_records"]
        .iter()
        .map(|t| {
            c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        })
        .collect()
}

/// Rows of each table an import writes, in a Postgres schema.
fn pg_rows(db: &Schema) -> Vec<i64> {
    ["runs", "facts", "blobs", "host_records"]
        .iter()
        .map(|t| {
            db.query(&format!("SELECT count(*) FROM {t}"))[0][0]
                .as_deref()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// The hostile archives, each with the words its refusal must contain.
fn attacks(t: &Team) -> Vec<(&'static str, PathBuf, &'static str)> {
    let signed = t.export("signed", true, Some("alice"));
    let mut out = Vec::new();

    // A host record changed: host.jsonl is not chained, the signature
    // covers it.
    let d = t.copy(&signed, "host-tampered");
    let host = d.join(&t.parent).join("host.jsonl");
    let h = std::fs::read_to_string(&host).unwrap();
    let at = h.find("\"at\":").expect("a host record") + 5;
    let mut changed = h.clone();
    changed.insert(at, '1');
    std::fs::write(&host, changed).unwrap();
    out.push(("tampered host record", d, "its host records changed"));

    // A blob's bytes changed: its hash no longer matches.
    let d = t.copy(&signed, "blob-tampered");
    let blobs = d.join(&t.fork).join("blobs");
    let b = std::fs::read_dir(&blobs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&b).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&b, bytes).unwrap();
    out.push(("tampered blob", d, "blob"));

    // A history line changed: the chain breaks.
    let d = t.copy(&signed, "line-tampered");
    let hist = d.join(&t.fork).join("history.jsonl");
    let h = std::fs::read_to_string(&hist).unwrap();
    std::fs::write(&hist, h.replacen("share me", "share us", 1)).unwrap();
    out.push(("tampered history line", d, "chain hash does not match"));

    // A torn line appended to a signed history.
    let d = t.copy(&signed, "torn");
    let hist = d.join(&t.parent).join("history.jsonl");
    let mut h = std::fs::read_to_string(&hist).unwrap();
    h.push_str("{\"fact\":");
    std::fs::write(&hist, h).unwrap();
    out.push(("torn tail appended", d, "torn fact"));

    // The signer's name changed in signature.json.
    let d = t.copy(&signed, "renamed");
    let sig = d.join("signature.json");
    let s = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, s.replace("\"alice\"", "\"alicia\"")).unwrap();
    out.push(("signer renamed", d, "does not verify"));

    // The signature of another archive (the parent alone) over this one.
    let alone = t.export("alone", false, Some("alice"));
    let d = t.copy(&signed, "swapped");
    std::fs::copy(alone.join("signature.json"), d.join("signature.json")).unwrap();
    out.push(("signature from another archive", d, "added after signing"));

    // A run removed from a signed archive of several.
    let d = t.copy(&signed, "run-removed");
    std::fs::remove_dir_all(d.join(&t.fork)).unwrap();
    out.push(("a run removed", d, "no longer holds"));

    // Signed by a key the team does not trust.
    let d = t.export("mallory", true, Some("mallory"));
    out.push(("untrusted key", d, "not in the trusted keys"));

    // Not signed at all.
    let d = t.export("unsigned", true, None);
    out.push(("unsigned", d, "not signed"));

    // Several runs, one of them bad (unsigned, so its own check fails).
    let d = t.copy(&t.path("unsigned"), "one-bad-run");
    let hist = d.join(&t.fork).join("history.jsonl");
    let h = std::fs::read_to_string(&hist).unwrap();
    std::fs::write(&hist, h.replacen("share me", "share us", 1)).unwrap();
    out.push(("one bad run of several", d, "chain hash does not match"));
    out
}

/// Signed archives of a run and its fork, locally: exported, imported with
/// trusted keys (both runs, replayed matched), idempotently; verified and
/// said not trusted when no keys are configured.
#[test]
fn a_signed_lineage_round_trips_through_the_cli() {
    let t = Team::new();
    let signed = t.export("signed", true, Some("alice"));
    let mut dirs: Vec<String> = std::fs::read_dir(&signed)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut want = vec![t.parent.clone(), t.fork.clone(), "signature.json".into()];
    want.sort();
    assert_eq!(dirs, want);
    // The layout `flow runs --runs DIR` reads as a root of archives.
    let (code, v) = t.app.json(&["runs", "--runs", signed.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["problems"], json!([]), "{v}");

    let b = TestApp::new();
    let trust = t.path("team.keys");
    let (code, v) = b.json(&[
        "import",
        signed.to_str().unwrap(),
        "--trust",
        trust.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["imported"], true, "{v}");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["signature"]["signer"], "alice", "{v}");
    assert_eq!(v["signature"]["trusted"], true, "{v}");
    assert_eq!(v["signature"]["trustedAs"], "alice", "{v}");
    b.assert_matched(&t.parent);
    b.assert_matched(&t.fork);
    assert_eq!(b.facts(&t.fork), t.app.facts(&t.fork));
    let o = b.cmd(&[
        "import",
        signed.to_str().unwrap(),
        "--trust",
        trust.to_str().unwrap(),
    ]);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains(&format!("{} is already stored", t.fork)),
        "{said}"
    );
    assert!(
        said.contains("signed by alice (trusted key SHA256:"),
        "{said}"
    );

    // No trusted keys: verified, and said not trusted.
    let c = TestApp::new();
    let o = c.cmd(&["import", signed.to_str().unwrap()]);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("signed by \"alice\""), "{said}");
    assert!(said.contains("not a trusted key"), "{said}");

    // An unsigned archive of one run is the form it always was.
    let one = t.export("one", false, None);
    let mut names: Vec<String> = std::fs::read_dir(&one)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["blobs", "history.jsonl", "host.jsonl"]);

    // A key file others may read is refused before anything is written.
    let loose = t.path("loose.key");
    std::fs::copy(t.path("alice.key"), &loose).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = t.path("never");
    let o = t.app.cmd(&[
        "export",
        &t.parent,
        "--out",
        out.to_str().unwrap(),
        "--sign",
        loose.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("chmod 600"), "{}", text(&o));
    assert!(!out.exists());
    // And a key file is never overwritten.
    let o = flow()
        .args(["keys", "new-signing"])
        .arg(t.path("alice.key"))
        .args(["--signer", "alice"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("never overwritten"), "{}", text(&o));
}

/// Every attack, imported by the CLI with the team's trusted keys (and the
/// bad signatures without them too): refused (exit 2) with its reason, and
/// no store is even created.
#[test]
fn attacks_on_the_cli_are_refused_and_write_nothing() {
    let t = Team::new();
    let trust = t.path("team.keys");
    for (what, dir, why) in attacks(&t) {
        let b = TestApp::new();
        let o = b.cmd(&[
            "import",
            dir.to_str().unwrap(),
            "--trust",
            trust.to_str().unwrap(),
        ]);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: {said}");
        assert!(said.contains(why), "{what}: {said}");
        assert_eq!(
            sqlite_rows(&b.data.path().join("flow.db")),
            [0; 4],
            "{what}"
        );
        // The same as a tar file.
        let tar = t.path(&format!("{what}.tar"));
        std::fs::write(&tar, flowd::tarball::pack(&dir).unwrap()).unwrap();
        let o = b.cmd(&[
            "import",
            tar.to_str().unwrap(),
            "--trust",
            trust.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{what} (tar): {}", text(&o));
        assert!(text(&o).contains(why), "{what} (tar): {}", text(&o));
        assert_eq!(
            sqlite_rows(&b.data.path().join("flow.db")),
            [0; 4],
            "{what}"
        );
        if !matches!(what, "untrusted key" | "unsigned") {
            // Verified without trusted keys too.
            let o = b.cmd(&["import", dir.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(2), "{what} (no trust): {}", text(&o));
            assert_eq!(
                sqlite_rows(&b.data.path().join("flow.db")),
                [0; 4],
                "{what}"
            );
        }
    }
}

/// The server's side on one backend: signed lineages in and out, every
/// attack refused (422) with the store's rows unchanged.
async fn server_shares_archives(t: &Team, store: &[&str], rows: &dyn Fn() -> Vec<i64>) {
    let trust = t.path("team.keys");
    let mut args = vec!["--trusted-keys", trust.to_str().unwrap()];
    args.extend_from_slice(store);
    let data = t.path(&format!("server-{}", store.len()));
    let s = serve(&data, &args);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |dir: PathBuf| {
        let c = c.clone();
        let url = format!("{}/v1/archives", s.base);
        async move {
            let r = c
                .post(url)
                .header("content-type", "application/x-tar")
                .body(flowd::tarball::pack(&dir).unwrap())
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let before = rows();
    for (what, dir, why) in attacks(t) {
        let (status, v) = post(dir).await;
        assert_eq!(status, 422, "{what}: {v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(why), "{what}: {v}");
        assert!(!detail.contains("/tmp/"), "{what}: a private path: {v}");
        assert_eq!(rows(), before, "{what}: the store changed");
    }

    let signed = t.path("signed");
    let (status, v) = post(signed.clone()).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["run"], t.parent.as_str(), "{v}");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(
        v["signature"],
        json!({"signer": "alice", "key": v["signature"]["key"], "fingerprint": v["signature"]["fingerprint"], "trusted": true, "trustedAs": "alice"}),
        "{v}"
    );
    let (status, v) = post(signed).await;
    assert_eq!((status, &v["imported"]), (200, &json!(false)), "{v}");
    let server = s.base.as_str();
    for run in [&t.parent, &t.fork] {
        let o = flow()
            .args(["--server", server, "--json", "replay", run])
            .output()
            .unwrap();
        assert!(text(&o).contains("\"matched\""), "{run}: {}", text(&o));
    }

    // Out again with its lineage, signed by the client, into a fresh
    // store that trusts alice.
    let back = t.path(&format!("back-{}", store.len()));
    let key = t.path("alice.key");
    let o = flow()
        .args([
            "--server",
            server,
            "export",
            &t.parent,
            "--lineage",
            "--out",
        ])
        .arg(&back)
        .arg("--sign")
        .arg(&key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2 runs"), "{}", text(&o));
    let b = TestApp::new();
    let o = b.cmd(&[
        "import",
        back.to_str().unwrap(),
        "--trust",
        trust.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    b.assert_matched(&t.fork);
    // `--trust` is the server's to decide over HTTP.
    let o = flow()
        .args(["--server", server, "import"])
        .arg(&back)
        .arg("--trust")
        .arg(&trust)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--trusted-keys"), "{}", text(&o));
    let r = c
        .get(format!(
            "{server}/v1/runs/{}/archive?lineage=maybe",
            t.parent
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn the_server_shares_signed_archives_on_sqlite() {
    let t = Team::new();
    let db = t.path("server-0").join("flow.db");
    server_shares_archives(&t, &[], &|| sqlite_rows(&db)).await;
}

#[tokio::test]
async fn the_server_shares_signed_archives_on_postgres() {
    let Some(db) = Schema::new() else { return };
    let t = Team::new();
    let store = [
        "--postgres",
        db.url.as_str(),
        "--postgres-schema",
        db.name.as_str(),
    ];
    server_shares_archives(&t, &store, &|| pg_rows(&db)).await;
}

/// A server without trusted keys still verifies a signature (a bad one
/// is refused), says who signed and that the key is not trusted, and
/// takes unsigned archives as before.
#[tokio::test]
async fn a_server_without_trusted_keys_still_verifies() {
    let t = Team::new();
    let s = serve(&t.path("plain"), &[]);
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let signed = t.export("signed", true, Some("mallory"));
    let bad = t.copy(&signed, "bad");
    let sig = bad.join("signature.json");
    let text = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, text.replace("\"mallory\"", "\"alice\"")).unwrap();
    let post = |dir: &Path| {
        c.post(format!("{}/v1/archives", s.base))
            .header("content-type", "application/x-tar")
            .body(flowd::tarball::pack(dir).unwrap())
            .send()
    };
    let r = post(&bad).await.unwrap();
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["detail"].as_str().unwrap().contains("does not verify"),
        "{v}"
    );
    assert_eq!(sqlite_rows(&t.path("plain").join("flow.db"))[0], 0);
    let r = post(&signed).await.unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["signature"]["signer"], "mallory", "{v}");
    assert_eq!(v["signature"]["trusted"], false, "{v}");
    let one = t.export("one", false, None);
    let r = post(&one).await.unwrap();
    assert_eq!(r.status(), 200, "already there from the lineage");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"run": t.parent, "imported": false}));
}

/// `--lineage` writes only to a new or empty directory (a run directory
/// left there would be carried and signed with it), and a signature left
/// from an earlier signed export never outlives the export it signed.
#[test]
fn exports_never_carry_what_they_did_not_write() {
    let t = Team::new();
    let signed = t.export("signed", true, Some("alice"));
    let o = t.app.cmd(&[
        "export",
        &t.parent,
        "--out",
        signed.to_str().unwrap(),
        "--lineage",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("new or empty directory"), "{}", text(&o));
    let one = t.export("one", false, Some("alice"));
    assert!(one.join("signature.json").exists());
    let one = t.export("one", false, None);
    assert!(!one.join("signature.json").exists());
}
