//! The narrow storage traits (STYLE rule 4) and the types they speak.
//!
//! Callers bound on only what they use: the run driver on [`AppendFacts`] and
//! [`ReadHistory`], the SSE feed on [`Subscribe`], discovery on [`Discover`],
//! archives on [`ReadHistory`] + [`HostRecords`] (export) and [`ImportRuns`]
//! (import). SQLite implements them all; a Postgres backend implements the
//! same traits and runs the same [`crate::conformance`] suite.

use crate::archive::VerifiedArchive;
use crate::error::Result;
use crate::fact::FactKind;
use flow_abi::fact::{Fact, RecordedChange, RunId, StateChange};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

mod delete;
mod host;
mod leases;
mod live;
mod pages;
mod recoveries;
mod redact;
mod runs;
mod waiting;

pub use crate::namespace::{Namespace, Namespaces};
pub use delete::*;
pub use host::*;
pub use leases::*;
pub use live::*;
pub use pages::*;
pub use recoveries::*;
pub use redact::*;
pub use runs::*;
pub use waiting::*;

/// A recorded source text handed over with Start (DESIGN §3: "sources are
/// always blobs"). Start lists it as `{"module":M,"hash":H,"length":L}` where
/// H is `blake3:<hex>` of the text's UTF-8 bytes and L its length in code
/// points (REQUIREMENTS HIST-15); see [`crate::source_ref`].
#[derive(Clone, Debug)]
pub struct SourceText {
    pub module: String,
    pub text: String,
}

/// A fact number and its chain hash (`blake3:<hex>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FactRef {
    pub n: u64,
    pub hash: String,
}

/// What an accepted (durable) append returns: the fact's number, kind and
/// chain hash, and the canonical text stored for it (the form the chain
/// covers, values over 1 KiB as `$blob` references, a Checkpoint perhaps a
/// delta), which a live feed sends as is, without reading it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub run: RunId,
    pub n: u64,
    pub kind: FactKind,
    pub hash: String,
    pub body: Arc<str>,
}

/// One verified fact, read: the typed fact beside the canonical text the
/// chain covers (as restate's journal keeps an entry's raw bytes beside it).
/// The fact is in stored form: a value over 1 KiB is a `$blob` reference
/// (load the values with [`ReadHistory::expand_fact`]), and a Checkpoint
/// stored as a delta has `state: null` and its `delta` beside it (load its
/// state with [`ReadHistory::checkpoint_state`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredFact {
    pub n: u64,
    pub hash: String,
    pub fact: Fact,
    /// A delta Checkpoint's delta, as stored.
    pub delta: Option<serde_json::Map<String, Value>>,
    /// The stored canonical text, sent as is by feeds and archives.
    pub body: String,
}

impl StoredFact {
    pub fn kind(&self) -> FactKind {
        self.fact.kind()
    }

    /// The stored form as a JSON tree (the text `body` holds).
    pub fn stored_json(&self) -> Value {
        let v = self.fact.to_json();
        match (&self.delta, v) {
            (Some(delta), Value::Object(mut m)) => {
                m.remove("state");
                m.insert("delta".into(), Value::Object(delta.clone()));
                Value::Object(m)
            }
            (_, v) => v,
        }
    }
}

/// A run's verified history.
#[derive(Clone, Debug)]
pub struct History {
    pub run: RunId,
    pub facts: Vec<StoredFact>,
}

/// A host record to add. `at_ms` is the caller's clock (unix milliseconds);
/// `None` takes the store's `SystemTime` (the store is not the deterministic
/// engine).
#[derive(Clone, Debug)]
pub struct HostRecord {
    pub at_ms: Option<i64>,
    pub details: HostDetails,
}

impl HostRecord {
    /// A record made now (the store's clock).
    pub fn now(details: HostDetails) -> HostRecord {
        HostRecord {
            at_ms: None,
            details,
        }
    }

    pub fn kind(&self) -> HostRecordKind {
        self.details.kind()
    }
}

/// A stored host record; `head` is the run's last fact when it was made
/// (seed: "A recorded pause or halt contributes hostDecision only when its
/// head matches the inspected facts").
#[derive(Clone, Debug, PartialEq)]
pub struct HostRecordRow {
    pub seq: u64,
    pub at_ms: i64,
    pub head: FactRef,
    pub details: HostDetails,
}

impl HostRecordRow {
    pub fn kind(&self) -> HostRecordKind {
        self.details.kind()
    }
}

/// What an import did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported {
        run: RunId,
        facts: u64,
    },
    /// The same history was already stored (import is idempotent).
    AlreadyPresent {
        run: RunId,
    },
}

/// What [`AppendFacts::append_all`] takes: a fact, or a Checkpoint given by
/// what changed since the run's latest Checkpoint (DESIGN §3
/// "Checkpoints": a step costs what it changed). The store applies the
/// change to the state of the run's latest Checkpoint and stores exactly
/// the bytes the whole fact would be stored as; a change that does not fit
/// that state, or a run with no Checkpoint, is refused and changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Appending {
    Fact(Fact),
    Changed {
        n: u64,
        task: String,
        node: String,
        change: StateChange,
    },
}

impl From<Fact> for Appending {
    fn from(f: Fact) -> Appending {
        Appending::Fact(f)
    }
}

impl Appending {
    pub fn kind(&self) -> FactKind {
        match self {
            Appending::Fact(f) => f.kind(),
            Appending::Changed { .. } => FactKind::Checkpoint,
        }
    }

    pub fn n(&self) -> u64 {
        match self {
            Appending::Fact(f) => f.n(),
            Appending::Changed { n, .. } => *n,
        }
    }

    /// Gives it its number (the appender's job).
    pub fn set_n(&mut self, number: u64) {
        match self {
            Appending::Fact(f) => f.set_n(number),
            Appending::Changed { n, .. } => *n = number,
        }
    }
}

/// Appends facts, owned and typed (a fact read from outside, such as an
/// archive's, goes through [`Fact::from_value`] first). Each returns only
/// when the fact is durable.
///
/// The caller numbers each fact: `n` is the head it expects plus one, and
/// the store refuses any other number inside the commit. That is the
/// fencing rule: a writer that lost its run to another can never append.
pub trait AppendFacts {
    /// Creates a run with its Start fact (n = 1), source texts and the host
    /// records made with it (such as where its program was read from), in
    /// one commit, in namespace `default` (a fork or nested run: its
    /// parent's, see [`AppendFacts::create_run_in`]).
    fn create_run(
        &self,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
    ) -> Result<Appended> {
        self.create_run_in(&Namespace::default(), start, sources, records)
    }
    /// [`AppendFacts::create_run`] in `namespace`. A run whose Start names
    /// an outer run (nested) or a parent (fork) that is stored goes to
    /// that run's namespace instead, whatever is given: a run's family
    /// lives in one namespace (issue 40 item 4).
    fn create_run_in(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
    ) -> Result<Appended>;
    /// Appends fact `n = last + 1`. Refused (changing nothing) after End,
    /// with a wrong `n`, for an unknown run, or for a Start.
    fn append(&self, run: &RunId, fact: Fact) -> Result<Appended>;
    /// Appends consecutive facts of one run, in order. A backend may commit
    /// them in one transaction (one fsync for a run's step: DESIGN §6 "a
    /// sequential run pays one fsync per step"); each is durable when this
    /// returns. On an error, the facts before the failing one may be stored.
    fn append_all(&self, run: &RunId, facts: Vec<Appending>) -> Result<Vec<Appended>> {
        crate::step::wait_for(|done| self.append_all_then(run, facts, done))
    }
    /// [`AppendFacts::append_all`] without waiting for another thread: one
    /// commit takes the facts; `done` gets what `append_all` would return
    /// once each is durable. A backend may commit them on the caller's own
    /// thread before returning, when its writer is idle (SQLite: one
    /// commit, one fsync, so the caller blocks for no more than that), or
    /// queue them and return at once (unless its queue of thousands of
    /// commands is full). `done` runs on whichever thread committed, with
    /// the writer held, so it must only hand the result on (a channel
    /// send), and an async caller needs no thread of its own to wait.
    fn append_all_then(&self, run: &RunId, facts: Vec<Appending>, done: AppendDone) {
        self.append_all_with_then(run, facts, Vec::new(), done)
    }
    /// [`AppendFacts::append_all_then`] with host records that ride in the
    /// same commit, after the facts (each record's head is the last of
    /// them): a step's timings cost no commit of their own (issue 38 §3).
    /// A refused record changes nothing else and is not reported: `done`
    /// answers for the facts, and is called at once when there are none
    /// (the records then commit on their own; a caller that must wait for
    /// them uses [`HostRecords::record_host`]).
    fn append_all_with_then(
        &self,
        run: &RunId,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    );
    /// [`AppendFacts::create_run`] and [`AppendFacts::append_all_with_then`]
    /// in one commit: the run is created with Start and the records made
    /// with it, then its first facts (numbered from 2) and the records that
    /// ride after them are appended. A run whose first round is known
    /// before its Start is recorded pays one commit for both (issue 42).
    /// `done` gets Start's `Appended`, then one per fact, or the first
    /// refusal (a refused Start leaves nothing behind). The run goes to
    /// `namespace` as [`AppendFacts::create_run_in`] says.
    #[allow(clippy::too_many_arguments)]
    fn create_run_then(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        created: Vec<HostRecord>,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    );
}

/// What a queued append is answered with (see [`AppendFacts::append_all_then`]).
pub type AppendDone = Box<dyn FnOnce(Result<Vec<Appended>>) + Send>;

/// A visitor of [`ReadHistory::walk_logical`]: each fact, with what a
/// Checkpoint's stored delta changed; false stops the walk.
pub type Visit<'a> = dyn FnMut(&Fact, Option<&RecordedChange>) -> bool + 'a;

/// Verified reads.
pub trait ReadHistory {
    fn run_info(&self, run: &RunId) -> Result<RunInfo>;
    /// The whole history, chain and every blob verified.
    fn read_history(&self, run: &RunId) -> Result<History>;
    /// The whole history as logical facts (what replay and resume walk),
    /// each handed to `visit` in order as it is made (answering false stops
    /// the walk): verified as [`ReadHistory::read_history`] verifies it,
    /// every value loaded, every Checkpoint with its whole state, in one
    /// read, holding one fact at a time. Each fact is handed over once its
    /// own row checks out; a failed whole-history check (fewer facts than
    /// the runs index says, another last hash) is the walk's error, after
    /// the facts before it.
    /// The visitor borrows each fact: the walk keeps a Checkpoint's state
    /// as the next delta's base without a copy, and drops the rest on the
    /// thread that parsed it. A Checkpoint stored as a delta on the
    /// Checkpoint handed just before comes with what that delta changed
    /// (replay compares it at that cost); any other fact with `None`.
    fn walk_logical(&self, run: &RunId, visit: &mut Visit<'_>) -> Result<()>;
    /// [`ReadHistory::walk_logical`] gathered: every fact in memory at
    /// once (every Checkpoint's whole state).
    fn logical_history(&self, run: &RunId) -> Result<Vec<Fact>> {
        let mut facts = Vec::new();
        self.walk_logical(run, &mut |f, _| {
            facts.push(f.clone());
            true
        })?;
        Ok(facts)
    }
    /// Facts after `after`, at most `limit`, each checked against its
    /// predecessor's recorded hash (the live tail's catch-up read).
    fn read_after(&self, run: &RunId, after: u64, limit: u32) -> Result<Vec<StoredFact>>;
    /// A blob's verified bytes.
    fn blob(&self, hash: &str) -> Result<Vec<u8>>;
    /// [`ReadHistory::blob`] for a caller that sees only `namespaces`:
    /// [`Error::UnknownBlob`] unless a run of one of them references it
    /// (equal content in two namespaces is one blob; each sees it).
    fn blob_in(&self, hash: &str, namespaces: &Namespaces) -> Result<Vec<u8>>;
    /// A stored value of `run` with every reference loaded and verified,
    /// each of the run's holes shown as `{"$hole":"blake3:…","length":L}`
    /// (docs/custody.md "Holes"): a value to show, never invented content.
    fn expand(&self, run: &RunId, stored: &Value) -> Result<Value>;
    /// A stored fact of `run` with its value's references loaded and
    /// verified, holes shown as [`ReadHistory::expand`] shows them (a
    /// delta Checkpoint's state stays null: read it with
    /// [`ReadHistory::checkpoint_state`]).
    fn expand_fact(&self, run: &RunId, stored: &StoredFact) -> Result<Fact> {
        let mut fact = stored.fact.clone();
        if let Some(v) = fact.value_mut() {
            *v = self.expand(run, v)?;
        }
        Ok(fact)
    }
    /// The logical state of Checkpoint `n` (deltas applied).
    fn checkpoint_state(&self, run: &RunId, n: u64) -> Result<Value>;
    /// [`ReadHistory::checkpoint_state`] with each of the run's holes as
    /// its marker `{"$hole":…,"length":L}` instead of refused: a state to
    /// show, or whose holes a caller supplies (`flow fork --set`).
    fn checkpoint_state_shown(&self, run: &RunId, n: u64) -> Result<Value>;
    /// The run's holes (`blake3:<hex>`), in hash order: the blobs its
    /// facts reference that it may no longer read (docs/custody.md
    /// "Holes").
    fn holes(&self, run: &RunId) -> Result<Vec<String>>;
    /// A filtered page of the verified history.
    fn history_page(&self, run: &RunId, query: &HistoryQuery) -> Result<HistoryPage>;
    /// `flow history --fact N`: a page holding only fact `n`, with its
    /// recorded number (refused when the run has no such fact).
    fn history_fact(&self, run: &RunId, n: u64) -> Result<HistoryPage> {
        let mut q = crate::view::check_query(&HistoryQuery::default())?;
        q.fact = Some(n);
        let info = self.run_info(run)?;
        if n == 0 || n > info.last_fact.n {
            return Err(crate::Error::InvalidArgument(format!(
                "run {run} has no fact {n}"
            )));
        }
        let history = self.read_history(run)?;
        let holes = crate::view::hole_set(&self.holes(run)?);
        crate::view::page(&info, &history, &q, &holes, &mut |v| self.expand(run, v))
    }
    /// Up to 4096 code points of a recorded source, from `offset` (in code
    /// points). An unknown module or an offset past the end is refused.
    fn source_page(&self, run: &RunId, module: &str, offset: u64) -> Result<SourcePage> {
        crate::view::source_page(self, run, module, offset)
    }
}

/// Run discovery over the store's index.
pub trait Discover {
    fn discover(&self, query: &DiscoveryQuery) -> Result<DiscoveryPage>;
}

/// Run listings beyond discovery, and the index's changes for live
/// feeds that must also see other processes' writes (the CLI on the same
/// store).
pub trait ListRuns {
    fn list_runs(&self, query: &RunListQuery) -> Result<RunListPage>;
    /// How many runs the query's filters select, by state and by flow
    /// ([`RunCounts`]); its cursor and limit are not used. With no filter
    /// but states and a flow it reads the maintained counters (migration
    /// 0015), the same cost at any store size.
    fn count_runs(&self, query: &RunListQuery) -> Result<RunCounts>;
    /// Runs whose row changed at or after `since_ms` (host clock), oldest
    /// change first, at most `limit` (1 to 10,000).
    fn runs_changed_since(&self, since_ms: i64, limit: u32) -> Result<Vec<RunInfo>>;
    /// The runs that name `run` as their parent (forks) or outer run
    /// (nested runs), by id, at most `limit`: by index, whatever the
    /// number of runs.
    fn children(&self, run: &RunId, limit: u32) -> Result<ChildPage>;
    /// A page of the calls paused runs wait on, with their count, from
    /// the `waiting_calls` index (migration 0013).
    fn waiting_calls(&self, query: &WaitingQuery) -> Result<WaitingPage>;
    /// Each `(run, n)`'s fact (a waiting call's Call), checked against its
    /// predecessor's recorded hash and expanded, with its run's row, in one
    /// read (on Postgres one query): an inbox page's details. One that does
    /// not read is its own error.
    fn calls_at(&self, at: &[(RunId, u64)]) -> Result<Vec<Result<(Fact, RunInfo)>>>;
}

/// Host records beside each history.
pub trait HostRecords {
    fn record_host(&self, run: &RunId, record: HostRecord) -> Result<HostRecordRow>;
    fn host_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>>;
    /// The host records made with the run's Start (where its program was
    /// read from, the `--tools` that bound it): a few rows, whatever the
    /// length of its history.
    fn start_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>>;
}

/// Writes verified archives.
pub trait ImportRuns {
    /// Writes several verified archives (an archive of several runs) in
    /// one transaction: every run is imported or matched, or nothing is
    /// written (one conflict refuses them all). The outcomes are in the
    /// order given; a run id given twice is refused.
    /// New runs go to `namespace` (a run already stored keeps its own: an
    /// import that matches it writes nothing).
    fn import_verified_all_in(
        &self,
        namespace: &Namespace,
        archives: Vec<VerifiedArchive>,
    ) -> Result<Vec<ImportOutcome>>;

    /// [`ImportRuns::import_verified_all_in`] namespace `default`.
    fn import_verified_all(&self, archives: Vec<VerifiedArchive>) -> Result<Vec<ImportOutcome>> {
        self.import_verified_all_in(&Namespace::default(), archives)
    }

    /// Writes one verified archive.
    fn import_verified(&self, archive: VerifiedArchive) -> Result<ImportOutcome> {
        self.import_verified_all(vec![archive])?
            .pop()
            .ok_or(crate::error::Error::WriterGone)
    }
}

/// The key-value memory stores `std/memory#read|write` use (DESIGN §4:
/// "served by default from the store's own database"). Keys and values are
/// JSON, kept as canonical text.
pub trait Memory {
    fn memory_read(&self, store: &str, key: &Value) -> Result<Option<Value>>;
    /// With `merge`, an object value is merged into the object stored
    /// (upsert); otherwise the value replaces what is stored (overwrite).
    fn memory_write(&self, store: &str, key: &Value, value: &Value, merge: bool) -> Result<()>;
}

/// Everything a full backend offers; the conformance suite takes one.
pub trait Backend:
    AppendFacts
    + ReadHistory
    + Discover
    + ListRuns
    + HostRecords
    + ImportRuns
    + Subscribe
    + Leases
    + DeleteRuns
    + Redact
    + Recoveries
    + crate::workers::WorkerQueue
{
}
impl<
    T: AppendFacts
        + ReadHistory
        + Discover
        + ListRuns
        + HostRecords
        + ImportRuns
        + Subscribe
        + Leases
        + DeleteRuns
        + Redact
        + Recoveries
        + crate::workers::WorkerQueue,
> Backend for T
{
}
