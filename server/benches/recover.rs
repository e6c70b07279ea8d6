//! Bulk recovery's numbers (issue 39, "Measure"): the recovery rate
//! (runs/s) and the time to first forked step, in process on a SQLite
//! store with full synchronous commits (each fork's Start and each step
//! durable: fsync), beside an fsync probe on the same disk.
//!
//! The runs are tests/fixtures/flows/recover/fault.json's small branch:
//! each faults at its `small_label` transform; fixed.json fixes that node,
//! so each fork starts at the Checkpoint before it and its first new step
//! is that transform's Checkpoint (then End).
//!
//! * **Dry run**: every faulted run planned (replayed against FIXED, its
//!   fork point found), nothing forked.
//! * **Time to first forked step**: a recovery of one run at a time
//!   (`prefix` = its id), from beginning the recovery until the fork has
//!   recorded its first new step — the recovery's own record, the plan,
//!   the fork's Start, its drive. The fork here ends with that step, so
//!   the figure is to the fork's End, an upper bound.
//! * **Recovery rate**: one recovery over the rest, `rate` 0 (no limit):
//!   forks started a second (each Start durable before the next run is
//!   planned), and until every fork ended.
//!
//! Run: `cargo bench -p flowd --bench recover` (200 runs, seconds);
//! `FLOW_BENCH_RECOVER_RUNS` sets the runs, `FLOW_BENCH_RECOVER_SINGLE`
//! [30] the one-run recoveries timed. Not part of CI.

// Shared with the other benches; this one uses part of it.
#[allow(dead_code)]
mod harness;

use flow_store::{RunListQuery, RunState, SqliteOptions, SqliteStore};
use flowd::service::bind::Bindings;
use flowd::service::recover::RecoverOptions;
use flowd::service::{RunService, ServiceOptions};
use flowd::source::Sources;
use harness::{Stats, Table, env_usize, fmt_ms, ms_since};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn fixture(name: &str) -> Sources {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/flows/recover")
        .join(name);
    Sources::read(&path).expect("the fixture")
}

fn query(prefix: Option<String>) -> RunListQuery {
    RunListQuery {
        flow: Some("recover-fault".into()),
        state: Some(RunState::Faulted),
        prefix,
        ..RunListQuery::default()
    }
}

fn main() {
    let runs = env_usize("FLOW_BENCH_RECOVER_RUNS", 200);
    let single = env_usize("FLOW_BENCH_RECOVER_SINGLE", 30).min(runs / 2);
    let dir = tempfile::tempdir().expect("a temp dir");
    let fsync_us = harness::fsync_probe(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut table = Table::default();
    rt.block_on(async {
        let store = SqliteStore::open(dir.path().join("flow.db"), SqliteOptions::default())
            .expect("the store");
        let service = RunService::new(
            Arc::new(store),
            ServiceOptions::local(Bindings::local(false, Vec::new())),
            tokio_util::sync::CancellationToken::new(),
        );

        // Seed: faulted runs, 16 at once.
        let t = Instant::now();
        let input = r#"{"n": 1, "small": "x", "big": 7}"#;
        let mut ids = Vec::new();
        while ids.len() < runs {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..(runs - ids.len()).min(16) {
                let s = service.clone();
                set.spawn(async move {
                    let accepted = s.start(&flow_store::Namespace::default(), fixture("fault.json"), input).await.expect("a start");
                    let run = accepted.run.clone();
                    let _ = accepted.finished().await;
                    run
                });
            }
            while let Some(r) = set.join_next().await {
                ids.push(r.expect("a seeding task"));
            }
        }
        table.note(format!(
            "seeded {runs} faulted runs in {:.1} s; fsync probe: median {fsync_us:.0} µs (4 KiB write + fsync) in the store's directory",
            t.elapsed().as_secs_f64()
        ));

        // The dry run over every faulted run.
        let dry = RecoverOptions {
            dry_run: true,
            rate: 0.0,
        };
        let t = Instant::now();
        let recovery = service
            .begin_recovery(fixture("fixed.json"), query(None), dry, "bench")
            .await
            .expect("a dry run");
        let (report, _) = service.run_recovery(recovery, None).await.expect("a dry run");
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(report.recoverable as usize, runs, "{report:?}");
        table.row(
            format!("dry run over {runs} faulted runs"),
            format!("{:.0} runs/s ({:.2} s)", runs as f64 / secs, secs),
            "—",
        );

        // One run at a time: to the fork's first new step.
        let forks = RecoverOptions {
            dry_run: false,
            rate: 0.0,
        };
        let mut samples = Vec::new();
        for run in ids.iter().take(single) {
            let t = Instant::now();
            let recovery = service
                .begin_recovery(
                    fixture("fixed.json"),
                    query(Some(run.to_string())),
                    forks,
                    "bench",
                )
                .await
                .expect("a recovery");
            let (report, drives) = service.run_recovery(recovery, None).await.expect("a recovery");
            assert_eq!(report.recovered, 1, "{report:?}");
            for d in drives {
                d.finished().await.expect("the fork ends");
            }
            samples.push(ms_since(t));
        }
        let s = Stats::of(&samples);
        table.row(
            "time to first forked step: a one-run recovery begun → the fork's first new step durable (here with its End)",
            format!(
                "{} = {:.0} / {:.0} fsyncs",
                s.ms(),
                s.p50 * 1e3 / fsync_us.max(1.0),
                s.p99 * 1e3 / fsync_us.max(1.0)
            ),
            "—",
        );

        // The rest in one recovery, no rate limit.
        let rest = runs - single;
        let t = Instant::now();
        let recovery = service
            .begin_recovery(fixture("fixed.json"), query(None), forks, "bench")
            .await
            .expect("a recovery");
        let (report, drives) = service.run_recovery(recovery, None).await.expect("a recovery");
        let started = t.elapsed().as_secs_f64();
        assert_eq!(report.recovered as usize, rest, "{report:?}");
        assert_eq!(report.already_recovered as usize, single, "{report:?}");
        for d in drives {
            d.finished().await.expect("the fork ends");
        }
        let ended = t.elapsed().as_secs_f64();
        table.row(
            format!("recovery of {rest} runs (and {single} already recovered), --rate 0"),
            format!(
                "{:.0} forks/s started ({:.2} s); every fork ended after {:.2} s ({} per run)",
                rest as f64 / started,
                started,
                ended,
                fmt_ms(ended * 1e3 / rest.max(1) as f64)
            ),
            "—",
        );
    });
    table.print();
}
