//! The conformance suite every backend runs (STYLE rule 4: "One conformance
//! suite runs against every backend"). A backend's test calls
//! [`run_suite`] with a factory that makes a fresh, empty store and a
//! scratch directory for archives; every case reports a failure as text
//! rather than panicking.

use crate::api::*;
use crate::archive::{export_run, import_run};
use crate::error::Error;
use crate::source_ref;
use flow_abi::fact::{CallId, Ending as FactEnding, Entry, Fact, RunId, Source};
use flow_abi::protocol::Outcome;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

type Case<B> = fn(&mut dyn FnMut() -> B, &Path) -> Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn e<T: std::fmt::Display>(x: T) -> String {
    x.to_string()
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh run id, increasing within a process.
pub fn new_run_id() -> RunId {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id().to_be_bytes();
    RunId::from_parts(
        1_700_000_000_000 + i,
        [
            pid[0],
            pid[1],
            pid[2],
            pid[3],
            0,
            0,
            (i >> 16) as u8,
            (i >> 8) as u8,
            i as u8,
            7,
        ],
    )
}

/// A Start fact with one source, and that source.
pub fn start_fact(run: &RunId, input: Value) -> (Value, Vec<SourceText>) {
    let text = format!("{{\"id\":\"demo\",\"nodes\":[],\"note\":\"{}\"}}", run);
    let (hash, length) = source_ref(&text);
    let start = Fact::Start {
        n: 1,
        run: run.clone(),
        data: "1.0".into(),
        entry: Entry {
            module: "demo.json".into(),
            function: "main".into(),
        },
        program: "sha256:00".into(),
        sources: vec![Source {
            module: "demo.json".into(),
            hash,
            length,
        }],
        input,
        parent: None,
        outer: None,
    };
    (
        start.into_json(),
        vec![SourceText {
            module: "demo.json".into(),
            text,
        }],
    )
}

/// Call `k` of the root task, `c1:root#<k>`. The suite counts calls from
/// 1; a 0 here is a mistake in the suite, not in a backend.
pub fn root_call(k: u64) -> CallId {
    CallId::new("root", k).expect("the suite counts a task's calls from 1")
}

pub fn call_fact(n: u64, k: u64, args: Value) -> Value {
    Fact::Call {
        n,
        call: root_call(k),
        task: "root".into(),
        node: "step".into(),
        tool: "demo.json#tool".into(),
        fingerprint: "sha256:11".into(),
        args,
    }
    .into_json()
}

pub fn reply_fact(n: u64, k: u64, v: Value) -> Value {
    Fact::Reply {
        n,
        call: root_call(k),
        outcome: Outcome::Ok(v),
    }
    .into_json()
}

pub fn checkpoint_fact(n: u64, state: Value) -> Value {
    Fact::Checkpoint {
        n,
        task: "root".into(),
        node: "step".into(),
        state,
    }
    .into_json()
}

pub fn end_fact(n: u64, output: Value) -> Value {
    Fact::End {
        n,
        ending: FactEnding::Completed {
            exit: "success".into(),
            output,
        },
    }
    .into_json()
}

/// Creates a run and appends `steps` Call/Reply/Checkpoint rounds (no End).
pub fn seed_run<B: Backend + ?Sized>(store: &B, steps: u64) -> Result<(RunId, u64), String> {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "hello"}));
    store.create_run(&start, &sources).map_err(e)?;
    let mut n = 1;
    for k in 1..=steps {
        store
            .append(&run, &call_fact(n + 1, k, json!({"k": k})))
            .map_err(e)?;
        store
            .append(
                &run,
                &reply_fact(n + 2, k, json!({"text": format!("answer {k}")})),
            )
            .map_err(e)?;
        store
            .append(&run, &checkpoint_fact(n + 3, json!({"k": k})))
            .map_err(e)?;
        n += 3;
    }
    Ok((run, n))
}

/// Every case, by name.
pub fn cases<B: Backend + Sync>() -> Vec<(&'static str, Case<B>)> {
    vec![
        ("round_trip", round_trip::<B>),
        ("refusals_change_nothing", refusals_change_nothing::<B>),
        (
            "merkle_values_and_escaping",
            merkle_values_and_escaping::<B>,
        ),
        ("checkpoint_states", checkpoint_states::<B>),
        (
            "discovery_cursor_and_limit",
            discovery_cursor_and_limit::<B>,
        ),
        (
            "host_records_and_decisions",
            host_records_and_decisions::<B>,
        ),
        ("live_tail", live_tail::<B>),
        ("history_pages", history_pages::<B>),
        ("archive_round_trip", archive_round_trip::<B>),
        ("concurrent_runs", concurrent_runs::<B>),
    ]
}

/// Runs every case on fresh stores; returns the failures (empty = pass).
pub fn run_suite<B: Backend + Sync>(factory: &mut dyn FnMut() -> B, scratch: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, case) in cases::<B>() {
        let dir = scratch.join(name);
        if let Err(msg) = case(factory, &dir) {
            failures.push(format!("{name}: {msg}"));
        }
    }
    failures
}

/// REQUIREMENTS LIVE-1, RES-4: an accepted fact reads back verified, in order.
fn round_trip<B: Backend + Sync>(new: &mut dyn FnMut() -> B, _: &Path) -> Result<(), String> {
    let s = new();
    let run = new_run_id();
    let big = "b".repeat(5000);
    let (start, sources) = start_fact(&run, json!({"q": big}));
    let a1 = s.create_run(&start, &sources).map_err(e)?;
    ensure!(a1.n == 1, "Start is fact 1");
    let facts = [
        call_fact(2, 1, json!({"prompt": "hi"})),
        reply_fact(3, 1, json!({"text": big})),
        checkpoint_fact(4, json!({"messages": [big]})),
        end_fact(5, json!({"answer": 42})),
    ];
    let mut hashes = vec![a1.hash];
    for f in &facts {
        hashes.push(s.append(&run, f).map_err(e)?.hash);
    }
    let h = s.read_history(&run).map_err(e)?;
    ensure!(h.facts.len() == 5, "5 facts, got {}", h.facts.len());
    for (i, f) in h.facts.iter().enumerate() {
        ensure!(
            f.n == i as u64 + 1 && f.hash == hashes[i],
            "fact {} number or hash",
            i + 1
        );
    }
    // Logical facts come back exactly (checkpoint state via checkpoint_state).
    ensure!(
        s.expand(&h.facts[0].fact).map_err(e)? == start,
        "Start differs"
    );
    for (i, f) in facts.iter().enumerate().filter(|(i, _)| *i != 2) {
        ensure!(
            s.expand(&h.facts[i + 1].fact).map_err(e)? == *f,
            "fact {} differs",
            i + 2
        );
    }
    ensure!(
        s.checkpoint_state(&run, 4).map_err(e)? == json!({"messages": [big]}),
        "checkpoint state"
    );
    let info = s.run_info(&run).map_err(e)?;
    ensure!(
        info.state == RunState::Completed && info.ending == Some(Ending::Completed),
        "state {:?}",
        info.state
    );
    ensure!(
        info.last_fact.n == 5 && info.last_fact.hash == hashes[4],
        "last fact"
    );
    ensure!(
        info.entry.module == "demo.json" && info.program == "sha256:00",
        "entry/program"
    );
    // Sources are blobs (DESIGN §3).
    let (src_hash, _) = source_ref(&sources[0].text);
    ensure!(
        s.blob(&src_hash).map_err(e)? == sources[0].text.as_bytes(),
        "source blob"
    );
    Ok(())
}

/// Issue 3 §2: "An append after End, with a wrong n, or to an unknown run is
/// refused with a clear error" (and DESIGN §7: "changes nothing").
fn refusals_change_nothing<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    let before = s.read_history(&run).map_err(e)?.facts;
    let unknown = new_run_id();
    ensure!(
        matches!(
            s.append(&unknown, &call_fact(2, 1, json!({}))),
            Err(Error::UnknownRun(_))
        ),
        "unknown run"
    );
    ensure!(
        matches!(
            s.append(&run, &call_fact(n + 2, 9, json!({}))),
            Err(Error::WrongNumber { .. })
        ),
        "gap"
    );
    ensure!(
        matches!(
            s.append(&run, &call_fact(n, 9, json!({}))),
            Err(Error::WrongNumber { .. })
        ),
        "repeat"
    );
    ensure!(
        matches!(
            s.append(&run, &json!({"fact": "Nope", "n": n + 1})),
            Err(Error::InvalidFact(_))
        ),
        "bad kind"
    );
    ensure!(
        matches!(
            s.append(&run, &json!({"fact": "Call", "n": n + 1})),
            Err(Error::InvalidFact(_))
        ),
        "bad call"
    );
    let (start, sources) = start_fact(&run, json!({}));
    ensure!(
        matches!(s.create_run(&start, &sources), Err(Error::RunExists(_))),
        "run exists"
    );
    ensure!(
        matches!(
            s.create_run(&start_fact(&new_run_id(), json!({})).0, &[]),
            Err(Error::InvalidFact(_))
        ),
        "missing source"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts == before,
        "refusals changed the history"
    );
    s.append(&run, &end_fact(n + 1, json!(null))).map_err(e)?;
    let ended = s.read_history(&run).map_err(e)?.facts;
    ensure!(
        matches!(
            s.append(&run, &call_fact(n + 2, 9, json!({}))),
            Err(Error::Ended { .. })
        ),
        "after End"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts == ended,
        "append after End changed the history"
    );
    ensure!(
        s.run_info(&run).map_err(e)?.last_fact.n == n + 1,
        "last fact moved"
    );
    Ok(())
}

/// DESIGN §3 values: blobs for values over 1 KiB, shared, user `$blob` keys escaped.
fn merkle_values_and_escaping<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let big = json!({"doc": "d".repeat(3000), "n": 1});
    let tricky = json!({"$blob": "blake3:0000000000000000000000000000000000000000000000000000000000000000", "length": 3, "$$blob": "x"});
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = new_run_id();
        let (start, sources) = start_fact(&run, json!({}));
        s.create_run(&start, &sources).map_err(e)?;
        s.append(&run, &call_fact(2, 1, big.clone())).map_err(e)?;
        s.append(&run, &reply_fact(3, 1, tricky.clone()))
            .map_err(e)?;
        runs.push(run);
    }
    for run in &runs {
        let h = s.read_history(run).map_err(e)?;
        let args = &h.facts[1].fact["args"];
        // Innermost first: the 3 KB text becomes the blob, its small parent stays inline.
        ensure!(
            args["doc"].get("$blob").is_some() && args["n"] == json!(1),
            "a 3 KB value is stored as a reference: {args}"
        );
        ensure!(
            args["doc"]["length"] == json!(3002),
            "reference length is the logical length"
        );
        ensure!(s.expand(args).map_err(e)? == big, "big value round trip");
        let stored_reply = &h.facts[2].fact["outcome"]["Ok"];
        ensure!(
            stored_reply.get("$blob").is_none(),
            "a user $blob key is escaped"
        );
        ensure!(
            s.expand(stored_reply).map_err(e)? == tricky,
            "escaped value round trip"
        );
    }
    let a = s.read_history(&runs[0]).map_err(e)?.facts[1].fact["args"].clone();
    let b = s.read_history(&runs[1]).map_err(e)?.facts[1].fact["args"].clone();
    ensure!(a == b, "equal values share one blob");
    Ok(())
}

/// DESIGN §3 "Checkpoints": any checkpoint's state reads back whole.
fn checkpoint_states<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({}));
    s.create_run(&start, &sources).map_err(e)?;
    let mut expected = Vec::new();
    let mut msgs: Vec<Value> = Vec::new();
    for step in 0..60u64 {
        msgs.push(json!(format!(
            "{step}:{}",
            "m".repeat(if step % 3 == 0 { 1500 } else { 40 })
        )));
        let mut state = json!({"messages": msgs, "step": step, "$blob": "user"});
        if step % 7 == 0 {
            state["extra"] = json!({"flag": step});
        }
        if step % 11 == 0 {
            // A rewrite that is not an append.
            msgs.reverse();
            state["messages"] = json!(msgs);
        }
        let n = step + 2;
        s.append(&run, &checkpoint_fact(n, state.clone()))
            .map_err(e)?;
        expected.push((n, state));
    }
    for (n, state) in &expected {
        let got = s.checkpoint_state(&run, *n).map_err(e)?;
        ensure!(got == *state, "checkpoint {n} state differs");
    }
    ensure!(
        matches!(s.checkpoint_state(&run, 1), Err(Error::InvalidArgument(_))),
        "Start is not a checkpoint"
    );
    s.read_history(&run).map_err(e)?;
    Ok(())
}

/// REQUIREMENTS DISC-4, DISC-5, DISC-7..DISC-12: cursor, limit, fields.
fn discovery_cursor_and_limit<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let mut ids = Vec::new();
    for i in 0..7 {
        let (run, n) = seed_run(&s, 1).map_err(e)?;
        if i % 2 == 0 {
            s.append(&run, &end_fact(n + 1, json!(i))).map_err(e)?;
        }
        ids.push(run.to_string());
    }
    ids.sort();
    for bad in [Some(0u32), Some(201)] {
        ensure!(
            matches!(
                s.discover(&DiscoveryQuery {
                    limit: bad,
                    ..Default::default()
                }),
                Err(Error::InvalidArgument(_))
            ),
            "limit {bad:?} refused"
        );
    }
    ensure!(
        matches!(
            s.discover(&DiscoveryQuery {
                after: Some("latest".into()),
                ..Default::default()
            }),
            Err(Error::InvalidArgument(_))
        ),
        "after must be a run id"
    );
    let all = s.discover(&DiscoveryQuery::default()).map_err(e)?;
    ensure!(
        all.runs.iter().map(|r| r.run.clone()).collect::<Vec<_>>() == ids,
        "default page lists every run by id"
    );
    ensure!(all.next_after.is_none(), "no nextAfter at the end");
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let p = s
            .discover(&DiscoveryQuery {
                limit: Some(3),
                after: after.clone(),
                state: None,
            })
            .map_err(e)?;
        ensure!(p.runs.len() <= 3, "page bigger than limit");
        seen.extend(p.runs.iter().map(|r| r.run.clone()));
        match p.next_after {
            Some(n) => {
                ensure!(
                    Some(&n) == p.runs.last().map(|r| &r.run),
                    "nextAfter is the last examined id"
                );
                after = Some(n);
            }
            None => break,
        }
    }
    ensure!(seen == ids, "cursor pages cover every run once");
    let done = s
        .discover(&DiscoveryQuery {
            state: Some(RunState::Completed),
            ..Default::default()
        })
        .map_err(e)?;
    ensure!(
        done.runs.len() == 4
            && done
                .runs
                .iter()
                .all(|r| r.record == RecordStatus::Complete && r.ending == Some(Ending::Completed)),
        "state filter"
    );
    let row = serde_json::to_value(&all.runs[0]).map_err(e)?;
    let mut keys: Vec<&str> = row
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort();
    ensure!(
        keys == [
            "ending",
            "entry",
            "historyPresent",
            "hostDecision",
            "lastFact",
            "problem",
            "program",
            "record",
            "run",
            "truncated"
        ],
        "row fields {keys:?}"
    );
    Ok(())
}

/// REQUIREMENTS HOST-3, DISC-17: typed host records; a pause or halt is the
/// host decision only while its head is the last fact.
fn host_records_and_decisions<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    s.record_host(
        &run,
        HostRecord {
            kind: HostRecordKind::Binding,
            at_ms: Some(5),
            details: json!({"tool": "demo.json#tool"}),
        },
    )
    .map_err(e)?;
    let p = s
        .record_host(
            &run,
            HostRecord {
                kind: HostRecordKind::Pause,
                at_ms: None,
                details: json!({}),
            },
        )
        .map_err(e)?;
    ensure!(p.head.n == n && p.seq == 2, "pause head {:?}", p.head);
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Paused,
        "paused"
    );
    let row = |s: &B| -> Result<DiscoveryRow, String> {
        s.discover(&DiscoveryQuery::default())
            .map_err(e)?
            .runs
            .into_iter()
            .find(|r| r.run == run.as_str())
            .ok_or_else(|| "row missing".to_string())
    };
    ensure!(
        row(&s)?.host_decision.map(|d| d.kind) == Some(HostRecordKind::Pause),
        "pause is the host decision"
    );
    s.append(&run, &call_fact(n + 1, 9, json!({}))).map_err(e)?;
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Running,
        "running again"
    );
    ensure!(
        row(&s)?.host_decision.is_none(),
        "a stale pause is no decision"
    );
    s.record_host(
        &run,
        HostRecord {
            kind: HostRecordKind::Halt,
            at_ms: Some(9),
            details: json!({"why": "interrupt"}),
        },
    )
    .map_err(e)?;
    ensure!(
        s.run_info(&run).map_err(e)?.state == RunState::Halted,
        "halted"
    );
    let recs = s.host_records(&run).map_err(e)?;
    ensure!(
        recs.len() == 3
            && recs[0].kind == HostRecordKind::Binding
            && recs[0].at_ms == 5
            && recs[2].details == json!({"why": "interrupt"}),
        "records"
    );
    ensure!(
        matches!(
            s.record_host(
                &new_run_id(),
                HostRecord {
                    kind: HostRecordKind::Retry,
                    at_ms: None,
                    details: json!(1)
                }
            ),
            Err(Error::UnknownRun(_))
        ),
        "unknown run"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts.len() as u64 == n + 1,
        "host records are not facts"
    );
    Ok(())
}

/// Issue 3 §4, REQUIREMENTS LIVE-3: backlog then live, no gap, no duplicate.
fn live_tail<B: Backend + Sync>(new: &mut dyn FnMut() -> B, _: &Path) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 2).map_err(e)?;
    let mut tail = s.subscribe(&run, 2).map_err(e)?;
    let total = n + 30 + 1;
    let got = std::thread::scope(|scope| -> Result<Vec<u64>, String> {
        let writer = scope.spawn(|| -> Result<(), String> {
            for i in 0..30u64 {
                s.append(&run, &call_fact(n + 1 + i, 100 + i, json!({"i": i})))
                    .map_err(e)?;
            }
            s.append(&run, &end_fact(total, json!(null))).map_err(e)?;
            Ok(())
        });
        let mut got = Vec::new();
        loop {
            match tail.next_event(Duration::from_secs(10)).map_err(e)? {
                TailEvent::Fact(f) => got.push(f.n),
                TailEvent::Ended => break,
                TailEvent::Idle => return Err("tail went idle".into()),
            }
        }
        writer.join().map_err(|_| "writer panicked".to_string())??;
        Ok(got)
    })?;
    ensure!(
        got == (3..=total).collect::<Vec<_>>(),
        "tail yielded {got:?}"
    );
    ensure!(
        matches!(s.subscribe(&new_run_id(), 0), Err(Error::UnknownRun(_))),
        "unknown run"
    );
    let mut idle = s.subscribe(&run, total).map_err(e)?;
    ensure!(
        idle.next_event(Duration::from_millis(10)).map_err(e)? == TailEvent::Idle,
        "nothing after End"
    );
    Ok(())
}

/// REQUIREMENTS HIST-12..HIST-18, HIST-21: paged, filtered, bounded views.
fn history_pages<B: Backend + Sync>(new: &mut dyn FnMut() -> B, _: &Path) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 5).map_err(e)?;
    // A call id longer than the 1024 code points a summary keeps: a branch
    // task with a long node id.
    let long_call = format!("c1:root/{}#1", "b".repeat(1100));
    let mut call = call_fact(n + 1, 1, json!({"big": "x".repeat(5000)}));
    call["call"] = json!(long_call);
    s.append(&run, &call).map_err(e)?;
    let calls = s
        .history_page(
            &run,
            &HistoryQuery {
                kind: Some("Call".into()),
                limit: Some(2),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        calls.page.total == 6 && calls.page.facts_total == n + 1,
        "totals {:?}",
        calls.page
    );
    ensure!(
        calls.facts.iter().map(|f| f.n).collect::<Vec<_>>() == [2, 5],
        "numbers keep positions"
    );
    ensure!(calls.page.next_offset == Some(2), "nextOffset");
    let last = s
        .history_page(
            &run,
            &HistoryQuery {
                kind: Some("Call".into()),
                offset: Some(4),
                limit: Some(2),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        last.page.next_offset.is_none(),
        "nextOffset null at the end"
    );
    let big = &last.facts[1];
    ensure!(
        big.values_omitted && big.fact["args"]["big"].get("$blob").is_some(),
        "a 5 KB value is omitted, hash visible"
    );
    ensure!(
        big.says_truncated && big.text.chars().count() == 1024,
        "text bounded"
    );
    ensure!(
        big.call.as_deref() == Some(long_call.as_str()),
        "call id as data"
    );
    ensure!(
        !last.facts[0].values_omitted && last.facts[0].fact["args"] == json!({"k": 5}),
        "small values shown"
    );
    ensure!(
        calls.sources.len() == 1
            && calls.sources[0].available
            && calls.sources[0].module == "demo.json",
        "sources listed"
    );
    let src = s.source_page(&run, "demo.json", 0).map_err(e)?;
    ensure!(
        src.text.starts_with("{\"id\":\"demo\"") && src.next_offset.is_none(),
        "source page {src:?}"
    );
    let tail = s.source_page(&run, "demo.json", 5).map_err(e)?;
    ensure!(
        tail.text == src.text.chars().skip(5).collect::<String>(),
        "source offset"
    );
    ensure!(
        matches!(
            s.source_page(&run, "other.json", 0),
            Err(Error::InvalidArgument(_))
        ),
        "unknown module refused"
    );
    ensure!(
        matches!(
            s.source_page(&run, "demo.json", 1_000_000),
            Err(Error::InvalidArgument(_))
        ),
        "offset past the end refused"
    );
    let search = s
        .history_page(
            &run,
            &HistoryQuery {
                search: Some("c1:root#3".into()),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        search.facts.iter().map(|f| f.n).collect::<Vec<_>>() == [8, 9],
        "search {:?}",
        search.facts.iter().map(|f| f.n).collect::<Vec<_>>()
    );
    for bad in [
        HistoryQuery {
            kind: Some("Nope".into()),
            ..Default::default()
        },
        HistoryQuery {
            limit: Some(0),
            ..Default::default()
        },
        HistoryQuery {
            limit: Some(201),
            ..Default::default()
        },
        HistoryQuery {
            offset: Some(1000),
            ..Default::default()
        },
    ] {
        ensure!(
            matches!(s.history_page(&run, &bad), Err(Error::InvalidArgument(_))),
            "refused {bad:?}"
        );
    }
    Ok(())
}

/// DESIGN §6 "Run archives": export, verified import, idempotent, conflicts refused.
fn archive_round_trip<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    scratch: &Path,
) -> Result<(), String> {
    let a = new();
    let (run, n) = seed_run(&a, 3).map_err(e)?;
    a.append(
        &run,
        &reply_fact(
            n + 1,
            77,
            json!({"doc": "q".repeat(4000), "inner": {"x": "r".repeat(2000)}}),
        ),
    )
    .map_err(e)?;
    a.record_host(
        &run,
        HostRecord {
            kind: HostRecordKind::Pause,
            at_ms: Some(1),
            details: json!({}),
        },
    )
    .map_err(e)?;
    let dir = scratch.join(run.as_str());
    let summary = export_run(&a, &run, &dir).map_err(e)?;
    ensure!(
        summary.facts == n + 1 && summary.blobs >= 3,
        "summary {summary:?}"
    );
    let again = export_run(&a, &run, &dir).map_err(e)?;
    ensure!(again == summary, "export is repeatable");
    let b = new();
    let out = import_run(&b, &dir).map_err(e)?;
    ensure!(
        matches!(out, ImportOutcome::Imported { facts, .. } if facts == n + 1),
        "imported {out:?}"
    );
    ensure!(
        matches!(
            import_run(&b, &dir).map_err(e)?,
            ImportOutcome::AlreadyPresent { .. }
        ),
        "import is idempotent"
    );
    let ha = a.read_history(&run).map_err(e)?.facts;
    let hb = b.read_history(&run).map_err(e)?.facts;
    ensure!(ha == hb, "imported history differs");
    ensure!(
        b.run_info(&run).map_err(e)?.state == RunState::Paused,
        "host decision imported"
    );
    ensure!(
        b.run_info(&run).map_err(e)?.imported_ms.is_some()
            && a.run_info(&run).map_err(e)?.imported_ms.is_none(),
        "an imported run is marked imported; a created one is not"
    );
    ensure!(
        b.host_records(&run).map_err(e)?.len() == 1,
        "host records imported"
    );
    ensure!(
        a.expand(&ha[n as usize].fact).map_err(e)? == b.expand(&hb[n as usize].fact).map_err(e)?,
        "blobs imported"
    );
    // The same run id with another history is refused.
    a.append(&run, &call_fact(n + 2, 78, json!({})))
        .map_err(e)?;
    export_run(&a, &run, &dir).map_err(e)?;
    ensure!(
        matches!(import_run(&b, &dir), Err(Error::Conflict(_))),
        "conflict refused"
    );
    Ok(())
}

/// Issue 3 tests: "many runs appending from many tasks with no lost or
/// reordered fact".
fn concurrent_runs<B: Backend + Sync>(new: &mut dyn FnMut() -> B, _: &Path) -> Result<(), String> {
    let s = new();
    let threads = 8u64;
    let per = 40u64;
    let runs: Vec<RunId> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let s = &s;
                scope.spawn(move || -> Result<RunId, String> {
                    let run = new_run_id();
                    let (start, sources) = start_fact(&run, json!({"t": t}));
                    s.create_run(&start, &sources).map_err(e)?;
                    for i in 0..per {
                        s.append(&run, &call_fact(i + 2, i + 1, json!({"t": t, "i": i})))
                            .map_err(e)?;
                    }
                    Ok(run)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "thread panicked".to_string())
                    .and_then(|r| r)
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    for (t, run) in runs.iter().enumerate() {
        let h = s.read_history(run).map_err(e)?;
        ensure!(
            h.facts.len() as u64 == per + 1,
            "run {t} has {} facts",
            h.facts.len()
        );
        for (i, f) in h.facts.iter().skip(1).enumerate() {
            ensure!(
                f.fact["args"] == json!({"t": t, "i": i}),
                "run {t} fact {} out of order",
                f.n
            );
        }
    }
    Ok(())
}
