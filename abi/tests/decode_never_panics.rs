//! The decoder never panics (issue 2, "Tests"): on arbitrary strings, on
//! JSON-like texts built from a grammar of the awkward cases (numbers past
//! every limit, lone surrogates, bad escapes, near-miss date-times and
//! durations, constructor and field names) and then corrupted, and on deep
//! nesting, decoded against random types and a fixed set of tricky ones.
//! Every outcome is a value or a refusal (DEC-6, DEC-7, DEC-8, GAP-ENC-7).
//!
//! The case counts are bounded so the whole flow-abi suite stays well under
//! a minute in a debug build; `fuzz/` holds the open-ended cargo-fuzz target.

mod arb;

use arb::Lcg;
use flow_abi::{Body, Decl, Field, Type, TypeSet, decode};
use proptest::prelude::*;
use std::sync::Arc;

/// Decodes `text` as `ty`; whatever it decodes to must re-encode to a text
/// that decodes to the same value (ENC-10).
fn check(text: &str, ty: &Type, ts: &TypeSet) {
    if let Ok(v) = decode(text, ty, ts) {
        let c = v.canonical();
        let again = decode(&c, ty, ts)
            .unwrap_or_else(|e| panic!("{c} (from {text:?}) does not decode again: {e}"));
        assert_eq!(again.canonical(), c);
    }
    if let Ok(j) = flow_abi::json::parse(text) {
        let c = flow_abi::json::canonical(&j);
        assert_eq!(
            flow_abi::json::parse(&c).map(|j| flow_abi::json::canonical(&j)),
            Ok(c)
        );
    }
}

/// Fixed types whose decoders take the unusual paths.
fn fixed_types() -> (Arc<TypeSet>, Vec<Type>) {
    let mut ts = TypeSet::new();
    let tree_id = ts.reserve("test.Tree", "Tree").unwrap();
    let tree = Type::Named(tree_id);
    ts.define(
        tree_id,
        None,
        Body::Record(vec![
            Field {
                name: "label".into(),
                ty: Type::Int,
                doc: None,
            },
            Field {
                name: "kids".into(),
                ty: Type::List(Box::new(tree.clone())),
                doc: None,
            },
            Field {
                name: "next".into(),
                ty: Type::Option(Box::new(tree.clone())),
                doc: None,
            },
        ]),
    );
    let shape = ts
        .add(Decl {
            identity: "test.Shape".into(),
            name: "Shape".into(),
            doc: None,
            body: Body::Enum(vec![
                flow_abi::Ctor {
                    name: "None".into(),
                    doc: None,
                    payload: None,
                },
                flow_abi::Ctor {
                    name: "Some".into(),
                    doc: None,
                    payload: Some(Type::Decimal),
                },
                flow_abi::Ctor {
                    name: "label".into(),
                    doc: None,
                    payload: Some(tree.clone()),
                },
            ]),
        })
        .unwrap();
    let b = Box::new;
    let types = vec![
        Type::Unit,
        Type::Bool,
        Type::Int,
        Type::Decimal,
        Type::Text,
        Type::Bytes,
        Type::Instant,
        Type::Duration,
        Type::Never,
        Type::Json,
        tree.clone(),
        Type::Named(shape),
        Type::List(b(tree)),
        Type::Set(b(Type::Decimal)),
        Type::Set(b(Type::Json)),
        Type::Dict(b(Type::Int), b(Type::Text)),
        Type::Dict(b(Type::Text), b(Type::Int)),
        Type::Option(b(Type::Option(b(Type::Int)))),
        Type::Tuple(vec![Type::Int, Type::Text, Type::Instant]),
        Type::List(b(Type::Duration)),
    ];
    (Arc::new(ts), types)
}

/// A random type or a fixed tricky one.
fn any_type() -> impl Strategy<Value = (Arc<TypeSet>, Type)> {
    let (ts, fixed) = fixed_types();
    prop_oneof![
        arb::typed(),
        proptest::sample::select(fixed).prop_map(move |t| (ts.clone(), t)),
    ]
}

/// Number tokens past or at every limit, and junk that looks like numbers
/// (DEC-8: judged by value, never expanded).
fn junk_number() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => arb::number_token(),
        4 => proptest::sample::select(vec![
            "1e999999999", "-1e-999999999", "1e9223372036854775807",
            "1e-9223372036854775808", "1e9223372036854775808", "1e99999999999999999999",
            "0e99999999999999999999", "0.0e-9223372036854775808", "-0", "-0.0", "1E+0",
            "1e4095", "1e4096", "1e-4094", "1e-4095", "1e999", "1e1000", "-1e999",
            "1.5e0", "0.5e1", "10e-1",
        ]).prop_map(String::from),
        1 => "[1-9][0-9]{995,1005}",
        1 => "0\\.[0-9]{995,1005}[1-9]",
        1 => "-?[1-9](\\.[0-9]{1,3})?[eE][+-]?[0-9]{3,5}",
        2 => "[-+.eE0-9]{1,12}",
    ]
}

/// String contents (unescaped: they may carry escapes of their own, valid or
/// not) aimed at the string-typed decoders.
fn junk_string_body() -> impl Strategy<Value = String> {
    prop_oneof![
        // Escapes, valid and broken, lone surrogates among them.
        2 => "([a-z]|\\\\(u[0-9a-fA-FdD]{0,4}|[\"\\\\/bfnrtxU0]))*",
        1 => Just("\\ud83d\\ude00".to_string()),
        1 => Just("\\ud800".to_string()),
        1 => Just("\\udc00\\ud800".to_string()),
        // Near-miss RFC 3339 date-times (ENC-16, GAP-ENC-6).
        2 => "[+-]?[0-9]{3,7}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|z|[+-][0-9]{2}:[0-9]{2})?",
        // Near-miss durations (ENC-17), with runs of digits long enough to
        // overflow any fixed-width sum.
        2 => "-?P([0-9]{0,31}W)?([0-9]{0,31}D)?(T([0-9]{0,31}H)?([0-9]{0,31}M)?(-?[0-9]{0,31}(\\.[0-9]{0,12})?S)?)?",
        // Every part near the top of an i128 of nanoseconds on its own, so
        // their sum overflows.
        1 => "-?P[12][0-9]{22}W[1-9][0-9]{23}DT[1-9][0-9]{24}H[1-9][0-9]{26}M-?[1-9][0-9]{28}S",
        1 => "[PTWDHMSYe0-9.+-]{0,16}",
        // Base64, padded or not (GAP-ENC-5).
        2 => "[A-Za-z0-9+/_-]{0,12}={0,3}",
        // Names the fixed types use.
        2 => proptest::sample::select(vec!["None", "Some", "label", "kids", "next", ""])
            .prop_map(String::from),
        2 => arb::text(),
    ]
}

/// A JSON-like text from a grammar of the awkward cases.
fn json_like() -> impl Strategy<Value = String> {
    let string = junk_string_body().prop_map(|s| format!("\"{s}\""));
    let leaf = prop_oneof![
        1 => proptest::sample::select(vec!["null", "true", "false", "nul", "True", "\u{FEFF}1"])
            .prop_map(String::from),
        3 => junk_number(),
        3 => string,
    ];
    leaf.prop_recursive(6, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6)
                .prop_map(|xs| format!("[{}]", xs.join(","))),
            // Keys may repeat: duplicates must be refused, not merged.
            proptest::collection::vec((junk_string_body(), inner), 0..5).prop_map(|es| {
                let body: Vec<String> = es
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1500,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    /// Arbitrary strings, against random and fixed types.
    #[test]
    fn arbitrary_strings((ts, ty) in any_type(), text in any::<String>()) {
        check(&text, &ty, &ts);
    }

    /// Strings over the JSON alphabet, so more of them get past the first
    /// byte.
    #[test]
    fn json_alphabet_strings(
        (ts, ty) in any_type(),
        text in "[\\[\\]{}\":,0-9eE.+\\-a-z\\\\ \\t\\n]{0,64}",
    ) {
        check(&text, &ty, &ts);
    }

    /// Grammar-built JSON-like texts, whole and with random corruption.
    #[test]
    fn corrupted_json_like(
        (ts, ty) in any_type(),
        text in json_like(),
        seed in any::<u64>(),
        edits in 0usize..4,
    ) {
        check(&text, &ty, &ts);
        let bad = arb::corrupt(&text, &mut Lcg::new(seed), edits);
        check(&bad, &ty, &ts);
    }
}

/// Nesting at, past and far past the depth limit of 128, against types that
/// follow it all the way down: refused with a message, no stack overflow
/// (DESIGN §2 limits).
#[test]
fn deep_nesting() {
    let (ts, _) = fixed_types();
    let tree = Type::Named(ts.lookup("test.Tree").unwrap());
    let mut list = Type::Int;
    let mut option = Type::Int;
    for _ in 0..300 {
        list = Type::List(Box::new(list));
        option = Type::Option(Box::new(option));
    }
    for depth in [127usize, 128, 129, 300, 100_000] {
        let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let objects = format!("{}1{}", "{\"Some\":".repeat(depth), "}".repeat(depth));
        let trees = format!(
            "{}{}",
            "{\"label\":1,\"kids\":[".repeat(depth),
            "]}".repeat(depth)
        );
        let unclosed = "[".repeat(depth);
        for (text, ty) in [
            (&arrays, &Type::Json),
            (&arrays, &list),
            (&objects, &Type::Json),
            (&objects, &option),
            (&trees, &tree),
            (&trees, &Type::Json),
            (&unclosed, &Type::Json),
            (&unclosed, &list),
        ] {
            let r = decode(text, ty, &ts);
            // Arrays count one level each, so 128 nested arrays are in;
            // a tree level is two (its object and its kids list).
            if depth > 128 {
                let e = r.expect_err("past the depth limit");
                assert!(
                    e.message().contains("nesting") || e.message().contains("invalid JSON"),
                    "{e}"
                );
            }
            check(text, ty, &ts);
        }
    }
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(decode(&ok, &Type::Json, &ts).is_ok());
    assert!(decode(&ok, &list, &ts).is_ok());
}

/// DEC-8: `1e999999999` and friends are refused quickly, by value, without
/// being written out; within-limit spellings are accepted.
#[test]
fn huge_numbers_refused_without_expanding() {
    let ts = TypeSet::new();
    let start = std::time::Instant::now();
    for text in [
        "1e999999999",
        "1e9223372036854775807",
        "-1e-9223372036854775808",
        "1e99999999999999999999",
        "0.1e-999999999",
    ] {
        for ty in [Type::Int, Type::Decimal, Type::Json] {
            assert!(decode(text, &ty, &ts).is_err(), "{text} as {ty:?}");
        }
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    let int_limit = format!("1e{}", flow_abi::limits::MAX_INT_DIGITS - 1);
    assert!(decode(&int_limit, &Type::Int, &ts).is_ok());
    let past = format!("1e{}", flow_abi::limits::MAX_INT_DIGITS);
    assert!(decode(&past, &Type::Int, &ts).is_err());
    assert_eq!(decode("1e3", &Type::Int, &ts).unwrap().canonical(), "1000");
    assert_eq!(decode("10.0", &Type::Int, &ts).unwrap().canonical(), "10");
    assert!(decode("1.5", &Type::Int, &ts).is_err());
}

/// GAP-ENC-7: a leading byte order mark is refused.
#[test]
fn byte_order_mark_refused() {
    let ts = TypeSet::new();
    assert!(decode("\u{FEFF}1", &Type::Int, &ts).is_err());
    assert!(decode("\u{FEFF}{}", &Type::Json, &ts).is_err());
}

/// Found by `corrupted_json_like`: a duration whose parts each fit an i128
/// of nanoseconds but whose sum does not overflowed (a panic in debug, a
/// wrapped and possibly accepted value in release). It is refused now.
#[test]
fn duration_parts_overflowing_together_refused() {
    let ts = TypeSet::new();
    for text in [
        "\"P1500000000000000000000001DT99999999999999999999999999999S\"",
        "\"P200000000000000000000000W100000000000000000000000DT1000000000000000000000000H100000000000000000000000000M-10000000000000000000000000000S\"",
    ] {
        let e = decode(text, &Type::Duration, &ts).expect_err(text);
        assert!(e.message().contains("out of range"), "{e}");
    }
}
