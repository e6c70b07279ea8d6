//! Generators shared by the property tests: random Flow types (with their
//! declarations registered in a `TypeSet`), random values of a given type,
//! random JSON trees, and deterministic re-spellings and corruptions of a
//! JSON text.
//!
//! Every value generated here keeps `Value`'s invariants (value.rs): Decimals
//! normalized, sets sorted and free of duplicates, dicts sorted by key with
//! unique keys, records holding Some(v) as v and leaving None fields out.

// Each test crate that includes this module uses a different part of it.
#![allow(dead_code)]

use bigdecimal::BigDecimal;
use flow_abi::{Body, Ctor, Decl, Duration, Field, Instant, Type, TypeSet, Value};
use num_bigint::BigInt;
use proptest::prelude::*;
use std::str::FromStr;
use std::sync::Arc;

/// The shape of a type before its declarations are registered. Records and
/// enums are spelled inline here and become `Decl`s in [`Shape::build`].
#[derive(Debug, Clone)]
pub enum Shape {
    Unit,
    Bool,
    Int,
    Decimal,
    Text,
    Bytes,
    Instant,
    Duration,
    Json,
    List(Box<Shape>),
    Set(Box<Shape>),
    Option(Box<Shape>),
    Tuple(Vec<Shape>),
    TextDict(Box<Shape>),
    IntDict(Box<Shape>),
    /// Fields in declaration order, names unique.
    Record(Vec<(String, Shape)>),
    /// Constructors in declaration order, names unique.
    Enum(Vec<(String, Option<Shape>)>),
    /// The recursive record `Tree {label: Int, kids: List<Tree>, next:
    /// Option<Tree>}`, declared once per type set.
    Tree,
}

impl Shape {
    /// Registers the declarations the shape spells and returns its type.
    pub fn build(&self) -> (TypeSet, Type) {
        let mut b = Builder {
            types: TypeSet::new(),
            next: 0,
            tree: None,
        };
        let ty = b.ty(self);
        (b.types, ty)
    }
}

struct Builder {
    types: TypeSet,
    next: usize,
    tree: Option<Type>,
}

impl Builder {
    fn ty(&mut self, s: &Shape) -> Type {
        match s {
            Shape::Unit => Type::Unit,
            Shape::Bool => Type::Bool,
            Shape::Int => Type::Int,
            Shape::Decimal => Type::Decimal,
            Shape::Text => Type::Text,
            Shape::Bytes => Type::Bytes,
            Shape::Instant => Type::Instant,
            Shape::Duration => Type::Duration,
            Shape::Json => Type::Json,
            Shape::List(t) => Type::List(Box::new(self.ty(t))),
            Shape::Set(t) => Type::Set(Box::new(self.ty(t))),
            Shape::Option(t) => Type::Option(Box::new(self.ty(t))),
            Shape::Tuple(ts) => Type::Tuple(ts.iter().map(|t| self.ty(t)).collect()),
            Shape::TextDict(t) => Type::Dict(Box::new(Type::Text), Box::new(self.ty(t))),
            Shape::IntDict(t) => Type::Dict(Box::new(Type::Int), Box::new(self.ty(t))),
            Shape::Record(fields) => {
                let fields = fields
                    .iter()
                    .map(|(name, t)| Field {
                        name: name.clone(),
                        ty: self.ty(t),
                        doc: None,
                    })
                    .collect();
                self.declare("Rec", Body::Record(fields))
            }
            Shape::Enum(ctors) => {
                let ctors = ctors
                    .iter()
                    .map(|(name, p)| Ctor {
                        name: name.clone(),
                        doc: None,
                        payload: p.as_ref().map(|t| self.ty(t)),
                    })
                    .collect();
                self.declare("Enum", Body::Enum(ctors))
            }
            Shape::Tree => {
                if let Some(t) = &self.tree {
                    return t.clone();
                }
                let id = self.types.reserve("test.Tree", "Tree").unwrap();
                let tree = Type::Named(id);
                self.types.define(
                    id,
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
                self.tree = Some(tree.clone());
                tree
            }
        }
    }

    fn declare(&mut self, kind: &str, body: Body) -> Type {
        self.next += 1;
        let name = format!("{kind}{}", self.next);
        let id = self
            .types
            .add(Decl {
                identity: format!("test.{name}"),
                name,
                doc: None,
                body,
            })
            .unwrap();
        Type::Named(id)
    }
}

/// Record field names: plain, empty, and ones that need escaping or sort
/// differently by code point than by UTF-16 (ENC-12).
pub fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z][a-z0-9_]{0,5}",
        1 => Just(String::new()),
        1 => Just("\u{E000}".to_string()),
        1 => Just("\u{1F600}".to_string()),
        1 => Just("a\"b\\c\n".to_string()),
        1 => Just("Some".to_string()),
        1 => text(),
    ]
}

/// Constructor names, including `None` and `Some`, which an enum other than
/// Option may use freely.
pub fn ctor_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[A-Z][a-z]{0,5}",
        1 => Just("None".to_string()),
        1 => Just("Some".to_string()),
        1 => Just("é\u{7f}".to_string()),
    ]
}

fn dedup_names<T>(items: Vec<(String, T)>) -> Vec<(String, T)> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .into_iter()
        .filter(|(n, _)| seen.insert(n.clone()))
        .collect()
}

/// A random type shape: every primitive, every compound, declared records
/// (often with Option fields) and enums (with and without payloads), and the
/// recursive `Tree`.
pub fn shape() -> impl Strategy<Value = Shape> {
    let leaf = prop_oneof![
        1 => Just(Shape::Unit),
        1 => Just(Shape::Bool),
        3 => Just(Shape::Int),
        3 => Just(Shape::Decimal),
        3 => Just(Shape::Text),
        1 => Just(Shape::Bytes),
        2 => Just(Shape::Instant),
        2 => Just(Shape::Duration),
        2 => Just(Shape::Json),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            2 => inner.clone().prop_map(|t| Shape::List(Box::new(t))),
            2 => inner.clone().prop_map(|t| Shape::Set(Box::new(t))),
            2 => inner.clone().prop_map(|t| Shape::Option(Box::new(t))),
            2 => proptest::collection::vec(inner.clone(), 2..4).prop_map(Shape::Tuple),
            1 => inner.clone().prop_map(|t| Shape::TextDict(Box::new(t))),
            1 => inner.clone().prop_map(|t| Shape::IntDict(Box::new(t))),
            3 => proptest::collection::vec((field_name(), any::<bool>(), inner.clone()), 0..5)
                .prop_map(|fs| {
                    let fs = fs
                        .into_iter()
                        .map(|(n, opt, t)| {
                            (n, if opt { Shape::Option(Box::new(t)) } else { t })
                        })
                        .collect();
                    Shape::Record(dedup_names(fs))
                }),
            2 => proptest::collection::vec(
                (ctor_name(), proptest::option::of(inner.clone())),
                1..5
            )
            .prop_map(|cs| Shape::Enum(dedup_names(cs))),
            1 => Just(Shape::Tree),
        ]
    })
}

/// A random type with its type set.
pub fn typed() -> impl Strategy<Value = (Arc<TypeSet>, Type)> {
    shape().prop_map(|s| {
        let (ts, ty) = s.build();
        (Arc::new(ts), ty)
    })
}

/// A random type, its type set, and a value of it.
pub fn typed_value() -> impl Strategy<Value = (Arc<TypeSet>, Type, Value)> {
    typed().prop_flat_map(|(ts, ty)| {
        let v = value(ts.clone(), &ty, 3);
        (Just(ts), Just(ty), v)
    })
}

/// A random type, its type set, and two values of it.
pub fn typed_pair() -> impl Strategy<Value = (Arc<TypeSet>, Type, Value, Value)> {
    typed().prop_flat_map(|(ts, ty)| {
        let a = value(ts.clone(), &ty, 3);
        let b = value(ts.clone(), &ty, 3);
        (Just(ts), Just(ty), a, b)
    })
}

/// Characters a text is made of: anything, with the ones the canonical
/// writer treats specially (ENC-13) weighted up.
pub fn text_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range(' ', '~'),
        2 => any::<char>(),
        3 => proptest::sample::select(vec![
            '"', '\\', '/', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1}', '\u{1f}',
            '\u{7f}', '\u{80}', '\u{2028}', '\u{2029}', 'é', '\u{E000}', '\u{FEFF}',
            '\u{FFFF}', '😀', '\u{10FFFF}', '\u{D7FF}',
        ]),
    ]
}

/// A short random text.
pub fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(text_char(), 0..16).prop_map(String::from_iter)
}

/// An Int: small, i64-sized, or up to 300 digits, either sign.
pub fn big_int() -> impl Strategy<Value = BigInt> {
    prop_oneof![
        3 => (-20i64..20).prop_map(BigInt::from),
        3 => any::<i64>().prop_map(BigInt::from),
        1 => Just(BigInt::from(i64::MIN) - 1),
        1 => Just(BigInt::from(u64::MAX) + 1),
        2 => (any::<bool>(), "[1-9][0-9]{0,299}").prop_map(|(neg, d)| {
            let v = BigInt::from_str(&d).unwrap();
            if neg { -v } else { v }
        }),
    ]
}

/// A normalized Decimal: random digits and scales of either sign, zero
/// included.
pub fn decimal() -> impl Strategy<Value = BigDecimal> {
    let coefficient = prop_oneof![
        3 => (-1000i64..1000).prop_map(BigInt::from),
        2 => any::<i64>().prop_map(BigInt::from),
        1 => (any::<bool>(), "[1-9][0-9]{0,120}").prop_map(|(neg, d)| {
            let v = BigInt::from_str(&d).unwrap();
            if neg { -v } else { v }
        }),
    ];
    (coefficient, -40i64..=60).prop_map(|(c, scale)| BigDecimal::new(c, scale).normalized())
}

const NANOS_PER_SEC: i128 = 1_000_000_000;
const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SEC;

fn unix_day(year: i32, month: time::Month, day: u8) -> i128 {
    i128::from(
        time::Date::from_calendar_date(year, month, day)
            .unwrap()
            .to_julian_day(),
    ) - 2_440_588
}

/// The fraction of a second: none, milli, micro or nano precision (ENC-16:
/// the fewest exact digits).
fn sub_second() -> impl Strategy<Value = i128> {
    prop_oneof![
        3 => Just(0i128),
        1 => (0i128..1000).prop_map(|m| m * 1_000_000),
        1 => (0i128..1_000_000).prop_map(|u| u * 1000),
        2 => 0i128..NANOS_PER_SEC,
    ]
}

/// An Instant anywhere in years -999999..=999999, with days near the
/// signed-year boundaries (0000, 9999/10000, the ends of the range) weighted
/// up.
pub fn instant() -> impl Strategy<Value = Instant> {
    use time::Month::{December, January};
    let min = unix_day(-999_999, January, 1);
    let max = unix_day(999_999, December, 31);
    let y0 = unix_day(0, January, 1);
    let y10k = unix_day(10_000, January, 1);
    let y1970 = 0i128;
    let near = |d: i128| (d - 400)..(d + 400);
    let day = prop_oneof![
        3 => min..=max,
        2 => near(y1970),
        2 => -30_000i128..30_000,
        1 => near(y0),
        1 => near(y10k),
        1 => min..(min + 400),
        1 => (max - 400)..=max,
    ];
    (day, 0i128..86_400, sub_second()).prop_map(|(d, s, f)| {
        Instant::from_unix_nanos(d * NANOS_PER_DAY + s * NANOS_PER_SEC + f).unwrap()
    })
}

/// A Duration of either sign up to ±10^18 seconds (the reader's bound).
pub fn duration() -> impl Strategy<Value = Duration> {
    let secs = prop_oneof![
        3 => 0i128..100_000,
        1 => 0i128..1_000_000_000_000_000_000,
    ];
    (any::<bool>(), secs, sub_second()).prop_map(|(neg, s, f)| {
        let n = s * NANOS_PER_SEC + f;
        Duration::from_nanos(if neg { -n } else { n })
    })
}

/// A JSON tree whose numbers are spelled as text.
#[derive(Debug, Clone)]
pub enum JTree {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<JTree>),
    Obj(Vec<(String, JTree)>),
}

/// A JSON number token within the limits, in any legal spelling
/// (exponents, leading `-0`, trailing zeros).
pub fn number_token() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,40})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,2})?"
}

pub fn jtree() -> impl Strategy<Value = JTree> {
    let leaf = prop_oneof![
        1 => Just(JTree::Null),
        1 => any::<bool>().prop_map(JTree::Bool),
        3 => number_token().prop_map(JTree::Num),
        3 => text().prop_map(JTree::Str),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(JTree::Arr),
            proptest::collection::vec((text(), inner), 0..5)
                .prop_map(|es| JTree::Obj(dedup_names(es))),
        ]
    })
}

impl JTree {
    pub fn write(&self, out: &mut String) {
        match self {
            JTree::Null => out.push_str("null"),
            JTree::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            JTree::Num(n) => out.push_str(n),
            JTree::Str(s) => flow_abi::json::write_str(s, out),
            JTree::Arr(items) => {
                out.push_str("[ ");
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" ,\n");
                    }
                    v.write(out);
                }
                out.push(']');
            }
            JTree::Obj(entries) => {
                out.push_str("{\t");
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    flow_abi::json::write_str(k, out);
                    out.push_str(" : ");
                    v.write(out);
                }
                out.push_str("\r\n}");
            }
        }
    }
}

/// A `json.Value` read by the strict reader from generated (non-canonical)
/// text, so its numbers are canonical.
pub fn json_value() -> impl Strategy<Value = serde_json::Value> {
    jtree().prop_map(|t| {
        let mut s = String::new();
        t.write(&mut s);
        flow_abi::json::parse(&s).unwrap_or_else(|e| panic!("generated JSON {s:?}: {e}"))
    })
}

/// A value of `ty`. `depth` bounds the recursion through recursive
/// declarations: at zero, `Tree` lists are empty and Option fields absent.
pub fn value(ts: Arc<TypeSet>, ty: &Type, depth: u32) -> BoxedStrategy<Value> {
    match ty {
        Type::Unit => Just(Value::Unit).boxed(),
        Type::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Type::Int => big_int().prop_map(Value::Int).boxed(),
        Type::Decimal => decimal().prop_map(Value::decimal).boxed(),
        Type::Text => text().prop_map(Value::Text).boxed(),
        Type::Bytes => proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(Value::Bytes)
            .boxed(),
        Type::Instant => instant().prop_map(Value::Instant).boxed(),
        Type::Duration => duration().prop_map(Value::Duration).boxed(),
        Type::Json => json_value().prop_map(Value::Json).boxed(),
        Type::Never => panic!("Never has no values"),
        Type::Refined(t, _) => value(ts, t, depth),
        // Depth only falls inside `Tree`, whose recursion goes through a
        // list and an Option field: at zero both are empty, and the element
        // strategy is never built (strategies are built eagerly).
        Type::List(_) if depth == 0 => Just(Value::List(Vec::new())).boxed(),
        Type::List(t) => proptest::collection::vec(value(ts, t, depth), 0..4)
            .prop_map(Value::List)
            .boxed(),
        Type::Set(t) => proptest::collection::vec(value(ts, t, depth), 0..5)
            .prop_map(|mut items| {
                items.sort();
                items.dedup();
                Value::Set(items)
            })
            .boxed(),
        Type::Option(t) => proptest::option::of(value(ts, t, depth))
            .prop_map(|o| Value::Option(o.map(Box::new)))
            .boxed(),
        Type::Tuple(parts) => parts
            .iter()
            .map(|t| value(ts.clone(), t, depth))
            .collect::<Vec<_>>()
            .prop_map(Value::Tuple)
            .boxed(),
        Type::Dict(k, v) if **k == Type::Text => {
            proptest::collection::btree_map(text(), value(ts, v, depth), 0..4)
                .prop_map(Value::TextDict)
                .boxed()
        }
        Type::Dict(k, v) => {
            proptest::collection::vec((value(ts.clone(), k, depth), value(ts, v, depth)), 0..4)
                .prop_map(|mut pairs| {
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                    pairs.dedup_by(|a, b| a.0 == b.0);
                    Value::Dict(pairs)
                })
                .boxed()
        }
        Type::Named(id) => {
            let decl = ts.get(*id).clone();
            let recursive = decl.identity == "test.Tree";
            let depth = if recursive {
                depth.saturating_sub(1)
            } else {
                depth
            };
            match decl.body {
                Body::Record(fields) => {
                    let parts: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
                        .into_iter()
                        .map(|f| {
                            let name = f.name.clone();
                            match &f.ty {
                                // An Option field: absent for None, the bare
                                // value for Some(v) (ENC-3).
                                Type::Option(inner) => {
                                    if recursive && depth == 0 {
                                        Just(None).boxed()
                                    } else {
                                        proptest::option::of(value(ts.clone(), inner, depth))
                                            .prop_map(move |o| o.map(|v| (name.clone(), v)))
                                            .boxed()
                                    }
                                }
                                t => value(ts.clone(), t, depth)
                                    .prop_map(move |v| Some((name.clone(), v)))
                                    .boxed(),
                            }
                        })
                        .collect();
                    parts
                        .prop_map(|fs| Value::Record(fs.into_iter().flatten().collect()))
                        .boxed()
                }
                Body::Enum(ctors) => {
                    let choices: Vec<BoxedStrategy<Value>> = ctors
                        .into_iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let index = u32::try_from(i).unwrap();
                            let name = c.name.clone();
                            match &c.payload {
                                None => Just(Value::Enum {
                                    index,
                                    name,
                                    payload: None,
                                })
                                .boxed(),
                                Some(p) => value(ts.clone(), p, depth)
                                    .prop_map(move |v| Value::Enum {
                                        index,
                                        name: name.clone(),
                                        payload: Some(Box::new(v)),
                                    })
                                    .boxed(),
                            }
                        })
                        .collect();
                    proptest::strategy::Union::new(choices).boxed()
                }
            }
        }
    }
}

/// A small deterministic generator (Knuth's MMIX LCG) driving re-spellings
/// and corruptions from one proptest-chosen seed.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Writes `v` as a different but equivalent JSON text: white space between
/// tokens, object members in another order, characters written as `\u`
/// escapes (upper or lower hex, surrogate pairs beyond the BMP) or `\/`, and
/// numbers in other spellings of the same value (`1.5` as `15e-1`, `1.50`,
/// `0.15E+1`). Every decoder must read such a text as the same value
/// (DEC-1, GAP-DEC-1, GAP-ENC-1: either hex case).
pub fn respell(v: &serde_json::Value, rng: &mut Lcg, out: &mut String) {
    ws(rng, out);
    match v {
        serde_json::Value::Null => out.push_str("null"),
        serde_json::Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        serde_json::Value::Number(n) => respell_number(n.as_str(), rng, out),
        serde_json::Value::String(s) => respell_str(s, rng, out),
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    ws(rng, out);
                    out.push(',');
                }
                respell(item, rng, out);
                ws(rng, out);
            }
            ws(rng, out);
            out.push(']');
        }
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            // Fisher-Yates with the case's generator.
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                respell_str(k, rng, out);
                ws(rng, out);
                out.push(':');
                respell(item, rng, out);
                ws(rng, out);
            }
            ws(rng, out);
            out.push('}');
        }
    }
    ws(rng, out);
}

fn ws(rng: &mut Lcg, out: &mut String) {
    if rng.one_in(4) {
        for _ in 0..=rng.below(2) {
            out.push([' ', '\t', '\n', '\r'][rng.below(4)]);
        }
    }
}

fn respell_str(s: &str, rng: &mut Lcg, out: &mut String) {
    const HEX_LO: &[u8; 16] = b"0123456789abcdef";
    const HEX_UP: &[u8; 16] = b"0123456789ABCDEF";
    out.push('"');
    for c in s.chars() {
        let escape = rng.one_in(5) || c < ' ';
        if c == '"' || c == '\\' {
            if escape {
                push_u(c, rng, out);
            } else {
                out.push('\\');
                out.push(c);
            }
        } else if c == '/' && rng.one_in(2) {
            out.push_str("\\/");
        } else if escape {
            match c {
                '\n' if rng.one_in(2) => out.push_str("\\n"),
                '\t' if rng.one_in(2) => out.push_str("\\t"),
                _ => push_u(c, rng, out),
            }
        } else {
            out.push(c);
        }
    }
    out.push('"');

    fn push_u(c: char, rng: &mut Lcg, out: &mut String) {
        let hex = if rng.one_in(2) { HEX_LO } else { HEX_UP };
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            out.push_str("\\u");
            for shift in [12, 8, 4, 0] {
                out.push(char::from(hex[usize::from((*u >> shift) & 0xf)]));
            }
        }
    }
}

/// Writes the canonical number `n` in another spelling of the same value.
fn respell_number(n: &str, rng: &mut Lcg, out: &mut String) {
    let (neg, body) = match n.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, n),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    // value = digits × 10^exp
    let digits = format!("{int}{frac}");
    let exp = -(frac.len() as i64);
    match rng.below(4) {
        0 => out.push_str(n),
        1 => {
            // Trailing zeros after a point (`2` as `2.00`).
            out.push_str(n);
            if frac.is_empty() {
                out.push('.');
            }
            for _ in 0..=rng.below(3) {
                out.push('0');
            }
        }
        _ => {
            // Scientific notation: d.ddd × 10^k, or all digits × 10^exp,
            // with an extra zero or two of padding.
            if neg || (n == "0" && rng.one_in(2)) {
                out.push('-');
            }
            let pad = rng.below(3);
            let digits = digits.trim_start_matches('0');
            let digits = if digits.is_empty() { "0" } else { digits };
            let scientific = rng.one_in(2) && digits.len() > 1;
            let (mantissa, mut e) = if scientific {
                (
                    format!("{}.{}", &digits[..1], &digits[1..]),
                    exp + digits.len() as i64 - 1,
                )
            } else {
                (digits.to_string(), exp)
            };
            out.push_str(&mantissa);
            if pad > 0 {
                if !mantissa.contains('.') {
                    out.push('.');
                }
                out.push_str(&"0".repeat(pad));
            }
            if e != 0 || rng.one_in(2) {
                out.push(if rng.one_in(2) { 'e' } else { 'E' });
                if e >= 0 && rng.one_in(2) {
                    out.push('+');
                }
                if rng.one_in(3) {
                    // Leading zeros in an exponent are legal.
                    if e < 0 {
                        out.push('-');
                        e = -e;
                    }
                    out.push('0');
                }
                out.push_str(&e.to_string());
            }
        }
    }
}

/// Corrupts a text with `count` random edits (deletions, insertions of
/// JSON-significant characters, replacements, swaps, truncation,
/// duplication), keeping it valid UTF-8.
pub fn corrupt(text: &str, rng: &mut Lcg, count: usize) -> String {
    const PALETTE: &[&str] = &[
        "\"",
        "\\",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "0",
        "1",
        "-",
        "+",
        "e",
        "E",
        ".",
        " ",
        "\n",
        "u",
        "\\u",
        "\\ud800",
        "\\udc00",
        "n",
        "null",
        "true",
        "x",
        "\u{0}",
        "é",
        "😀",
        "9",
        "1e999999999",
        "-0",
        "\"None\"",
        "{\"Some\":",
        "=",
        "T",
        "Z",
        "PT",
        "S",
        "99999999999999999999",
        ".5",
        "00",
        "\u{FEFF}",
    ];
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..count {
        let len = chars.len();
        let at = if len == 0 { 0 } else { rng.below(len + 1) };
        match rng.below(7) {
            0 if len > 0 => {
                let end = (at + 1 + rng.below(3)).min(len);
                chars.drain(at.min(len - 1)..end);
            }
            1 | 2 => {
                let s = PALETTE[rng.below(PALETTE.len())];
                chars.splice(at..at, s.chars());
            }
            3 if len > 0 => {
                let s = PALETTE[rng.below(PALETTE.len())];
                let at = at.min(len - 1);
                chars.splice(at..=at, s.chars());
            }
            4 if len > 1 => {
                let at = at.min(len - 2);
                chars.swap(at, at + 1);
            }
            5 => chars.truncate(at),
            6 if len > 0 => {
                let start = at.min(len - 1);
                let end = (start + 1 + rng.below(8)).min(len);
                let piece: Vec<char> = chars[start..end].to_vec();
                chars.splice(end..end, piece);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}
