//! The inbox (`GET /v1/calls`, the dashboard's inbox and badge): the open
//! calls of paused runs, each with how long it has waited and its
//! deadline, filtered, sorted by age or deadline, paged by an opaque
//! cursor, with the exact count of the calls the filter matches (issue 38
//! §2). It reads each paused run's waiting calls from the one read model
//! ([`super::pending::waiting`]); a call that drives a nested run is
//! answered by that run's calls, listed under the nested run.

use super::RunService;
use super::nested::links;
use super::pending::waiting;
use super::store::Store;
use crate::error::{Error, Result};
use flow_engine::machine::OpenCall;
use flow_store::{DiscoveryQuery, HostDetails, RunId, RunState};
use std::collections::BTreeMap;

/// Which calls an inbox page holds.
#[derive(Debug, Clone, Default)]
pub struct InboxQuery {
    /// Only this run's calls.
    pub run: Option<RunId>,
    pub node: Option<String>,
    pub tool: Option<String>,
    /// Only calls waiting at least this many milliseconds at `now_ms`.
    pub waiting_ms: Option<i64>,
    /// Only calls with a deadline before this time (unix ms).
    pub due_before_ms: Option<i64>,
    pub sort: InboxSort,
    /// The cursor the previous page answered (`next`).
    pub after: Option<InboxCursor>,
    pub limit: usize,
    /// The time `waiting_ms` counts back from (unix ms).
    pub now_ms: i64,
}

/// The inbox's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InboxSort {
    /// Longest waiting first.
    #[default]
    Age,
    /// Nearest deadline first; calls with none last.
    Due,
}

impl InboxSort {
    pub fn parse(s: &str) -> Option<InboxSort> {
        match s {
            "age" => Some(InboxSort::Age),
            "due" => Some(InboxSort::Due),
            _ => None,
        }
    }
}

/// Where a page ended: the sort key, run and call of its last call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InboxCursor {
    key: i64,
    run: String,
    call: String,
}

impl InboxCursor {
    /// A cursor as `next` gave it; `None` for anything else.
    pub fn parse(s: &str) -> Option<InboxCursor> {
        let mut parts = s.splitn(3, '~');
        let key = parts.next()?.parse().ok()?;
        let run = RunId::parse(parts.next()?).ok()?.to_string();
        let call = parts.next().filter(|c| !c.is_empty())?.to_string();
        Some(InboxCursor { key, run, call })
    }

    fn text(&self) -> String {
        format!("{}~{}~{}", self.key, self.run, self.call)
    }
}

/// One open call in the inbox.
#[derive(Debug, Clone)]
pub struct InboxCall {
    pub run: RunId,
    /// The outer run when `run` is a nested run.
    pub outer: Option<String>,
    /// The Call's fact number.
    pub fact: u64,
    pub open: OpenCall,
    /// When the run paused (unix ms).
    pub since_ms: i64,
    pub due_ms: Option<i64>,
}

/// A page of the inbox.
#[derive(Debug, Default)]
pub struct InboxPage {
    pub calls: Vec<InboxCall>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
    /// How many calls the filter matches, on every page.
    pub total: usize,
    /// Paused runs whose calls cannot be read: listed, never dropped.
    pub problems: Vec<(RunId, Error)>,
}

impl InboxQuery {
    fn admits(&self, c: &InboxCall) -> bool {
        self.node.as_ref().is_none_or(|n| *n == c.open.node)
            && self.tool.as_ref().is_none_or(|t| *t == c.open.tool)
            && self
                .waiting_ms
                .is_none_or(|w| self.now_ms - c.since_ms >= w)
            && self
                .due_before_ms
                .is_none_or(|d| c.due_ms.is_some_and(|due| due < d))
    }

    fn cursor(&self, c: &InboxCall) -> InboxCursor {
        let key = match self.sort {
            InboxSort::Age => c.since_ms,
            InboxSort::Due => c.due_ms.unwrap_or(i64::MAX),
        };
        InboxCursor {
            key,
            run: c.run.to_string(),
            call: c.open.call.clone(),
        }
    }
}

impl RunService {
    /// The inbox page `q` asks for. Blocking: it reads the store.
    pub fn inbox(&self, q: &InboxQuery) -> Result<InboxPage> {
        let store = &*self.inner.store;
        let mut page = InboxPage::default();
        let mut all = BTreeMap::new();
        for run in paused_runs(store, q.run.as_ref())? {
            match run_calls(store, &run) {
                Ok(calls) => {
                    for c in calls.into_iter().filter(|c| q.admits(c)) {
                        all.insert(q.cursor(&c), c);
                    }
                }
                Err(e) => page.problems.push((run, e)),
            }
        }
        page.total = all.len();
        let mut rest = match &q.after {
            Some(after) => all.split_off(after),
            None => all,
        };
        if let Some(after) = &q.after {
            rest.remove(after);
        }
        let more = rest.len() > q.limit;
        for (cursor, c) in rest.into_iter().take(q.limit) {
            page.next = more.then(|| cursor.text());
            page.calls.push(c);
        }
        Ok(page)
    }
}

/// The paused runs, in id order (only `run` when given).
pub(super) fn paused_runs(store: &dyn Store, run: Option<&RunId>) -> Result<Vec<RunId>> {
    if let Some(run) = run {
        let paused = store.run_info(run)?.state == RunState::Paused;
        return Ok(paused.then(|| run.clone()).into_iter().collect());
    }
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let q = DiscoveryQuery {
            limit: Some(DiscoveryQuery::MAX_LIMIT),
            after: after.clone(),
            state: Some(RunState::Paused),
        };
        let page = store.discover(&q)?;
        out.extend(page.runs.iter().filter_map(|r| RunId::parse(&r.run).ok()));
        match page.next_after {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

/// The calls of paused `run` a person answers: its open calls but those
/// that drive a nested run not ended (that run lists its own).
fn run_calls(store: &dyn Store, run: &RunId) -> Result<Vec<InboxCall>> {
    let info = store.run_info(run)?;
    let open = waiting(store, run)?.open;
    let records = store.host_records(run)?;
    let due: BTreeMap<&str, i64> = records
        .iter()
        .filter_map(|r| match &r.details {
            HostDetails::Timeout { call, due_ms } => Some((call.as_str(), *due_ms)),
            _ => None,
        })
        .collect();
    let links = links(&records);
    let outer = info.outer.map(|(o, _)| o);
    Ok(open
        .into_iter()
        .filter(|p| {
            !links
                .get(&p.open.call)
                .is_some_and(|n| store.run_info(n).is_ok_and(|i| i.ending.is_none()))
        })
        .map(|p| InboxCall {
            run: run.clone(),
            outer: outer.clone(),
            fact: p.fact.unwrap_or_default(),
            due_ms: due.get(p.open.call.as_str()).copied(),
            since_ms: info.state_ms,
            open: p.open,
        })
        .collect())
}
