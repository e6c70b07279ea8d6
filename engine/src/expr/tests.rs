use super::*;
use serde_json::json;

fn eval(src: &str, state: &Value) -> Result<bool, EvalError> {
    Expr::parse(src).unwrap().eval(&Scope::state(state))
}

#[test]
fn corpus_conditions() {
    let s = json!({"classification": {"severity": "high"}, "validation_result": {"valid": false}});
    assert!(eval("$.state.classification.severity == 'high'", &s).unwrap());
    assert!(eval("$.state.validation_result.valid == false", &s).unwrap());
    let msg = json!("The VERDICT is in");
    let scope = Scope {
        state: &s,
        last_message: Some(&msg),
        error: None,
    };
    assert!(
        Expr::parse("$.last_message contains 'VERDICT'")
            .unwrap()
            .eval(&scope)
            .unwrap()
    );
}

/// The short integer path reads what the general parse reads, and
/// leaves every other token to it.
#[test]
fn short_integers_read_as_the_general_parse_reads_them() {
    let general = |t: &str| {
        let n = Num::parse(t.as_bytes()).ok()?;
        n.check_decimal().ok()?;
        BigDecimal::from_str(&n.canonical()).ok()
    };
    for t in [
        "0",
        "-0",
        "7",
        "-7",
        "10",
        "999999999999999999",
        "-999999999999999999",
        "1000000000000000000",
        "9223372036854775808",
        "-9223372036854775809",
        "01",
        "-",
        "",
        "1.5",
        "1e3",
        "+1",
        "1 ",
    ] {
        assert_eq!(decimal(t), general(t), "{t:?}");
    }
    assert_eq!(
        small_int("999999999999999999"),
        Some(999_999_999_999_999_999)
    );
    assert_eq!(
        small_int("1000000000000000000"),
        None,
        "19 digits: the general parse"
    );
    assert_eq!(small_int("01"), None);
}

#[test]
fn numbers_are_exact() {
    let s: Value = serde_json::from_str(r#"{"score": 0.80, "big": 9007199254740993}"#).unwrap();
    assert!(eval("$.state.score == 0.8", &s).unwrap());
    assert!(eval("$.state.score > 0.5 && $.state.score <= 8e-1", &s).unwrap());
    assert!(!eval("$.state.big == 9007199254740992", &s).unwrap());
    assert!(eval("$.state.big > 9007199254740992", &s).unwrap());
}

#[test]
fn precedence_and_words() {
    let s = json!({"a": 1, "b": 2});
    assert!(eval("$.state.a == 1 || $.state.b == 3 && false", &s).unwrap());
    assert!(!eval("($.state.a == 1 || $.state.b == 3) && false", &s).unwrap());
    assert!(eval("not ($.state.a == 2) and $.state.b == 2", &s).unwrap());
    assert_eq!(
        Expr::parse("!($.state.a == 1)").unwrap().to_string(),
        "!($.state.a == 1)"
    );
}

#[test]
fn missing_is_null_and_mismatches_are_errors() {
    let s = json!({"n": 1, "s": "x"});
    assert!(!eval("$.state.nope == 'x'", &s).unwrap());
    assert!(eval("$.state.nope == null", &s).unwrap());
    assert!(!eval("$.state.nope contains 'x'", &s).unwrap());
    let e = eval("$.state.n == 'x'", &s).unwrap_err();
    assert!(
        e.message.contains("cannot compare a number and a string"),
        "{e}"
    );
    assert!(eval("$.state.s > 1", &s).is_err());
    assert!(eval("$.state.s", &s).is_err());
    assert!(eval("$.state.s.deeper == 1", &s).is_err());
    assert!(eval("$.state.n && true", &s).is_err());
}

#[test]
fn contains_forms() {
    let s = json!({"tags": ["a", 1.0], "obj": {"k": 1}, "text": "hello"});
    assert!(eval("$.state.tags contains 'a'", &s).unwrap());
    assert!(eval("$.state.tags contains 1", &s).unwrap());
    assert!(eval("$.state.obj contains 'k'", &s).unwrap());
    assert!(eval("$.state.text contains 'ell'", &s).unwrap());
    assert!(eval("$.state.text contains 1", &s).is_err());
}

#[test]
fn syntax_errors() {
    for bad in [
        "",
        "$.state.a =",
        "$.state.a = 1",
        "a == 1",
        "$.state.a == 'x",
        "($.state.a == 1",
        "$.state.a == 1)",
        "$.state.a & true",
        "$.foo == 1",
        "$.state.a == 1e99999999999999999999",
        "== 1",
        "$.state.a == 01",
        "$.state.a $.state.b",
    ] {
        assert!(Expr::parse(bad).is_err(), "{bad}");
    }
    let deep = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    assert!(Expr::parse(&deep).is_err());
    let long_chain = vec!["true"; 500].join(" && ");
    assert!(Expr::parse(&long_chain).is_err());
    assert!(Expr::parse(&"!".repeat(100)).is_err());
}
