//! Generated facts of every kind: the canonical writer's text reads back
//! (strictly) as the same fact, and re-writes to the same bytes.

mod arb;

use flow_abi::fact::{CallId, Ending, Entry, Fact, Outer, Parent, RunId, Source};
use flow_abi::protocol::Outcome;
use proptest::prelude::*;

fn node_id() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,8}"
}

fn task() -> impl Strategy<Value = String> {
    proptest::collection::vec(node_id(), 0..3).prop_map(|branches| {
        let mut t = String::from("root");
        for b in branches {
            t.push('/');
            t.push_str(&b);
        }
        t
    })
}

fn call() -> impl Strategy<Value = CallId> {
    (task(), 1..u64::MAX).prop_map(|(t, k)| CallId::new(&t, k).unwrap())
}

fn run() -> impl Strategy<Value = RunId> {
    (any::<u64>(), any::<[u8; 10]>()).prop_map(|(t, r)| RunId::from_parts(t, r))
}

fn n() -> impl Strategy<Value = u64> {
    1..u64::MAX
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        arb::json_value().prop_map(Outcome::Ok),
        arb::json_value().prop_map(Outcome::Failed),
        arb::text().prop_map(Outcome::NotRun),
        arb::text().prop_map(Outcome::Unknown),
        arb::text().prop_map(Outcome::BadReply),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        (arb::text(), arb::json_value())
            .prop_map(|(exit, output)| Ending::Completed { exit, output }),
        arb::text().prop_map(Ending::Faulted),
    ]
}

fn source() -> impl Strategy<Value = Source> {
    (arb::text(), "[0-9a-f]{64}", any::<u64>()).prop_map(|(module, hex, length)| Source {
        module,
        hash: format!("blake3:{hex}"),
        length,
    })
}

fn start() -> impl Strategy<Value = Fact> {
    (
        (
            run(),
            "1\\.[0-9]{1,3}",
            arb::text(),
            arb::text(),
            arb::text(),
        ),
        proptest::collection::vec(source(), 0..3),
        arb::json_value(),
        proptest::option::of((run(), n()).prop_map(|(run, checkpoint)| Parent { run, checkpoint })),
        proptest::option::of((run(), call()).prop_map(|(run, call)| Outer { run, call })),
    )
        .prop_map(
            |((run, data, module, function, program), sources, input, parent, outer)| Fact::Start {
                n: 1,
                run,
                data,
                entry: Entry { module, function },
                program,
                sources,
                input,
                parent,
                outer,
            },
        )
}

fn fact() -> impl Strategy<Value = Fact> {
    prop_oneof![
        start(),
        (
            n(),
            call(),
            task(),
            node_id(),
            arb::text(),
            arb::text(),
            arb::json_value()
        )
            .prop_map(
                |(n, call, task, node, tool, fingerprint, args)| Fact::Call {
                    n,
                    call,
                    task,
                    node,
                    tool,
                    fingerprint,
                    args
                }
            ),
        (n(), call(), outcome()).prop_map(|(n, call, outcome)| Fact::Reply { n, call, outcome }),
        (n(), call(), arb::text()).prop_map(|(n, call, reason)| Fact::Close { n, call, reason }),
        (n(), task(), node_id(), arb::json_value()).prop_map(|(n, task, node, state)| {
            Fact::Checkpoint {
                n,
                task,
                node,
                state,
            }
        }),
        (n(), ending()).prop_map(|(n, ending)| Fact::End { n, ending }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn written_facts_read_back_the_same(f in fact()) {
        let text = f.to_canonical();
        let back = Fact::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&back, &f);
        prop_assert_eq!(back.to_canonical(), text);
        // The owned reader and writer agree with the borrowing ones.
        prop_assert_eq!(Fact::from_value(f.clone().into_json()).unwrap(), f);
    }

    #[test]
    fn call_ids_read_back_the_same(c in call()) {
        prop_assert_eq!(CallId::parse(c.as_str()).unwrap(), c.clone());
        prop_assert_eq!(CallId::new(c.task(), c.k()).unwrap(), c);
    }
}
