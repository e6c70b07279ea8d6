//! Replay verdicts over recorded run-flow histories (DESIGN §3): an
//! untouched history is `matched`, every cut is `incomplete`, and each kind
//! of tampering (changed args, reordered calls, a removed reply, a changed
//! program, extra facts, a different ending) is `diverged` at the fact
//! where it shows, with a reason that says what differs.

mod common;

use common::*;
use flow_engine::replay::{Verdict, replay};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

fn with(name: &str, edit: impl Fn(&mut Json)) -> std::sync::Arc<flow_engine::program::Program> {
    let mut doc = flow_doc(name);
    edit(&mut doc);
    let mut files = BTreeMap::new();
    files.insert(format!("{name}.json"), doc);
    program_of(files, &format!("{name}.json"))
}

fn set_wait_for(doc: &mut Json, w: Json) {
    for n in doc["nodes"].as_array_mut().unwrap() {
        if n["id"] == "join" {
            n["wait_for"] = w.clone();
        }
    }
}

/// The parallel flow run with replies in order a, b, c:
/// 1 Start, 2 Cp start, 3 Cp fork, 4 Cp root/a, 5 Call a, 6 Cp root/b,
/// 7 Call b, 8 Cp root/c, 9 Call c, 10 Reply a, 11 Reply b, 12 Reply c,
/// 13 Cp root/c c2, 14 Cp join, 15 Cp done, 16 End.
fn parallel_run(wait_for: Json) -> Run {
    let p = with("parallel", |d| set_wait_for(d, wait_for.clone()));
    let (mut run, _) = Run::start(&p, "parallel.json", json!({"topic": "t"}));
    for (c, h) in [
        ("c1:root/a#1", "A"),
        ("c1:root/b#1", "B"),
        ("c1:root/c#1", "C"),
    ] {
        if run.ending().is_none() {
            run.feed(c, ok(json!({ "hit": h })));
        }
    }
    run
}

fn kinds(facts: &[Json]) -> Vec<String> {
    facts
        .iter()
        .map(|f| {
            let k = f["fact"].as_str().unwrap();
            match k {
                "Call" | "Reply" | "Close" => format!("{k} {}", f["call"].as_str().unwrap()),
                "Checkpoint" => format!(
                    "{k} {} {}",
                    f["task"].as_str().unwrap(),
                    f["node"].as_str().unwrap()
                ),
                _ => k.to_string(),
            }
        })
        .collect()
}

#[test]
fn parallel_history_layout_and_matched() {
    let run = parallel_run(json!("all"));
    assert_eq!(
        kinds(&run.facts),
        [
            "Start",
            "Checkpoint root start",
            "Checkpoint root fork",
            "Checkpoint root/a a",
            "Call c1:root/a#1",
            "Checkpoint root/b b",
            "Call c1:root/b#1",
            "Checkpoint root/c c",
            "Call c1:root/c#1",
            "Reply c1:root/a#1",
            "Reply c1:root/b#1",
            "Reply c1:root/c#1",
            "Checkpoint root/c c2",
            "Checkpoint root join",
            "Checkpoint root done",
            "End",
        ]
    );
    assert_eq!(
        replay(run.program.clone(), typed(&run.facts)).verdict,
        Verdict::Matched
    );
}

#[test]
fn every_cut_is_incomplete_and_resumes_where_the_record_ends() {
    let run = parallel_run(json!("all"));
    for cut in 1..run.facts.len() {
        let r = replay(run.program.clone(), typed(&run.facts[..cut]));
        assert_eq!(r.verdict, Verdict::Incomplete, "cut at {cut}");
        // The effects derived past the end are exactly the facts cut off
        // up to the next Reply (the ones a resume would record).
        // Unrecorded facts are not numbered yet; numbered as a resume
        // would number them, they are the facts cut off.
        let rest: Vec<Json> = run.facts[cut..]
            .iter()
            .take_while(|f| f["fact"] != "Reply")
            .cloned()
            .collect();
        let unrecorded: Vec<Json> = r
            .unrecorded
            .iter()
            .filter_map(|e| e.fact())
            .inspect(|f| assert_eq!(f.n(), 0))
            .zip(cut as u64 + 1..)
            .map(|(f, n)| f.numbered(n).to_json())
            .collect();
        assert_eq!(unrecorded, rest, "cut at {cut}");
    }
}

#[test]
fn changed_args_diverge_at_the_call() {
    let run = parallel_run(json!("all"));
    let mut f = run.facts.clone();
    f[6]["args"]["query"] = json!("x");
    assert_eq!(
        diverged_at(&run.program, &f),
        (7, "other args for call c1:root/b#1".to_string())
    );
}

#[test]
fn reordered_calls_diverge_at_the_first_moved_call() {
    let run = parallel_run(json!("all"));
    let mut f = run.facts.clone();
    f.swap(4, 6);
    renumber(&mut f);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            5,
            "other call: recorded c1:root/b#1, derived c1:root/a#1".to_string()
        )
    );
    // A Checkpoint moved before its task's Call.
    let mut f = run.facts.clone();
    f.swap(3, 4);
    renumber(&mut f);
    let (n, why) = diverged_at(&run.program, &f);
    assert_eq!(n, 4, "{why}");
    assert_eq!(
        why,
        "the record has a Call where the program derives a Checkpoint of task root/a at node a"
    );
}

#[test]
fn reordered_replies_of_a_wait_for_all_join_still_match() {
    // Target order, not arrival order: any reply order is the same run.
    let run = parallel_run(json!("all"));
    let mut f = run.facts.clone();
    f.swap(9, 11);
    renumber(&mut f);
    // c's reply now comes first, so its Checkpoint at c2 comes right
    // after it: the record then differs there.
    let (n, why) = diverged_at(&run.program, &f);
    assert_eq!(n, 11, "{why}");
    let mut f = run.facts.clone();
    f.swap(9, 10);
    renumber(&mut f);
    assert_eq!(
        replay(run.program.clone(), typed(&f)).verdict,
        Verdict::Matched
    );
}

#[test]
fn reordered_replies_of_a_wait_for_any_join_diverge_at_the_close() {
    let run = parallel_run(json!("any"));
    // a won: b and c were closed.
    assert_eq!(
        kinds(&run.facts[9..]),
        [
            "Reply c1:root/a#1",
            "Close c1:root/b#1",
            "Close c1:root/c#1",
            "Checkpoint root join",
            "Checkpoint root done",
            "End"
        ]
    );
    // A record claiming b's reply came first: b wins, a is closed.
    let mut f = run.facts.clone();
    f[9]["call"] = json!("c1:root/b#1");
    assert_eq!(
        diverged_at(&run.program, &f),
        (11, "a different Close".to_string())
    );
    // A reply after the Close of its call is dropped by the host, never
    // recorded (DESIGN §3 Close); a record holding one diverges.
    let late = json!({"fact": "Reply", "call": "c1:root/b#1", "outcome": {"Ok": {"hit": "B"}}});
    let mut f = run.facts.clone();
    f.insert(12, late.clone());
    renumber(&mut f);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            13,
            "the record lacks a Checkpoint of task root at node join before this Reply".to_string()
        )
    );
    let mut f = run.facts.clone();
    f.push(late);
    renumber(&mut f);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            16,
            "a Reply for c1:root/b#1, but the run has ended".to_string()
        )
    );
}

#[test]
fn a_removed_reply_diverges_where_its_consequence_was_recorded() {
    let run = parallel_run(json!("all"));
    let mut f = run.facts.clone();
    f.remove(10); // Reply b
    renumber(&mut f);
    // Reply c and c's checkpoint still match; the join waits for b.
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            13,
            "the record has a Checkpoint the program does not derive here".to_string()
        )
    );
    // A removed Call: the Reply names a call the record never made.
    let mut f = run.facts.clone();
    f.remove(8);
    renumber(&mut f);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            9,
            "the record lacks a Call c1:root/c#1 to parallel.json#search at node c before this Reply"
                .to_string()
        )
    );
    // A duplicated Reply.
    let mut f = run.facts.clone();
    f.insert(10, f[9].clone());
    renumber(&mut f);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            11,
            "a Reply for c1:root/a#1, but call c1:root/a#1 is not open".to_string()
        )
    );
}

#[test]
fn a_changed_program_diverges_with_the_reason() {
    let run = parallel_run(json!("all"));
    // Other args: branch c's input_map reads another path.
    let p = with("parallel", |d| {
        d["nodes"][4]["input_map"]["query"] = json!("$.state.q");
    });
    assert_eq!(
        diverged_at(&p, &run.facts),
        (9, "other args for call c1:root/c#1".to_string())
    );
    // Other tool: b calls another registry entry.
    let p = with("parallel", |d| {
        d["tools"]["find"] = d["tools"]["search"].clone();
        d["nodes"][3]["tool_id"] = json!("find");
    });
    assert_eq!(
        diverged_at(&p, &run.facts),
        (
            7,
            "other tool: recorded parallel.json#search, derived parallel.json#find".to_string()
        )
    );
    // A changed declaration: the fingerprint differs.
    let p = with("parallel", |d| {
        d["tools"]["search"]["output_schema"]["properties"]["score"] = json!({"type": "number"});
    });
    assert_eq!(
        diverged_at(&p, &run.facts),
        (
            5,
            "the declaration of parallel.json#search changed (fingerprint)".to_string()
        )
    );
    // Another node order: c routes straight to the join.
    let p = with("parallel", |d| {
        let edges = d["edges"].as_array_mut().unwrap();
        edges.retain(|e| e["from"] != "c" && e["from"] != "c2");
        edges.push(json!({"from": "c", "to": "join"}));
        let nodes = d["nodes"].as_array_mut().unwrap();
        nodes.retain(|n| n["id"] != "c2");
    });
    assert_eq!(
        diverged_at(&p, &run.facts),
        (13, "other node: recorded c2, derived join".to_string())
    );
}

#[test]
fn extra_facts_and_other_endings_diverge() {
    let run = parallel_run(json!("all"));
    let mut f = run.facts.clone();
    let mut extra = f[4].clone();
    extra["n"] = json!(17);
    f.push(extra);
    assert_eq!(
        diverged_at(&run.program, &f),
        (
            17,
            "the record has a Call the program does not derive here".to_string()
        )
    );
    let mut f = run.facts.clone();
    f[15]["ending"]["Completed"]["exit"] = json!("error");
    assert_eq!(
        diverged_at(&run.program, &f),
        (16, "a different ending".to_string())
    );
    let mut f = run.facts.clone();
    f[13]["state"]["last"] = json!("Z");
    assert_eq!(
        diverged_at(&run.program, &f),
        (14, "other state at node join".to_string())
    );
    let mut f = run.facts.clone();
    f[5]["n"] = json!(99);
    assert_eq!(
        diverged_at(&run.program, &f),
        (6, "fact numbers are not consecutive".to_string())
    );
    let mut f = run.facts.clone();
    f[0]["input"] = json!({"topic": 1});
    let (n, why) = diverged_at(&run.program, &f);
    assert_eq!(n, 1);
    assert!(
        why.starts_with("the run cannot start: input refused"),
        "{why}"
    );
    assert_eq!(
        diverged_at(&run.program, &run.facts[1..]),
        (1, "the history does not begin with Start".to_string())
    );
}

#[test]
fn hitl_timeouts_replay_and_a_forged_timeout_diverges() {
    let p = with("hitl", |d| d["nodes"][1]["on_timeout"] = json!("skip"));
    let (mut run, _) = Run::start(&p, "hitl.json", json!({"draft": "d"}));
    run.assert_replays();
    run.expire("c1:root#1");
    run.assert_replays();
    // The Close, then the rest: cut after the Close is incomplete.
    let close = run.facts.iter().position(|f| f["fact"] == "Close").unwrap();
    assert_eq!(
        replay(p.clone(), typed(&run.facts[..=close])).verdict,
        Verdict::Incomplete
    );
    // A Close with another reason where the machine has nothing to close.
    let mut f = run.facts.clone();
    f[close]["reason"] = json!("cancelled");
    let (n, why) = diverged_at(&p, &f);
    assert_eq!(n as usize, close + 1);
    assert_eq!(
        why,
        "the record has a Close the program does not derive here"
    );
}

/// A replay fed one fact at a time (as a store's walk feeds it) reaches
/// the verdict `replay` does, and stops taking facts once it diverged.
#[test]
fn a_replay_fed_fact_by_fact_agrees_and_stops_at_divergence() {
    use flow_engine::replay::Replayer;
    let run = parallel_run(json!("all"));
    let facts = typed(&run.facts);
    let mut r = Replayer::new(run.program.clone());
    assert!(facts.iter().all(|f| r.push(f, None)));
    let fed = r.finish();
    assert_eq!(fed.verdict, Verdict::Matched);
    assert_eq!(fed.verdict, replay(run.program.clone(), &facts).verdict);

    let mut f = run.facts.clone();
    f[4]["args"] = json!({"changed": true});
    let facts = typed(&f);
    let mut r = Replayer::new(run.program.clone());
    let taken = facts.iter().take_while(|f| r.push(f, None)).count();
    assert_eq!(taken, 4, "the fifth fact diverges and is the last taken");
    assert!(
        !r.push(&facts[5], None),
        "facts after a divergence change nothing"
    );
    assert!(matches!(
        r.finish().verdict,
        Verdict::Diverged { fact: 5, .. }
    ));

    assert_eq!(
        Replayer::new(run.program.clone()).finish().verdict,
        Verdict::Diverged {
            fact: 1,
            reason: "the history has no Start".into()
        }
    );
}

/// What a store's walk hands with each fact of `facts`: for a Checkpoint
/// after another, what its delta would say changed (each field whose
/// value differs, a list that only grew as appended to), as the walk
/// hands a Checkpoint stored as a delta on the one before it.
fn recorded_changes(facts: &[Json]) -> Vec<Option<flow_abi::fact::RecordedChange>> {
    use flow_abi::fact::{RecordedChange, Touched};
    let mut before: Option<&serde_json::Map<String, Json>> = None;
    facts
        .iter()
        .map(|f| {
            if f["fact"] != "Checkpoint" {
                return None;
            }
            let state = f["state"].as_object()?;
            let change = before.map(|b| {
                let mut fields = BTreeMap::new();
                for (k, v) in state {
                    match (b.get(k), v) {
                        (Some(old), _) if old == v => {}
                        (Some(Json::Array(old)), Json::Array(new)) if new.starts_with(old) => {
                            fields.insert(k.clone(), Touched::Append);
                        }
                        _ => {
                            fields.insert(k.clone(), Touched::Set);
                        }
                    }
                }
                for k in b.keys().filter(|k| !state.contains_key(*k)) {
                    fields.insert(k.clone(), Touched::Unset);
                }
                RecordedChange { fields }
            });
            before = Some(state);
            change
        })
        .collect()
}

/// Replays `facts` as a store's walk feeds them, each Checkpoint after
/// another with what changed.
fn replay_by_change(p: &std::sync::Arc<flow_engine::program::Program>, facts: &[Json]) -> Verdict {
    let typed_facts = typed(facts);
    let changes = recorded_changes(facts);
    let mut r = flow_engine::replay::Replayer::new(p.clone());
    for (f, c) in typed_facts.iter().zip(&changes) {
        if !r.push(f, c.as_ref()) {
            break;
        }
    }
    r.finish().verdict
}

/// A Checkpoint that follows a matched one is compared on what changed
/// (the fields the machine wrote and the fields the record's delta names,
/// a list both only appended to at its new items): an untouched history
/// matches, and a field changed in the record diverges there, whether the
/// machine wrote that field or only the record names it.
#[test]
fn checkpoints_compared_by_change_match_and_a_changed_field_diverges() {
    let (mut run, _) = Run::of(
        "reducers",
        json!({"item": "i1", "obj": {"a": {"x": 1}, "b": [1]}}),
    );
    run.feed(
        "c1:root#1",
        ok(
            json!({"log": ["i2", "i3"], "merged": {"a": {"y": 2}, "b": [2]},
                  "plain": "p2", "lw": "l2"}),
        ),
    );
    assert!(run.ending().is_some(), "the reducers flow ends");
    assert_eq!(replay_by_change(&run.program, &run.facts), Verdict::Matched);
    let checkpoints: Vec<usize> = (0..run.facts.len())
        .filter(|&i| run.facts[i]["fact"] == "Checkpoint")
        .collect();
    assert!(checkpoints.len() >= 3, "{checkpoints:?}");
    let last = *checkpoints.last().unwrap();
    let node = run.facts[last]["node"].as_str().unwrap().to_string();
    let other_state = Verdict::Diverged {
        fact: last as u64 + 1,
        reason: format!("other state at node {node}"),
    };
    // A field the last step wrote (appended to), given another item.
    let mut f = run.facts.clone();
    f[last]["state"]["log"]
        .as_array_mut()
        .unwrap()
        .push(json!("extra"));
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    // The same list with its first item changed: no longer only appended
    // to, so compared whole.
    let mut f = run.facts.clone();
    f[last]["state"]["log"][0] = json!("changed");
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    // A field no step after the first wrote, changed only in the record.
    let mut f = run.facts.clone();
    f[last]["state"]["item"] = json!("changed");
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    // A field removed, and one added.
    let mut f = run.facts.clone();
    f[last]["state"].as_object_mut().unwrap().remove("obj");
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    let mut f = run.facts.clone();
    f[last]["state"]["new"] = json!(1);
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    // Without the changes (every Checkpoint read whole) the same verdicts.
    assert_eq!(
        replay(run.program.clone(), typed(&run.facts)).verdict,
        Verdict::Matched
    );
    let mut f = run.facts.clone();
    f[last]["state"]["item"] = json!("changed");
    assert_eq!(replay(run.program.clone(), typed(&f)).verdict, other_state);

    // The parallel flow's fact 15 (Cp done) follows fact 14 (Cp join) of
    // the same state after the replay took its first Checkpoints: the
    // machine gives it by change.
    let run = parallel_run(json!("all"));
    assert_eq!(replay_by_change(&run.program, &run.facts), Verdict::Matched);
    let other_state = Verdict::Diverged {
        fact: 15,
        reason: "other state at node done".into(),
    };
    let mut f = run.facts.clone();
    f[14]["state"]["last"] = json!("Z");
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    let mut f = run.facts.clone();
    f[14]["state"]["found"]
        .as_array_mut()
        .unwrap()
        .push(json!("Z"));
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    let mut f = run.facts.clone();
    f[14]["state"].as_object_mut().unwrap().remove("topic");
    f[14]["state"]["other"] = json!("t");
    assert_eq!(replay_by_change(&run.program, &f), other_state);
    // The effects past a cut after it are whole Checkpoints, as before.
    let r = {
        let facts = typed(&run.facts[..15]);
        let changes = recorded_changes(&run.facts[..15]);
        let mut r = flow_engine::replay::Replayer::new(run.program.clone());
        assert!(
            facts
                .iter()
                .zip(&changes)
                .all(|(f, c)| r.push(f, c.as_ref()))
        );
        r.finish()
    };
    assert_eq!(r.verdict, Verdict::Incomplete);
    assert!(r.unrecorded.iter().all(|e| e.fact().is_some()));
}
