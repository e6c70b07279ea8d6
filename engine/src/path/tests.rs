use super::*;
use serde_json::json;

#[test]
fn parses_the_forms_flowspec_uses() {
    let p = Path::parse("$.state.topics[0]").unwrap();
    assert_eq!(p.root, Root::State);
    assert_eq!(p.segs, vec![Seg::Name("topics".into()), Seg::Index(0)]);
    let p = Path::parse("$['state'][\"a b\"][-1]").unwrap();
    assert_eq!(p.segs, vec![Seg::Name("a b".into()), Seg::Index(-1)]);
    assert_eq!(p.to_string(), "$.state['a b'][-1]");
    assert!(Path::parse("$.last_message").is_ok());
    assert_eq!(
        Path::parse_source("question").unwrap().to_string(),
        "$.state.question"
    );
}

#[test]
fn refuses_non_singular_and_unknown_roots() {
    for bad in [
        "$",
        "$.foo",
        "$.state..a",
        "$.state.*",
        "$.state[*]",
        "$.state[1:2]",
        "$.state[?@.a]",
        "$.state[01]",
        "$.state[-0]",
        "$.state['a'",
        "$.state.",
        "$.state[99999999999999999]",
        "state",
    ] {
        assert!(Path::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn resolves_missing_and_mismatch() {
    let state = json!({"a": {"b": [1, 2, 3]}, "s": "text"});
    let scope = Scope::state(&state);
    let get = |s: &str| Path::parse(s).unwrap().resolve(&scope);
    assert_eq!(get("$.state.a.b[-1]").unwrap(), Some(&json!(3)));
    assert_eq!(get("$.state.a.b[5]").unwrap(), None);
    assert_eq!(get("$.state.nope.deeper").unwrap(), None);
    assert_eq!(get("$.last_message").unwrap(), None);
    let e = get("$.state.s.x").unwrap_err();
    assert!(e.message.contains("`$.state.s` is a string"), "{e}");
}

#[test]
fn targets() {
    assert_eq!(
        Target::parse("answer").unwrap(),
        Target {
            field: "answer".into(),
            below: vec![]
        }
    );
    assert_eq!(
        Target::parse("$.output.verdict").unwrap(),
        Target {
            field: "output".into(),
            below: vec!["verdict".into()]
        }
    );
    assert_eq!(
        Target::parse("$.state.a.b").unwrap().below,
        vec!["b".to_string()]
    );
    assert!(Target::parse("$.state").is_err());
    assert!(Target::parse("$.state.a[0]").is_err());
    assert!(Target::parse("$.error.x").is_err());
    // A plain key with a hyphen is that state key (issue 11, item 6).
    let t = Target::parse("user-name").unwrap();
    assert_eq!((t.field.as_str(), t.below.len()), ("user-name", 0));
    assert_eq!(t.to_string(), "$.state['user-name']");
    assert!(Target::parse("user-name.first").is_err());
    assert!(Target::parse("$.state.user-name").is_err());
}
