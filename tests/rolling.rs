//! A rolling restart under load loses nothing and faults nothing (issue
//! 36, "Must hold"): two `flow serve --postgres` servers share one
//! database, 20 runs are in flight with a slow Tool call out most of the
//! time, and each server in turn is stopped with SIGTERM and started
//! again. Each drains — its calls out finish and their Replies are
//! recorded, nothing new is sent — and hands its runs over; the other
//! server continues them. Every run completes, no Reply says `Unknown`,
//! every replay matches, and no call ran twice (the Tool logs each call
//! it starts; `resend` is off).
//!
//! Real parts: the `flow` binary, PostgreSQL at 127.0.0.1:5432 (a fresh
//! schema, dropped after), the counter fixture's Python Tool processes
//! (`tests/fixtures/flows/rolling`), real SIGTERM by pid.

mod common;

use common::Schema;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

const RUNS: usize = 20;
const STEPS: u64 = 8;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flows/rolling")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A `flow serve --postgres` process, killed on drop unless it stopped.
struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Server {
    fn start(db: &Schema, log: &Path) -> Server {
        let data = tempfile::tempdir().unwrap();
        let (child, base) = common::serve_args(
            data.path(),
            Some(&fixture().join("flow.toml")),
            &[
                ("COUNT_DELAY_MS", "300"),
                ("COUNT_LOG", log.to_str().unwrap()),
            ],
            &[
                "--postgres",
                &db.url,
                "--postgres-schema",
                &db.name,
                "--lease-seconds",
                "2",
                "--drain-seconds",
                "30",
            ],
        );
        Server {
            child,
            base,
            _data: data,
        }
    }

    /// SIGTERM, then waits for the process to exit on its own (drained).
    async fn stop(mut self) {
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        for _ in 0..600 {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "{} exited with {s}", self.base);
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} did not exit within 30 s of SIGTERM", self.base);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_run(c: &reqwest::Client, base: &str) -> String {
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("count.json")).unwrap())
            .unwrap();
    let r = c
        .post(format!("{base}/v1/runs"))
        .json(&json!({"flow": flow, "name": "count.json", "input": {"count": 0, "limit": STEPS}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    r.json::<Value>().await.unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_rolling_restart_of_two_servers_loses_nothing_and_faults_nothing() {
    let Some(db) = Schema::new() else { return };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let c = client();
    let a = Server::start(&db, &log);
    let b = Server::start(&db, &log);
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        runs.push(start_run(&c, base).await);
    }
    // One server at a time: stop it (it drains and exits), start it again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.stop().await;
    let a = Server::start(&db, &log);
    b.stop().await;
    let b = Server::start(&db, &log);

    let mut done = 0;
    for _ in 0..1200 {
        done = 0;
        for run in &runs {
            let v = common::get_json(&c, format!("{}/v1/runs/{run}", b.base)).await;
            match v["state"].as_str() {
                Some("completed") => done += 1,
                Some("running") => {}
                other => panic!("{run} is {other:?}: {v}"),
            }
        }
        if done == RUNS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(done, RUNS, "every run completed");
    for run in &runs {
        let v = common::get_json(&c, format!("{}/v1/runs/{run}", a.base)).await;
        assert_eq!(v["output"]["count"], STEPS, "{run}: {v}");
        let replies =
            common::get_json(&c, format!("{}/v1/runs/{run}/facts?kind=Reply", a.base)).await;
        assert_eq!(replies["page"]["total"], STEPS, "{run}: {replies}");
        assert!(
            !replies.to_string().contains("Unknown"),
            "{run}: no Reply is Unknown: {replies}"
        );
        let verdict = common::verdict(&c, &a.base, run).await;
        assert_eq!(verdict, "matched", "{run}");
    }
    let mut ran: BTreeMap<String, u32> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        *ran.entry(line.to_string()).or_default() += 1;
    }
    assert_eq!(ran.len(), RUNS * STEPS as usize, "every call ran");
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "calls that ran twice: {twice:?}");
}
