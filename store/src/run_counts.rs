//! Counts from the maintained counters (migration 0015, docs/store.md
//! "Run counts"): when a run query's filters are states and/or a flow —
//! the dashboard's tabs and `/metrics` — its counts are sums over a few
//! counter rows (one per flow and state) instead of `GROUP BY` scans over
//! the runs they count, so they cost the same at any store size.

use crate::api::CheckedRunList;
use crate::listing::{Arg, Dialect, Sql, where_clause};

/// Whether the counters answer `q`: no filter but states and flow (the
/// counters are kept per flow and state and know nothing else of a run).
pub(crate) fn answers(q: &CheckedRunList) -> bool {
    let CheckedRunList {
        limit: _,
        cursor: _,
        order: _,
        states: _,
        flow: _,
        prefix,
        entry_module,
        entry_function,
        started,
        updated,
        fork_of,
        nested_in,
        fault,
        attrs,
        waiting_node,
        waiting_tool,
        namespaces: _,
        none: _,
    } = q;
    prefix.is_none()
        && entry_module.is_none()
        && entry_function.is_none()
        && started.from.is_none()
        && started.to.is_none()
        && updated.from.is_none()
        && updated.to.is_none()
        && fork_of.is_none()
        && nested_in.is_none()
        && fault.is_none()
        && attrs.is_empty()
        && waiting_node.is_none()
        && waiting_tool.is_none()
}

/// The counter rows: SQLite's in place; Postgres's base rows plus the
/// deltas not folded yet (read in the same snapshot, so a fold moving
/// deltas into the base never shows a count twice or not at all).
fn source(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "run_counts c",
        Dialect::Postgres => {
            "(SELECT namespace, has_flow, flow, state, n FROM run_counts
              UNION ALL SELECT namespace, has_flow, flow, state, delta FROM run_count_deltas) c"
        }
    }
}

/// The counter rows of `q`'s namespaces (migration 0019 keeps them per
/// namespace), as a condition; none for every namespace.
fn in_namespaces(q: &CheckedRunList, d: Dialect, args: &mut Vec<Arg>, w: &mut Vec<String>) {
    if let Some(names) = q.namespaces.listed() {
        let ps: Vec<String> = names
            .iter()
            .map(|n| d.bind(args, Arg::Text(n.as_str().into())))
            .collect();
        w.push(format!("c.namespace IN ({})", ps.join(", ")));
    }
}

/// The same two `(group, count)` queries as `listing::count_sql` (by
/// state with the state filter left out; by flow with every filter), over
/// the counters. Groups whose sum is 0 are left out, as `GROUP BY` over
/// the runs would. No by-flow query when one flow is named (see
/// `listing::count_runs`).
pub(crate) fn count_sql(q: &CheckedRunList, d: Dialect) -> (Sql, Option<Sql>) {
    let sum = match d {
        Dialect::Sqlite => "SUM(c.n)",
        Dialect::Postgres => "SUM(c.n)::int8",
    };
    let named = match d {
        Dialect::Sqlite => "c.has_flow = 1",
        Dialect::Postgres => "c.has_flow",
    };
    let mut args = Vec::new();
    let mut w = Vec::new();
    in_namespaces(q, d, &mut args, &mut w);
    if let Some(f) = &q.flow {
        let p = d.bind(&mut args, Arg::Text(f.clone()));
        w.push(format!("{named} AND c.flow = {p}"));
    }
    let by_state = Sql {
        text: format!(
            "SELECT c.state, {sum} FROM {}{} GROUP BY c.state HAVING {sum} <> 0",
            source(d),
            where_clause(&w)
        ),
        args,
    };
    if q.flow.is_some() {
        return (by_state, None);
    }
    let mut args = Vec::new();
    let mut w = vec![named.to_string()];
    in_namespaces(q, d, &mut args, &mut w);
    if !q.states.is_empty() {
        let ps: Vec<String> = q
            .states
            .iter()
            .map(|s| d.bind(&mut args, Arg::Text(s.as_str().into())))
            .collect();
        w.push(format!("c.state IN ({})", ps.join(", ")));
    }
    let by_flow = Sql {
        text: format!(
            "SELECT c.flow, {sum} FROM {}{} GROUP BY c.flow HAVING {sum} <> 0",
            source(d),
            where_clause(&w)
        ),
        args,
    };
    (by_state, Some(by_flow))
}
