//! Canonical encode and type-directed decode throughput (issue 2,
//! "Benchmark"), beside serde_json on the same documents in the same run.
//!
//! Two documents of about 1 MiB of canonical text each, built
//! deterministically:
//! - `records`: a list of declared records with text, int, decimal, bool,
//!   Option and nested list fields;
//! - `numbers`: a record of one list of Ints and one list of Decimals.
//!
//! For each: `flow_encode` (`Value::canonical`), `flow_decode`
//! (`flow_abi::decode` against the declared type), `serde_to_string`
//! (`serde_json::to_string` of the same document as a `serde_json::Value`)
//! and `serde_from_str` (`serde_json::from_str::<serde_json::Value>`).
//! Targets: decode within 2x of serde's untyped parse, encode within 1.5x of
//! its compact writer. Note that the workspace builds serde_json with
//! `arbitrary_precision`, so serde keeps every number as its text.
//!
//! Run: `cargo bench -p flow-abi` (a few minutes; throughput in MB/s).

use bigdecimal::BigDecimal;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flow_abi::{Body, Decl, Field, Type, TypeSet, Value, decode};
use num_bigint::BigInt;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

/// Size of each document's canonical text.
const TARGET_BYTES: usize = 1 << 20;

/// A fixed-seed linear congruential generator: the documents are the same in
/// every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 16
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn word(&mut self, out: &mut String) {
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qu", "é", "ß", "\"", "\n",
        ];
        for _ in 0..2 + self.below(4) {
            // Mostly plain ASCII, sometimes a character that needs care.
            let i = if self.below(20) == 0 {
                self.below(SYLLABLES.len() as u64)
            } else {
                self.below(10)
            };
            out.push_str(SYLLABLES[i as usize]);
        }
    }

    fn text(&mut self, words: u64) -> String {
        let mut s = String::new();
        for i in 0..words {
            if i > 0 {
                s.push(' ');
            }
            self.word(&mut s);
        }
        s
    }

    /// A decimal such as a price or a measurement: up to 9 integer digits,
    /// 0 to 6 fraction digits, either sign.
    fn decimal(&mut self) -> BigDecimal {
        let digits = 1 + self.below(9);
        let mut m = i64::try_from(self.below(10u64.pow(digits as u32))).unwrap_or(0);
        if self.below(4) == 0 {
            m = -m;
        }
        let scale = i64::try_from(self.below(7)).unwrap_or(0);
        BigDecimal::new(BigInt::from(m), scale).normalized()
    }

    /// An Int of 1 to 19 digits, occasionally a big one of 20 to 40.
    fn int(&mut self) -> BigInt {
        let v = BigInt::from(self.next() >> self.below(48));
        let v = if self.below(50) == 0 {
            v * BigInt::from(self.next()) * BigInt::from(self.next())
        } else {
            v
        };
        if self.below(3) == 0 { -v } else { v }
    }
}

fn field(name: &str, ty: Type) -> Field {
    Field {
        name: name.into(),
        ty,
        doc: None,
    }
}

/// `List<Item>`, `Item {id: Int, name: Text, description: Text, price:
/// Decimal, in_stock: Bool, note: Option<Text>, tags: List<Text>, readings:
/// List<Decimal>, sizes: List<Int>}`.
fn records_doc() -> (TypeSet, Type, Value) {
    let mut ts = TypeSet::new();
    let id = ts
        .add(Decl {
            identity: "bench.Item".into(),
            name: "Item".into(),
            doc: None,
            body: Body::Record(vec![
                field("id", Type::Int),
                field("name", Type::Text),
                field("description", Type::Text),
                field("price", Type::Decimal),
                field("in_stock", Type::Bool),
                field("note", Type::Option(Box::new(Type::Text))),
                field("tags", Type::List(Box::new(Type::Text))),
                field("readings", Type::List(Box::new(Type::Decimal))),
                field("sizes", Type::List(Box::new(Type::Int))),
            ]),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let ty = Type::List(Box::new(Type::Named(id)));
    let mut rng = Lcg(0x5EED_0001);
    let mut items = Vec::new();
    let mut size = 2;
    let mut n = 0u64;
    while size < TARGET_BYTES {
        let mut m = BTreeMap::new();
        m.insert("id".to_string(), Value::Int(BigInt::from(n)));
        m.insert("name".to_string(), Value::Text(rng.text(2)));
        m.insert("description".to_string(), Value::Text(rng.text(8)));
        m.insert("price".to_string(), Value::decimal(rng.decimal()));
        m.insert("in_stock".to_string(), Value::Bool(rng.below(2) == 0));
        if rng.below(3) == 0 {
            m.insert("note".to_string(), Value::Text(rng.text(4)));
        }
        let tags = (0..rng.below(4))
            .map(|_| Value::Text(rng.text(1)))
            .collect();
        m.insert("tags".to_string(), Value::List(tags));
        let readings = (0..rng.below(6))
            .map(|_| Value::decimal(rng.decimal()))
            .collect();
        m.insert("readings".to_string(), Value::List(readings));
        let sizes = (0..rng.below(6)).map(|_| Value::Int(rng.int())).collect();
        m.insert("sizes".to_string(), Value::List(sizes));
        let item = Value::Record(m);
        size += item.canonical().len() + 1;
        items.push(item);
        n += 1;
    }
    (ts, ty, Value::List(items))
}

/// `Numbers {ints: List<Int>, decimals: List<Decimal>}`, half the text each.
fn numbers_doc() -> (TypeSet, Type, Value) {
    let mut ts = TypeSet::new();
    let id = ts
        .add(Decl {
            identity: "bench.Numbers".into(),
            name: "Numbers".into(),
            doc: None,
            body: Body::Record(vec![
                field("ints", Type::List(Box::new(Type::Int))),
                field("decimals", Type::List(Box::new(Type::Decimal))),
            ]),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let mut rng = Lcg(0x5EED_0002);
    let (mut ints, mut decimals) = (Vec::new(), Vec::new());
    let mut size = 0;
    while size < TARGET_BYTES / 2 {
        let v = Value::Int(rng.int());
        size += v.canonical().len() + 1;
        ints.push(v);
    }
    while size < TARGET_BYTES {
        let v = Value::decimal(rng.decimal());
        size += v.canonical().len() + 1;
        decimals.push(v);
    }
    let mut m = BTreeMap::new();
    m.insert("ints".to_string(), Value::List(ints));
    m.insert("decimals".to_string(), Value::List(decimals));
    (ts, Type::Named(id), Value::Record(m))
}

fn codec(c: &mut Criterion) {
    for (name, (ts, ty, value)) in [("records", records_doc()), ("numbers", numbers_doc())] {
        let text = value.canonical();
        // The benchmark is only fair if both sides see the same document.
        let decoded = decode(&text, &ty, &ts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded.canonical(), text);
        let tree: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            serde_json::to_string(&tree).map(|s| s.len()).ok(),
            Some(text.len())
        );

        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::BytesDecimal(text.len() as u64));
        g.bench_function("flow_encode", |b| b.iter(|| black_box(&value).canonical()));
        g.bench_function("serde_to_string", |b| {
            b.iter(|| serde_json::to_string(black_box(&tree)))
        });
        g.bench_function("flow_decode", |b| {
            b.iter(|| decode(black_box(&text), &ty, &ts))
        });
        g.bench_function("serde_from_str", |b| {
            b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&text)))
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = codec
}
criterion_main!(benches);
