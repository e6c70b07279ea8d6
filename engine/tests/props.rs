//! Property tests (ECOSYSTEM §11): the expression parser round-trips
//! (generate AST → print → parse → equal), evaluation and rendering never
//! panic, templates and paths round-trip, and the checker never panics on
//! a mangled document (DESIGN §7: "no panic is reachable from input").

use flow_engine::expr::{self, BinOp, Expr, Lit, Number};
use flow_engine::path::{Path, Root, Scope, Seg};
use flow_engine::template::{Part, Template};
use proptest::prelude::*;
use serde_json::Value;

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_][a-z0-9_]{0,8}",
        any::<String>().prop_map(|s| s.chars().take(6).collect()),
        Just(String::new()),
        Just("a b'\"\\\n".to_string()),
    ]
}

fn seg() -> impl Strategy<Value = Seg> {
    prop_oneof![
        name().prop_map(Seg::Name),
        (-1000i64..1000).prop_map(Seg::Index)
    ]
}

fn path() -> impl Strategy<Value = Path> {
    let root = prop_oneof![
        Just(Root::State),
        Just(Root::LastMessage),
        Just(Root::Error)
    ];
    (root, prop::collection::vec(seg(), 0..4)).prop_map(|(root, segs)| Path { root, segs })
}

fn number_text() -> impl Strategy<Value = String> {
    (
        "-?",
        "0|[1-9][0-9]{0,6}",
        "(\\.[0-9]{1,4})?",
        "([eE][+-]?[0-9]{1,2})?",
    )
        .prop_map(|(s, i, f, e)| format!("{s}{i}{f}{e}"))
}

fn lit() -> impl Strategy<Value = Lit> {
    prop_oneof![
        Just(Lit::Null),
        any::<bool>().prop_map(Lit::Bool),
        number_text().prop_map(|text| {
            let value = expr::decimal(&text).expect("generated numbers are valid");
            Lit::Number(Number { text, value })
        }),
        any::<String>().prop_map(Lit::String),
    ]
}

fn op() -> impl Strategy<Value = BinOp> {
    prop_oneof![
        Just(BinOp::Or),
        Just(BinOp::And),
        Just(BinOp::Eq),
        Just(BinOp::Ne),
        Just(BinOp::Lt),
        Just(BinOp::Le),
        Just(BinOp::Gt),
        Just(BinOp::Ge),
        Just(BinOp::Contains),
    ]
}

fn ast() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![path().prop_map(Expr::Path), lit().prop_map(Expr::Lit)];
    leaf.prop_recursive(6, 40, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            (op(), inner.clone(), inner).prop_map(|(o, a, b)| Expr::Binary(
                o,
                Box::new(a),
                Box::new(b)
            )),
        ]
    })
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            number_text(),
            Just("1e999999".to_string()),
            Just("-0.000".to_string())
        ]
        .prop_map(|t| serde_json::from_str::<Value>(&t).unwrap_or(Value::Null)),
        "[a-zA-Z ]{0,8}".prop_map(Value::String),
        Just(Value::String("VERDICT".into())),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop_oneof!["[a-z]{1,3}", name()], inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// GAP-EXPR-1: the printed form of any tree parses back to the same tree.
    #[test]
    fn expr_print_parse_roundtrip(e in ast()) {
        let printed = e.to_string();
        let parsed = Expr::parse(&printed);
        prop_assert_eq!(parsed.as_ref(), Ok(&e), "printed: {}", printed);
    }

    #[test]
    fn path_print_parse_roundtrip(p in path()) {
        prop_assert_eq!(Path::parse(&p.to_string()), Ok(p));
    }

    /// Evaluation never panics, whatever the state, the debate message and
    /// the error value; it yields a boolean or a clear error.
    #[test]
    fn eval_never_panics(e in ast(), state in json(), msg in json(), err in json()) {
        let scope = Scope { state: &state, last_message: Some(&msg), error: Some(&err) };
        match e.eval(&scope) {
            Ok(_) => {}
            Err(x) => prop_assert!(!x.message.is_empty()),
        }
    }

    /// The parser never panics on arbitrary text.
    #[test]
    fn parse_never_panics(src in "\\PC{0,60}") {
        let _ = Expr::parse(&src);
        let _ = Template::parse(&src);
        let _ = Path::parse(&src);
        let _ = Path::parse_source(&src);
    }

    #[test]
    fn template_roundtrip_and_render(pieces in prop::collection::vec(("[^{}]{0,6}", path()), 0..5), state in json()) {
        let mut parts = Vec::new();
        for (text, mut p) in pieces {
            // A `}` inside a quoted name would end the hole early.
            p.segs.retain(|s| !matches!(s, Seg::Name(n) if n.contains('}') || n.contains('{')));
            if !text.is_empty() {
                parts.push(Part::Text(text));
            }
            parts.push(Part::Hole(p));
        }
        let t = Template { parts };
        prop_assert_eq!(Template::parse(&t.to_string()), Ok(t.clone()));
        let _ = t.render(&Scope::state(&state));
    }
}

fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| pointers(x, format!("{at}/{i}"), out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            pointers(
                x,
                format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                out,
            )
        }),
        _ => {}
    }
}

fn kitchen_sink() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/flows/check/good/kitchen-sink.json"
    );
    let doc: Value = flow_abi::json::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
    doc["flow"].clone()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Replacing random parts of a valid flow with random JSON never makes
    /// the checker panic, and checking stays deterministic.
    #[test]
    fn checker_never_panics(picks in prop::collection::vec((any::<prop::sample::Index>(), json()), 1..4)) {
        let mut doc = kitchen_sink();
        for (ix, value) in picks {
            let mut ps = Vec::new();
            pointers(&doc, String::new(), &mut ps);
            let p = ix.get(&ps).clone();
            if p.is_empty() {
                doc = value;
            } else if let Some(slot) = doc.pointer_mut(&p) {
                *slot = value;
            }
        }
        let a = flow_engine::check(&doc);
        let b = flow_engine::check(&doc);
        prop_assert_eq!(a.diagnostics, b.diagnostics);
    }
}
