//! Conformance cases: The live tail and concurrent writers.

use super::*;

/// Issue 3 §4, REQUIREMENTS LIVE-3: backlog then live, no gap, no duplicate.
pub(super) fn live_tail<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let (run, n) = seed_run(&s, 2).map_err(e)?;
    let mut tail = s.subscribe(&run, 2).map_err(e)?;
    let total = n + 30 + 1;
    let got = std::thread::scope(|scope| -> Result<Vec<u64>, String> {
        let writer = scope.spawn(|| -> Result<(), String> {
            for i in 0..30u64 {
                s.append(&run, call_fact(n + 1 + i, 100 + i, json!({"i": i})))
                    .map_err(e)?;
            }
            s.append(&run, end_fact(total, json!(null))).map_err(e)?;
            Ok(())
        });
        let mut got = Vec::new();
        loop {
            match tail.next_event(Duration::from_secs(10)).map_err(e)? {
                TailEvent::Fact(f) => got.push(f.n),
                TailEvent::Ended => break,
                TailEvent::Idle => return Err("tail went idle".into()),
            }
        }
        writer.join().map_err(|_| "writer panicked".to_string())??;
        Ok(got)
    })?;
    ensure!(
        got == (3..=total).collect::<Vec<_>>(),
        "tail yielded {got:?}"
    );
    ensure!(
        matches!(s.subscribe(&new_run_id(), 0), Err(Error::UnknownRun(_))),
        "unknown run"
    );
    let mut idle = s.subscribe(&run, total).map_err(e)?;
    ensure!(
        idle.next_event(Duration::from_millis(10)).map_err(e)? == TailEvent::Idle,
        "nothing after End"
    );
    Ok(())
}

/// Issue 3 tests: "many runs appending from many tasks with no lost or
/// reordered fact".
pub(super) fn concurrent_runs<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let threads = 8u64;
    let per = 40u64;
    let runs: Vec<RunId> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let s = &s;
                scope.spawn(move || -> Result<RunId, String> {
                    let run = new_run_id();
                    let (start, sources) = start_fact(&run, json!({"t": t}));
                    s.create_run(start.clone(), &sources, Vec::new())
                        .map_err(e)?;
                    for i in 0..per {
                        s.append(&run, call_fact(i + 2, i + 1, json!({"t": t, "i": i})))
                            .map_err(e)?;
                    }
                    Ok(run)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "thread panicked".to_string())
                    .and_then(|r| r)
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    for (t, run) in runs.iter().enumerate() {
        let h = s.read_history(run).map_err(e)?;
        ensure!(
            h.facts.len() as u64 == per + 1,
            "run {t} has {} facts",
            h.facts.len()
        );
        for (i, f) in h.facts.iter().skip(1).enumerate() {
            ensure!(
                f.fact.value() == Some(&json!({"t": t, "i": i})),
                "run {t} fact {} out of order",
                f.n
            );
        }
    }
    Ok(())
}
