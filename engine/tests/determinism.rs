//! Determinism (issue 4, Tests): random reply arrival orders for parallel
//! branches give the same call ids (with the same args) and, for
//! `wait_for: all`, the same final state and the same End; every recorded
//! history replays matched. DESIGN §3: "Call ids are deterministic: they
//! never depend on timing"; §4: "results reduced in target order, not
//! arrival order".

mod common;

use common::*;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Ending};
use flow_engine::program::Program;
use proptest::prelude::*;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The reply to a call depends only on its id and args, never on when it
/// comes.
fn reply(call: &str, args: &Json) -> Outcome {
    let q = args["query"].as_str().unwrap_or("");
    ok(json!({"hit": format!("{call}<{q}>"), "note": {call: q, "shared": call}}))
}

struct Outcome_ {
    calls: BTreeMap<String, Json>,
    ending: Ending,
    state: Json,
}

/// Drives the run, answering the open call picked by `picks` each time.
fn drive(program: &Arc<Program>, module: &str, picks: &[usize]) -> Outcome_ {
    let (mut run, _) = Run::start(program, module, json!({"topic": "t"}));
    let mut i = 0;
    while run.ending().is_none() {
        let open = run.machine.open_calls();
        assert!(!open.is_empty(), "stuck");
        let pick = picks.get(i).copied().unwrap_or(0) % open.len();
        i += 1;
        let c = &open[pick];
        run.feed(c.call.as_str(), reply(c.call.as_str(), &c.args));
    }
    run.assert_replays();
    let calls = run
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Call { call, args, .. } => Some((call.to_string(), args.clone())),
            _ => None,
        })
        .collect();
    Outcome_ {
        calls,
        ending: run.ending().unwrap().clone(),
        state: run.machine.state().clone(),
    }
}

fn with_wait_for(wait_for: Json) -> Arc<Program> {
    let mut doc = flow_doc("parallel-nested");
    for n in doc["nodes"].as_array_mut().unwrap() {
        if n["id"] == "join" {
            n["wait_for"] = wait_for.clone();
        }
    }
    let mut files = BTreeMap::new();
    files.insert("parallel-nested.json".to_string(), doc);
    program_of(files, "parallel-nested.json")
}

#[test]
fn reference_run_in_call_id_order() {
    let p = program(&["parallel-nested"]);
    let r = drive(&p, "parallel-nested.json", &[]);
    let ids: Vec<&String> = r.calls.keys().collect();
    assert_eq!(
        ids,
        [
            "c1:root/a#1",
            "c1:root/a#2",
            "c1:root/b#1",
            "c1:root/b#2",
            "c1:root/n/n1#1",
            "c1:root/n/n2#1"
        ]
    );
    // Writes applied in target order a, b, n (and n1, n2 inside n):
    // found appends a's, b's, n1's hits; last is n2's (the last writer in
    // target order); notes deep-merge with the later target winning
    // `shared`.
    let Ending::Completed { output, .. } = &r.ending else {
        panic!("{:?}", r.ending)
    };
    assert_eq!(
        output["found"],
        json!([
            "c1:root/a#1<t>",
            "c1:root/b#2<c1:root/b#1<t>>",
            "c1:root/n/n1#1<t>"
        ])
    );
    assert_eq!(output["last"], json!("c1:root/n/n2#1<t>"));
    assert_eq!(output["notes"]["shared"], json!("c1:root/n/n2#1"));
    assert_eq!(
        output["inner"],
        json!([
            {"found": ["c1:root/n/n1#1<t>"], "notes": {"c1:root/n/n1#1": "t", "shared": "c1:root/n/n1#1"}},
            {"last": "c1:root/n/n2#1<t>", "notes": {"c1:root/n/n2#1": "t", "shared": "c1:root/n/n2#1"}}
        ])
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn wait_for_all_is_independent_of_arrival_order(picks in proptest::collection::vec(0usize..8, 0..12)) {
        let p = program(&["parallel-nested"]);
        let reference = drive(&p, "parallel-nested.json", &[]);
        let r = drive(&p, "parallel-nested.json", &picks);
        prop_assert_eq!(&r.calls, &reference.calls);
        prop_assert_eq!(&r.state, &reference.state);
        prop_assert_eq!(&r.ending, &reference.ending);
    }

    #[test]
    fn wait_for_any_and_n_keep_call_ids_and_args(
        picks in proptest::collection::vec(0usize..8, 0..12),
        n in 1u64..=3,
    ) {
        // Which branches win depends on the recorded order, but a call id
        // always names the same call with the same args.
        let all = drive(&program(&["parallel-nested"]), "parallel-nested.json", &[]);
        let wait_for = if n == 1 { json!("any") } else { json!(n) };
        let p = with_wait_for(wait_for);
        let r = drive(&p, "parallel-nested.json", &picks);
        for (call, args) in &r.calls {
            prop_assert_eq!(Some(args), all.calls.get(call), "{}", call);
        }
        let completed = matches!(r.ending, Ending::Completed { .. });
        prop_assert!(completed);
    }
}

#[test]
fn resume_from_every_root_checkpoint_reaches_the_same_end() {
    // Issue 4, Tests: "Resume from every checkpoint of a recorded run
    // reaches the same End" — here for nested parallel branches, with the
    // same reply function.
    let p = program(&["parallel-nested"]);
    let (mut run, _) = Run::start(&p, "parallel-nested.json", json!({"topic": "t"}));
    while run.ending().is_none() {
        let c = run.machine.open_calls().remove(0);
        run.feed(c.call.as_str(), reply(c.call.as_str(), &c.args));
    }
    let end = run.ending().unwrap().clone();
    let mut resumed = 0;
    for e in &run.effects {
        let Effect::Checkpoint { task, node, state } = e else {
            continue;
        };
        if task != "root" {
            continue;
        }
        let (mut m, _) = flow_engine::machine::Machine::resume_at(
            p.clone(),
            "parallel-nested.json",
            node,
            state.clone(),
        )
        .unwrap();
        while m.ending().is_none() {
            let c = m.open_calls().remove(0);
            m.feed(c.call.as_str(), &reply(c.call.as_str(), &c.args))
                .unwrap();
        }
        assert_eq!(m.ending(), Some(&end), "from {node}");
        resumed += 1;
    }
    // start, fork, join (after the branches were joined), done.
    assert_eq!(resumed, 4);
}
