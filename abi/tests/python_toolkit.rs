//! The Python toolkit's codec (`toolkits/python/flowd_toolkit`) against
//! this crate's, on generated types and values (issue 15, part 2): the same
//! canonical text, and the same refusals.
//!
//! Each case is a random type (arb's generators) with a value of it. The
//! case goes to one `python3 toolkits/python/tests/crosscheck.py` process as
//! a JSON line: the type as `flow tools` terms, the value's canonical text,
//! a re-spelling of it, and corrupted copies. Python decodes each text and
//! writes it back; for every text it must accept exactly what flow-abi
//! accepts, and write the same canonical text (ENC-10, ENC-18, DEC-1,
//! DEC-6, TKT-2, TKT-3). Python also builds values of the type from its own
//! objects (Decimals with trailing zeros, aware datetimes, timedeltas, sets
//! in any order, records as dicts or dataclasses) and encodes them: flow-abi
//! must decode each, and re-encode it to the same bytes.

mod arb;

use arb::Lcg;
use flow_abi::signature::{term, types_document};
use flow_abi::{Type, TypeSet, decode};
use proptest::prelude::*;
use serde_json::{Value as Json, json};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

struct Python {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Python process for every case: starting the interpreter per case
/// would cost more than the cases.
fn python() -> &'static Mutex<Python> {
    static PY: OnceLock<Mutex<Python>> = OnceLock::new();
    PY.get_or_init(|| {
        let kit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../toolkits/python");
        let mut child = Command::new(std::env::var("FLOW_PYTHON").unwrap_or("python3".into()))
            .arg(kit.join("tests/crosscheck.py"))
            .env("PYTHONPATH", &kit)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (the Python toolkit's cross-check needs it)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Python {
            child,
            stdin,
            stdout,
        })
    })
}

/// Sends one case and reads Python's answer.
fn ask(case: &Json) -> Json {
    let mut py = python().lock().unwrap_or_else(|e| e.into_inner());
    let mut line = serde_json::to_string(case).unwrap();
    line.push('\n');
    py.stdin.write_all(line.as_bytes()).unwrap();
    py.stdin.flush().unwrap();
    let mut answer = String::new();
    let n = py.stdout.read_line(&mut answer).unwrap();
    assert!(
        n > 0,
        "the cross-check process ended (see its stderr above)"
    );
    serde_json::from_str(&answer).unwrap()
}

/// flow-abi's verdict on a text: its canonical re-encoding, or a refusal.
fn rust_verdict(text: &str, ty: &Type, ts: &TypeSet) -> Option<String> {
    decode(text, ty, ts).ok().map(|v| v.canonical())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 500,
        ..ProptestConfig::default()
    })]

    #[test]
    fn python_codec_agrees_with_flow_abi(
        (ts, ty, v) in arb::typed_value(),
        seed in any::<u64>(),
    ) {
        let canonical = v.canonical();
        let mut rng = Lcg::new(seed);
        let mut respelled = String::new();
        arb::respell(&v.to_json(), &mut rng, &mut respelled);
        let mut texts = vec![canonical.clone(), respelled];
        for edits in 1..=4 {
            texts.push(arb::corrupt(&canonical, &mut rng, edits));
        }
        let case = json!({
            "types": types_document(&[&ty], &ts),
            "type": term(&ty, &ts),
            "texts": texts,
            "seed": seed,
        });
        let answer = ask(&case);
        let results = answer["results"].as_array().expect("results");
        prop_assert_eq!(results.len(), texts.len());
        for (text, got) in texts.iter().zip(results) {
            let want = rust_verdict(text, &ty, &ts);
            let got_text = got.get("ok").and_then(Json::as_str);
            match (&want, got_text) {
                (Some(w), Some(g)) => prop_assert_eq!(
                    w.as_str(), g,
                    "same text, different canonical text; type {}\ninput: {}", ty.describe(&ts), text
                ),
                (None, None) => {}
                (Some(w), None) => prop_assert!(
                    false,
                    "Python refused what flow-abi accepts; type {}\ninput: {}\nflow-abi: {}\nPython: {}",
                    ty.describe(&ts), text, w, got["err"]
                ),
                (None, Some(g)) => prop_assert!(
                    false,
                    "Python accepted what flow-abi refuses; type {}\ninput: {}\nPython wrote: {}\nflow-abi: {}",
                    ty.describe(&ts), text, g,
                    decode(text, &ty, &ts).err().map(|e| e.to_string()).unwrap_or_default()
                ),
            }
        }
        // The other direction: values Python built from its own objects.
        let generated = answer["generated"].as_array().expect("generated");
        prop_assert!(!generated.is_empty() || matches!(ty, Type::Never));
        for g in generated {
            if let Some(err) = g.get("error") {
                prop_assert!(false, "Python could not encode its own value of {}: {}", ty.describe(&ts), err);
            }
            let text = g["text"].as_str().expect("text");
            let back = decode(text, &ty, &ts).map_err(|e| {
                TestCaseError::fail(format!(
                    "flow-abi refuses Python's encoding of {} ({}): {e}\n{text}",
                    ty.describe(&ts), g["python"]
                ))
            })?;
            prop_assert_eq!(
                back.canonical(), text,
                "Python's encoding is not canonical; value {}", g["python"]
            );
        }
    }
}
