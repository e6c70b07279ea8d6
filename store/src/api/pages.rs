//! The query and page types of the store's reads that answer a page at a
//! time: stored-run discovery, run listings (the dashboard's), history
//! pages and source pages.

use super::*;

/// Discovery arguments (seed "Stored-run discovery": "limit defaults to 50
/// and accepts 1 to 200; optional after excludes that ID and lexically
/// earlier IDs. Invalid arguments are refused before inspection").
#[derive(Clone, Debug, Default)]
pub struct DiscoveryQuery {
    pub limit: Option<u32>,
    pub after: Option<String>,
    pub state: Option<RunState>,
}

/// The checked form of a [`DiscoveryQuery`].
#[derive(Clone, Debug)]
pub struct CheckedDiscovery {
    pub limit: u32,
    pub after: Option<RunId>,
    pub state: Option<RunState>,
}

impl DiscoveryQuery {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 200;

    /// Refuses invalid arguments before anything is inspected.
    pub fn check(&self) -> Result<CheckedDiscovery> {
        let limit = self.limit.unwrap_or(Self::DEFAULT_LIMIT);
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(crate::Error::InvalidArgument(format!(
                "limit must be from 1 to {}, not {limit}",
                Self::MAX_LIMIT
            )));
        }
        let after = self.after.as_deref().map(RunId::parse).transpose()?;
        Ok(CheckedDiscovery {
            limit,
            after,
            state: self.state,
        })
    }
}

/// Seed: "record is complete when the validated prefix ends in End,
/// incomplete when Start is present without End, not-started when Start is
/// absent, unreadable for an invalid or unavailable component, or
/// inspection-limited when a read bound prevents inspection."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordStatus {
    Complete,
    Incomplete,
    NotStarted,
    Unreadable,
    InspectionLimited,
}

/// Statuses a problem can carry (root: not-created, unreadable,
/// inspection-limited; a run's component: unreadable, inspection-limited).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemStatus {
    NotCreated,
    Unreadable,
    InspectionLimited,
}

/// Seed: "A problem has component and status". `detail` is presentation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub component: String,
    pub status: ProblemStatus,
    pub detail: String,
}

/// A recorded pause or halt whose head is the row's last fact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDecision {
    pub kind: HostRecordKind,
    pub at_ms: i64,
}

/// One discovery row, with exactly the seed's fields: "run, historyPresent,
/// record, truncated, ending, entry, program, lastFact, hostDecision and
/// problem ... Unavailable fields are null."
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryRow {
    pub run: String,
    pub history_present: bool,
    pub record: RecordStatus,
    pub truncated: bool,
    pub ending: Option<Ending>,
    pub entry: Option<Entry>,
    pub program: Option<String>,
    pub last_fact: Option<FactRef>,
    pub host_decision: Option<HostDecision>,
    pub problem: Option<Problem>,
}

impl DiscoveryRow {
    /// The run service's state word for what the row shows (docs/cli.md,
    /// "One state vocabulary"): completed or faulted by its ending, halted
    /// or paused by a matching host decision, running for any other
    /// incomplete record; `None` when the record cannot say.
    pub fn state(&self) -> Option<RunState> {
        match (self.ending, &self.host_decision) {
            (Some(Ending::Completed), _) => Some(RunState::Completed),
            (Some(Ending::Faulted), _) => Some(RunState::Faulted),
            (None, Some(d)) if d.kind == HostRecordKind::Halt => Some(RunState::Halted),
            (None, Some(d)) if d.kind == HostRecordKind::Pause => Some(RunState::Paused),
            (None, _) if self.record == RecordStatus::Incomplete => Some(RunState::Running),
            _ => None,
        }
    }
}

/// Seed: "The result has runs, nextAfter and problems."
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryPage {
    pub runs: Vec<DiscoveryRow>,
    pub next_after: Option<String>,
    pub problems: Vec<Problem>,
}

/// Which way a run listing goes: ids are creation-ordered, so oldest
/// first is id order and newest first its reverse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunOrder {
    #[default]
    Oldest,
    Newest,
}

/// A run listing (the run query of issue 38: `GET /v1/runs`, `flow runs`,
/// MCP `runs`, the dashboard): discovery rows with the index's other
/// columns, in either order, filtered by what the runs index keeps. Every
/// filter combines with every other (AND); each is served by an index
/// (docs/store.md, "The run query"). `cursor` is keyset paging: the id the
/// previous page ended on, excluded with every id before it in this order.
#[derive(Clone, Debug, Default)]
pub struct RunListQuery {
    pub limit: Option<u32>,
    pub cursor: Option<String>,
    pub order: RunOrder,
    /// One state (kept for callers that name one); joined with `states`.
    pub state: Option<RunState>,
    /// Any of these states (none: every state).
    pub states: Vec<RunState>,
    /// Only ids starting with this (`run-01m8…`); at most 30 characters of
    /// `[0-9a-z-]`.
    pub prefix: Option<String>,
    /// Only runs whose root FlowSpec document has this `id`.
    pub flow: Option<String>,
    /// Only runs whose entry is this module (and function, when given).
    pub entry_module: Option<String>,
    pub entry_function: Option<String>,
    /// Started (Start recorded, host clock unix ms) in `[from, to)`.
    pub started: TimeRange,
    /// Last changed (any commit, unix ms) in `[from, to)`.
    pub updated: TimeRange,
    /// Only forks of this run (their Start's parent).
    pub fork_of: Option<String>,
    /// Only runs nested in this run (their Start's outer run).
    pub nested_in: Option<String>,
    /// Only faulted runs whose fault reason contains this text (case
    /// sensitive).
    pub fault: Option<String>,
    /// Only runs whose search attribute `name` equals the value (a string,
    /// integer or boolean: `"42"` and `42` differ).
    pub attrs: Vec<(String, Value)>,
    /// Only paused runs waiting on a call at this node (`waiting_calls`,
    /// migration 0013).
    pub waiting_node: Option<String>,
    /// Only paused runs waiting on a call to this Tool (e.g.
    /// `std/human#input`).
    pub waiting_tool: Option<String>,
    /// Only runs in these namespaces (issue 40 item 4): the caller's, as
    /// its token allows, narrowed by a `namespace=` filter.
    pub namespaces: Namespaces,
}

/// A host-clock interval `[from, to)` in unix ms; either end open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub from: Option<i64>,
    pub to: Option<i64>,
}

/// The checked form of a [`RunListQuery`].
#[derive(Clone, Debug)]
pub struct CheckedRunList {
    pub limit: u32,
    pub cursor: Option<RunId>,
    pub order: RunOrder,
    /// Sorted, no repeats; empty: every state.
    pub states: Vec<RunState>,
    pub prefix: Option<String>,
    pub flow: Option<String>,
    pub entry_module: Option<String>,
    pub entry_function: Option<String>,
    pub started: TimeRange,
    pub updated: TimeRange,
    pub fork_of: Option<String>,
    pub nested_in: Option<String>,
    pub fault: Option<String>,
    /// `(name, indexed value text)` (crate::search::value_text).
    pub attrs: Vec<(String, String)>,
    pub waiting_node: Option<String>,
    pub waiting_tool: Option<String>,
    pub namespaces: Namespaces,
    /// The filters admit no run (a fault filter with states other than
    /// faulted, a waiting filter with states other than paused): answered
    /// without a query.
    pub none: bool,
}

/// How many runs a [`RunListQuery`]'s filters select (cursor and limit
/// aside): `by_state` leaves the state filter out (the dashboard's tabs:
/// each says how many runs selecting it would list), `by_flow` and `total`
/// apply every filter. `by_flow` names the runs whose root flow has an id;
/// `total` minus its sum is the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub total: u64,
    pub by_state: Vec<(RunState, u64)>,
    pub by_flow: Vec<(String, u64)>,
}

impl RunListQuery {
    /// Refuses invalid arguments before anything is inspected.
    pub fn check(&self) -> Result<CheckedRunList> {
        let d = DiscoveryQuery {
            limit: self.limit,
            after: self.cursor.clone(),
            state: self.state,
        }
        .check()?;
        if let Some(p) = &self.prefix
            && (p.is_empty()
                || p.len() > 30
                || !p
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-'))
        {
            return Err(crate::Error::InvalidArgument(format!(
                "prefix {p:?} is not the start of a run id (at most 30 of 0-9, a-z and -)"
            )));
        }
        let text = |what: &str, v: &Option<String>, max: usize| match v {
            Some(t) if t.is_empty() || t.len() > max => Err(crate::Error::InvalidArgument(
                format!("{what} must be 1 to {max} bytes, not {}", t.len()),
            )),
            _ => Ok(v.clone()),
        };
        let run = |what: &str, v: &Option<String>| match v {
            Some(t) => RunId::parse(t).map(|r| Some(r.to_string())).map_err(|_| {
                crate::Error::InvalidArgument(format!(
                    "{what} {t:?} is not a run id (run-<26 lowercase ULID characters>)"
                ))
            }),
            None => Ok(None),
        };
        for (what, r) in [("started", self.started), ("updated", self.updated)] {
            if let (Some(f), Some(t)) = (r.from, r.to)
                && f >= t
            {
                return Err(crate::Error::InvalidArgument(format!(
                    "{what} range is empty: its start {f} is not before its end {t}"
                )));
            }
        }
        if self.entry_function.is_some() && self.entry_module.is_none() {
            return Err(crate::Error::InvalidArgument(
                "an entry function needs its module: give entry as module#function".into(),
            ));
        }
        if self.attrs.len() > crate::search::MAX_ATTRS {
            return Err(crate::Error::InvalidArgument(format!(
                "at most {} search attributes, not {}",
                crate::search::MAX_ATTRS,
                self.attrs.len()
            )));
        }
        let mut attrs = Vec::new();
        for (name, value) in &self.attrs {
            if !crate::search::valid_name(name) {
                return Err(crate::Error::InvalidArgument(format!(
                    "search attribute name {name:?} is not 1 to 64 of A-Z, a-z, 0-9, _, . and -"
                )));
            }
            let Some(v) = crate::search::value_text(value) else {
                return Err(crate::Error::InvalidArgument(format!(
                    "search attribute {name} must equal a string (at most {} bytes), an integer or a boolean, not {value}",
                    crate::search::MAX_TEXT
                )));
            };
            attrs.push((name.clone(), v));
        }
        attrs.sort();
        attrs.dedup();
        let mut states: Vec<RunState> = self.states.iter().copied().chain(self.state).collect();
        states.sort_by_key(|s| s.as_str());
        states.dedup();
        let fault = text("fault", &self.fault, 1024)?;
        // A caller confined to no namespace sees no run.
        let mut none = self.namespaces.listed().is_some_and(<[_]>::is_empty);
        if fault.is_some() {
            // Only a faulted run has a fault: the filter is served by the
            // state index.
            if states.is_empty() || states.contains(&RunState::Faulted) {
                states = vec![RunState::Faulted];
            } else {
                none = true;
            }
        }
        let waiting_node = text("waiting node", &self.waiting_node, 1024)?;
        let waiting_tool = text("waiting tool", &self.waiting_tool, 1024)?;
        if waiting_node.is_some() || waiting_tool.is_some() {
            // Only a paused run waits on a call.
            if states.is_empty() || states.contains(&RunState::Paused) {
                states = vec![RunState::Paused];
            } else {
                none = true;
            }
        }
        Ok(CheckedRunList {
            limit: d.limit,
            cursor: d.after,
            order: self.order,
            states,
            prefix: self.prefix.clone(),
            flow: text("flow", &self.flow, 256)?,
            entry_module: text("entry module", &self.entry_module, 1024)?,
            entry_function: text("entry function", &self.entry_function, 1024)?,
            started: self.started,
            updated: self.updated,
            fork_of: run("fork_of", &self.fork_of)?,
            nested_in: run("nested_in", &self.nested_in)?,
            fault,
            attrs,
            waiting_node,
            waiting_tool,
            namespaces: self.namespaces.clone(),
            none,
        })
    }
}

/// One row of a run listing: the discovery row and the rest of the
/// index's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRun {
    pub row: DiscoveryRow,
    pub state: RunState,
    pub parent: Option<(String, u64)>,
    pub outer: Option<(String, String)>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// The root FlowSpec document's `id`, as the runs index keeps it.
    pub flow_id: Option<String>,
    pub namespace: Namespace,
}

/// A run that names another: a fork its parent, a nested run its outer
/// run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRun {
    pub run: String,
    pub link: ChildLink,
    /// The child's namespace: its parent's, unless an import placed it.
    pub namespace: Namespace,
}

/// How a [`ChildRun`] names its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildLink {
    /// Forked from the run's Checkpoint at this fact.
    Fork { checkpoint: u64 },
    /// Run for the run's call with this id.
    Nested { call: String },
}

/// A run's children in id order, at most the limit asked for;
/// `truncated` when it has more.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ChildPage {
    pub children: Vec<ChildRun>,
    pub truncated: bool,
}

/// A page of a run listing; `next` is the cursor of the next page, `None`
/// at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunListPage {
    pub runs: Vec<ListedRun>,
    pub next: Option<String>,
}

/// A history page request (seed, MCP `history`: "an optional fact kind,
/// offset (default 0) and limit (default 50, from 1 to 200)"; plus the
/// `--search` summary substring of `flow history`).
#[derive(Clone, Debug, Default)]
pub struct HistoryQuery {
    pub kind: Option<String>,
    pub search: Option<String>,
    pub offset: Option<u64>,
    pub limit: Option<u32>,
}

/// One fact as presented in a page.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FactView {
    /// The fact's recorded number ("fact numbers retain their original positions").
    pub n: u64,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub kind: FactKind,
    pub hash: String,
    /// The recorded call id of a Call, Reply or Close, as structured data.
    pub call: Option<String>,
    /// The summary text, "bounded to 1024 code points".
    pub text: String,
    pub says_truncated: bool,
    /// The fact; each value whose JSON exceeds 4096 bytes is left in stored
    /// form (a reference showing hash and length) instead of loaded.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub fact: Value,
    pub values_omitted: bool,
}

/// Paging data: `total` is after filtering, `factsTotal` all facts
/// (REQUIREMENTS GAP-HIST-6), `nextOffset` null at the end.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    pub total: u64,
    pub facts_total: u64,
    pub offset: u64,
    pub limit: u32,
    pub next_offset: Option<u64>,
}

/// A page of a run's verified history.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPage {
    pub run: String,
    pub state: RunState,
    /// An unfinished physical tail; SQLite commits are atomic, so a stored
    /// history is never truncated (an archive can be).
    pub truncated: bool,
    pub sources: Vec<SourceInfo>,
    pub facts: Vec<FactView>,
    pub page: PageInfo,
}

/// A recorded source as the history view lists it (seed, MCP `history`:
/// "Sources are listed by module, commit, hash and code-point length").
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub module: String,
    pub commit: Option<String>,
    pub hash: String,
    pub length: u64,
    /// The blob is stored and verified ("An unavailable source is never
    /// replaced by a working file").
    pub available: bool,
}

/// Seed, MCP `history`: "an optional source module and source_offset select
/// up to 4096 code points of its recorded text, with nextOffset null at the
/// end."
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourcePage {
    pub module: String,
    pub hash: String,
    pub offset: u64,
    pub text: String,
    pub next_offset: Option<u64>,
}
