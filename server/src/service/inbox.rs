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
    DiscoveryQuery, Fact, RunId, RunState, WaitingCall, WaitingCursor, WaitingQuery, WaitingSort,
};
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
        // Each listed call is two point reads (its Call fact, its run's
        // row): on Postgres each is a round trip, so a page's are read on
        // a few threads at once (a page of 200 is 400 round trips).
        let chunk = found.calls.len().div_ceil(READERS).max(MIN_CHUNK);
        let read: Vec<Vec<Result<InboxCall>>> = std::thread::scope(|scope| {
            let readers: Vec<_> = found
                .calls
                .chunks(chunk)
                .map(|calls| {
                    scope.spawn(move || {
                        let mut outer: BTreeMap<RunId, Option<RunId>> = BTreeMap::new();
                        calls
                            .iter()
                            .map(|w| inbox_call(store, &mut outer, w))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            readers
                .into_iter()
                .map(|r| {
                    r.join().unwrap_or_else(|_| {
                        vec![Err(Error::Unreadable("an inbox reader panicked".into()))]
                    })
                })
                .collect()
        });
        for (w, c) in found.calls.iter().zip(read.into_iter().flatten()) {
            match c {
                Ok(c) => page.calls.push(c),
                Err(e) => page.problems.push((w.run.clone(), e)),
            }
        }
        Ok(page)
    }
}

/// Threads that read an inbox page's calls at most, and the fewest calls
/// worth a thread of their own.
const READERS: usize = 4;
const MIN_CHUNK: usize = 16;

/// An indexed waiting call with what the inbox shows of it: its Call's
/// arguments (read by fact number) and its run's outer run.
fn inbox_call(
    store: &dyn Store,
    outer: &mut BTreeMap<RunId, Option<RunId>>,
    w: &WaitingCall,
) -> Result<InboxCall> {
    // The Call, checked against its predecessor's recorded hash (a damaged
    // fact is a problem, not a call): one fact read, whatever the length of
    // the run's history, so the cost follows the page, not the histories.
    let stored = store.read_after(&w.run, w.fact.saturating_sub(1), 1)?;
    let args = match stored.last().map(|f| store.expand_fact(f)).transpose()? {
        Some(Fact::Call { args, .. }) => args,
        _ => {
            return Err(Error::from(flow_store::Error::Corrupt {
                run: w.run.to_string(),
                n: w.fact,
                reason: format!("the waiting call {} is not this fact", w.call),
            }));
        }
    };
    let o = match outer.get(&w.run) {
        Some(o) => o.clone(),
        None => {
            let o = store.run_info(&w.run)?.outer.map(|(o, _)| o);
            outer.insert(w.run.clone(), o.clone());
            o
        }
    };
    Ok(InboxCall {
        run: w.run.clone(),
        outer: o,
        fact: w.fact,
        open: OpenCall {
            call: w.call.clone(),
            task: w.task.clone(),
            node: w.node.clone(),
            tool: w.tool.clone(),
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
