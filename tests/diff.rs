//! Run diff (issue 39, item 4) end to end, with the real `flow` binary
//! locally and against the real server: a fork onto a candidate that
//! changes a branch, beside its parent, shares the parent's history up to
//! the fork's checkpoint (FORK-1: the fork's Start records the parent and
//! the checkpoint) and parts exactly where the changed branch's result is
//! checkpointed; two runs of the same flow stand fact by fact from Start.

mod common;

use common::{TestApp, serve};
use serde_json::{Value as Json, json};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/flows/gate")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// A completed run of the branch flow with `n`.
fn run(app: &TestApp, n: u64) -> String {
    let input = json!({"n": n, "small": "small", "big": "big"}).to_string();
    let (code, v) = app.json(&["run", &fixture("branch.json"), "--input", &input]);
    assert_eq!(code, 0, "{v}");
    v["run"].as_str().unwrap().to_string()
}

/// The Checkpoints of `run`: (fact, node).
fn checkpoints(app: &TestApp, run: &str) -> Vec<(u64, String)> {
    let (code, v) = app.json(&["history", run, "--kind", "Checkpoint"]);
    assert_eq!(code, 0, "{v}");
    v["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["n"].as_u64().unwrap(),
                f["fact"]["node"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn diff(args: &[&str], app: &TestApp, server: Option<&str>) -> (i32, Json) {
    let mut c = common::flow();
    match server {
        Some(url) => c.args(["--server", url]),
        None => c.arg("--data").arg(app.data.path()),
    };
    let out = c.args(["--json", "diff"]).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "diff {args:?}: not JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn a_fork_onto_a_changed_branch_parts_from_its_parent_where_the_branch_is_checkpointed() {
    let app = TestApp::new();
    let parent = run(&app, 3);
    let cps = checkpoints(&app, &parent);
    // Fork from the Checkpoint at the small branch's node, onto the
    // candidate that labels small numbers with `big`.
    let (at, _) = cps
        .iter()
        .find(|(_, node)| node == "small_label")
        .unwrap_or_else(|| panic!("no Checkpoint at small_label: {cps:?}"));
    let (after, _) = cps.iter().find(|(n, _)| n > at).unwrap();
    let at = at.to_string();
    let (code, v) = app.json(&[
        "fork",
        &parent,
        "--checkpoint",
        &at,
        "--flow",
        &fixture("small-changed.json"),
    ]);
    assert_eq!(code, 0, "{v}");
    let fork = v["run"].as_str().unwrap().to_string();

    let (code, d) = diff(&[&parent, &fork], &app, None);
    assert_eq!(code, 1, "{d}");
    assert_eq!(
        d["alignment"],
        json!({"kind": "fork", "checkpoint": at.parse::<u64>().unwrap()})
    );
    // Shared through the fork's checkpoint (the parent's fact `at`, the
    // fork's fact 2); parted at the next fact on each side, the Checkpoint
    // after the branch, where only the label differs.
    assert_eq!(
        d["shared"],
        json!({"a": at.parse::<u64>().unwrap(), "b": 2})
    );
    assert_eq!(d["parted"], json!({"a": after, "b": 3}));
    assert_eq!(d["calls"], json!([]));
    let cps_diff = d["checkpoints"].as_array().unwrap();
    assert_eq!(cps_diff.len(), 1, "{d}");
    assert_eq!(cps_diff[0]["facts"], json!({"a": after, "b": 3}));
    assert_eq!(
        cps_diff[0]["fields"],
        json!([{"path": "$.state.label", "a": "small", "b": "big"}])
    );
    assert_eq!(d["endingA"]["output"]["label"], "small");
    assert_eq!(d["endingB"]["output"]["label"], "big");
    assert_eq!(d["same"], false);

    // The other way round: the parent is B.
    let (code, r) = diff(&[&fork, &parent], &app, None);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["alignment"]["kind"], "parent");
    assert_eq!(r["parted"], json!({"a": 3, "b": after}));

    // A run beside itself agrees.
    let (code, same) = diff(&[&parent, &parent], &app, None);
    assert_eq!(
        (code, &same["same"], &same["parted"]),
        (0, &json!(true), &Json::Null)
    );

    // Two runs of the flow, fact by fact: they part at Start (the input),
    // and the branch shows in the node of the third Checkpoint.
    let other = run(&app, 15);
    let (code, two) = diff(&[&parent, &other], &app, None);
    assert_eq!(code, 1, "{two}");
    assert_eq!(two["alignment"]["kind"], "start");
    assert_eq!(two["parted"], json!({"a": 1, "b": 1}));
    assert_eq!(
        two["input"],
        json!([{"path": "$.input.n", "a": 3, "b": 15}])
    );
    let nodes: Vec<&Json> = two["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["fields"].as_array().unwrap())
        .filter(|f| f["path"] == "$.node")
        .collect();
    assert_eq!(
        nodes,
        vec![&json!({"path": "$.node", "a": "small_label", "b": "big_label"})]
    );

    // The text says where they part.
    let out = app.cmd(&["diff", &parent, &fork]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("parted at A fact {after} / B fact 3"))
            && text.contains("$.state.label: \"small\" → \"big\""),
        "{text}"
    );

    // Through the server: the same diff.
    let s = serve(app.data.path(), &[]);
    let (code, remote) = diff(&[&parent, &fork], &app, Some(&s.base));
    assert_eq!((code, &remote), (1, &d));
    let (code, missing) = diff(
        &[&parent, "run-00000000000000000000000000"],
        &app,
        Some(&s.base),
    );
    assert_eq!(code, 2, "{missing}");
}
