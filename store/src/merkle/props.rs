use super::*;
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("$blob".to_string()),
        Just("$$blob".to_string()),
        Just("length".to_string()),
        Just("$ref".to_string()),
        "[a-z$]{0,6}",
    ]
}

pub(crate) fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| Value::Number(Number::from(i))),
        // Short and long strings, with escapes, so some exceed 1 KiB.
        ("[a-z\"\\\\\n]{0,20}", 0usize..1500)
            .prop_map(|(s, n)| Value::String(format!("{s}{}", "é".repeat(n / 2)))),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Storing then loading gives the value back; the declared and
    /// computed logical lengths equal the canonical length; the stored
    /// form is small; every blob verifies.
    #[test]
    fn store_load_round_trip(v in value()) {
        let mut blobs = Vec::new();
        let s = externalize(&v, &mut blobs).unwrap();
        prop_assert!(s.stored_len <= BLOB_THRESHOLD);
        prop_assert_eq!(s.stored_len, canonical(&s.value).len());
        prop_assert_eq!(s.logical_len, canonical(&v).len());
        prop_assert_eq!(logical_len(&s.value).unwrap() as usize, canonical(&v).len());
        let mut load = |h: &[u8; 32]| {
            let b = blobs.iter().find(|b| b.hash == *h).ok_or_else(|| Error::UnknownBlob(hash_text(h)))?;
            flow_abi::json::parse(std::str::from_utf8(&b.body).unwrap_or_default()).map_err(|e| Error::CorruptBlob { hash: hash_text(h), reason: e.to_string() })
        };
        prop_assert_eq!(expand(&s.value, &mut load).unwrap(), v);
        let mut raw = |h: &[u8; 32]| Ok(blobs.iter().find(|b| b.hash == *h).map(|b| b.body.clone()));
        prop_assert!(BlobVerifier::default().verify_refs_in(&s.value, &mut raw).is_ok());
    }

    /// The one-pass writer gives the stored tree's canonical text, its
    /// logical length and the same blobs in the same order, after
    /// whatever `out` held.
    #[test]
    fn written_in_one_pass_as_the_tree_is(v in value()) {
        let mut tree_blobs = Vec::new();
        let s = externalize(&v, &mut tree_blobs).unwrap();
        let mut blobs = Vec::new();
        let before = "{\"args\":";
        let mut out = String::from(before);
        let logical = write_stored(&v, &mut out, &mut blobs).unwrap();
        prop_assert_eq!(&out[before.len()..], canonical(&s.value));
        prop_assert_eq!(logical, s.logical_len);
        let hashes = |b: &[NewBlob]| b.iter().map(|b| (b.hash, b.body.clone())).collect::<Vec<_>>();
        prop_assert_eq!(hashes(&blobs), hashes(&tree_blobs));
    }
}
