//! Arbitrary bytes, read as UTF-8, decoded against a few fixed types and by
//! the untyped strict reader. Nothing may panic (DEC-6, DEC-7); whatever is
//! accepted must be stable under canonical encode/decode (ENC-10, ENC-18).
#![no_main]

use flow_abi::{Body, Ctor, Decl, Field, Type, TypeSet, decode, json};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn types() -> &'static (TypeSet, Vec<Type>) {
    static TYPES: OnceLock<(TypeSet, Vec<Type>)> = OnceLock::new();
    TYPES.get_or_init(|| {
        let mut ts = TypeSet::new();
        let tree_id = ts.reserve("fuzz.Tree", "Tree").expect("fresh type set");
        let tree = Type::Named(tree_id);
        let opt_tree = Type::Option(Box::new(tree.clone()));
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
                    name: "price".into(),
                    ty: Type::Option(Box::new(Type::Decimal)),
                    doc: None,
                },
                Field {
                    name: "kids".into(),
                    ty: Type::List(Box::new(tree.clone())),
                    doc: None,
                },
                Field {
                    name: "next".into(),
                    ty: opt_tree,
                    doc: None,
                },
            ]),
        );
        let event = ts
            .add(Decl {
                identity: "fuzz.Event".into(),
                name: "Event".into(),
                doc: None,
                body: Body::Enum(vec![
                    Ctor {
                        name: "Tick".into(),
                        doc: None,
                        payload: None,
                    },
                    Ctor {
                        name: "At".into(),
                        doc: None,
                        payload: Some(Type::Instant),
                    },
                    Ctor {
                        name: "After".into(),
                        doc: None,
                        payload: Some(Type::Duration),
                    },
                    Ctor {
                        name: "Blob".into(),
                        doc: None,
                        payload: Some(Type::Tuple(vec![Type::Bytes, Type::Text])),
                    },
                ]),
            })
            .expect("fresh identity");
        let b = Box::new;
        let types = vec![
            Type::Int,
            Type::Decimal,
            Type::Json,
            tree,
            Type::List(b(Type::Named(event))),
            Type::Set(b(Type::Decimal)),
            Type::Dict(b(Type::Int), b(Type::Option(b(Type::Text)))),
            Type::Dict(b(Type::Text), b(Type::Json)),
        ];
        (ts, types)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (ts, tys) = types();
    for ty in tys {
        if let Ok(v) = decode(text, ty, ts) {
            let c = v.canonical();
            let again = decode(&c, ty, ts).expect("a canonical text decodes");
            assert_eq!(again, v);
            assert_eq!(again.canonical(), c);
        }
    }
    if let Ok(j) = json::parse(text) {
        let c = json::canonical(&j);
        let again = json::parse(&c).expect("a canonical text parses");
        assert_eq!(json::canonical(&again), c);
    }
});
