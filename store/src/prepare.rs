//! What a writer decides before it writes, the same for every backend:
//! whether a Start, an append, a host record or an import is accepted, the
//! stored form and chain hash of each new fact, its blobs, and the run's new
//! head. A backend's writer looks up heads, runs these, and stores the
//! result with its own SQL.

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::{CkptCache, CkptHead, store_change, store_checkpoint};
use crate::error::{Error, Result};
use crate::fact::{FactKind, read_logical, store_fact, stored_text};
use crate::hash::{blob_hash, chain_next, chain_start, hash_text, parse_hash};
use crate::index::Head;
use crate::merkle::NewBlob;
use flow_abi::fact::{Ending as FactEnding, Fact, RunId};
use flow_abi::json::canonical;
use std::sync::Arc;

/// What the runs index keeps from a Start fact.
pub(crate) struct StartMeta {
    pub run: String,
    pub entry_module: String,
    pub entry_function: String,
    pub program: String,
    pub parent: Option<(String, u64)>,
    pub outer: Option<(String, String)>,
    /// The root FlowSpec document's `id` (the run query's flow filter).
    pub flow_id: Option<String>,
    /// The run's search attributes `(name, value text)` (crate::search).
    pub attrs: Vec<(String, String)>,
    /// The declarations read from each Checkpoint's state `(name,
    /// pointer)`, kept in the runs row (`state_attrs`), and the state
    /// pointers declared sensitive, with an empty name.
    pub state_decls: Vec<(String, String)>,
    /// The input pointers the root document declares sensitive
    /// (`runtime_hints.sensitive`): stored as blobs whatever their size.
    pub sensitive_input: Vec<String>,
    /// The run's namespace (issue 40 item 4): the one its creator gave.
    pub namespace: Namespace,
    /// Whether the insert takes the namespace of the run the Start names
    /// (its outer run, else its parent) when that run is stored: a fork
    /// and a nested run live beside their parent. An import places its
    /// runs where it was told.
    pub inherit: bool,
}

impl StartMeta {
    /// The `state_attrs` column: the state declarations as JSON, or NULL.
    pub(crate) fn state_attrs_column(&self) -> Option<String> {
        (!self.state_decls.is_empty())
            .then(|| serde_json::to_string(&self.state_decls).unwrap_or_default())
    }
}

/// The runs index's columns of a Start fact; anything else is refused.
pub(crate) fn start_meta(start: &Fact) -> Result<StartMeta> {
    let Fact::Start {
        run,
        entry,
        program,
        parent,
        outer,
        ..
    } = start
    else {
        return Err(Error::InvalidFact("a run begins with Start, fact 1".into()));
    };
    Ok(StartMeta {
        run: run.to_string(),
        entry_module: entry.module.clone(),
        entry_function: entry.function.clone(),
        program: program.clone(),
        parent: parent.as_ref().map(|p| (p.run.to_string(), p.checkpoint)),
        outer: outer
            .as_ref()
            .map(|o| (o.run.to_string(), o.call.to_string())),
        flow_id: None,
        attrs: Vec::new(),
        state_decls: Vec::new(),
        sensitive_input: Vec::new(),
        namespace: Namespace::default(),
        inherit: true,
    })
}

/// `meta` with what the run query indexes from the root source's text and
/// the run's logical input (crate::search).
fn searchable(
    mut meta: StartMeta,
    root: Option<&str>,
    input: Option<&serde_json::Value>,
) -> StartMeta {
    if let Some(text) = root {
        let (id, decls) = crate::search::root_doc(text);
        meta.flow_id = id;
        if let Some(input) = input {
            meta.attrs = crate::search::attrs_of(&decls, input);
        }
        meta.state_decls = crate::search::decls_in(&decls, "state");
        // A sensitive state pointer rides in the same column, with no
        // name (no attribute has an empty one): the writer reads it back
        // with the run's head at each Checkpoint.
        let sensitive = crate::search::sensitive_of(text);
        meta.state_decls.extend(
            sensitive
                .iter()
                .filter(|p| p.starts_with("/state/"))
                .map(|p| (String::new(), p.clone())),
        );
        meta.sensitive_input = sensitive
            .into_iter()
            .filter(|p| p.starts_with("/input/"))
            .collect();
    }
    meta
}

/// A faulted End's reason; `None` for every other fact.
pub(crate) fn fault_of(end: &Fact) -> Option<String> {
    match end {
        Fact::End {
            ending: FactEnding::Faulted(reason),
            ..
        } => Some(reason.clone()),
        _ => None,
    }
}

/// How an End fact ended the run; `None` for every other fact.
pub(crate) fn ending_of(end: &Fact) -> Option<Ending> {
    match end {
        Fact::End {
            ending: FactEnding::Completed { .. },
            ..
        } => Some(Ending::Completed),
        Fact::End {
            ending: FactEnding::Faulted(_),
            ..
        } => Some(Ending::Faulted),
        _ => None,
    }
}

/// A Start that passed its checks; the run's existence is the writer's to
/// check next.
pub(crate) struct CheckedStart {
    pub run: RunId,
    pub meta: StartMeta,
    /// The Start as the fact reader wrote it back.
    start: serde_json::Value,
    /// The source blobs.
    pub blobs: Vec<NewBlob>,
}

/// Checks a Start and its source texts. DESIGN §3: "sources are always
/// blobs". Start lists each by hash; the text must be handed over and match.
pub(crate) fn check_start(typed: Fact, sources: &[SourceText]) -> Result<CheckedStart> {
    let Fact::Start {
        n: 1,
        run,
        sources: listed,
        ..
    } = &typed
    else {
        return Err(Error::InvalidFact("a run begins with Start, fact 1".into()));
    };
    let mut blobs = Vec::new();
    for s in listed {
        let module = s.module.as_str();
        let text = sources.iter().find(|t| t.module == module).ok_or_else(|| {
            Error::InvalidFact(format!("no source text was given for module {module:?}"))
        })?;
        let h = blob_hash(text.text.as_bytes());
        if parse_hash(&s.hash) != Some(h) || s.length != text.text.chars().count() as u64 {
            return Err(Error::InvalidFact(format!(
                "source {module:?} does not match its hash or length in Start"
            )));
        }
        blobs.push(NewBlob {
            hash: h,
            body: text.text.as_bytes().to_vec(),
        });
    }
    if let Some(extra) = sources
        .iter()
        .find(|t| !listed.iter().any(|s| s.module == t.module))
    {
        return Err(Error::InvalidFact(format!(
            "source {:?} is not listed in Start",
            extra.module
        )));
    }
    let run = run.clone();
    let meta = start_meta(&typed)?;
    let root = sources
        .iter()
        .find(|t| t.module == meta.entry_module)
        .map(|t| t.text.as_str());
    let input = match &typed {
        Fact::Start { input, .. } => Some(input),
        _ => None,
    };
    let meta = searchable(meta, root, input);
    Ok(CheckedStart {
        run,
        meta,
        start: typed.into_json(),
        blobs,
    })
}

/// A new fact in stored form.
pub(crate) struct NewFact {
    pub n: u64,
    pub kind: FactKind,
    pub hash: [u8; 32],
    pub body: Arc<str>,
}

impl NewFact {
    /// What the append answers once the fact is durable.
    pub(crate) fn appended(&self, run: &RunId) -> Appended {
        Appended {
            run: run.clone(),
            n: self.n,
            kind: self.kind,
            hash: hash_text(&self.hash),
            body: self.body.clone(),
        }
    }
}

impl CheckedStart {
    /// The stored Start (adding its value blobs) once the run is known new.
    pub(crate) fn store(&mut self) -> Result<NewFact> {
        let pins = crate::search::pins_in(
            self.meta.sensitive_input.iter().map(String::as_str),
            "input",
        );
        let stored = if pins.is_empty() {
            store_fact(&self.start, FactKind::Start, &mut self.blobs)?
        } else {
            // The input stored once, with its sensitive fields as blobs
            // (stored whole first, a field under 1 KiB would be inline in
            // an input blob).
            let mut start = self.start.clone();
            let input = start
                .get_mut("input")
                .map(std::mem::take)
                .unwrap_or(serde_json::Value::Null);
            let mut stored = store_fact(&start, FactKind::Start, &mut self.blobs)?;
            stored["input"] =
                crate::merkle::externalize_pinned(&input, &pins, &mut self.blobs)?.value;
            stored
        };
        let body: Arc<str> = canonical(&stored).into();
        let hash = chain_next(&chain_start(self.run.as_str()), &body);
        Ok(NewFact {
            n: 1,
            kind: FactKind::Start,
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
    /// A faulted End's reason (the runs index's `fault`).
    pub fault: Option<String>,
    /// A Checkpoint of a run with state search attributes: every declared
    /// name, and the `(name, value text)` its state gives now (the rows
    /// `run_attrs` keeps for those names from now on).
    pub state_attrs: Option<StateAttrs>,
}

/// See [`PreparedAppend::state_attrs`].
pub(crate) type StateAttrs = (Vec<String>, Vec<(String, String)>);

/// What a Checkpoint's whole state gives a run's state declarations.
fn state_attrs(head: &Head, ckpt: &Option<Option<CkptCache>>) -> Option<StateAttrs> {
    let decls: Vec<(String, String)> = head
        .state_attrs
        .as_ref()?
        .iter()
        .filter(|(n, _)| !n.is_empty())
        .cloned()
        .collect();
    let Some(Some(c)) = ckpt else { return None };
    if decls.is_empty() {
        return None;
    }
    let names = decls.iter().map(|(n, _)| n.clone()).collect();
    Some((names, crate::search::attrs_at(&decls, "state", &c.state)))
}

/// The run's sensitive state fields as pins into its state (the unnamed
/// entries of its `state_attrs` column).
fn state_pins(head: &Head) -> crate::merkle::Pins {
    let decls = head
        .state_attrs
        .as_deref()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    crate::search::pins_in(
        decls
            .iter()
            .filter(|(n, _)| n.is_empty())
            .map(|(_, p)| p.as_str()),
        "state",
    )
}

/// Checks fact `fact` against the run's head and stores it: refused after
/// End, with a wrong number, for Start or a malformed fact. `prev_ckpt` is
/// the run's latest Checkpoint the writer remembers (a delta's base).
pub(crate) fn prepare_append(
    run: &RunId,
    head: &Head,
    typed: Fact,
    at_ms: i64,
    prev_ckpt: Option<&CkptCache>,
) -> Result<PreparedAppend> {
    let (kind, n) = (typed.kind(), typed.n());
    if kind == FactKind::Start {
        return Err(Error::InvalidFact("Start only begins a run".into()));
    }
    admit(run, head, n)?;
    let mut blobs = Vec::new();
    let end = ending_of(&typed);
    let fault = fault_of(&typed);
    let (body, ckpt) = match stored_text(&typed, &mut blobs)? {
        Some(text) => (text, (kind == FactKind::End).then_some(None)),
        None => {
            let Fact::Checkpoint {
                task, node, state, ..
            } = typed
            else {
                return Err(Error::InvalidFact(format!(
                    "{} has no stored text",
                    kind.as_str()
                )));
            };
            let pins = state_pins(head);
            let head = CkptHead {
                n,
                task: &task,
                node: &node,
                pins: &pins,
            };
            let (text, c) = store_checkpoint(head, state, prev_ckpt, &mut blobs)?;
            (text, Some(Some(c)))
        }
    };
    let mut p = prepared(head, n, kind, body, blobs, end, ckpt, at_ms);
    p.fault = fault;
    if kind == FactKind::Checkpoint {
        p.state_attrs = state_attrs(head, &p.ckpt);
    }
    Ok(p)
}

/// [`prepare_append`] of a Checkpoint given by `change` against `base`,
/// the run's latest Checkpoint (see [`Appending::Changed`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_change(
    run: &RunId,
    head: &Head,
    n: u64,
    task: String,
    node: String,
    change: flow_abi::fact::StateChange,
    at_ms: i64,
    base: CkptCache,
) -> Result<PreparedAppend> {
    admit(run, head, n)?;
    let mut blobs = Vec::new();
    let pins = state_pins(head);
    let ckpt = CkptHead {
        n,
        task: &task,
        node: &node,
        pins: &pins,
    };
    let (text, c) = store_change(ckpt, change, base, &mut blobs)?;
    let mut p = prepared(
        head,
        n,
        FactKind::Checkpoint,
        text,
        blobs,
        None,
        Some(Some(c)),
        at_ms,
    );
    p.state_attrs = state_attrs(head, &p.ckpt);
    Ok(p)
}

/// Refuses an append after End or with a number other than the head's
/// next.
fn admit(run: &RunId, head: &Head, n: u64) -> Result<()> {
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
    Ok(())
}

/// An accepted append of `stored`, fact `n` after `head`.
#[allow(clippy::too_many_arguments)]
fn prepared(
    head: &Head,
    n: u64,
    kind: FactKind,
    body: String,
    blobs: Vec<NewBlob>,
    end: Option<Ending>,
    ckpt: Option<Option<CkptCache>>,
    at_ms: i64,
) -> PreparedAppend {
    let body: Arc<str> = body.into();
    let h = chain_next(&head.last_hash, &body);
    let state = match end {
        Some(Ending::Completed) => RunState::Completed,
        Some(Ending::Faulted) => RunState::Faulted,
        None => RunState::Running,
    };
    PreparedAppend {
        fact: NewFact {
            n,
            kind,
            hash: h,
            body,
        },
        blobs,
        head: Head {
            last_n: n,
            last_hash: h,
            ..head.moved(state, end, at_ms)
        },
        ckpt,
        fault: None,
        state_attrs: None,
    }
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
    Some(head.moved(state, None, at_ms))
}

/// The stored row of a host record made at `head`.
pub(crate) fn host_row(seq: u64, record: HostRecord, at_ms: i64, head: &Head) -> HostRecordRow {
    HostRecordRow {
        seq,
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
    /// A faulted End's reason.
    pub fault: Option<String>,
}

/// The index row of a new imported run: its ending, or the host decision
/// recorded at its last fact.
pub(crate) fn plan_import(a: &VerifiedArchive, namespace: &Namespace) -> Result<ImportPlan> {
    let (last_n, last_hash) = a.last();
    if a.facts.is_empty() {
        return Err(Error::ArchiveRefused {
            component: "history.jsonl".into(),
            fact: None,
            reason: "empty history".into(),
        });
    }
    // Verified already; read again only for the runs index. A Start is
    // never a delta, and an End's output is opaque to the reader.
    let start = read_logical(a.first.clone())?;
    let mut meta = start_meta(&start)?;
    meta.namespace = namespace.clone();
    meta.inherit = false;
    let meta = import_searchable(a, &start, meta);
    let (ending, fault) = match a.facts.last() {
        Some(f) if f.kind == FactKind::End => {
            let end = read_logical(a.last.clone())?;
            (ending_of(&end), fault_of(&end))
        }
        _ => (None, None),
    };
    let decision = a
        .host
        .iter()
        .rev()
        .find(|r| matches!(r.kind(), HostRecordKind::Halt | HostRecordKind::Pause))
        .filter(|r| r.head.n == last_n && r.head.hash == hash_text(&last_hash))
        .map(|r| r.kind());
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
        fault,
    })
}

/// [`searchable`] for an imported run: its root source and stored input
/// are among the archive's verified blobs. A value that cannot be loaded
/// indexes nothing (the import itself was verified already).
fn import_searchable(a: &VerifiedArchive, start: &Fact, meta: StartMeta) -> StartMeta {
    let Fact::Start { sources, input, .. } = start else {
        return meta;
    };
    let blob = |hash: &[u8; 32]| a.blobs.iter().find(|b| b.hash == *hash).map(|b| &b.body);
    let root = sources
        .iter()
        .find(|s| s.module == meta.entry_module)
        .and_then(|s| parse_hash(&s.hash))
        .and_then(|h| blob(&h))
        .and_then(|b| std::str::from_utf8(b).ok());
    let input = crate::merkle::expand(input, &mut |h| {
        blob(h)
            .and_then(|b| serde_json::from_slice(b).ok())
            .ok_or_else(|| Error::InvalidFact("an input blob is missing".into()))
    })
    .ok();
    searchable(meta, root, input.as_ref())
}
