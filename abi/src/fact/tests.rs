//! The reader and writer on every kind, and the refusals of bad envelopes.

use super::*;
use crate::json::canonical;

const RUN: &str = "run-01m8rj42f2bzsqpqw3w0atf5a8";
const HASH: &str = "blake3:155e58e9b332dd7938a926b5b0e8b7f0e0ebd9bd2b5b7fb4bd1b2cf1d22e1c41";

/// One canonical text of each kind (and each outcome and ending case).
fn texts() -> Vec<String> {
    vec![
        format!(
            r#"{{"data":"1.0","entry":{{"function":"main","module":"a.json"}},"fact":"Start","input":{{"q":1}},"n":1,"program":"sha256:00","run":"{RUN}","sources":[{{"hash":"{HASH}","length":12,"module":"a.json"}}]}}"#
        ),
        format!(
            r#"{{"data":"1.3","entry":{{"function":"main","module":"a.json"}},"fact":"Start","input":{{}},"n":1,"outer":{{"call":"c1:root/b#2","run":"{RUN}"}},"parent":{{"checkpoint":11,"run":"{RUN}"}},"program":"sha256:00","run":"{RUN}","sources":[]}}"#
        ),
        r#"{"args":{"k":[1,2]},"call":"c1:root#1","fact":"Call","fingerprint":"sha256:11","n":2,"node":"step","task":"root","tool":"std/llm#chat"}"#.into(),
        r#"{"call":"c1:root#1","fact":"Reply","n":3,"outcome":{"Ok":{"text":"hi"}}}"#.into(),
        r#"{"call":"c1:root#1","fact":"Reply","n":3,"outcome":{"Failed":{"message":"no"}}}"#.into(),
        r#"{"call":"c1:root#1","fact":"Reply","n":3,"outcome":{"NotRun":"why"}}"#.into(),
        r#"{"call":"c1:root#1","fact":"Reply","n":3,"outcome":{"Unknown":"host restarted"}}"#.into(),
        r#"{"call":"c1:root#1","fact":"Reply","n":3,"outcome":{"BadReply":"not JSON"}}"#.into(),
        r#"{"call":"c1:root/web-search#1","fact":"Close","n":4,"reason":"join satisfied"}"#.into(),
        r#"{"fact":"Checkpoint","n":5,"node":"paper_search","state":{"notes":{"$blob":"blake3:c5","length":2002}},"task":"root/paper-search"}"#.into(),
        r#"{"ending":{"Completed":{"exit":"success","output":null}},"fact":"End","n":6}"#.into(),
        r#"{"ending":{"Faulted":"boom"},"fact":"End","n":6}"#.into(),
    ]
}

#[test]
fn every_kind_reads_and_writes_back_byte_for_byte() {
    let mut kinds = std::collections::BTreeSet::new();
    for t in texts() {
        let f = Fact::parse(&t).unwrap_or_else(|e| panic!("{t}: {e}"));
        kinds.insert(f.kind());
        assert_eq!(f.to_canonical(), t);
        assert_eq!(canonical(&f.clone().into_json()), t);
        assert_eq!(Fact::from_json(&f.to_json()).unwrap(), f);
    }
    assert_eq!(kinds.len(), FactKind::ALL.len());
}

#[test]
fn typed_fields() {
    let f = Fact::parse(&texts()[1]).unwrap();
    let Fact::Start {
        n,
        run,
        parent: Some(p),
        outer: Some(o),
        ..
    } = &f
    else {
        panic!("{f:?}")
    };
    assert_eq!((*n, run.as_str(), p.checkpoint), (1, RUN, 11));
    assert_eq!((o.call.task(), o.call.k()), ("root/b", 2));
    let r = Fact::parse(&texts()[3]).unwrap();
    assert_eq!(r.call().map(CallId::as_str), Some("c1:root#1"));
    assert_eq!(
        r,
        Fact::Reply {
            n: 3,
            call: CallId::parse("c1:root#1").unwrap(),
            outcome: Outcome::Ok(serde_json::json!({"text": "hi"})),
        }
    );
}

#[test]
fn numbering() {
    let f = Fact::Close {
        n: 0,
        call: CallId::new("root", 1).unwrap(),
        reason: "timeout".into(),
    };
    assert_eq!(f.n(), 0);
    // An unnumbered fact is written, but never read back.
    let e = Fact::from_json(&f.to_json()).unwrap_err();
    assert_eq!(e.to_string(), "$.n: facts are numbered from 1");
    let g = f.numbered(7);
    assert_eq!(g.n(), 7);
    assert_eq!(Fact::from_json(&g.to_json()).unwrap(), g);
}

/// Each bad envelope is refused at the path that is wrong.
#[test]
fn refusals_name_the_path() {
    let start =
        |patch: &str| texts()[0].replacen(r#""data":"1.0""#, &format!(r#""data":"1.0"{patch}"#), 1);
    let cases: Vec<(String, &str, &str)> = vec![
        ("[]".into(), "$", "a fact is a JSON object"),
        ("{\"n\":1}".into(), "$.fact", "missing"),
        (r#"{"fact":1,"n":1}"#.into(), "$.fact", "expected a fact kind"),
        (r#"{"fact":"Nope","n":1}"#.into(), "$.fact", "unknown fact kind \"Nope\""),
        (r#"{"fact":"Close","n":0,"call":"c1:root#1","reason":"r"}"#.into(), "$.n", "numbered from 1"),
        (r#"{"fact":"Close","n":-1,"call":"c1:root#1","reason":"r"}"#.into(), "$.n", "expected a count"),
        (r#"{"fact":"Close","n":1.5,"call":"c1:root#1","reason":"r"}"#.into(), "$.n", "expected a count"),
        (r#"{"fact":"Close","call":"c1:root#1","reason":"r"}"#.into(), "$.n", "missing"),
        (r#"{"fact":"Close","n":2,"call":"c","reason":"r"}"#.into(), "$.call", "not a call id"),
        (r#"{"fact":"Close","n":2,"call":"c1:root#1"}"#.into(), "$.reason", "missing"),
        (r#"{"fact":"Close","n":2,"call":"c1:root#1","reason":7}"#.into(), "$.reason", "expected a string, found a number"),
        (r#"{"fact":"Close","n":2,"call":"c1:root#1","reason":"r","extra":1}"#.into(), "$.extra", "unknown key: a Close fact has fact, n, call and reason"),
        (r#"{"fact":"Close","n":2,"call":"c1:root#1","reason":"r","odd key":1}"#.into(), "$[\"odd key\"]", "unknown key"),
        (r#"{"fact":"Call","n":2}"#.into(), "$.call", "missing"),
        (r#"{"fact":"Call","n":2,"call":"c1:root#1","task":"main","node":"a","tool":"t","fingerprint":"f","args":{}}"#.into(), "$.task", "not a task id"),
        (r#"{"fact":"Call","n":2,"call":"c1:root#1","task":"root","node":"A","tool":"t","fingerprint":"f","args":{}}"#.into(), "$.node", "not a node id"),
        (r#"{"fact":"Call","n":2,"call":"c1:root#1","task":"root","node":"a","tool":"t","fingerprint":"f"}"#.into(), "$.args", "missing"),
        (r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"Ok":1,"Failed":2}}"#.into(), "$.outcome", "exactly one"),
        (r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"NotRun":1}}"#.into(), "$.outcome.NotRun", "holds a reason"),
        (r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":{"Done":1}}"#.into(), "$.outcome.Done", "unknown outcome"),
        (r#"{"fact":"Reply","n":3,"call":"c1:root#1","outcome":"Ok"}"#.into(), "$.outcome", "an outcome is an object"),
        (r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a"}"#.into(), "$.state", "missing"),
        (r#"{"fact":"Checkpoint","n":5,"task":"root","node":"a","delta":{"base":1}}"#.into(), "$.delta", "unknown key"),
        (r#"{"fact":"End","n":6,"ending":{"Completed":{"output":1}}}"#.into(), "$.ending.Completed.exit", "missing"),
        (r#"{"fact":"End","n":6,"ending":{"Completed":{"exit":"success","output":1,"x":2}}}"#.into(), "$.ending.Completed.x", "unknown key"),
        (r#"{"fact":"End","n":6,"ending":{"Faulted":{}}}"#.into(), "$.ending.Faulted", "holds a reason"),
        (r#"{"fact":"End","n":6,"ending":{"Paused":"x"}}"#.into(), "$.ending.Paused", "unknown ending"),
        (r#"{"fact":"End","n":6,"ending":{}}"#.into(), "$.ending", "exactly one"),
        (texts()[0].replace(RUN, "run-x"), "$.run", "not a run id"),
        (texts()[0].replace(r#""data":"1.0""#, r#""data":"2.0""#), "$.data", "unknown data version \"2.0\""),
        (texts()[0].replace(HASH, "blake3:00"), "$.sources[0].hash", "blake3:<64 lowercase hex>"),
        (texts()[0].replace(HASH, &HASH.to_uppercase().replace("BLAKE3", "blake3")), "$.sources[0].hash", "lowercase"),
        (texts()[0].replace(r#","length":12"#, ""), "$.sources[0].length", "missing"),
        (texts()[0].replace(r#""length":12"#, r#""length":12,"size":1"#), "$.sources[0].size", "unknown key"),
        (texts()[0].replace(r#""sources":[{"#, r#""sources":{"a":{"#).replace("}]}", "}}}"), "$.sources", "expected a list"),
        (texts()[0].replace(r#""function":"main","#, ""), "$.entry.function", "missing"),
        (start(r#","parent":{"run":"x","checkpoint":1}"#), "$.parent.run", "not a run id"),
        (start(&format!(r#","parent":{{"run":"{RUN}","checkpoint":0}}"#)), "$.parent.checkpoint", "a count from 1"),
        (start(&format!(r#","parent":{{"run":"{RUN}"}}"#)), "$.parent.checkpoint", "missing"),
        (start(&format!(r#","outer":{{"run":"{RUN}","call":"c1:root"}}"#)), "$.outer.call", "not a call id"),
        (start(r#","outer":[]"#), "$.outer", "Start.outer is an object"),
        (start(r#","parent":null"#), "$.parent", "Start.parent is an object"),
        ("{\"fact\":\"End\",\"n\":6,\"ending\":{\"Faulted\":\"a\"},\"ending\":{\"Faulted\":\"b\"}}".into(), "$.ending", "not JSON: duplicate key"),
    ];
    for (text, path, needle) in cases {
        let e = Fact::parse(&text).expect_err(&text);
        assert_eq!(e.path(), path, "{text}: {e}");
        assert!(
            e.message().contains(needle),
            "{text}: {e:?} lacks {needle:?}"
        );
    }
}

#[test]
fn kinds_parse_by_name() {
    for k in FactKind::ALL {
        assert_eq!(FactKind::parse(k.as_str()), Some(k));
    }
    assert_eq!(FactKind::parse("start"), None);
}
