//! What a dashboard lists and inspects, all typed in the OpenAPI document:
//! the runs list (`GET /v1/runs`: discovery rows with state, times, parent,
//! nested-run link and the flow's id and name; newest or oldest first,
//! keyset paging, the run query's filters and counts, issue 38). The inbox
//! is `inbox.rs`; the state at a checkpoint and a run's chain verification
//! are `chain.rs`.

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, QueryArgs};
use super::respond::{blocking, typed_response};
use crate::service::store::Store;
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use flow_store::{
    FactRef, ListedRun, Namespace, Namespaces, RunId, RunListQuery, RunOrder, RunState, TimeRange,
};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use utoipa::{IntoParams, ToSchema};

/// A fact number and its chain hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FactRefView {
    pub n: u64,
    /// `blake3:<hex>`.
    pub hash: String,
}

impl From<&FactRef> for FactRefView {
    fn from(f: &FactRef) -> FactRefView {
        FactRefView {
            n: f.n,
            hash: f.hash.clone(),
        }
    }
}

/// A run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateName {
    Running,
    Paused,
    Completed,
    Faulted,
    Halted,
}

impl From<RunState> for StateName {
    fn from(s: RunState) -> StateName {
        match s {
            RunState::Running => StateName::Running,
            RunState::Paused => StateName::Paused,
            RunState::Completed => StateName::Completed,
            RunState::Faulted => StateName::Faulted,
            RunState::Halted => StateName::Halted,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EntryView {
    pub module: String,
    pub function: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostDecisionView {
    /// `pause` or `halt`.
    pub kind: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProblemView {
    pub component: String,
    pub status: String,
    pub detail: String,
}

/// A fork's parent run and the checkpoint it was forked from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ParentView {
    pub run: String,
    pub checkpoint: u64,
}

/// A nested run's outer run and the call it serves.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OuterView {
    pub run: String,
    pub call: String,
}

/// The root FlowSpec document's `id` and `name`, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FlowView {
    pub id: Option<String>,
    pub name: Option<String>,
}

/// A runs list row: the discovery row (seed "Stored-run discovery") and the
/// rest of the runs index.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    pub run: String,
    pub state: StateName,
    pub history_present: bool,
    /// complete, incomplete or unreadable.
    pub record: String,
    pub truncated: bool,
    /// completed or faulted, once ended.
    pub ending: Option<String>,
    pub entry: Option<EntryView>,
    /// The recorded program fingerprint.
    pub program: Option<String>,
    pub last_fact: Option<FactRefView>,
    pub host_decision: Option<HostDecisionView>,
    pub problem: Option<ProblemView>,
    /// When Start was recorded (host clock, unix ms).
    pub created_ms: i64,
    /// When the row last changed (unix ms).
    pub updated_ms: i64,
    pub parent: Option<ParentView>,
    pub outer: Option<OuterView>,
    pub flow: Option<FlowView>,
    /// The namespace the run belongs to (issue 40 item 4).
    pub namespace: String,
}

/// `GET /v1/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunList {
    pub runs: Vec<RunRow>,
    /// Oldest first: pass as `after` for the next page; null at the end.
    pub next_after: Option<String>,
    /// Newest first: pass as `before` for the next page; null at the end.
    pub next_before: Option<String>,
    pub problems: Vec<ProblemView>,
    /// Rows looked at to fill this page: every filter is an index lookup
    /// (issue 38), so this is the number of rows listed.
    pub scanned: u64,
    /// With `counts=true`: how many runs the filters select.
    pub counts: Option<RunCountsView>,
}

/// How many runs a query's filters select (its cursor and limit aside).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCountsView {
    /// Every filter applied.
    pub total: u64,
    /// By state, the `state` filter left out (what each state tab would
    /// list); a state with no runs is 0.
    pub by_state: BTreeMap<String, u64>,
    /// By root flow id, every filter applied; runs whose flow has no id
    /// are `total` minus their sum.
    pub by_flow: Vec<FlowCount>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FlowCount {
    pub flow: String,
    pub count: u64,
}

#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    #[serde(default, deserialize_with = "super::params::query_int32")]
    pub limit: Option<u32>,
    /// Oldest first: excludes this id and earlier ones.
    pub after: Option<String>,
    /// Newest first: excludes this id and later ones.
    pub before: Option<String>,
    /// One or more of running, paused, completed, faulted, halted,
    /// separated by commas (`paused,faulted`).
    pub state: Option<String>,
    /// `oldest` (default: discovery order) or `newest`.
    pub order: Option<String>,
    /// Only runs whose root flow has this FlowSpec `id`.
    pub flow: Option<String>,
    /// Only run ids starting with this (`run-01m8…`).
    pub prefix: Option<String>,
    /// Only runs whose entry is this module, or `module#function`.
    pub entry: Option<String>,
    /// Only runs started at or after this time (unix ms).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub started_from: Option<u64>,
    /// Only runs started before this time (unix ms).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub started_to: Option<u64>,
    /// Only runs last changed at or after this time (unix ms).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub updated_from: Option<u64>,
    /// Only runs last changed before this time (unix ms).
    #[serde(default, deserialize_with = "super::params::query_int64")]
    pub updated_to: Option<u64>,
    /// Only forks of this run.
    pub fork_of: Option<String>,
    /// Only runs nested in this run (started for one of its calls).
    pub nested_in: Option<String>,
    /// Only faulted runs whose fault reason contains this text (case
    /// sensitive).
    pub fault: Option<String>,
    /// Only paused runs waiting on a call at this node.
    pub waiting_node: Option<String>,
    /// Only paused runs waiting on a call to this Tool (e.g.
    /// `std/human#input`).
    pub waiting_tool: Option<String>,
    /// Search attributes, a JSON object of name → string, integer or
    /// boolean: `{"customer":"acme","vip":true}` (each must equal; the
    /// flow declares them in `runtime_hints.search_attributes`).
    pub attrs: Option<String>,
    /// `true`: add `counts` (by state and by flow) for the same filters.
    pub counts: Option<bool>,
    /// Only runs in this namespace (one of the token's; without it, every
    /// namespace the token holds).
    pub namespace: Option<String>,
}

/// Parses a `state` list: `paused,faulted`.
pub(crate) fn parse_states(s: &str) -> Result<Vec<RunState>, String> {
    s.split(',')
        .map(|w| {
            RunState::parse(w.trim()).ok_or_else(|| {
                format!(
                    "state {w:?} is not one of running, paused, completed, faulted, halted (give one or several, separated by commas)"
                )
            })
        })
        .collect()
}

/// Parses an `attrs` object: `{"customer":"acme","vip":true}`.
pub(crate) fn parse_attrs(s: &str) -> Result<Vec<(String, Json)>, String> {
    match serde_json::from_str::<Json>(s) {
        Ok(Json::Object(m)) => Ok(m.into_iter().collect()),
        _ => Err(format!(
            "attrs must be a JSON object of search attribute names to values, such as {{\"customer\":\"acme\"}}, not {s:?}"
        )),
    }
}

/// Splits an `entry` filter: `module` or `module#function`.
pub(crate) fn parse_entry(s: &str) -> (Option<String>, Option<String>) {
    match s.rsplit_once('#') {
        Some((m, f)) => (Some(m.to_string()), Some(f.to_string())),
        None => (Some(s.to_string()), None),
    }
}

fn ms(what: &str, v: Option<u64>) -> ApiResult<Option<i64>> {
    v.map(|v| i64::try_from(v).map_err(|_| ApiError::bad_request(format!("{what} is too large"))))
        .transpose()
}

#[utoipa::path(get, path = "/v1/runs", operation_id = "list_runs", tag = "runs", params(RunsQuery),
    responses(
        (status = 200, description = "Runs: discovery rows with state, times, parent, outer run and flow; with counts=true, how many runs the filters select by state and flow", body = RunList),
        (status = 400, description = "An invalid limit, cursor, order or filter, with what to give instead", body = super::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list_runs(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    QueryArgs(q): QueryArgs<RunsQuery>,
) -> ApiResult<Response> {
    let counts = q.counts.unwrap_or(false);
    let lq = run_list_query(q, &Caller::seen(caller.as_deref()))?;
    let list = blocking(&state, move |s| Ok(runs_page(&**s.store(), &lq, counts)?)).await?;
    typed_response(StatusCode::OK, &list)
}

/// The run query `q` asks, checked as the store checks it (the runs list,
/// the replay gate and recoveries select runs with it), over the runs of
/// the namespaces `seen` (the caller's) — of one of them with `namespace=`.
pub(crate) fn run_list_query(q: RunsQuery, seen: &Namespaces) -> ApiResult<RunListQuery> {
    let namespace = q
        .namespace
        .as_deref()
        .map(Namespace::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let states = match q.state.as_deref() {
        None => Vec::new(),
        Some(s) => parse_states(s).map_err(ApiError::bad_request)?,
    };
    let order = match q.order.as_deref() {
        None | Some("oldest") => RunOrder::Oldest,
        Some("newest") => RunOrder::Newest,
        Some(o) => {
            return Err(ApiError::bad_request(format!(
                "order {o:?} is not oldest or newest"
            )));
        }
    };
    let cursor = match (order, q.after, q.before) {
        (_, Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give after or before, not both"));
        }
        (RunOrder::Oldest, a, None) => a,
        (RunOrder::Newest, None, b) => b,
        (RunOrder::Oldest, None, Some(_)) => {
            return Err(ApiError::bad_request(
                "before pages newest first: add order=newest",
            ));
        }
        (RunOrder::Newest, Some(_), None) => {
            return Err(ApiError::bad_request(
                "after pages oldest first: leave out order=newest",
            ));
        }
    };
    let (entry_module, entry_function) = q.entry.as_deref().map(parse_entry).unwrap_or_default();
    let attrs = match q.attrs.as_deref() {
        None => Vec::new(),
        Some(a) => parse_attrs(a).map_err(ApiError::bad_request)?,
    };
    let lq = RunListQuery {
        limit: q.limit,
        cursor,
        order,
        states,
        prefix: q.prefix,
        flow: q.flow,
        entry_module,
        entry_function,
        started: TimeRange {
            from: ms("started_from", q.started_from)?,
            to: ms("started_to", q.started_to)?,
        },
        updated: TimeRange {
            from: ms("updated_from", q.updated_from)?,
            to: ms("updated_to", q.updated_to)?,
        },
        fork_of: q.fork_of,
        nested_in: q.nested_in,
        fault: q.fault,
        attrs,
        waiting_node: q.waiting_node,
        waiting_tool: q.waiting_tool,
        namespaces: seen.narrowed(namespace.as_ref()),
        ..RunListQuery::default()
    };
    lq.check()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(lq)
}

/// One page of the run query, and its counts when asked for.
pub(crate) fn runs_page(
    store: &dyn Store,
    q: &RunListQuery,
    counts: bool,
) -> flow_store::Result<RunList> {
    let page = store.list_runs(q)?;
    let rows: Vec<RunRow> = page.runs.into_iter().map(|r| row(store, r)).collect();
    let (next_after, next_before) = match q.order {
        RunOrder::Oldest => (page.next, None),
        RunOrder::Newest => (None, page.next),
    };
    let counts = if counts {
        let c = store.count_runs(q)?;
        let mut by_state: BTreeMap<String, u64> = [
            RunState::Running,
            RunState::Paused,
            RunState::Completed,
            RunState::Faulted,
            RunState::Halted,
        ]
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
        for (s, n) in c.by_state {
            by_state.insert(s.as_str().to_string(), n);
        }
        Some(RunCountsView {
            total: c.total,
            by_state,
            by_flow: c
                .by_flow
                .into_iter()
                .map(|(flow, count)| FlowCount { flow, count })
                .collect(),
        })
    } else {
        None
    };
    Ok(RunList {
        scanned: rows.len() as u64,
        runs: rows,
        next_after,
        next_before,
        problems: Vec::new(),
        counts,
    })
}

fn row(store: &dyn Store, r: ListedRun) -> RunRow {
    let d = r.row;
    let text = |v: &dyn erased::Text| v.text();
    let flow = d
        .entry
        .as_ref()
        .zip(d.program.as_ref())
        .and_then(|(e, p)| flow_of(store, &d.run, &e.module, p));
    RunRow {
        state: r.state.into(),
        history_present: d.history_present,
        record: text(&d.record),
        truncated: d.truncated,
        ending: d.ending.as_ref().map(|e| text(e)),
        entry: d.entry.map(|e| EntryView {
            module: e.module,
            function: e.function,
        }),
        program: d.program,
        last_fact: d.last_fact.as_ref().map(Into::into),
        host_decision: d.host_decision.map(|h| HostDecisionView {
            kind: h.kind.as_str().into(),
            at_ms: h.at_ms,
        }),
        problem: d.problem.map(|p| ProblemView {
            component: p.component,
            status: text(&p.status),
            detail: p.detail,
        }),
        created_ms: r.created_ms,
        updated_ms: r.updated_ms,
        parent: r
            .parent
            .map(|(run, checkpoint)| ParentView { run, checkpoint }),
        outer: r.outer.map(|(run, call)| OuterView { run, call }),
        flow,
        namespace: r.namespace.to_string(),
        run: d.run,
    }
}

/// The serde name of a store enum (its wire text).
mod erased {
    pub trait Text {
        fn text(&self) -> String;
    }
    impl<T: serde::Serialize> Text for T {
        fn text(&self) -> String {
            serde_json::to_value(self)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        }
    }
}

/// (program fingerprint, root module) → the root document's id and name.
type FlowCache = HashMap<(String, String), Option<FlowView>>;

/// Flow id and name by (program fingerprint, root module): the fingerprint
/// hashes the recorded sources, so one key always names one document. A
/// bounded process-wide cache; a miss reads Start and the root source.
fn flow_of(store: &dyn Store, run: &str, module: &str, program: &str) -> Option<FlowView> {
    static CACHE: OnceLock<Mutex<FlowCache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (program.to_string(), module.to_string());
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return v;
    }
    let id = RunId::parse(run).ok()?;
    let start = store.read_after(&id, 0, 1).ok()?.into_iter().next()?;
    let hash = start.fact.source(module)?.hash.clone();
    let doc: Option<Json> = store
        .blob(&hash)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let view = doc.map(|d| FlowView {
        id: d.get("id").and_then(Json::as_str).map(str::to_string),
        name: d.get("name").and_then(Json::as_str).map(str::to_string),
    });
    if let Ok(mut c) = cache.lock() {
        if c.len() >= 4096 {
            c.clear();
        }
        c.insert(key, view.clone());
    }
    view
}
