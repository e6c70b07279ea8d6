use super::*;

/// Issue 17: a huge `minLength` is capped as `minItems` is; the model
/// answers (shorter than asked) instead of padding without bound.
#[test]
fn a_huge_min_length_is_capped() {
    let schema = json!({"type": "object", "required": ["t"],
            "properties": {"t": {"type": "string", "minLength": 1_000_000_000_000u64}}});
    let a = offline_answer("m", None, "hello", Some(&schema));
    assert_eq!(a["t"].as_str().unwrap().chars().count(), 4096);
}

#[test]
fn offline_is_deterministic_and_fits() {
    let schema = json!({
        "type": "object",
        "properties": {
            "verdict": {"enum": ["approve", "reject", "escalate"]},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 2},
            "addr": {"$ref": "#/$defs/Addr"}
        },
        "required": ["verdict", "score"],
        "$defs": {"Addr": {"type": "object", "properties": {"city": {"type": "string"}}}}
    });
    let a = offline_answer("m", Some("s"), "rate this: good stuff", Some(&schema));
    let b = offline_answer("m", Some("s"), "rate this: good stuff", Some(&schema));
    assert_eq!(a, b);
    assert!(["approve", "reject", "escalate"].contains(&a["verdict"].as_str().unwrap()));
    let score: i64 = a["score"].as_number().unwrap().as_str().parse().unwrap();
    assert!((1..=5).contains(&score));
    assert!(a["ok"].is_boolean());
    assert_eq!(a["tags"].as_array().unwrap().len(), 2);
    assert!(a["tags"][0].as_str().unwrap().chars().count() <= 5);
    assert!(a["addr"]["city"].is_string());
    assert_eq!(
        offline_answer("m", None, "hello", None),
        json!({"text": "hello"})
    );
}
