//! The inbox (`GET /v1/calls`, the dashboard's inbox and badge): the open
//! calls of paused runs, each with how long it has waited and its
//! deadline, filtered, sorted by age or deadline, paged by an opaque
//! cursor, with the exact count of the calls the filter matches (issue 38
//! §2). It reads the store's index of the calls paused runs wait on
//! (`waiting_calls`, migration 0013: written with each pause record), not
//! the runs' histories; a call that drives a nested run is not indexed:
//! that run's calls are, listed under the nested run.

use super::RunService;
use super::store::Store;
use crate::error::{Error, Result};
use flow_engine::machine::OpenCall;
use flow_store::{
    DiscoveryQuery, Fact, Namespaces, RunId, RunInfo, RunState, WaitingCall, WaitingCursor,
    WaitingQuery, WaitingSort,
};

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
    /// Only calls of runs in these namespaces (the caller's).
    pub namespaces: Namespaces,
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
    pub outer: Option<RunId>,
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
    /// The store's query for this page (`waiting_calls`, migration 0013).
    fn store_query(&self) -> WaitingQuery {
        WaitingQuery {
            run: self.run.clone(),
            node: self.node.clone(),
            tool: self.tool.clone(),
            since_at_most: self.waiting_ms.map(|w| self.now_ms.saturating_sub(w)),
            due_before: self.due_before_ms,
            sort: match self.sort {
                InboxSort::Age => WaitingSort::Age,
                InboxSort::Due => WaitingSort::Due,
            },
            after: self.after.as_ref().map(|c| WaitingCursor {
                key: c.key,
                run: c.run.clone(),
                call: c.call.clone(),
            }),
            limit: u32::try_from(self.limit).unwrap_or(u32::MAX),
            namespaces: self.namespaces.clone(),
        }
    }
}

impl RunService {
    /// The inbox page `q` asks for, from the store's index of the calls
    /// paused runs wait on: one ordered index range and one count, then
    /// each listed call's Call fact (its prompt and schema) and run row.
    /// Blocking: it reads the store.
    pub fn inbox(&self, q: &InboxQuery) -> Result<InboxPage> {
        let store = &*self.inner.store;
        let wq = q.store_query();
        let found = store.waiting_calls(&wq)?;
        let mut page = InboxPage {
            total: found.total as usize,
            ..InboxPage::default()
        };
        if found.more
            && let Some(last) = found.calls.last()
        {
            let c = last.cursor(wq.sort);
            page.next = Some(
                InboxCursor {
                    key: c.key,
                    run: c.run,
                    call: c.call,
                }
                .text(),
            );
        }
        // The listed calls' Call facts and runs rows in one read (on
        // Postgres one query, not two round trips a call).
        let at: Vec<(RunId, u64)> = found
            .calls
            .iter()
            .map(|w| (w.run.clone(), w.fact))
            .collect();
        for (w, read) in found.calls.into_iter().zip(store.calls_at(&at)?) {
            let run = w.run.clone();
            match read
                .map_err(Error::from)
                .and_then(|(fact, info)| inbox_call(w, fact, info))
            {
                Ok(c) => page.calls.push(c),
                Err(e) => page.problems.push((run, e)),
            }
        }
        Ok(page)
    }
}

/// An indexed waiting call with what the inbox shows of it: its Call's
/// arguments (`fact`, read by number, checked against its predecessor's
/// recorded hash: a damaged Call is a problem, not a call) and its run's
/// outer run.
fn inbox_call(w: WaitingCall, fact: Fact, info: RunInfo) -> Result<InboxCall> {
    let Fact::Call { args, .. } = fact else {
        return Err(Error::from(flow_store::Error::Corrupt {
            run: w.run.to_string(),
            n: w.fact,
            reason: format!("the waiting call {} is not this fact", w.call),
        }));
    };
    let o = info.outer.map(|(o, _)| o);
    Ok(InboxCall {
        run: w.run,
        outer: o,
        fact: w.fact,
        open: OpenCall {
            call: w.call,
            task: w.task,
            node: w.node,
            tool: w.tool,
            args,
        },
        since_ms: w.since_ms,
        due_ms: w.due_ms,
    })
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
