//! A rolling restart under load (issue 36, "Measure"): how long rolling
//! two servers and two workers takes, and the longest pause any run saw
//! during it.
//!
//! Workload: two `flow serve --postgres` servers on one fresh schema
//! (database `test` at 127.0.0.1:5432, or `FLOW_TEST_POSTGRES`), each
//! with a `flow worker` serving the rolling tests' counter
//! (`tests/fixtures/flows/rolling`: a Python Tool call of 300 ms a step).
//! `FLOW_BENCH_RUNS` runs (default 20) of `FLOW_BENCH_RUN_STEPS` steps
//! (default 40) are started, alternately on each server; once they are
//! going, each server and then each worker is stopped with SIGTERM, waited
//! for (it drains and exits) and started again (a server on its old
//! address), one at a time, as a rollout does.
//!
//! Figures:
//! - the roll: first SIGTERM → last worker serving again;
//! - a run's pause: the longest time its head did not move (polled every
//!   20 ms), over every run, during the roll and outside it. With a 300 ms
//!   step a run moves at least every ~300 ms when nothing stops it; the
//!   difference is what the restarts cost it.
//!
//! Run: `cargo bench --profile dev -p flowd --bench rolling` (the times are
//! the drains' and the Tool's, not the code's). An fsync probe runs in
//! the same process.

// Shared with the other benches; this one uses part of it.
#[allow(dead_code)]
mod harness;

#[path = "../../tests/common/mod.rs"]
mod common;

use common::roll::{Server, Worker, client, start_run};
use harness::{Table, env_usize, fmt_ms};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each run's head as last seen, when it last moved, and its longest stall
/// inside and outside the roll window.
#[derive(Default)]
struct Watch {
    runs: BTreeMap<String, Seen>,
    /// While the roll is on (first SIGTERM to last worker serving).
    rolling: bool,
}

struct Seen {
    head: u64,
    since: Instant,
    longest_rolling: Duration,
    longest_steady: Duration,
    done: bool,
}

fn main() {
    let runs = env_usize("FLOW_BENCH_RUNS", 20);
    let steps = env_usize("FLOW_BENCH_RUN_STEPS", 40) as u64;
    let Some(db) = common::Schema::new() else {
        eprintln!("no Postgres (FLOW_TEST_POSTGRES): the rolling bench needs it");
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let log = tmp.path().join("calls.log");
    let mut table = Table::default();
    table.note(format!("load average at the start: {}", harness::load()));
    let fsync_us = harness::fsync_probe(tmp.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = client();
        let a = Server::for_workers(&db, "127.0.0.1:0");
        let b = Server::for_workers(&db, "127.0.0.1:0");
        let (a_addr, b_addr) = (a.addr(), b.addr());
        let w1 = Worker::start(&a.base, &log);
        let w2 = Worker::start(&b.base, &log);
        let watch = Arc::new(Mutex::new(Watch::default()));
        let mut ids = Vec::new();
        for i in 0..runs {
            let base = if i % 2 == 0 { &a.base } else { &b.base };
            ids.push(start_run(&c, base, steps).await);
        }
        let poller = tokio::spawn(poll(
            c.clone(),
            [a.base.clone(), b.base.clone()],
            ids.clone(),
            watch.clone(),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;

        let t = Instant::now();
        watch.lock().unwrap().rolling = true;
        a.stop().await;
        let a = Server::for_workers(&db, &a_addr);
        b.stop().await;
        let b = Server::for_workers(&db, &b_addr);
        w1.stop().await;
        let _w1 = Worker::start(&a.base, &log);
        w2.stop().await;
        let _w2 = Worker::start(&b.base, &log);
        let roll = t.elapsed();
        watch.lock().unwrap().rolling = false;
        let unfinished = {
            let w = watch.lock().unwrap();
            w.runs.values().filter(|s| !s.done).count()
        };
        poller.await.expect("poller");
        let w = watch.lock().unwrap();
        let longest = |f: fn(&Seen) -> Duration| {
            w.runs
                .iter()
                .map(|(id, s)| (f(s), id.clone()))
                .max()
                .unwrap_or_default()
        };
        let (pause, which) = longest(|s| s.longest_rolling);
        let (steady, _) = longest(|s| s.longest_steady);
        table.row(
            format!("rolling restart of 2 servers + 2 workers, {runs} runs in flight"),
            format!("{} ms", fmt_ms(roll.as_secs_f64() * 1e3)),
            "—",
        );
        table.row(
            "longest pause of any run during the roll",
            format!("{} ms ({which})", fmt_ms(pause.as_secs_f64() * 1e3)),
            "—",
        );
        table.row(
            "longest pause of any run outside the roll (a 300 ms step)",
            format!("{} ms", fmt_ms(steady.as_secs_f64() * 1e3)),
            "—",
        );
        table.note(format!(
            "{unfinished} of {runs} runs were still running when the roll ended; all completed"
        ));
        drop((a, b));
    });
    table.note(format!(
        "fsync probe: median {fsync_us:.0} µs (4 KiB write + fsync) in the bench's temp directory"
    ));
    table.note(format!("load average at the end: {}", harness::load()));
    table.print();
}

/// Polls every run's head every 20 ms until all are complete; each
/// faulted or halted run panics (the roll must fault nothing).
async fn poll(c: reqwest::Client, bases: [String; 2], ids: Vec<String>, watch: Arc<Mutex<Watch>>) {
    loop {
        let mut all = true;
        for id in &ids {
            // Either server answers; one of them may be restarting.
            let mut answer = None;
            for base in &bases {
                if let Ok(r) = c.get(format!("{base}/v1/runs/{id}")).send().await {
                    answer = Some(r);
                    break;
                }
            }
            let Some(r) = answer else {
                all = false;
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                all = false;
                continue;
            };
            let state = v["state"].as_str().unwrap_or("?").to_string();
            assert!(
                state == "running" || state == "completed",
                "{id} is {state}: {v}"
            );
            let head = v["lastFact"]["n"].as_u64().unwrap_or(0);
            let now = Instant::now();
            let mut w = watch.lock().unwrap();
            let rolling = w.rolling;
            let s = w.runs.entry(id.clone()).or_insert(Seen {
                head,
                since: now,
                longest_rolling: Duration::ZERO,
                longest_steady: Duration::ZERO,
                done: false,
            });
            if s.done {
                continue;
            }
            let stalled = now - s.since;
            let longest = if rolling {
                &mut s.longest_rolling
            } else {
                &mut s.longest_steady
            };
            *longest = (*longest).max(stalled);
            if head != s.head {
                s.head = head;
                s.since = now;
            }
            s.done = state == "completed";
            all &= s.done;
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
