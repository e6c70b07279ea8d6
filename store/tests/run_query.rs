//! The run query (issue 38 item 1) on a real SQLite file and on the real
//! Postgres: every filter alone and combined, against a brute-force
//! reference over the same runs (a seeded generator), paged both ways
//! without gaps or repeats (also while runs are being added), counts by
//! state and flow, bad filters refused, and on SQLite a query plan that
//! uses an index for each filter.

#[cfg(feature = "postgres")]
mod pg;
mod undo;

use undo::*;

use flow_abi::fact::{CallId, Outer, Parent};
use flow_store::conformance::{call_fact, end_fact, new_run_id, start_with_source};
use flow_store::{
    Backend, Fact, HostDetails, HostRecord, HostRecordKind, ListedRun, RunCounts, RunId,
    RunListQuery, RunOrder, RunState, SqliteOptions, SqliteStore, TimeRange,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A tiny deterministic generator (no dependency, same runs every time).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const FLOWS: [(&str, &str); 3] = [
    ("orders.json", "orders"),
    ("billing.json", "billing"),
    ("plain.txt", ""),
];

fn root_text(module: &str, flow: &str, run: &RunId) -> String {
    match module {
        "orders.json" => {
            json!({"id": flow, "note": run.to_string(), "runtime_hints": {"search_attributes": {
            "customer": "/input/customer", "n": "/input/n", "vip": "/input/vip"}}})
            .to_string()
        }
        "billing.json" => json!({"id": flow, "note": run.to_string(),
            "runtime_hints": {"search_attributes": {"customer": "/input/customer"}}})
        .to_string(),
        _ => format!("not json {run}"),
    }
}

/// What the generator made of one run: the reference's side of it.
#[derive(Clone, Debug)]
struct Made {
    run: String,
    module: String,
    function: String,
    flow: Option<String>,
    attrs: BTreeMap<String, String>,
    fault: Option<String>,
    parent: Option<String>,
    outer: Option<String>,
}

fn pause() -> HostRecord {
    HostRecord {
        at_ms: None,
        details: HostDetails::Other {
            kind: HostRecordKind::Pause,
            details: json!({}),
        },
    }
}

fn halt() -> HostRecord {
    HostRecord {
        at_ms: None,
        details: HostDetails::Other {
            kind: HostRecordKind::Halt,
            details: json!({}),
        },
    }
}

/// Makes run `i`: a flow, an input, perhaps a parent or outer run, and an
/// outcome (running, completed, faulted, paused or halted).
fn make(s: &dyn Backend, rng: &mut Rng, made: &[Made]) -> Made {
    make_as(s, rng, made, new_run_id())
}

/// [`make`] with id `run`.
fn make_as(s: &dyn Backend, rng: &mut Rng, made: &[Made], run: RunId) -> Made {
    let (module, flow) = FLOWS[rng.below(3) as usize];
    let function = if rng.chance(70) { "main" } else { "alt" };
    let customers = ["acme", "zeta", "ACME"];
    let input = json!({
        "customer": customers[rng.below(3) as usize],
        "n": rng.below(4),
        "vip": rng.chance(40),
    });
    let (mut start, sources) = start_with_source(
        &run,
        module,
        function,
        root_text(module, flow, &run),
        input.clone(),
    );
    let parent = (!made.is_empty() && rng.chance(20))
        .then(|| made[rng.below(made.len() as u64) as usize].run.clone());
    let outer = (!made.is_empty() && rng.chance(20))
        .then(|| made[rng.below(made.len() as u64) as usize].run.clone());
    if let Fact::Start {
        parent: p,
        outer: o,
        ..
    } = &mut start
    {
        *p = parent.as_ref().map(|r| Parent {
            run: RunId::parse(r).unwrap(),
            checkpoint: 3,
        });
        *o = outer.as_ref().map(|r| Outer {
            run: RunId::parse(r).unwrap(),
            call: CallId::new("root", 1).unwrap(),
        });
    }
    s.create_run(start, &sources, Vec::new()).unwrap();
    let mut attrs = BTreeMap::new();
    let declared: &[&str] = match module {
        "orders.json" => &["customer", "n", "vip"],
        "billing.json" => &["customer"],
        _ => &[],
    };
    for name in declared {
        attrs.insert(name.to_string(), input[*name].to_string());
    }
    let mut fault = None;
    match rng.below(5) {
        0 => {
            s.append(&run, call_fact(2, 1, json!({}))).unwrap();
        }
        1 => {
            s.append(&run, end_fact(2, json!(1))).unwrap();
        }
        2 => {
            let why = format!("boom {} at step", rng.below(4));
            s.append(
                &run,
                Fact::End {
                    n: 2,
                    ending: flow_abi::fact::Ending::Faulted(why.clone()),
                },
            )
            .unwrap();
            fault = Some(why);
        }
        3 => {
            s.record_host(&run, pause()).unwrap();
        }
        _ => {
            s.record_host(&run, halt()).unwrap();
        }
    }
    Made {
        run: run.to_string(),
        module: module.into(),
        function: function.into(),
        flow: (!flow.is_empty()).then(|| flow.to_string()),
        attrs,
        fault,
        parent,
        outer,
    }
}

/// Every run as the listing shows it, unfiltered, oldest first.
fn all_rows(s: &dyn Backend) -> Vec<ListedRun> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let p = s
            .list_runs(&RunListQuery {
                limit: Some(200),
                cursor,
                ..RunListQuery::default()
            })
            .unwrap();
        out.extend(p.runs);
        match p.next {
            Some(n) => cursor = Some(n),
            None => return out,
        }
    }
}

/// Whether the reference says run `m` (listed as `row`) passes `q`.
fn passes(q: &RunListQuery, m: &Made, row: &ListedRun) -> bool {
    let states: Vec<RunState> = q.states.iter().copied().chain(q.state).collect();
    let within = |r: TimeRange, t: i64| r.from.is_none_or(|f| t >= f) && r.to.is_none_or(|e| t < e);
    (states.is_empty() || states.contains(&row.state))
        && q.flow.as_ref().is_none_or(|f| m.flow.as_ref() == Some(f))
        && q.entry_module.as_ref().is_none_or(|e| *e == m.module)
        && q.entry_function.as_ref().is_none_or(|e| *e == m.function)
        && within(q.started, row.created_ms)
        && within(q.updated, row.updated_ms)
        && q.fork_of
            .as_ref()
            .is_none_or(|p| m.parent.as_ref() == Some(p))
        && q.nested_in
            .as_ref()
            .is_none_or(|o| m.outer.as_ref() == Some(o))
        && q.fault
            .as_ref()
            .is_none_or(|f| m.fault.as_ref().is_some_and(|x| x.contains(f.as_str())))
        && q.attrs
            .iter()
            .all(|(n, v)| m.attrs.get(n) == Some(&v.to_string()))
        && q.prefix
            .as_ref()
            .is_none_or(|p| m.run.starts_with(p.as_str()))
}

/// Every page of `q` in its order, checking each page's size and cursor.
fn walk(s: &dyn Backend, q: &RunListQuery) -> Vec<String> {
    let mut out = Vec::new();
    let mut q = q.clone();
    let limit = q.limit.unwrap_or(50) as usize;
    loop {
        let p = s.list_runs(&q).unwrap();
        assert!(p.runs.len() <= limit);
        out.extend(p.runs.iter().map(|r| r.row.run.clone()));
        match p.next {
            Some(n) => {
                assert_eq!(p.runs.len(), limit, "a page before the last is full");
                assert_eq!(Some(&n), out.last());
                q.cursor = Some(n);
            }
            None => return out,
        }
    }
}

fn random_query(rng: &mut Rng, made: &[Made], rows: &[ListedRun]) -> RunListQuery {
    let mut q = RunListQuery {
        limit: Some(1 + rng.below(7) as u32),
        order: if rng.chance(50) {
            RunOrder::Newest
        } else {
            RunOrder::Oldest
        },
        ..RunListQuery::default()
    };
    let all = [
        RunState::Running,
        RunState::Paused,
        RunState::Completed,
        RunState::Faulted,
        RunState::Halted,
    ];
    if rng.chance(35) {
        for s in all {
            if rng.chance(40) {
                q.states.push(s);
            }
        }
    }
    if rng.chance(25) {
        q.flow = Some(["orders", "billing", "nothing"][rng.below(3) as usize].into());
    }
    if rng.chance(20) {
        q.entry_module = Some(FLOWS[rng.below(3) as usize].0.into());
        if rng.chance(50) {
            q.entry_function = Some(["main", "alt"][rng.below(2) as usize].into());
        }
    }
    let pick_t =
        |rng: &mut Rng, f: fn(&ListedRun) -> i64| f(&rows[rng.below(rows.len() as u64) as usize]);
    if rng.chance(25) {
        let a = pick_t(rng, |r| r.created_ms);
        let b = pick_t(rng, |r| r.created_ms);
        let (lo, hi) = (a.min(b), a.max(b) + 1);
        q.started = TimeRange {
            from: rng.chance(70).then_some(lo),
            to: rng.chance(70).then_some(hi),
        };
    }
    if rng.chance(15) {
        let a = pick_t(rng, |r| r.updated_ms);
        q.updated = TimeRange {
            from: Some(a),
            to: None,
        };
    }
    if rng.chance(10) {
        q.fork_of = Some(made[rng.below(made.len() as u64) as usize].run.clone());
    }
    if rng.chance(10) {
        q.nested_in = Some(made[rng.below(made.len() as u64) as usize].run.clone());
    }
    if rng.chance(15) {
        q.fault = Some(["boom", "boom 1", "at step", "nothing"][rng.below(4) as usize].into());
    }
    if rng.chance(35) {
        q.attrs.push(match rng.below(4) {
            0 => (
                "customer".into(),
                json!(["acme", "zeta", "ACME"][rng.below(3) as usize]),
            ),
            1 => ("n".into(), json!(rng.below(4))),
            2 => ("vip".into(), json!(rng.chance(50))),
            _ => ("n".into(), json!("1")),
        });
        if rng.chance(30) {
            q.attrs.push(("vip".into(), json!(true)));
        }
    }
    if rng.chance(5) {
        q.prefix = Some(made[rng.below(made.len() as u64) as usize].run[..20].to_string());
    }
    q
}

fn check_against_reference(s: &dyn Backend, made: &[Made], seed: u64, queries: usize) {
    let rows = all_rows(s);
    assert_eq!(rows.len(), made.len());
    let by_id: BTreeMap<&str, &Made> = made.iter().map(|m| (m.run.as_str(), m)).collect();
    for r in &rows {
        let m = by_id[r.row.run.as_str()];
        assert_eq!(r.flow_id, m.flow, "{}", m.run);
    }
    let mut rng = Rng(seed);
    for i in 0..queries {
        let q = random_query(&mut rng, made, &rows);
        let mut want: Vec<String> = rows
            .iter()
            .filter(|r| passes(&q, by_id[r.row.run.as_str()], r))
            .map(|r| r.row.run.clone())
            .collect();
        // With a started range (and no search attribute), by start time,
        // then id (docs/store.md, "The run query").
        if q.attrs.is_empty() && (q.started.from.is_some() || q.started.to.is_some()) {
            let at: BTreeMap<&str, i64> = rows
                .iter()
                .map(|r| (r.row.run.as_str(), r.created_ms))
                .collect();
            want.sort_by(|a, b| (at[a.as_str()], a).cmp(&(at[b.as_str()], b)));
        }
        if q.order == RunOrder::Newest {
            want.reverse();
        }
        let got = walk(s, &q);
        assert_eq!(got, want, "query {i}: {q:?}");
        let counts = s.count_runs(&q).unwrap();
        assert_eq!(
            counts,
            reference_counts(&q, made, &rows),
            "counts {i}: {q:?}"
        );
    }
}

fn reference_counts(q: &RunListQuery, made: &[Made], rows: &[ListedRun]) -> RunCounts {
    let by_id: BTreeMap<&str, &Made> = made.iter().map(|m| (m.run.as_str(), m)).collect();
    let mut states: Vec<RunState> = q.states.iter().copied().chain(q.state).collect();
    if q.fault.is_some() {
        if states.is_empty() || states.contains(&RunState::Faulted) {
            states = vec![RunState::Faulted];
        } else {
            return RunCounts::default();
        }
    }
    let q_all = RunListQuery {
        state: None,
        states: Vec::new(),
        ..q.clone()
    };
    let mut by_state: BTreeMap<&str, (RunState, u64)> = BTreeMap::new();
    let mut by_flow: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for r in rows {
        let m = by_id[r.row.run.as_str()];
        if !passes(&q_all, m, r) {
            continue;
        }
        by_state.entry(r.state.as_str()).or_insert((r.state, 0)).1 += 1;
        if states.is_empty() || states.contains(&r.state) {
            total += 1;
            if let Some(f) = &m.flow {
                *by_flow.entry(f.clone()).or_default() += 1;
            }
        }
    }
    RunCounts {
        total,
        by_state: by_state.into_values().collect(),
        by_flow: by_flow.into_iter().collect(),
    }
}

/// Runs whose ids do not follow their start times: one in four has an
/// id from years before (as an imported run's, or one created on a server
/// whose clock was behind), so a started range's start-time order is not
/// id order.
fn seeded_out_of_order(s: &dyn Backend, n: usize, seed: u64) -> Vec<Made> {
    let mut rng = Rng(seed);
    let mut made = Vec::new();
    for _ in 0..n {
        let run = if rng.chance(25) {
            let mut random = [0u8; 10];
            random[..8].copy_from_slice(&rng.next().to_be_bytes());
            RunId::from_parts(1_500_000_000_000 + rng.below(1_000_000_000), random)
        } else {
            new_run_id()
        };
        let m = make_as(s, &mut rng, &made, run);
        made.push(m);
    }
    made
}

fn seeded(s: &dyn Backend, n: usize, seed: u64) -> Vec<Made> {
    let mut rng = Rng(seed);
    let mut made = Vec::new();
    for _ in 0..n {
        let m = make(s, &mut rng, &made);
        made.push(m);
    }
    made
}

fn on_both(check: impl Fn(&dyn Backend, &std::path::Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(tmp.path().join("s.db"), SqliteOptions::default()).unwrap();
    check(&s, tmp.path());
    #[cfg(feature = "postgres")]
    if let Some(db) = pg::TestDb::new() {
        let s = flow_store::PostgresStore::open(db.options()).unwrap();
        check(&s, tmp.path());
    }
}

#[test]
fn every_filter_alone_and_combined_matches_a_brute_force_reference() {
    on_both(|s, _| {
        let made = seeded_out_of_order(s, 80, 38);
        check_against_reference(s, &made, 1, 300);
    });
}

#[test]
fn each_filter_alone_selects_what_the_reference_does() {
    on_both(|s, _| {
        let made = seeded(s, 40, 7);
        let rows = all_rows(s);
        let by_id: BTreeMap<&str, &Made> = made.iter().map(|m| (m.run.as_str(), m)).collect();
        let some_fork = made.iter().find_map(|m| m.parent.clone());
        let some_outer = made.iter().find_map(|m| m.outer.clone());
        let mid = rows[rows.len() / 2].created_ms;
        let orders = made.iter().find(|m| m.module == "orders.json").unwrap();
        let queries = vec![
            RunListQuery {
                states: vec![RunState::Paused, RunState::Faulted],
                ..Default::default()
            },
            RunListQuery {
                flow: Some("orders".into()),
                ..Default::default()
            },
            RunListQuery {
                entry_module: Some("billing.json".into()),
                entry_function: Some("alt".into()),
                ..Default::default()
            },
            RunListQuery {
                started: TimeRange {
                    from: Some(mid),
                    to: None,
                },
                ..Default::default()
            },
            RunListQuery {
                updated: TimeRange {
                    from: None,
                    to: Some(mid),
                },
                ..Default::default()
            },
            RunListQuery {
                fork_of: some_fork,
                ..Default::default()
            },
            RunListQuery {
                nested_in: some_outer,
                ..Default::default()
            },
            RunListQuery {
                fault: Some("boom 2".into()),
                ..Default::default()
            },
            RunListQuery {
                attrs: vec![("customer".into(), json!("acme"))],
                ..Default::default()
            },
            RunListQuery {
                attrs: vec![
                    (
                        "n".into(),
                        serde_json::from_str(&orders.attrs["n"]).unwrap(),
                    ),
                    (
                        "vip".into(),
                        serde_json::from_str(&orders.attrs["vip"]).unwrap(),
                    ),
                ],
                ..Default::default()
            },
        ];
        for q in queries {
            let mut want: Vec<String> = rows
                .iter()
                .filter(|r| passes(&q, by_id[r.row.run.as_str()], r))
                .map(|r| r.row.run.clone())
                .collect();
            want.reverse();
            let q = RunListQuery {
                order: RunOrder::Newest,
                limit: Some(3),
                ..q
            };
            assert!(!want.is_empty(), "the seed makes a run for {q:?}");
            assert_eq!(walk(s, &q), want, "{q:?}");
        }
    });
}

#[test]
fn paging_has_no_gap_or_repeat_while_runs_are_added() {
    on_both(|s, _| {
        let mut made = seeded(s, 30, 3);
        let mut rng = Rng(99);
        let before: Vec<String> = made.iter().map(|m| m.run.clone()).collect();
        // Newest first: runs added meanwhile are newer than the cursor, so
        // the walk lists exactly the runs there were when it began.
        let mut q = RunListQuery {
            limit: Some(4),
            order: RunOrder::Newest,
            ..Default::default()
        };
        let mut seen = Vec::new();
        loop {
            let p = s.list_runs(&q).unwrap();
            seen.extend(p.runs.iter().map(|r| r.row.run.clone()));
            let m = make(s, &mut rng, &made);
            made.push(m);
            match p.next {
                Some(n) => q.cursor = Some(n),
                None => break,
            }
        }
        let mut want = before.clone();
        want.reverse();
        assert_eq!(seen, want);
        // Oldest first: the walk lists every run it began with, in order,
        // then those added while it walked.
        let mut q = RunListQuery {
            limit: Some(5),
            ..Default::default()
        };
        let mut seen = Vec::new();
        for _ in 0..1000 {
            let p = s.list_runs(&q).unwrap();
            seen.extend(p.runs.iter().map(|r| r.row.run.clone()));
            if seen.len() < 60 && p.next.is_some() {
                let m = make(s, &mut rng, &made);
                made.push(m);
            }
            match p.next {
                Some(n) => q.cursor = Some(n),
                None => break,
            }
        }
        let all: Vec<String> = made.iter().map(|m| m.run.clone()).collect();
        assert_eq!(seen, all);
    });
}

#[test]
fn bad_filters_are_refused_saying_what_to_do() {
    on_both(|s, _| {
        let bad = |q: RunListQuery, says: &str| {
            let e = s.list_runs(&q).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            let e = s.count_runs(&q).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        };
        bad(
            RunListQuery {
                fork_of: Some("nope".into()),
                ..Default::default()
            },
            "is not a run id",
        );
        bad(
            RunListQuery {
                started: TimeRange {
                    from: Some(10),
                    to: Some(5),
                },
                ..Default::default()
            },
            "range is empty",
        );
        bad(
            RunListQuery {
                attrs: vec![("customer".into(), json!({"a": 1}))],
                ..Default::default()
            },
            "must equal a string",
        );
        bad(
            RunListQuery {
                attrs: vec![("bad name".into(), json!(1))],
                ..Default::default()
            },
            "search attribute name",
        );
        bad(
            RunListQuery {
                entry_function: Some("main".into()),
                ..Default::default()
            },
            "module#function",
        );
        bad(
            RunListQuery {
                flow: Some(String::new()),
                ..Default::default()
            },
            "flow must be 1 to 256 bytes",
        );
    });
}

/// A fault filter with states other than faulted selects nothing, at once.
#[test]
fn a_fault_filter_keeps_to_faulted_runs() {
    on_both(|s, _| {
        seeded(s, 20, 5);
        let q = RunListQuery {
            fault: Some("boom".into()),
            states: vec![RunState::Running],
            ..Default::default()
        };
        assert!(s.list_runs(&q).unwrap().runs.is_empty());
        assert_eq!(s.count_runs(&q).unwrap(), RunCounts::default());
    });
}

/// Each filter's page query is an index search on SQLite: EXPLAIN QUERY
/// PLAN names an index and never scans a table.
#[test]
fn every_filter_is_an_index_lookup_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(tmp.path().join("s.db"), SqliteOptions::default()).unwrap();
    let made = seeded(&s, 30, 11);
    drop(s);
    let conn = rusqlite::Connection::open(tmp.path().join("s.db")).unwrap();
    let run = made[0].run.clone();
    let cases: Vec<(&str, &str, Vec<Value>)> = vec![
        (
            "state",
            "SELECT id FROM runs WHERE state = ?1 ORDER BY id DESC LIMIT 51",
            vec![json!("paused")],
        ),
        (
            "flow",
            "SELECT r.id FROM runs r WHERE r.flow_id = ?1 ORDER BY r.id DESC LIMIT 51",
            vec![json!("orders")],
        ),
        (
            "entry",
            "SELECT r.id FROM runs r WHERE r.entry_module = ?1 AND r.entry_function = ?2 ORDER BY r.id DESC LIMIT 51",
            vec![json!("orders.json"), json!("main")],
        ),
        (
            "started",
            "SELECT r.id AS id, r.created_ms AS t FROM runs r WHERE r.created_ms >= ?1 AND r.created_ms < ?2 ORDER BY r.created_ms DESC, r.id DESC LIMIT 51",
            vec![json!(0), json!(1)],
        ),
        (
            "fork",
            "SELECT r.id FROM runs r WHERE r.parent_run = ?1 ORDER BY r.id DESC LIMIT 51",
            vec![json!(run)],
        ),
        (
            "nested",
            "SELECT r.id FROM runs r WHERE r.outer_run = ?1 ORDER BY r.id DESC LIMIT 51",
            vec![json!(run)],
        ),
        (
            "attribute",
            "SELECT a0.run FROM run_attrs a0 JOIN runs r ON r.id = a0.run WHERE a0.name = ?1 AND a0.value = ?2 ORDER BY a0.run DESC LIMIT 51",
            vec![json!("customer"), json!("\"acme\"")],
        ),
        (
            "flow + started",
            "SELECT r.id AS id, r.created_ms AS t FROM runs r WHERE r.flow_id = ?1 AND r.created_ms >= ?2 AND r.created_ms < ?3 ORDER BY r.created_ms DESC, r.id DESC LIMIT 51",
            vec![json!("orders"), json!(0), json!(1)],
        ),
        (
            "flow + started, counts by state",
            "SELECT r.state, COUNT(*) FROM runs r WHERE r.flow_id = ?1 AND r.created_ms >= ?2 AND r.created_ms < ?3 GROUP BY r.state",
            vec![json!("orders"), json!(0), json!(1)],
        ),
        (
            "flow + started, counts by flow",
            "SELECT r.flow_id, COUNT(*) FROM runs r WHERE r.flow_id = ?1 AND r.created_ms >= ?2 AND r.created_ms < ?3 AND r.flow_id IS NOT NULL GROUP BY r.flow_id",
            vec![json!("orders"), json!(0), json!(1)],
        ),
    ];
    for (what, sql, args) in cases {
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let args: Vec<rusqlite::types::Value> = args
            .iter()
            .map(|a| match a {
                Value::String(s) => rusqlite::types::Value::Text(s.clone()),
                Value::Number(n) => rusqlite::types::Value::Integer(n.as_i64().unwrap()),
                _ => unreachable!(),
            })
            .collect();
        let plan: Vec<String> = st
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let text = plan.join(" | ");
        assert!(
            plan.iter()
                .any(|p| p.contains("USING") && p.contains("INDEX")),
            "{what}: {text}"
        );
        assert!(
            !plan
                .iter()
                .any(|p| p.starts_with("SCAN r") || p.starts_with("SCAN runs")),
            "{what}: {text}"
        );
        // Flow + started range (migration 0015): one range of the index
        // holding both, its counts reading no table row.
        if what.starts_with("flow + started") {
            assert!(text.contains("runs_by_flow_created"), "{what}: {text}");
        }
        if what.starts_with("flow + started, counts") {
            assert!(text.contains("COVERING INDEX"), "{what}: {text}");
        }
        // A started range's page walks its index in start-time order,
        // sorting only runs that started in the same millisecond: a page's
        // worth, not the range.
        if what.starts_with("started") || what == "flow + started" {
            assert!(!text.contains("TEMP B-TREE FOR ORDER BY"), "{what}: {text}");
        }
    }
}

/// What migration 10's backfill must find again: each run's flow id and
/// fault (search attributes are indexed from Start on; docs/store.md).
fn backfilled(s: &dyn Backend, made: &[Made]) {
    let rows = all_rows(s);
    assert_eq!(rows.len(), made.len());
    for (r, m) in rows.iter().zip(made) {
        assert_eq!(r.flow_id, m.flow, "{}", m.run);
    }
    for m in made {
        if let Some(f) = &m.fault {
            let q = RunListQuery {
                fault: Some(f.clone()),
                prefix: Some(m.run.clone()),
                ..Default::default()
            };
            assert_eq!(walk(s, &q), vec![m.run.clone()]);
        }
    }
}

#[test]
fn migration_10_backfills_flow_ids_and_faults() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.db");
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let made = seeded(&s, 25, 21);
    drop(s);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("{UNDO_15_SQLITE}{UNDO_10}"))
        .unwrap();
    let s = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    backfilled(&s, &made);
    #[cfg(feature = "postgres")]
    if let Some(db) = pg::TestDb::new() {
        let options = db.options();
        let s = flow_store::PostgresStore::open(options.clone()).unwrap();
        let made = seeded(&s, 25, 21);
        drop(s);
        db.sql(&options.schema, &format!("{UNDO_15_POSTGRES}{UNDO_10}"));
        let s = flow_store::PostgresStore::open(options).unwrap();
        backfilled(&s, &made);
    }
}

/// Each filter's page query is an index search on Postgres too: with
/// 20,000 runs in the index (inserted by SQL, analysed as autovacuum
/// would), EXPLAIN shows no sequential scan of `runs` or `run_attrs`.
#[cfg(feature = "postgres")]
#[test]
fn every_filter_is_an_index_lookup_on_postgres() {
    let Some(db) = pg::TestDb::new() else {
        return;
    };
    let options = db.options();
    drop(flow_store::PostgresStore::open(options.clone()).unwrap());
    db.sql(
        &options.schema,
        "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint,
                           outer_run, outer_call, last_n, last_hash, created_ms, updated_ms, flow_id)
         SELECT 'run-7' || lpad(g::text, 25, '0'),
                (ARRAY['running','paused','completed','faulted','halted'])[1 + g % 5],
                'm' || (g % 7) || '.json', 'main', 'sha256:0',
                CASE WHEN g % 100 = 0 THEN 'run-7' || lpad('1', 25, '0') END,
                CASE WHEN g % 100 = 0 THEN 2 END,
                CASE WHEN g % 50 = 0 THEN 'run-7' || lpad('2', 25, '0') END,
                CASE WHEN g % 50 = 0 THEN 'c1:root#1' END,
                2, '\\x00'::bytea, g, g, 'flow' || (g % 9)
         FROM generate_series(1, 20000) AS g;
         INSERT INTO run_attrs (name, value, run)
         SELECT 'customer', '\"c-' || (g % 500) || '\"', 'run-7' || lpad(g::text, 25, '0')
         FROM generate_series(1, 20000) AS g;
         ANALYZE runs; ANALYZE run_attrs;",
    );
    let one = "run-7".to_string() + &"0".repeat(24) + "1";
    let cases = [
        ("state", "SELECT r.id FROM runs r WHERE r.state = 'paused' ORDER BY r.id DESC LIMIT 51".to_string()),
        ("flow", "SELECT r.id FROM runs r WHERE r.flow_id = 'flow3' ORDER BY r.id DESC LIMIT 51".into()),
        (
            "entry",
            "SELECT r.id FROM runs r WHERE r.entry_module = 'm3.json' AND r.entry_function = 'main' ORDER BY r.id DESC LIMIT 51".into(),
        ),
        (
            "started",
            "SELECT r.id FROM runs r WHERE r.created_ms >= 100 AND r.created_ms < 200 ORDER BY r.id DESC LIMIT 51".into(),
        ),
        ("fork", format!("SELECT r.id FROM runs r WHERE r.parent_run = '{one}' ORDER BY r.id DESC LIMIT 51")),
        ("nested", format!("SELECT r.id FROM runs r WHERE r.outer_run = '{one}' ORDER BY r.id DESC LIMIT 51")),
        (
            "fault",
            "SELECT r.id FROM runs r WHERE r.state = 'faulted' AND strpos(r.fault, 'x') > 0 ORDER BY r.id DESC LIMIT 51".into(),
        ),
        (
            "attribute",
            "SELECT a0.run FROM run_attrs a0 JOIN runs r ON r.id = a0.run WHERE a0.name = 'customer' AND a0.value = '\"c-17\"' ORDER BY a0.run DESC LIMIT 51".into(),
        ),
        (
            "flow + started",
            "SELECT r.id FROM runs r WHERE r.flow_id = 'flow3' AND r.created_ms >= 100 AND r.created_ms < 400 ORDER BY r.id DESC LIMIT 51".into(),
        ),
        (
            "flow + started, counts by state",
            "SELECT r.state, COUNT(*) FROM runs r WHERE r.flow_id = 'flow3' AND r.created_ms >= 100 AND r.created_ms < 5000 GROUP BY r.state".into(),
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        client
            .batch_execute(&format!("SET search_path = {}", options.schema))
            .await
            .unwrap();
        for (what, sql) in &cases {
            let rows = client.query(&format!("EXPLAIN {sql}"), &[]).await.unwrap();
            let plan: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
            let text = plan.join("\n");
            assert!(text.contains("Index"), "{what}: {text}");
            assert!(
                !text.contains("Seq Scan on runs") && !text.contains("Seq Scan on run_attrs"),
                "{what}: {text}"
            );
            // Flow + started range (migration 0015): a range of the index
            // holding both (a page whose range holds most of the flow's
            // runs may walk the id index instead: the planner's choice).
            if what.starts_with("flow + started") {
                assert!(text.contains("runs_by_flow_created"), "{what}: {text}");
            }
        }
        drop(client);
        let _ = driver.await;
    });
}

/// A search attribute declared into `/state` is read from each
/// Checkpoint's whole state: the latest Checkpoint's value replaces the
/// one before, and a state without it leaves the run unfound by it.
#[test]
fn state_attributes_follow_each_checkpoint() {
    on_both(|s, _| {
        let run = new_run_id();
        let doc = json!({"id": "staged", "runtime_hints": {"search_attributes": {
            "stage": "/state/stage", "who": "/input/who"}}})
        .to_string();
        let (start, sources) =
            start_with_source(&run, "staged.json", "main", doc, json!({"who": "ann"}));
        s.create_run(start, &sources, Vec::new()).unwrap();
        let find = |name: &str, v: Value| {
            walk(
                s,
                &RunListQuery {
                    attrs: vec![(name.into(), v)],
                    ..Default::default()
                },
            )
        };
        let me = vec![run.to_string()];
        assert_eq!(find("who", json!("ann")), me);
        assert!(
            find("stage", json!("draft")).is_empty(),
            "no Checkpoint yet"
        );
        s.append(
            &run,
            flow_store::conformance::checkpoint_fact(2, json!({"stage": "draft", "n": 1})),
        )
        .unwrap();
        assert_eq!(find("stage", json!("draft")), me);
        s.append(
            &run,
            flow_store::conformance::checkpoint_fact(3, json!({"stage": "review", "n": 2})),
        )
        .unwrap();
        assert!(find("stage", json!("draft")).is_empty(), "replaced");
        assert_eq!(find("stage", json!("review")), me);
        s.append(
            &run,
            flow_store::conformance::checkpoint_fact(4, json!({"n": 3})),
        )
        .unwrap();
        assert!(
            find("stage", json!("review")).is_empty(),
            "gone from the state"
        );
        assert_eq!(find("who", json!("ann")), me, "input attributes stay");
    });
}
