//! A rolling restart under load loses nothing and faults nothing (issue
//! 36, "Must hold"): two `flow serve --postgres` servers share one
//! database, 20 runs are in flight with a slow Tool call out most of the
//! time, and each server in turn is stopped with SIGTERM and started
//! again, with the Tools as the servers' children. Each server drains — its calls out finish and their Replies are
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
use common::roll::{Server, Worker, client, start_run};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const RUNS: usize = 20;
const STEPS: u64 = 8;

#[tokio::test]
async fn a_rolling_restart_of_two_servers_loses_nothing_and_faults_nothing() {
    let Some(db) = Schema::new() else { return };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let c = client();
    let a = Server::start(&db, &log, &[]);
    let b = Server::start(&db, &log, &[]);
    let runs = start_runs(&c, [&a.base, &b.base]).await;
    // One server at a time: stop it (it drains and exits), start it again.
    a.stop().await;
    let a = Server::start(&db, &log, &[]);
    b.stop().await;
    let b = Server::start(&db, &log, &[]);
    all_complete(&c, &runs, &a.base, &b.base, &log).await;
}

/// The same with the counter's calls served by two `flow worker`s, one
/// at each server: every server, then every worker is stopped with SIGTERM
/// and started again, one at a time. A draining server lets its workers'
/// calls finish; a draining worker finishes the calls it holds and takes
/// no more, while the other worker serves the queue.
#[tokio::test]
async fn a_rolling_restart_of_two_servers_and_two_workers_loses_nothing() {
    let Some(db) = Schema::new() else { return };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let c = client();
    let a = Server::for_workers(&db, "127.0.0.1:0");
    let b = Server::for_workers(&db, "127.0.0.1:0");
    let (a_addr, b_addr) = (a.addr(), b.addr());
    let w1 = Worker::start(&a.base, &log);
    let w2 = Worker::start(&b.base, &log);
    let runs = start_runs(&c, [&a.base, &b.base]).await;
    a.stop().await;
    let a = Server::for_workers(&db, &a_addr);
    b.stop().await;
    let b = Server::for_workers(&db, &b_addr);
    w1.stop().await;
    let _w1 = Worker::start(&a.base, &log);
    assert!(
        running(&c, &runs, &b.base).await > 0,
        "runs are still in flight when the last worker is stopped"
    );
    w2.stop().await;
    let _w2 = Worker::start(&b.base, &log);
    all_complete(&c, &runs, &a.base, &b.base, &log).await;
}

/// Starts the runs, alternately on each server, and lets them get going.
async fn start_runs(c: &reqwest::Client, servers: [&String; 2]) -> Vec<String> {
    let mut runs = Vec::new();
    for i in 0..RUNS {
        runs.push(start_run(c, servers[i % 2], STEPS).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    runs
}

/// How many of `runs` are still running.
async fn running(c: &reqwest::Client, runs: &[String], base: &str) -> usize {
    let mut n = 0;
    for run in runs {
        let v = common::get_json(c, format!("{base}/v1/runs/{run}")).await;
        n += usize::from(v["state"] == "running");
    }
    n
}

/// Waits until every run completed; then each counted to the end with
/// every Reply Ok, replays matched, and each call ran exactly once.
async fn all_complete(c: &reqwest::Client, runs: &[String], a: &str, b: &str, log: &Path) {
    let mut done = 0;
    for _ in 0..1200 {
        done = 0;
        for run in runs {
            let v = common::get_json(c, format!("{b}/v1/runs/{run}")).await;
            match v["state"].as_str() {
                Some("completed") => done += 1,
                Some("running") => {}
                // A problem answer (a server busy for a moment) is no
                // state: asked again on the next round.
                None if v["status"].as_u64().is_some_and(|s| s >= 500) => {}
                other => panic!("{run} is {other:?}: {v}"),
            }
        }
        if done == RUNS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(done, RUNS, "every run completed");
    for run in runs {
        let v = common::get_json(c, format!("{a}/v1/runs/{run}")).await;
        assert_eq!(v["output"]["count"], STEPS, "{run}: {v}");
        let replies = common::get_json(c, format!("{a}/v1/runs/{run}/facts?kind=Reply")).await;
        assert_eq!(replies["page"]["total"], STEPS, "{run}: {replies}");
        assert!(
            !replies.to_string().contains("Unknown"),
            "{run}: no Reply is Unknown: {replies}"
        );
        assert_eq!(common::verdict(c, a, run).await, "matched", "{run}");
    }
    let mut ran: BTreeMap<String, u32> = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        *ran.entry(line.to_string()).or_default() += 1;
    }
    assert_eq!(ran.len(), RUNS * STEPS as usize, "every call ran");
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "calls that ran twice: {twice:?}");
}
