//! Live reads: a run's tail (backlog, then each fact once durable) and
//! the durable heads the store learns of, which the SSE feeds follow.

use super::*;

/// What a live tail yields.
#[derive(Clone, Debug, PartialEq)]
pub enum TailEvent {
    Fact(Box<StoredFact>),
    /// Nothing new within the timeout.
    Idle,
    /// The run's End has been yielded; nothing more will come.
    Ended,
}

/// A live tail: backlog first, then live, no gap and no duplicate.
pub trait Tail: Send {
    /// Waits at most `timeout` for the next durable fact.
    fn next_event(&mut self, timeout: Duration) -> Result<TailEvent>;
}

/// Live subscriptions.
pub trait Subscribe {
    /// Yields every fact after `after` once it is durable.
    fn subscribe(&self, run: &RunId, after: u64) -> Result<Box<dyn Tail>>;
    /// Calls `observer` with every durable head the store learns of, from
    /// now on (the run service's heads notifier, which SSE followers wait
    /// on, is fed this way).
    fn observe_heads(&self, observer: HeadObserver);
}

/// A durable head the store learned of: the run and its last fact number,
/// with the facts up to it, in order, when this process committed them (a
/// live feed sends their stored text without reading it back). Another
/// writer's commit — on Postgres, another server's, by LISTEN/NOTIFY —
/// brings the number only.
#[derive(Clone, Debug)]
pub struct HeadNote {
    pub run: RunId,
    pub n: u64,
    pub facts: Vec<Appended>,
}

impl HeadNote {
    /// The head one committed append makes.
    pub fn of(a: &Appended) -> HeadNote {
        HeadNote {
            run: a.run.clone(),
            n: a.n,
            facts: vec![a.clone()],
        }
    }

    /// The head an import that wrote its run makes (none when the run
    /// was already there).
    pub fn imported(o: &ImportOutcome) -> Option<HeadNote> {
        match o {
            ImportOutcome::Imported { run, facts } => Some(HeadNote {
                run: run.clone(),
                n: *facts,
                facts: Vec::new(),
            }),
            ImportOutcome::AlreadyPresent { .. } => None,
        }
    }

    /// A commit's notes, in commit order, a note that continues the one
    /// before it (the same run, its facts next in order) folded into it:
    /// a step's facts reach the observers as one note, not one a fact.
    pub fn gather(notes: impl IntoIterator<Item = HeadNote>) -> Vec<HeadNote> {
        let mut out: Vec<HeadNote> = Vec::new();
        for note in notes {
            if let Some(last) = out.last_mut()
                && last.run == note.run
                && let (Some(end), Some(first)) = (last.facts.last(), note.facts.first())
                && end.n + 1 == first.n
            {
                last.n = note.n;
                last.facts.extend(note.facts);
                continue;
            }
            out.push(note);
        }
        out
    }
}

/// Whoever wants to hear of every new durable head the store learns of —
/// its own commits and, on Postgres, every server's — without a thread per
/// run.
pub type HeadObserver = std::sync::Arc<dyn Fn(&HeadNote) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(run: &str, n: u64) -> Appended {
        Appended {
            run: RunId::parse(run).unwrap(),
            n,
            kind: FactKind::Reply,
            hash: format!("h{n}"),
            body: format!("{{\"n\":{n}}}").into(),
        }
    }

    fn note(run: &str, ns: &[u64]) -> HeadNote {
        HeadNote {
            run: RunId::parse(run).unwrap(),
            n: ns.last().copied().unwrap_or(9),
            facts: ns.iter().map(|&n| appended(run, n)).collect(),
        }
    }

    fn shape(notes: &[HeadNote]) -> Vec<(String, u64, Vec<u64>)> {
        notes
            .iter()
            .map(|h| {
                (
                    h.run.to_string(),
                    h.n,
                    h.facts.iter().map(|a| a.n).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_commits_notes_fold_only_where_one_continues_the_last() {
        let (a, b) = (
            "run-01arz3ndektsv4rrffq69g5fav",
            "run-01arz3ndektsv4rrffq69g5faw",
        );
        let notes = HeadNote::gather([
            note(a, &[5]),
            note(a, &[6]),
            note(a, &[7]),
            note(b, &[3]),
            note(a, &[8]),
            // Not next in order: a note of its own.
            note(a, &[10]),
            // An imported run's note carries its number only.
            note(b, &[]),
            note(b, &[10]),
        ]);
        assert_eq!(
            shape(&notes),
            vec![
                (a.to_string(), 7, vec![5, 6, 7]),
                (b.to_string(), 3, vec![3]),
                (a.to_string(), 8, vec![8]),
                (a.to_string(), 10, vec![10]),
                (b.to_string(), 9, vec![]),
                (b.to_string(), 10, vec![10]),
            ]
        );
    }
}
