//! The runs index and host records as every backend stores them: the
//! columns a backend reads, and their checked conversion into the API's
//! types. A backend only runs its SQL; what the columns mean, and what makes
//! a row malformed, is decided here once.

use crate::api::*;
use crate::error::{Error, Result};
use crate::hash::{from_column, hash_text};
use flow_abi::fact::{CallId, RunId};

/// The `ending` column's text.
pub(crate) fn ending_text(e: Ending) -> &'static str {
    match e {
        Ending::Completed => "completed",
        Ending::Faulted => "faulted",
    }
}

/// Parses the `ending` column; `Err` for a value the schema does not allow.
pub(crate) fn parse_ending(col: Option<&str>) -> Result<Option<Ending>, ()> {
    match col {
        None => Ok(None),
        Some("completed") => Ok(Some(Ending::Completed)),
        Some("faulted") => Ok(Some(Ending::Faulted)),
        Some(_) => Err(()),
    }
}

/// A run's head as a writer sees it: its index row's moving part.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub key: i64,
    pub last_n: u64,
    pub last_hash: [u8; 32],
    pub ending: Option<Ending>,
    pub state: RunState,
    pub updated_ms: i64,
    /// When `state` last changed.
    pub state_ms: i64,
    /// The run's state search attribute declarations `(name, pointer)`
    /// (crate::search), read from the runs row's `state_attrs`.
    pub state_attrs: Option<std::sync::Arc<Vec<(String, String)>>>,
}

/// A runs row's head columns as a backend reads them.
pub(crate) struct HeadColumns<'a> {
    pub key: i64,
    pub last_n: i64,
    pub last_hash: &'a [u8],
    pub ending: Option<&'a str>,
    pub state: &'a str,
    pub updated_ms: i64,
    pub state_ms: i64,
    pub state_attrs: Option<&'a str>,
}

impl HeadColumns<'_> {
    /// Checks the columns of `run`'s row.
    pub(crate) fn check(self, run: &RunId) -> Result<Head> {
        let bad = |what: &str| {
            Error::corrupt(
                run.as_str(),
                self.last_n as u64,
                format!("the runs index holds a malformed {what}"),
            )
        };
        Ok(Head {
            key: self.key,
            last_n: self.last_n as u64,
            last_hash: from_column(self.last_hash).ok_or_else(|| bad("hash"))?,
            ending: parse_ending(self.ending).map_err(|()| bad("ending"))?,
            state: RunState::parse(self.state).ok_or_else(|| bad("state"))?,
            updated_ms: self.updated_ms,
            state_ms: self.state_ms,
            state_attrs: parse_state_attrs(self.state_attrs),
        })
    }
}

/// The `state_attrs` column read back; a malformed one indexes nothing.
pub(crate) fn parse_state_attrs(
    col: Option<&str>,
) -> Option<std::sync::Arc<Vec<(String, String)>>> {
    let decls: Vec<(String, String)> = serde_json::from_str(col?).ok()?;
    (!decls.is_empty()).then(|| std::sync::Arc::new(decls))
}

impl Head {
    /// This head after an update at `at_ms` to `state` and `ending`.
    pub(crate) fn moved(&self, state: RunState, ending: Option<Ending>, at_ms: i64) -> Head {
        let mut h = Head {
            state,
            ending,
            updated_ms: at_ms,
            ..self.clone()
        };
        if !h.same_state(self) {
            h.state_ms = at_ms;
        }
        h
    }

    /// Whether `self`, a later head of the same run, has `before`'s state
    /// (its indexed columns unchanged).
    pub(crate) fn same_state(&self, before: &Head) -> bool {
        self.state == before.state && self.ending == before.ending
    }
}

/// Every column of a runs row.
#[derive(Clone)]
pub(crate) struct RunColumns {
    pub key: i64,
    pub state: String,
    pub entry_module: String,
    pub entry_function: String,
    pub program: String,
    pub parent_run: Option<String>,
    pub parent_checkpoint: Option<i64>,
    pub outer_run: Option<String>,
    pub outer_call: Option<String>,
    pub ending: Option<String>,
    pub last_n: i64,
    pub last_hash: Vec<u8>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub state_ms: i64,
    pub imported_ms: Option<i64>,
    pub namespace: String,
}

/// A checked runs row: its internal key and what it says.
pub(crate) struct RunRow {
    pub key: i64,
    pub info: RunInfo,
}

impl RunColumns {
    pub(crate) fn check(self, run: &RunId) -> Result<RunRow> {
        let last_n = self.last_n as u64;
        let corrupt = |what: &str| {
            Error::corrupt(
                run.as_str(),
                last_n,
                format!("the runs index holds a malformed {what}"),
            )
        };
        let state = RunState::parse(&self.state).ok_or_else(|| corrupt("state"))?;
        let namespace = Namespace::parse(&self.namespace).map_err(|_| corrupt("namespace"))?;
        let hash = from_column(&self.last_hash).ok_or_else(|| corrupt("hash"))?;
        let ending = parse_ending(self.ending.as_deref()).map_err(|()| corrupt("ending"))?;
        let parent = match (self.parent_run, self.parent_checkpoint) {
            (Some(r), Some(c)) => Some((
                RunId::parse(&r).map_err(|_| corrupt("parent run"))?,
                c as u64,
            )),
            _ => None,
        };
        let outer = match (self.outer_run, self.outer_call) {
            (Some(r), Some(c)) => Some((
                RunId::parse(&r).map_err(|_| corrupt("outer run"))?,
                CallId::parse(&c).map_err(|_| corrupt("outer call"))?,
            )),
            _ => None,
        };
        Ok(RunRow {
            key: self.key,
            info: RunInfo {
                run: run.clone(),
                state,
                entry: Entry {
                    module: self.entry_module,
                    function: self.entry_function,
                },
                program: self.program,
                parent,
                outer,
                ending,
                last_fact: FactRef {
                    n: last_n,
                    hash: hash_text(&hash),
                },
                created_ms: self.created_ms,
                updated_ms: self.updated_ms,
                state_ms: self.state_ms,
                imported_ms: self.imported_ms,
                namespace,
            },
        })
    }
}

/// The columns of a host_records row.
pub(crate) struct HostColumns {
    pub seq: i64,
    pub kind: String,
    pub at_ms: i64,
    pub head_n: i64,
    pub head_hash: Vec<u8>,
    pub details: String,
}

impl HostColumns {
    pub(crate) fn check(self, run: &RunId) -> Result<HostRecordRow> {
        let (seq, head_n) = (self.seq, self.head_n);
        let bad = |what: &str| {
            Error::corrupt(
                run.as_str(),
                head_n as u64,
                format!("host record {seq}: malformed {what}"),
            )
        };
        Ok(HostRecordRow {
            seq: seq as u64,
            at_ms: self.at_ms,
            head: FactRef {
                n: head_n as u64,
                hash: hash_text(&from_column(&self.head_hash).ok_or_else(|| bad("head hash"))?),
            },
            details: HostDetails::from_json(
                HostRecordKind::parse(&self.kind).ok_or_else(|| bad("kind"))?,
                flow_abi::json::parse(&self.details).map_err(|_| bad("details"))?,
            ),
        })
    }
}

/// The columns discovery reads for one run: its runs row and its latest
/// pause or halt record `(kind, at_ms, head_n, head_hash)`.
pub(crate) struct DiscoveryColumns {
    /// The run's internal key (its facts are read by it).
    pub key: i64,
    pub id: String,
    pub entry_module: String,
    pub entry_function: String,
    pub program: String,
    pub ending: Option<String>,
    pub last_n: i64,
    pub last_hash: Vec<u8>,
    pub decision: Option<(String, i64, i64, Vec<u8>)>,
}

impl DiscoveryColumns {
    /// The seed's row; a malformed hash is reported as the row's problem.
    pub(crate) fn row(self) -> DiscoveryRow {
        let ending = parse_ending(self.ending.as_deref()).unwrap_or(None);
        let (last_n, last_hash) = (self.last_n, self.last_hash);
        let host_decision = self
            .decision
            .filter(|(_, _, n, h)| *n == last_n && *h == last_hash)
            .and_then(|(k, at, _, _)| {
                HostRecordKind::parse(&k).map(|kind| HostDecision { kind, at_ms: at })
            });
        let last_fact = from_column(&last_hash).map(|h| FactRef {
            n: last_n as u64,
            hash: hash_text(&h),
        });
        let problem = last_fact.is_none().then(|| Problem {
            component: "runs".into(),
            status: ProblemStatus::Unreadable,
            detail: "the runs index holds a malformed hash".into(),
        });
        DiscoveryRow {
            run: self.id,
            history_present: true,
            record: if problem.is_some() {
                RecordStatus::Unreadable
            } else if ending.is_some() {
                RecordStatus::Complete
            } else {
                RecordStatus::Incomplete
            },
            truncated: false,
            ending,
            entry: Some(Entry {
                module: self.entry_module,
                function: self.entry_function,
            }),
            program: Some(self.program),
            last_fact,
            host_decision,
            problem,
        }
    }
}

/// A page from up to `limit + 1` rows read in id order.
pub(crate) fn discovery_page(rows: Vec<DiscoveryColumns>, limit: u32) -> DiscoveryPage {
    let more = rows.len() as i64 > i64::from(limit);
    let runs: Vec<DiscoveryRow> = rows
        .into_iter()
        .take(limit as usize)
        .map(DiscoveryColumns::row)
        .collect();
    let next_after = if more {
        runs.last().map(|r| r.run.clone())
    } else {
        None
    };
    DiscoveryPage {
        runs,
        next_after,
        problems: Vec::new(),
    }
}
