//! Property tests of the canonical encoder and the type-directed decoder over
//! random types and random values of them (issue 2, "Tests").
//!
//! Requirements exercised (by requirement ID):
//! - ENC-10: one canonical text per value; re-encoding a decoded canonical
//!   text gives the same bytes.
//! - ENC-11..ENC-17: the canonical rules (checked structurally: no white space
//!   outside strings, keys in code-point order, numbers plain).
//! - ENC-18: equal values ⇔ equal texts.
//! - ENC-3/ENC-4: Option fields left out / Option elsewhere as an enum (the
//!   generators build values that way and the round trip must keep them).
//! - DEC-1/GAP-DEC-1/GAP-ENC-1: decoding is by type, any legal spelling of a
//!   value (white space, key order, escapes, number spelling) reads as the
//!   same value.
//! - DEC-6/DEC-7: whatever the input, decoding ends in a value or a refusal,
//!   never a panic.
//! - PRO-9/PRO-10: a Tool call's line, written straight from the call, is
//!   the canonical text of its message.

mod arb;

use arb::Lcg;
use flow_abi::{Type, TypeSet, Value, decode, protocol};
use proptest::prelude::*;
use std::cmp::Ordering;

/// Checks the surface rules of a canonical text: valid strict JSON, no white
/// space outside strings (ENC-11), object keys strictly ascending by code
/// point (ENC-12), every number already canonical (ENC-14), and the text is
/// its own `json.Value` canonical form (ENC-10).
fn assert_canonical_surface(text: &str) {
    let tree = flow_abi::json::parse(text)
        .unwrap_or_else(|e| panic!("canonical text is not strict JSON: {e}\n{text}"));
    assert_eq!(
        flow_abi::json::canonical(&tree),
        text,
        "not in canonical form"
    );
    // Independently of the writer: strings escape only `"`, `\\` and
    // U+0000..U+001F, with the short forms where one exists and lowercase
    // `\u00xx` otherwise (ENC-13, GAP-ENC-1).
    let mut chars = text.chars();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if !in_str {
            assert!(!c.is_whitespace(), "white space outside a string: {text}");
            in_str = c == '"';
            continue;
        }
        match c {
            '"' => in_str = false,
            '\\' => match chars.next() {
                Some('"' | '\\' | 'b' | 'f' | 'n' | 'r' | 't') => {}
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let code = u32::from_str_radix(&hex, 16).unwrap();
                    assert!(
                        code < 0x20 && ![8, 9, 10, 12, 13].contains(&code),
                        "\\u{hex} has a short form or needs no escape: {text}"
                    );
                    assert_eq!(hex, hex.to_lowercase(), "upper-case hex: {text}");
                }
                other => panic!("escape {other:?} is not canonical: {text}"),
            },
            c => assert!(c >= ' ', "raw control character in a string: {text}"),
        }
    }
}

fn decode_ok(text: &str, ty: &Type, ts: &TypeSet) -> Value {
    decode(text, ty, ts).unwrap_or_else(|e| {
        panic!(
            "canonical text of a {} does not decode: {e}\n{text}",
            ty.describe(ts)
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    /// decode(encode(v), ty) == v, and encode(decode(text)) == text
    /// (ENC-10, ENC-18, DEC-1).
    #[test]
    fn round_trip((ts, ty, v) in arb::typed_value()) {
        let text = v.canonical();
        assert_canonical_surface(&text);
        let back = decode_ok(&text, &ty, &ts);
        prop_assert_eq!(&back, &v, "round trip changed the value; text {}", text);
        prop_assert_eq!(back.canonical(), text);
        // The encoder's view as a json.Value agrees with the text.
        prop_assert_eq!(flow_abi::json::canonical(&v.to_json()), v.canonical());
    }

    /// Decoding is idempotent on its own output: encode ∘ decode is the
    /// identity on canonical texts, and a second pass changes nothing (ENC-10).
    #[test]
    fn encode_decode_idempotent((ts, ty, v) in arb::typed_value()) {
        let t1 = v.canonical();
        let v1 = decode_ok(&t1, &ty, &ts);
        let t2 = v1.canonical();
        let v2 = decode_ok(&t2, &ty, &ts);
        prop_assert_eq!(&t1, &t2);
        prop_assert_eq!(v2.canonical(), t2);
        prop_assert_eq!(v1, v2);
    }

    /// Any other legal spelling of the canonical text (white space, member
    /// order, `\u` escapes in either hex case, `1.5` as `15E-1` or `1.50`)
    /// decodes to the same value and so to the same canonical text
    /// (DEC-1, GAP-DEC-1, GAP-ENC-1, ENC-14, ENC-15).
    #[test]
    fn respelled_text_decodes_to_same_value(
        (ts, ty, v) in arb::typed_value(),
        seed in any::<u64>(),
    ) {
        let text = v.canonical();
        let tree = flow_abi::json::parse(&text).unwrap();
        let mut other = String::new();
        arb::respell(&tree, &mut Lcg::new(seed), &mut other);
        let back = decode(&other, &ty, &ts).unwrap_or_else(|e| {
            panic!("respelled text does not decode as {}: {e}\n{other}\ncanonical: {text}", ty.describe(&ts))
        });
        prop_assert_eq!(&back, &v, "respelled: {}", other);
        prop_assert_eq!(back.canonical(), text);
    }

    /// Injectivity (ENC-18): for two values of one type, v1 == v2 exactly
    /// when their canonical texts are equal. The order agrees with equality
    /// and is antisymmetric.
    #[test]
    fn equal_values_iff_equal_texts((ts, ty, a, b) in arb::typed_pair()) {
        let (ta, tb) = (a.canonical(), b.canonical());
        prop_assert_eq!(a == b, ta == tb, "a={:?}\nb={:?}\nta={}\ntb={}", a, b, ta, tb);
        prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
        prop_assert_eq!(a.cmp(&a), Ordering::Equal);
        // A value is equal to its decoded copy and distinct values stay
        // distinct after the round trip.
        let (da, db) = (decode_ok(&ta, &ty, &ts), decode_ok(&tb, &ty, &ts));
        prop_assert_eq!(da == db, a == b);
        prop_assert_eq!(da.cmp(&db), a.cmp(&b));
    }

    /// A canonical text with random edits decodes to a value or is refused,
    /// never a panic (DEC-6, DEC-7); a value it does decode to is itself
    /// stable under encode/decode (ENC-10).
    #[test]
    fn mutated_text_never_panics(
        (ts, ty, v) in arb::typed_value(),
        seed in any::<u64>(),
        edits in 1usize..6,
    ) {
        let text = v.canonical();
        let bad = arb::corrupt(&text, &mut Lcg::new(seed), edits);
        if let Ok(w) = decode(&bad, &ty, &ts) {
            let t = w.canonical();
            assert_canonical_surface(&t);
            let again = decode_ok(&t, &ty, &ts);
            prop_assert_eq!(again.canonical(), t);
            prop_assert_eq!(again, w);
        }
        // The untyped reader must hold too.
        if let Ok(j) = flow_abi::json::parse(&bad) {
            let t = flow_abi::json::canonical(&j);
            prop_assert_eq!(flow_abi::json::canonical(&flow_abi::json::parse(&t).unwrap()), t);
        }
    }

    /// json.Value from arbitrary (non-canonical) JSON text: its canonical
    /// text is a fixed point and it decodes as the type `json.Value` to
    /// itself (ENC-6, ENC-10).
    #[test]
    fn json_value_canonical_fixed_point(tree in arb::jtree()) {
        let mut text = String::new();
        tree.write(&mut text);
        let j = flow_abi::json::parse(&text).unwrap();
        let c = flow_abi::json::canonical(&j);
        assert_canonical_surface(&c);
        let v = decode_ok(&text, &Type::Json, &TypeSet::new());
        prop_assert_eq!(v.canonical(), c);
    }

    /// PRO-9/PRO-10: a call line written straight from the call (no tree of
    /// its message) is that message's canonical text, byte for byte, for
    /// any ids, args and generic views; and it reads back as the call.
    #[test]
    fn a_call_line_is_its_messages_canonical_text(
        run in arb::text(),
        call in arb::text(),
        tool in arb::text(),
        args in proptest::collection::vec((arb::text(), arb::json_value()), 0..4),
        generic in proptest::option::of((arb::json_value(), arb::json_value())),
    ) {
        // The reader refuses empty ids; any other text is an id.
        let c = protocol::Call {
            run: format!("r{run}"),
            call: format!("c{call}"),
            tool: format!("t{tool}"),
            args: args.into_iter().collect(),
            generic: generic.map(|(schema, types)| protocol::GenericViews { schema, types }),
        };
        let line = protocol::write_call(&c);
        prop_assert_eq!(&line, &protocol::Message::Call(c.clone()).to_line().unwrap());
        assert_canonical_surface(line.strip_suffix('\n').unwrap());
        if c.generic.is_none() {
            prop_assert_eq!(protocol::parse_line(&line).unwrap(), protocol::Message::Call(c));
        }
    }
}

/// ENC-3 and ENC-4 on fixed cases, beside the random ones: a record's None
/// field is left out (never `null`), Some(v) holds v, and an Option anywhere
/// else is `"None"` / `{"Some": v}`.
#[test]
fn option_encodings() {
    use flow_abi::{Body, Decl, Field};
    let mut ts = TypeSet::new();
    let opt_int = Type::Option(Box::new(Type::Int));
    let id = ts
        .add(Decl {
            identity: "test.R".into(),
            name: "R".into(),
            doc: None,
            body: Body::Record(vec![
                Field {
                    name: "a".into(),
                    ty: opt_int.clone(),
                    doc: None,
                },
                Field {
                    name: "b".into(),
                    ty: opt_int.clone(),
                    doc: None,
                },
                Field {
                    name: "c".into(),
                    ty: Type::Option(Box::new(opt_int.clone())),
                    doc: None,
                },
            ]),
        })
        .unwrap();
    let rec = Type::Named(id);
    let v = decode(r#"{"b":1}"#, &rec, &ts).unwrap();
    assert_eq!(v.canonical(), r#"{"b":1}"#);
    // Some(None) of an Option<Option<Int>> field is present, as "None".
    let v = decode(r#"{"c":"None"}"#, &rec, &ts).unwrap();
    assert_eq!(v.canonical(), r#"{"c":"None"}"#);
    assert_ne!(v, decode("{}", &rec, &ts).unwrap());
    // No coercion: null is not None, and {"Some":1} is not a bare field value.
    assert!(decode(r#"{"a":null}"#, &rec, &ts).is_err());
    assert!(decode(r#"{"a":{"Some":1}}"#, &rec, &ts).is_err());
    let list = Type::List(Box::new(opt_int));
    let v = decode(r#"["None",{"Some":1}]"#, &list, &ts).unwrap();
    assert_eq!(v.canonical(), r#"["None",{"Some":1}]"#);
    assert!(decode("[null]", &list, &ts).is_err());
    assert!(decode("[1]", &list, &ts).is_err());
}

/// Generated values really cover the cases the properties are about: an
/// absent Option field, a present one, huge Ints, signed years.
#[test]
fn generators_cover_the_edges() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut absent, mut present, mut huge, mut signed_year, mut astral) =
        (false, false, false, false, false);
    for _ in 0..2000 {
        let (ts, ty, v) = arb::typed_value().new_tree(&mut runner).unwrap().current();
        let text = v.canonical();
        huge |= text.len() > 200 && text.bytes().filter(u8::is_ascii_digit).count() > 200;
        signed_year |= has_signed_year(&text);
        astral |= text.chars().any(|c| u32::from(c) > 0xFFFF);
        if let (Type::Named(id), Value::Record(m)) = (&ty, &v)
            && let flow_abi::Body::Record(fields) = &ts.get(*id).body
        {
            for f in fields.iter().filter(|f| matches!(f.ty, Type::Option(_))) {
                if m.contains_key(&f.name) {
                    present = true;
                } else {
                    absent = true;
                }
            }
        }
    }
    assert!(
        absent && present,
        "Option fields: absent {absent}, present {present}"
    );
    assert!(huge, "no huge number generated");
    assert!(signed_year, "no signed year generated");
    assert!(astral, "no astral character generated");
}

/// Whether `text` holds an Instant with a signed year (`"+10000-…`, `"-0001-…`).
fn has_signed_year(text: &str) -> bool {
    let b = text.as_bytes();
    b.windows(7).any(|w| {
        w[0] == b'"' && matches!(w[1], b'+' | b'-') && w[2..6].iter().all(u8::is_ascii_digit)
    }) && text.contains('T')
        && text.contains('Z')
}
