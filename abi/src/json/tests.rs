use super::*;

#[test]
fn canonicalizes() {
    let v = parse(r#"{"b":[1.50,{"d":1,"c":2}],"a":null, "e": "\u00e9\u001F"}"#).unwrap();
    assert_eq!(
        canonical(&v),
        r#"{"a":null,"b":[1.5,{"c":2,"d":1}],"e":"é\u001f"}"#
    );
}

#[test]
fn refuses() {
    for bad in [
        r#"{"a":1,"a":2}"#,
        r#""\ud800""#,
        r#""\udc00x""#,
        "[1,]",
        "{,}",
        "01",
        "NaN",
        "[1] x",
        "\"a\nb\"",
        "1e5000000",
        "",
        "tru",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn depth_limit() {
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(parse(&ok).is_ok());
    let bad = format!("{}{}", "[".repeat(129), "]".repeat(129));
    assert!(parse(&bad).is_err());
}

#[test]
fn canonical_number_check() {
    for (s, c) in [
        ("0", true),
        ("-0", false),
        ("1.5", true),
        ("1.50", false),
        ("10", true),
        ("1e3", false),
        ("0.01", true),
        ("-1.2", true),
        ("00", false),
    ] {
        assert_eq!(is_canonical_number(s), c, "{s}");
    }
}

#[test]
fn word_escape_test_agrees_with_table() {
    // Every byte at every position, among fillers that stress borrows
    // (plain ASCII, 0x80, 0xff, 0x20, 0x21).
    for filler in [b'a', 0x80, 0xff, 0x20, 0x21, b'"' + 1, b'\\' + 1] {
        for b in 0..=255u8 {
            for pos in 0..8 {
                let mut w = [filler; 8];
                w[pos] = b;
                let want = NEEDS_ESCAPE[usize::from(b)] || NEEDS_ESCAPE[usize::from(filler)];
                assert_eq!(
                    any_needs_escape(u64::from_le_bytes(w)),
                    want,
                    "{b:#x} at {pos} among {filler:#x}"
                );
            }
        }
    }
    let mut out = String::new();
    write_str("0123456789abcdef\"0123456789\u{1f}é😀\\", &mut out);
    assert_eq!(out, "\"0123456789abcdef\\\"0123456789\\u001fé😀\\\\\"");
}

#[test]
fn canonical_is_judged_while_reading() {
    for text in [
        r#"{"a":null,"b":[1.5,{"c":2,"d":1}],"e":"é\u001f"}"#,
        r#"{"b":1,"a":2}"#,
        r#"{"a":1, "b":2}"#,
        " 1",
        "1 ",
        "1.50",
        "-0",
        "0",
        "1e3",
        "100",
        "-1.25",
        r#""\/""#,
        r#""\u0041""#,
        r#""\u001F""#,
        r#""\u001f""#,
        r#""\u000a""#,
        r#""\n\t\r\b\f\"\\""#,
        r#""\ud83d\ude00""#,
        "\"😀\u{2028}\u{7f}\"",
        r#"{"":1,"a":{"A":[],"a":[true,false]}}"#,
        r#"{"a":{"z":1,"y":2}}"#,
        r#"{"é":1,"z":2}"#,
        r#"{"z":1,"é":2}"#,
        "[1,2,[3,[]]]",
        "[1,\t2]",
        r#""a plain text longer than eight bytes""#,
        r#""twelve bytes\nthen an escape""#,
        r#""twelve bytes\/then a needless escape""#,
        r#"{"a":1,"b":2,"c":{"x":[1,2.5,-3]}}"#,
        r#"{"a":1,"c":2,"b":3}"#,
        "12345678901234567",
        "-1234567890.123456",
    ] {
        let (v, judged) = parse_checking_canonical(text).unwrap();
        assert_eq!(judged, canonical(&v) == text, "{text}");
        if let Json::Object(m) = &v {
            let (members, judged_too) = parse_object_checking_canonical(text).unwrap();
            assert_eq!(judged_too, judged, "{text}");
            let members: Vec<(String, Json)> = members
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v))
                .collect();
            assert_eq!(members, m.clone().into_iter().collect::<Vec<_>>(), "{text}");
        }
    }
    // A duplicate is refused whether the keys before it were in order
    // or not.
    for dup in [
        r#"{"a":1,"a":1}"#,
        r#"{"a":1,"b":1,"b":2}"#,
        r#"{"b":1,"a":1,"b":2}"#,
        r#"{"b":1,"a":1,"a":2}"#,
    ] {
        assert!(parse_checking_canonical(dup).is_err(), "{dup}");
        assert!(parse_object_checking_canonical(dup).is_err(), "{dup}");
    }
    assert!(parse_object_checking_canonical("[1]").is_err());
}

/// Generated texts (a fixed xorshift seed): keys in any order, spaces,
/// every escape form, numbers canonical or not; the judgement while
/// reading agrees with writing the value again.
#[test]
fn canonical_judgement_agrees_on_generated_texts() {
    struct Gen(u64);
    impl Gen {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.next(xs.len() as u64) as usize]
        }
        fn ws(&mut self, out: &mut String) {
            if self.next(12) == 0 {
                out.push(' ');
            }
        }
        fn value(&mut self, out: &mut String, depth: u32) {
            self.ws(out);
            let atoms = [
                "null", "true", "false", "0", "-0", "1", "1.5", "1.50", "1e2", "-3", "10",
            ];
            let strs = [
                r#""a""#,
                r#""b""#,
                r#""\/""#,
                r#""\u0041""#,
                r#""\u001f""#,
                r#""\u001F""#,
                r#""\n""#,
                r#""\u000a""#,
                r#""é""#,
                r#""\u00e9""#,
                r#""\"\\""#,
                r#""""#,
            ];
            match if depth > 3 {
                self.next(2)
            } else {
                self.next(4)
            } {
                0 => out.push_str(self.pick(&atoms)),
                1 => out.push_str(self.pick(&strs)),
                2 => {
                    out.push('[');
                    for i in 0..self.next(4) {
                        if i > 0 {
                            out.push(',');
                        }
                        self.value(out, depth + 1);
                    }
                    out.push(']');
                }
                _ => {
                    let keys = ["a", "b", "c", "A", "é", "z"];
                    let mut used = Vec::new();
                    out.push('{');
                    for _ in 0..self.next(4) {
                        let k = self.pick(&keys);
                        if used.contains(&k) {
                            continue;
                        }
                        if !used.is_empty() {
                            out.push(',');
                        }
                        used.push(k);
                        self.ws(out);
                        write_str(k, out);
                        out.push(':');
                        self.value(out, depth + 1);
                    }
                    out.push('}');
                }
            }
            self.ws(out);
        }
    }
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut canonical_seen = 0;
    for _ in 0..20_000 {
        let mut text = String::new();
        g.value(&mut text, 0);
        let (v, judged) = parse_checking_canonical(&text).unwrap();
        assert_eq!(judged, canonical(&v) == text, "{text}");
        canonical_seen += usize::from(judged);
    }
    assert!(canonical_seen > 1_000, "{canonical_seen}");
}

#[test]
fn error_paths() {
    let e = parse(r#"{"a":[1,{"b":"\ud800"}]}"#).unwrap_err();
    assert!(e.to_string().starts_with("$.a[1].b: "), "{e}");
}
