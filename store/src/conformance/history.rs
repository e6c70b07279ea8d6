//! Conformance cases: Appends, refusals, values, checkpoints and history pages.

use super::*;

/// REQUIREMENTS LIVE-1, RES-4: an accepted fact reads back verified, in order.
pub(super) fn round_trip<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let run = new_run_id();
    let big = "b".repeat(5000);
    let (start, sources) = start_fact(&run, json!({"q": big}));
    let a1 = s
        .create_run(start.clone(), &sources, Vec::new())
        .map_err(e)?;
    ensure!(a1.n == 1, "Start is fact 1");
    let facts = [
        call_fact(2, 1, json!({"prompt": "hi"})),
        reply_fact(3, 1, json!({"text": big})),
        checkpoint_fact(4, json!({"messages": [big]})),
        end_fact(5, json!({"answer": 42})),
    ];
    let mut hashes = vec![a1.hash];
    for f in &facts {
        hashes.push(s.append(&run, f.clone()).map_err(e)?.hash);
    }
    let h = s.read_history(&run).map_err(e)?;
    ensure!(h.facts.len() == 5, "5 facts, got {}", h.facts.len());
    for (i, f) in h.facts.iter().enumerate() {
        ensure!(
            f.n == i as u64 + 1 && f.hash == hashes[i],
            "fact {} number or hash",
            i + 1
        );
    }
    // Logical facts come back exactly (checkpoint state via checkpoint_state).
    ensure!(
        s.expand_fact(&run, &h.facts[0]).map_err(e)?.to_json() == start.to_json(),
        "Start differs"
    );
    for (i, f) in facts.iter().enumerate().filter(|(i, _)| *i != 2) {
        ensure!(
            s.expand_fact(&run, &h.facts[i + 1]).map_err(e)?.to_json() == f.to_json(),
            "fact {} differs",
            i + 2
        );
    }
    ensure!(
        s.checkpoint_state(&run, 4).map_err(e)? == json!({"messages": [big]}),
        "checkpoint state"
    );
    // Queued without waiting: answered once durable, in order, and a
    // refusal answers too.
    let (queued, _) = seed_run(&s, 0).map_err(e)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let t = tx.clone();
    s.append_all_then(
        &queued,
        vec![
            call_fact(2, 1, json!({})).into(),
            reply_fact(3, 1, json!(1)).into(),
        ],
        Box::new(move |r| {
            let _ = t.send(r);
        }),
    );
    let got = rx.recv().map_err(e)?.map_err(e)?;
    ensure!(
        got.iter().map(|a| a.n).collect::<Vec<_>>() == [2, 3]
            && s.run_info(&queued).map_err(e)?.last_fact.n == 3,
        "queued appends {got:?}"
    );
    s.append_all_then(
        &queued,
        vec![call_fact(9, 2, json!({})).into()],
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    ensure!(
        matches!(rx.recv().map_err(e)?, Err(Error::WrongNumber { .. })),
        "a queued refusal"
    );
    let info = s.run_info(&run).map_err(e)?;
    ensure!(
        info.state == RunState::Completed && info.ending == Some(Ending::Completed),
        "state {:?}",
        info.state
    );
    ensure!(
        info.last_fact.n == 5 && info.last_fact.hash == hashes[4],
        "last fact"
    );
    ensure!(
        info.entry.module == "demo.json" && info.program == "sha256:00",
        "entry/program"
    );
    // Sources are blobs (DESIGN §3).
    let (src_hash, _) = source_ref(&sources[0].text);
    ensure!(
        s.blob(&src_hash).map_err(e)? == sources[0].text.as_bytes(),
        "source blob"
    );
    Ok(())
}

/// Issue 42: a run created with its first facts in one commit
/// (`create_run_then`): Start's answer first, then each fact's, the
/// records made with Start at its head and those riding after the facts at
/// the last; a Start refused (its run exists) leaves nothing behind, and
/// the facts that follow it are refused with it.
pub(super) fn create_with_first_facts<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({"q": "x".repeat(3000)}));
    let record = |dir: &str| HostRecord {
        at_ms: Some(7),
        details: HostDetails::ProgramDir {
            program_dir: dir.into(),
        },
    };
    let created = |start: Fact, facts: Vec<Appending>| {
        let (tx, rx) = std::sync::mpsc::channel();
        s.create_run_then(
            &Namespace::default(),
            start,
            &sources,
            vec![record("/at-start")],
            facts,
            vec![record("/after")],
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv().map_err(e)
    };
    let got = created(
        start.clone(),
        vec![
            call_fact(2, 1, json!({"k": 1})).into(),
            reply_fact(3, 1, json!({"big": "y".repeat(3000)})).into(),
        ],
    )?
    .map_err(e)?;
    ensure!(
        got.iter().map(|a| a.n).collect::<Vec<_>>() == [1, 2, 3],
        "answers {got:?}"
    );
    let h = s.read_history(&run).map_err(e)?;
    ensure!(
        h.facts.len() == 3 && h.facts.iter().zip(&got).all(|(f, a)| f.hash == a.hash),
        "history {:?}",
        h.facts.iter().map(|f| f.n).collect::<Vec<_>>()
    );
    let rows = s.host_records(&run).map_err(e)?;
    ensure!(
        rows.iter().map(|r| r.head.n).collect::<Vec<_>>() == [1, 3],
        "records at {:?}",
        rows.iter().map(|r| r.head.n).collect::<Vec<_>>()
    );
    // The records made with the Start, and only those (a fork binds by
    // them, whatever follows in its parent's history).
    let at_start = s.start_records(&run).map_err(e)?;
    ensure!(
        at_start.iter().map(|r| &r.details).collect::<Vec<_>>() == [&record("/at-start").details],
        "start records {at_start:?}"
    );
    // The same run again: refused, and its facts with it; nothing moved.
    let again = created(start, vec![call_fact(4, 2, json!({})).into()])?;
    ensure!(
        matches!(again, Err(Error::RunExists(_))),
        "a second create: {again:?}"
    );
    ensure!(
        s.run_info(&run).map_err(e)?.last_fact.n == 3
            && s.host_records(&run).map_err(e)?.len() == 2,
        "a refused create changed the run"
    );
    // With no facts it is a create alone.
    let alone = new_run_id();
    let (start, sources) = start_fact(&alone, json!({}));
    let (tx, rx) = std::sync::mpsc::channel();
    s.create_run_then(
        &Namespace::default(),
        start,
        &sources,
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let got = rx.recv().map_err(e)?.map_err(e)?;
    ensure!(
        got.len() == 1 && s.run_info(&alone).map_err(e)?.last_fact.n == 1,
        "a create alone {got:?}"
    );
    // More records made with a Start than one page of the read, then
    // records made later: the Start's are read, all of them and no more.
    let many = new_run_id();
    let (start, sources) = start_fact(&many, json!({}));
    let made: Vec<HostRecord> = (0..21).map(|i| record(&format!("/dir{i}"))).collect();
    s.create_run_in(&Namespace::default(), start, &sources, made.clone())
        .map_err(e)?;
    s.append(&many, call_fact(2, 1, json!({}))).map_err(e)?;
    for i in 0..3 {
        s.record_host(&many, record(&format!("/later{i}")))
            .map_err(e)?;
    }
    let at_start = s.start_records(&many).map_err(e)?;
    ensure!(
        at_start.iter().map(|r| &r.details).collect::<Vec<_>>()
            == made.iter().map(|r| &r.details).collect::<Vec<_>>(),
        "start records of a run made with 21: {} read",
        at_start.len()
    );
    Ok(())
}

/// Issue 3 §2: "An append after End, with a wrong n, or to an unknown run is
/// refused with a clear error" (and DESIGN §7: "changes nothing").
pub(super) fn refusals_change_nothing<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 1).map_err(e)?;
    let before = s.read_history(&run).map_err(e)?.facts;
    let unknown = new_run_id();
    ensure!(
        matches!(
            s.append(&unknown, call_fact(2, 1, json!({}))),
            Err(Error::UnknownRun(_))
        ),
        "unknown run"
    );
    ensure!(
        matches!(
            s.append(&run, call_fact(n + 2, 9, json!({}))),
            Err(Error::WrongNumber { .. })
        ),
        "gap"
    );
    ensure!(
        matches!(
            s.append(&run, call_fact(n, 9, json!({}))),
            Err(Error::WrongNumber { .. })
        ),
        "repeat"
    );
    let (start, sources) = start_fact(&run, json!({}));
    let mut late = start.clone();
    late.set_n(n + 1);
    ensure!(
        matches!(s.append(&run, late), Err(Error::InvalidFact(_))),
        "a Start appended later"
    );
    ensure!(
        matches!(
            s.create_run(start.clone(), &sources, Vec::new()),
            Err(Error::RunExists(_))
        ),
        "run exists"
    );
    ensure!(
        matches!(
            s.create_run(start_fact(&new_run_id(), json!({})).0, &[], Vec::new()),
            Err(Error::InvalidFact(_))
        ),
        "missing source"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts == before,
        "refusals changed the history"
    );
    s.append(&run, end_fact(n + 1, json!(null))).map_err(e)?;
    let ended = s.read_history(&run).map_err(e)?.facts;
    ensure!(
        matches!(
            s.append(&run, call_fact(n + 2, 9, json!({}))),
            Err(Error::Ended { .. })
        ),
        "after End"
    );
    ensure!(
        s.read_history(&run).map_err(e)?.facts == ended,
        "append after End changed the history"
    );
    ensure!(
        s.run_info(&run).map_err(e)?.last_fact.n == n + 1,
        "last fact moved"
    );
    Ok(())
}

/// DESIGN §3 values: blobs for values over 1 KiB, shared, user `$blob` keys escaped.
pub(super) fn merkle_values_and_escaping<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let big = json!({"doc": "d".repeat(3000), "n": 1});
    let tricky = json!({"$blob": "blake3:0000000000000000000000000000000000000000000000000000000000000000", "length": 3, "$$blob": "x"});
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = new_run_id();
        let (start, sources) = start_fact(&run, json!({}));
        s.create_run(start.clone(), &sources, Vec::new())
            .map_err(e)?;
        s.append(&run, call_fact(2, 1, big.clone())).map_err(e)?;
        s.append(&run, reply_fact(3, 1, tricky.clone()))
            .map_err(e)?;
        runs.push(run);
    }
    for run in &runs {
        let h = s.read_history(run).map_err(e)?;
        let args = h.facts[1].fact.value().ok_or("a Call has args")?;
        // Innermost first: the 3 KB text becomes the blob, its small parent stays inline.
        ensure!(
            args["doc"].get("$blob").is_some() && args["n"] == json!(1),
            "a 3 KB value is stored as a reference: {args}"
        );
        ensure!(
            args["doc"]["length"] == json!(3002),
            "reference length is the logical length"
        );
        ensure!(
            s.expand(run, args).map_err(e)? == big,
            "big value round trip"
        );
        let stored_reply = h.facts[2].fact.value().ok_or("a Reply has a value")?;
        ensure!(
            stored_reply.get("$blob").is_none(),
            "a user $blob key is escaped"
        );
        ensure!(
            s.expand(run, stored_reply).map_err(e)? == tricky,
            "escaped value round trip"
        );
    }
    let a = s.read_history(&runs[0]).map_err(e)?.facts[1]
        .fact
        .value()
        .cloned();
    let b = s.read_history(&runs[1]).map_err(e)?.facts[1]
        .fact
        .value()
        .cloned();
    ensure!(a == b, "equal values share one blob");
    Ok(())
}

/// DESIGN §3 "Checkpoints": any checkpoint's state reads back whole.
pub(super) fn checkpoint_states<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let run = new_run_id();
    let (start, sources) = start_fact(&run, json!({}));
    s.create_run(start.clone(), &sources, Vec::new())
        .map_err(e)?;
    let mut expected = Vec::new();
    let mut msgs: Vec<Value> = Vec::new();
    for step in 0..60u64 {
        msgs.push(json!(format!(
            "{step}:{}",
            "m".repeat(if step % 3 == 0 { 1500 } else { 40 })
        )));
        let mut state = json!({"messages": msgs, "step": step, "$blob": "user"});
        if step % 7 == 0 {
            state["extra"] = json!({"flag": step});
        }
        if step % 11 == 0 {
            // A rewrite that is not an append.
            msgs.reverse();
            state["messages"] = json!(msgs);
        }
        let n = step + 2;
        s.append(&run, checkpoint_fact(n, state.clone()))
            .map_err(e)?;
        expected.push((n, state));
    }
    for (n, state) in &expected {
        let got = s.checkpoint_state(&run, *n).map_err(e)?;
        ensure!(got == *state, "checkpoint {n} state differs");
    }
    ensure!(
        matches!(s.checkpoint_state(&run, 1), Err(Error::InvalidArgument(_))),
        "Start is not a checkpoint"
    );
    s.read_history(&run).map_err(e)?;
    // The logical history, in one read, holds the same facts: every value
    // loaded, every Checkpoint whole.
    let logical = s.logical_history(&run).map_err(e)?;
    ensure!(logical.len() == 61, "{} logical facts", logical.len());
    ensure!(logical[0] == start, "Start differs");
    for (f, (n, state)) in logical[1..].iter().zip(&expected) {
        ensure!(
            *f == checkpoint_fact(*n, state.clone()),
            "logical checkpoint {n} differs"
        );
    }
    // The walk hands over the same facts in order, and stops when told.
    let mut walked = Vec::new();
    s.walk_logical(&run, &mut |f, _| {
        walked.push(f.clone());
        true
    })
    .map_err(e)?;
    ensure!(
        walked == logical,
        "the walk differs from the logical history"
    );
    let mut seen = 0;
    s.walk_logical(&run, &mut |_, _| {
        seen += 1;
        seen < 3
    })
    .map_err(e)?;
    ensure!(seen == 3, "a walk told to stop at 3 facts saw {seen}");
    Ok(())
}

/// REQUIREMENTS HIST-12..HIST-18, HIST-21: paged, filtered, bounded views.
pub(super) fn history_pages<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 5).map_err(e)?;
    // A call id longer than the 1024 code points a summary keeps: a branch
    // task with a long node id.
    let long_call = format!("c1:root/{}#1", "b".repeat(1100));
    let mut call = call_fact(n + 1, 1, json!({"big": "x".repeat(5000)}));
    if let Fact::Call { call, .. } = &mut call {
        *call = CallId::parse(&long_call).map_err(e)?;
    }
    s.append(&run, call).map_err(e)?;
    let calls = s
        .history_page(
            &run,
            &HistoryQuery {
                kind: Some("Call".into()),
                limit: Some(2),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        calls.page.total == 6 && calls.page.facts_total == n + 1,
        "totals {:?}",
        calls.page
    );
    ensure!(
        calls.facts.iter().map(|f| f.n).collect::<Vec<_>>() == [2, 5],
        "numbers keep positions"
    );
    ensure!(calls.page.next_offset == Some(2), "nextOffset");
    let last = s
        .history_page(
            &run,
            &HistoryQuery {
                kind: Some("Call".into()),
                offset: Some(4),
                limit: Some(2),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        last.page.next_offset.is_none(),
        "nextOffset null at the end"
    );
    let big = &last.facts[1];
    ensure!(
        big.values_omitted && big.fact["args"]["big"].get("$blob").is_some(),
        "a 5 KB value is omitted, hash visible"
    );
    ensure!(
        big.says_truncated && big.text.chars().count() == 1024,
        "text bounded"
    );
    ensure!(
        big.call.as_deref() == Some(long_call.as_str()),
        "call id as data"
    );
    ensure!(
        !last.facts[0].values_omitted && last.facts[0].fact["args"] == json!({"k": 5}),
        "small values shown"
    );
    ensure!(
        calls.sources.len() == 1
            && calls.sources[0].available
            && calls.sources[0].module == "demo.json",
        "sources listed"
    );
    let src = s.source_page(&run, "demo.json", 0).map_err(e)?;
    ensure!(
        src.text.starts_with("{\"id\":\"demo\"") && src.next_offset.is_none(),
        "source page {src:?}"
    );
    let tail = s.source_page(&run, "demo.json", 5).map_err(e)?;
    ensure!(
        tail.text == src.text.chars().skip(5).collect::<String>(),
        "source offset"
    );
    ensure!(
        matches!(
            s.source_page(&run, "other.json", 0),
            Err(Error::InvalidArgument(_))
        ),
        "unknown module refused"
    );
    ensure!(
        matches!(
            s.source_page(&run, "demo.json", 1_000_000),
            Err(Error::InvalidArgument(_))
        ),
        "offset past the end refused"
    );
    let search = s
        .history_page(
            &run,
            &HistoryQuery {
                search: Some("c1:root#3".into()),
                ..Default::default()
            },
        )
        .map_err(e)?;
    ensure!(
        search.facts.iter().map(|f| f.n).collect::<Vec<_>>() == [8, 9],
        "search {:?}",
        search.facts.iter().map(|f| f.n).collect::<Vec<_>>()
    );
    for bad in [
        HistoryQuery {
            kind: Some("Nope".into()),
            ..Default::default()
        },
        HistoryQuery {
            limit: Some(0),
            ..Default::default()
        },
        HistoryQuery {
            limit: Some(201),
            ..Default::default()
        },
        HistoryQuery {
            offset: Some(1000),
            ..Default::default()
        },
    ] {
        ensure!(
            matches!(s.history_page(&run, &bad), Err(Error::InvalidArgument(_))),
            "refused {bad:?}"
        );
    }
    Ok(())
}
