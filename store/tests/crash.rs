//! Crash safety for real (issue 3 tests; REQUIREMENTS LIVE-1, DESIGN §7 "a
//! crash at any point loses no accepted fact"): a child process (this test
//! binary, re-run as `crash_child`) appends facts to two runs from two
//! threads and prints each acknowledged fact; the parent kill -9s it at
//! pseudo-random moments, reopens the store, verifies every chain and checks
//! that every acknowledged fact is present with its hash. The same test
//! runs against SQLite (a file) and Postgres (a schema of its own).

#[cfg(feature = "postgres")]
mod pg;

use flow_store::conformance::{call_fact, checkpoint_fact, reply_fact, start_fact};
use flow_store::{Backend, RunId, SqliteOptions, SqliteStore};
#[cfg(feature = "postgres")]
use flow_store::{PostgresOptions, PostgresStore};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The SQLite child's database file.
const CHILD_ENV: &str = "FLOW_STORE_CRASH_CHILD_DB";
/// The Postgres child's `url schema`.
#[cfg(feature = "postgres")]
const PG_CHILD_ENV: &str = "FLOW_STORE_CRASH_CHILD_PG";

fn runs() -> [RunId; 2] {
    [
        RunId::from_parts(1_800_000_000_000, [1; 10]),
        RunId::from_parts(1_800_000_000_001, [2; 10]),
    ]
}

/// The fact appended as number `n` (n ≥ 2): Call, Reply, Checkpoint in turn,
/// the checkpoint state an accumulating list.
fn fact(n: u64) -> flow_store::Fact {
    let k = (n + 1) / 3;
    match n % 3 {
        2 => call_fact(n, k, json!({"k": k})),
        0 => reply_fact(n, k, json!({"text": format!("{k}{}", "r".repeat(1200))})),
        _ => {
            let msgs: Vec<String> = (1..=k).map(|i| format!("{i}{}", "m".repeat(300))).collect();
            checkpoint_fact(n, json!({"messages": msgs}))
        }
    }
}

/// The child: not a test unless the parent set the environment variable.
#[test]
fn crash_child() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        child_appends(&SqliteStore::open(&db, SqliteOptions::default()).unwrap());
    }
    #[cfg(feature = "postgres")]
    if let Ok(v) = std::env::var(PG_CHILD_ENV)
        && let Some((url, schema)) = v.split_once(' ')
    {
        child_appends(
            &PostgresStore::open(PostgresOptions {
                url: url.into(),
                schema: schema.into(),
                keys: None,
            })
            .unwrap(),
        );
    }
}

/// Appends to both runs from two threads until killed, printing each
/// acknowledged fact.
fn child_appends<B: Backend + Sync>(store: &B) {
    let stdout = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|scope| {
        for run in runs() {
            let (store, stdout) = (&store, &stdout);
            scope.spawn(move || {
                let mut n = match store.run_info(&run) {
                    Ok(info) => info.last_fact.n,
                    Err(_) => {
                        let (start, sources) = start_fact(&run, json!({}));
                        let a = store
                            .create_run(start.clone(), &sources, Vec::new())
                            .unwrap();
                        writeln!(stdout.lock().unwrap(), "ack {run} 1 {}", a.hash).unwrap();
                        1
                    }
                };
                loop {
                    n += 1;
                    let a = store.append(&run, fact(n)).unwrap();
                    let mut out = stdout.lock().unwrap();
                    writeln!(out, "ack {run} {} {}", a.n, a.hash).unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
}

#[test]
fn kill_9_loses_no_acknowledged_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("crash.db");
    kill_9_rounds((CHILD_ENV, db.display().to_string()), &|| {
        SqliteStore::open(&db, SqliteOptions::default()).unwrap()
    });
}

#[cfg(feature = "postgres")]
/// The same against Postgres: the child's connection dies with it, its
/// open transaction rolls back, and every COMMIT it acknowledged stays.
#[test]
fn postgres_kill_9_loses_no_acknowledged_fact() {
    let Some(db) = pg::TestDb::new() else { return };
    let opts = db.options();
    // Create the schema before the first child, so no child dies mid-migration.
    drop(PostgresStore::open(opts.clone()).unwrap());
    kill_9_rounds(
        (PG_CHILD_ENV, format!("{} {}", opts.url, opts.schema)),
        &|| PostgresStore::open(opts.clone()).unwrap(),
    );
}

/// Runs the child 24 times, killing it at pseudo-random moments, then
/// checks every acknowledged fact in a freshly opened store.
fn kill_9_rounds<B: Backend>(child_env: (&str, String), open: &dyn Fn() -> B) {
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashMap<(String, u64), String> = HashMap::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let rounds = 24;
    for round in 0..rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait_ms = 150 + seed % 400;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(child_env.0, &child_env.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("ack ") {
                    lines.push(rest.to_string());
                }
            }
            lines
        });
        std::thread::sleep(Duration::from_millis(wait_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        for l in &lines {
            let parts: Vec<&str> = l.split(' ').collect();
            if parts.len() == 3 {
                acked.insert(
                    (parts[0].to_string(), parts[1].parse().unwrap()),
                    parts[2].to_string(),
                );
            }
        }
        assert!(
            round < 3 || !acked.is_empty(),
            "the child acknowledged nothing"
        );
    }
    let store = open();
    let mut checked = 0;
    for run in runs() {
        let history = store.read_history(&run).unwrap(); // verifies chain and blobs
        for f in &history.facts {
            if let Some(h) = acked.get(&(run.to_string(), f.n)) {
                assert_eq!(h, &f.hash, "fact {} of {run} changed", f.n);
                checked += 1;
            }
        }
        let max_acked = acked
            .keys()
            .filter(|(r, _)| r == run.as_str())
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        assert!(
            history.facts.len() as u64 >= max_acked,
            "{run}: acknowledged fact {max_acked} lost (history has {})",
            history.facts.len()
        );
        // The latest checkpoint's state rebuilds.
        if let Some(c) = history
            .facts
            .iter()
            .rev()
            .find(|f| f.kind() == flow_store::FactKind::Checkpoint)
        {
            store.checkpoint_state(&run, c.n).unwrap();
        }
    }
    assert_eq!(checked, acked.len(), "every acknowledged fact is present");
    eprintln!("crash test: {rounds} kill -9 rounds, {checked} acknowledged facts verified");
}
