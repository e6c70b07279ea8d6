//! The facts and runs the cases (and backends' own tests) build.

use super::*;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh run id, increasing within a process.
pub fn new_run_id() -> RunId {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id().to_be_bytes();
    RunId::from_parts(
        1_700_000_000_000 + i,
        [
            pid[0],
            pid[1],
            pid[2],
            pid[3],
            0,
            0,
            (i >> 16) as u8,
            (i >> 8) as u8,
            i as u8,
            7,
        ],
    )
}

/// A Start fact with one source, and that source.
pub fn start_fact(run: &RunId, input: Value) -> (Fact, Vec<SourceText>) {
    let text = format!("{{\"id\":\"demo\",\"nodes\":[],\"note\":\"{}\"}}", run);
    let (hash, length) = source_ref(&text);
    let start = Fact::Start {
        n: 1,
        run: run.clone(),
        data: "1.0".into(),
        entry: Entry {
            module: "demo.json".into(),
            function: "main".into(),
        },
        program: "sha256:00".into(),
        sources: vec![Source {
            module: "demo.json".into(),
            hash,
            length,
        }],
        input,
        parent: None,
        outer: None,
    };
    (
        start,
        vec![SourceText {
            module: "demo.json".into(),
            text,
        }],
    )
}

/// A Start whose root source (module `module`) is `text`: the run query's
/// tests give it a FlowSpec document with an id and search attributes.
pub fn start_with_source(
    run: &RunId,
    module: &str,
    function: &str,
    text: String,
    input: Value,
) -> (Fact, Vec<SourceText>) {
    let (hash, length) = source_ref(&text);
    let start = Fact::Start {
        n: 1,
        run: run.clone(),
        data: "1.0".into(),
        entry: Entry {
            module: module.into(),
            function: function.into(),
        },
        program: "sha256:00".into(),
        sources: vec![Source {
            module: module.into(),
            hash,
            length,
        }],
        input,
        parent: None,
        outer: None,
    };
    (
        start,
        vec![SourceText {
            module: module.into(),
            text,
        }],
    )
}

/// Call `k` of the root task, `c1:root#<k>`. The suite counts calls from
/// 1; a 0 here is a mistake in the suite, not in a backend.
pub fn root_call(k: u64) -> CallId {
    CallId::new("root", k).expect("the suite counts a task's calls from 1")
}

pub fn call_fact(n: u64, k: u64, args: Value) -> Fact {
    Fact::Call {
        n,
        call: root_call(k),
        task: "root".into(),
        node: "step".into(),
        tool: "demo.json#tool".into(),
        fingerprint: "sha256:11".into(),
        args,
    }
}

pub fn reply_fact(n: u64, k: u64, v: Value) -> Fact {
    Fact::Reply {
        n,
        call: root_call(k),
        outcome: Outcome::Ok(v),
    }
}

pub fn checkpoint_fact(n: u64, state: Value) -> Fact {
    Fact::Checkpoint {
        n,
        task: "root".into(),
        node: "step".into(),
        state,
    }
}

pub fn end_fact(n: u64, output: Value) -> Fact {
    Fact::End {
        n,
        ending: FactEnding::Completed {
            exit: "success".into(),
            output,
        },
    }
}

/// Creates a run and appends `steps` Call/Reply/Checkpoint rounds (no End).
pub fn seed_run<B: Backend + ?Sized>(store: &B, steps: u64) -> Result<(RunId, u64), String> {
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "hello"}));
    store
        .create_run(start.clone(), &sources, Vec::new())
        .map_err(e)?;
    let mut n = 1;
    for k in 1..=steps {
        store
            .append(&run, call_fact(n + 1, k, json!({"k": k})))
            .map_err(e)?;
        store
            .append(
                &run,
                reply_fact(n + 2, k, json!({"text": format!("answer {k}")})),
            )
            .map_err(e)?;
        store
            .append(&run, checkpoint_fact(n + 3, json!({"k": k})))
            .map_err(e)?;
        n += 3;
    }
    Ok((run, n))
}
