//! What a writer decides before it writes, the same for every backend:
//! whether a Start, an append, a host record or an import is accepted, the
//! stored form and chain hash of each new fact, its blobs, and the run's new
//! head. A backend's writer looks up heads, runs these, and stores the
//! result with its own SQL.

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::{CkptCache, store_checkpoint};
use crate::error::{Error, Result};
use crate::fact::{FactKind, Form, check, store_fact};
use crate::hash::{blob_hash, chain_next, chain_start, hash_text, parse_hash};
use crate::id::RunId;
use crate::index::Head;
use crate::merkle::NewBlob;
use flow_abi::json::canonical;
use serde_json::Value;

/// What the runs index keeps from a Start fact.
pub(crate) struct StartMeta {
    pub run: String,
    pub entry_module: String,
    pub entry_function: String,
    pub program: String,
    pub parent: Option<(String, u64)>,
    pub outer: Option<(String, String)>,
}

pub(crate) fn start_meta(start: &Value) -> Result<StartMeta> {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let bad = || Error::InvalidFact("Start lacks run, entry or program".into());
    Ok(StartMeta {
        run: s(start.get("run")).ok_or_else(bad)?,
        entry_module: s(start.pointer("/entry/module")).ok_or_else(bad)?,
        entry_function: s(start.pointer("/entry/function")).ok_or_else(bad)?,
        program: s(start.get("program")).ok_or_else(bad)?,
        parent: match (
            s(start.pointer("/parent/run")),
            start.pointer("/parent/checkpoint").and_then(Value::as_u64),
        ) {
            (Some(r), Some(c)) => Some((r, c)),
            _ => None,
        },
        outer: match (
            s(start.pointer("/outer/run")),
            s(start.pointer("/outer/call")),
        ) {
            (Some(r), Some(c)) => Some((r, c)),
            _ => None,
        },
    })
}

pub(crate) fn ending_of(end: &Value) -> Option<Ending> {
    let e = end.get("ending")?.as_object()?;
    if e.contains_key("Completed") {
        Some(Ending::Completed)
    } else if e.contains_key("Faulted") {
        Some(Ending::Faulted)
    } else {
        None
    }
}

/// A Start that passed its checks; the run's existence is the writer's to
/// check next.
pub(crate) struct CheckedStart {
    pub run: RunId,
    pub meta: StartMeta,
    pub kind: FactKind,
    /// The source blobs.
    pub blobs: Vec<NewBlob>,
}

/// Checks a Start and its source texts. DESIGN §3: "sources are always
/// blobs". Start lists each by hash; the text must be handed over and match.
pub(crate) fn check_start(start: &Value, sources: &[SourceText]) -> Result<CheckedStart> {
    let (kind, n) = check(start, Form::Logical)?;
    if kind != FactKind::Start || n != 1 {
        return Err(Error::InvalidFact("a run begins with Start, fact 1".into()));
    }
    let meta = start_meta(start)?;
    let run = RunId::parse(&meta.run).map_err(|e| Error::InvalidFact(format!("Start.run: {e}")))?;
    let listed = start
        .get("sources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut blobs = Vec::new();
    for s in &listed {
        let module = s.get("module").and_then(Value::as_str).unwrap_or_default();
        let hash = s.get("hash").and_then(Value::as_str).and_then(parse_hash);
        let length = s.get("length").and_then(Value::as_u64);
        let text = sources.iter().find(|t| t.module == module).ok_or_else(|| {
            Error::InvalidFact(format!("no source text was given for module {module:?}"))
        })?;
        let h = blob_hash(text.text.as_bytes());
        if hash != Some(h) || length != Some(text.text.chars().count() as u64) {
            return Err(Error::InvalidFact(format!(
                "source {module:?} does not match its hash or length in Start"
            )));
        }
        blobs.push(NewBlob {
            hash: h,
            body: text.text.as_bytes().to_vec(),
        });
    }
    if let Some(extra) = sources.iter().find(|t| {
        !listed
            .iter()
            .any(|s| s.get("module").and_then(Value::as_str) == Some(t.module.as_str()))
    }) {
        return Err(Error::InvalidFact(format!(
            "source {:?} is not listed in Start",
            extra.module
        )));
    }
    Ok(CheckedStart {
        run,
        meta,
        kind,
        blobs,
    })
}

/// A new fact in stored form.
pub(crate) struct NewFact {
    pub n: u64,
    pub kind: FactKind,
    pub hash: [u8; 32],
    pub body: String,
}

impl CheckedStart {
    /// The stored Start (adding its value blobs) once the run is known new.
    pub(crate) fn store(&mut self, start: &Value) -> Result<NewFact> {
        let stored = store_fact(start, self.kind, &mut self.blobs)?;
        let body = canonical(&stored);
        let hash = chain_next(&chain_start(self.run.as_str()), &body);
        Ok(NewFact {
            n: 1,
            kind: self.kind,
            hash,
            body,
        })
    }
}

/// An accepted append: the stored fact, its blobs, the run's new head and
/// the update to the writer's checkpoint cache (`Some(None)`: forget).
pub(crate) struct PreparedAppend {
    pub fact: NewFact,
    pub blobs: Vec<NewBlob>,
    pub head: Head,
    pub ckpt: Option<Option<CkptCache>>,
}

/// Checks fact `fact` against the run's head and stores it: refused after
/// End, with a wrong number, for Start or a malformed fact. `prev_ckpt` is
/// the run's latest Checkpoint the writer remembers (a delta's base).
pub(crate) fn prepare_append(
    run: &RunId,
    head: &Head,
    fact: Value,
    at_ms: i64,
    prev_ckpt: Option<&CkptCache>,
) -> Result<PreparedAppend> {
    let (kind, n) = check(&fact, Form::Logical)?;
    if kind == FactKind::Start {
        return Err(Error::InvalidFact("Start only begins a run".into()));
    }
    if head.ending.is_some() {
        return Err(Error::Ended {
            run: run.to_string(),
            n,
        });
    }
    if n != head.last_n + 1 {
        return Err(Error::WrongNumber {
            run: run.to_string(),
            expected: head.last_n + 1,
            got: n.to_string(),
        });
    }
    let mut blobs = Vec::new();
    let end = if kind == FactKind::End {
        ending_of(&fact)
    } else {
        None
    };
    let (stored, ckpt) = match kind {
        FactKind::Checkpoint => {
            let (s, c) = store_checkpoint(fact, n, prev_ckpt, &mut blobs)?;
            (s, Some(Some(c)))
        }
        FactKind::End => (store_fact(&fact, kind, &mut blobs)?, Some(None)),
        _ => (store_fact(&fact, kind, &mut blobs)?, None),
    };
    let body = canonical(&stored);
    let h = chain_next(&head.last_hash, &body);
    let state = match end {
        Some(Ending::Completed) => RunState::Completed,
        Some(Ending::Faulted) => RunState::Faulted,
        None => RunState::Running,
    };
    Ok(PreparedAppend {
        fact: NewFact {
            n,
            kind,
            hash: h,
            body,
        },
        blobs,
        head: Head {
            key: head.key,
            last_n: n,
            last_hash: h,
            ending: end,
            state,
            updated_ms: at_ms,
        },
        ckpt,
    })
}

/// The head after a host record: a pause or halt moves a run that has not
/// ended to paused or halted; other kinds change nothing.
pub(crate) fn host_head(head: &Head, kind: HostRecordKind, at_ms: i64) -> Option<Head> {
    let state = match kind {
        HostRecordKind::Halt => RunState::Halted,
        HostRecordKind::Pause => RunState::Paused,
        _ => return None,
    };
    if head.ending.is_some() {
        return None;
    }
    let mut h = head.clone();
    h.state = state;
    h.updated_ms = at_ms;
    Some(h)
}

/// The stored row of a host record made at `head`.
pub(crate) fn host_row(seq: u64, record: HostRecord, at_ms: i64, head: &Head) -> HostRecordRow {
    HostRecordRow {
        seq,
        kind: record.kind,
        at_ms,
        head: FactRef {
            n: head.last_n,
            hash: hash_text(&head.last_hash),
        },
        details: record.details,
    }
}

/// An import over a run already stored: the same history is
/// `AlreadyPresent`, another one a `Conflict`.
pub(crate) fn import_over(
    a: &VerifiedArchive,
    last_n: u64,
    last_hash: &[u8],
) -> Result<ImportOutcome> {
    let (n, h) = a.last();
    if n == last_n && h[..] == *last_hash {
        Ok(ImportOutcome::AlreadyPresent { run: a.run.clone() })
    } else {
        Err(Error::Conflict(a.run.to_string()))
    }
}

/// What the runs index gets for an imported run.
pub(crate) struct ImportPlan {
    pub meta: StartMeta,
    pub state: RunState,
    pub ending: Option<Ending>,
    pub last_n: u64,
    pub last_hash: [u8; 32],
}

/// The index row of a new imported run: its ending, or the host decision
/// recorded at its last fact.
pub(crate) fn plan_import(a: &VerifiedArchive) -> Result<ImportPlan> {
    let (last_n, last_hash) = a.last();
    let first = a.facts.first().ok_or_else(|| Error::ArchiveRefused {
        component: "history.jsonl".into(),
        fact: None,
        reason: "empty history".into(),
    })?;
    let meta = start_meta(&first.fact)?;
    let ending = a
        .facts
        .last()
        .filter(|f| f.kind == FactKind::End)
        .and_then(|f| ending_of(&f.fact));
    let decision = a
        .host
        .iter()
        .rev()
        .find(|r| matches!(r.kind, HostRecordKind::Halt | HostRecordKind::Pause))
        .filter(|r| r.head.n == last_n && r.head.hash == hash_text(&last_hash))
        .map(|r| r.kind);
    let state = match (ending, decision) {
        (Some(Ending::Completed), _) => RunState::Completed,
        (Some(Ending::Faulted), _) => RunState::Faulted,
        (None, Some(HostRecordKind::Halt)) => RunState::Halted,
        (None, Some(HostRecordKind::Pause)) => RunState::Paused,
        _ => RunState::Running,
    };
    Ok(ImportPlan {
        meta,
        state,
        ending,
        last_n,
        last_hash,
    })
}
