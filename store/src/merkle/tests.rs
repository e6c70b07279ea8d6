use super::*;
use flow_abi::json::parse;

fn load_from(blobs: &[NewBlob]) -> impl FnMut(&[u8; 32]) -> Result<Value> + '_ {
    move |h| {
        let b = blobs.iter().find(|b| b.hash == *h).unwrap();
        Ok(parse(std::str::from_utf8(&b.body).unwrap()).unwrap())
    }
}

#[test]
fn small_values_stay_inline() {
    let v = parse(r#"{"a":[1,2,3],"b":"x"}"#).unwrap();
    let mut blobs = Vec::new();
    let s = externalize(&v, &mut blobs).unwrap();
    assert!(blobs.is_empty());
    assert_eq!(s.value, v);
    assert_eq!(s.stored_len, canonical(&v).len());
    assert_eq!(s.logical_len, canonical(&v).len());
}

#[test]
fn innermost_first_and_round_trip() {
    let big = "x".repeat(2000);
    let v = parse(&format!(
        r#"{{"outer":{{"inner":"{big}","k":1}},"list":["{big}","{big}",2]}}"#
    ))
    .unwrap();
    let mut blobs = Vec::new();
    let s = externalize(&v, &mut blobs).unwrap();
    // The 2000-byte string is one blob (pushed three times, same hash).
    let distinct: std::collections::HashSet<_> = blobs.iter().map(|b| b.hash).collect();
    assert_eq!(distinct.len(), 1);
    assert!(s.stored_len <= BLOB_THRESHOLD);
    assert_eq!(s.logical_len, canonical(&v).len());
    let back = expand(&s.value, &mut load_from(&blobs)).unwrap();
    assert_eq!(back, v);
}

#[test]
fn whole_value_becomes_a_blob() {
    let items: Vec<String> = (0..300).map(|i| i.to_string()).collect();
    let v = parse(&format!("[{}]", items.join(","))).unwrap();
    let mut blobs = Vec::new();
    let s = externalize(&v, &mut blobs).unwrap();
    assert_eq!(blobs.len(), 1);
    let m = s.value.as_object().unwrap();
    let (h, l) = as_reference(m).unwrap().unwrap();
    assert_eq!(h, blobs[0].hash);
    assert_eq!(l as usize, canonical(&v).len());
    assert_eq!(logical_len(&s.value).unwrap() as usize, canonical(&v).len());
}

#[test]
fn user_blob_keys_are_escaped() {
    let v = parse(r#"{"$blob":"blake3:00","length":3,"$$blob":1,"$x":2}"#).unwrap();
    let mut blobs = Vec::new();
    let s = externalize(&v, &mut blobs).unwrap();
    let m = s.value.as_object().unwrap();
    assert!(as_reference(m).is_none());
    assert!(m.contains_key("$$blob") && m.contains_key("$$$blob") && m.contains_key("$x"));
    let mut refs = Vec::new();
    collect_refs(&s.value, &mut refs).unwrap();
    assert!(refs.is_empty());
    assert_eq!(expand(&s.value, &mut load_from(&blobs)).unwrap(), v);
    assert_eq!(logical_len(&s.value).unwrap() as usize, canonical(&v).len());
}

#[test]
fn verifier_detects_flips_and_lengths() {
    let v = parse(&format!(r#"["{}"]"#, "y".repeat(3000))).unwrap();
    let mut blobs = Vec::new();
    let s = externalize(&v, &mut blobs).unwrap();
    let mut ok = |h: &[u8; 32]| Ok(blobs.iter().find(|b| b.hash == *h).map(|b| b.body.clone()));
    BlobVerifier::default()
        .verify_refs_in(&s.value, &mut ok)
        .unwrap();
    let mut flipped = blobs.clone();
    flipped[0].body[10] ^= 1;
    let mut bad = |h: &[u8; 32]| {
        Ok(flipped
            .iter()
            .find(|b| b.hash == *h)
            .map(|b| b.body.clone()))
    };
    assert!(
        BlobVerifier::default()
            .verify_refs_in(&s.value, &mut bad)
            .is_err()
    );
    let wrong_len = reference(&blobs[0].hash, 5);
    let mut ok2 = |h: &[u8; 32]| Ok(blobs.iter().find(|b| b.hash == *h).map(|b| b.body.clone()));
    assert!(
        BlobVerifier::default()
            .verify_refs_in(&wrong_len, &mut ok2)
            .is_err()
    );
}
