//! `flow runs` as the run query (issue 38 item 1): the flags, the same
//! `RunListQuery` locally and the same `GET /v1/runs` parameters with
//! `--server`, and one printer of the answer (whose JSON is the same
//! either way: the local command builds it with the server's own
//! `runs_page`), so the two print the same text (tests/cli_server.rs).

use super::Global;
use super::print::{flow_cmd, shell_quote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::listing::{RunList, RunsQuery, parse_entry, parse_states};
use flow_store::{Namespace, Namespaces, RunListQuery, RunOrder, TimeRange};
use serde_json::Value as Json;

/// The run query's flags (`flow runs --help`).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct RunsFilter {
    /// Only runs whose root flow has this FlowSpec id.
    #[arg(long)]
    pub flow: Option<String>,
    /// Only runs whose entry is this module, or MODULE#FUNCTION.
    #[arg(long)]
    pub entry: Option<String>,
    /// Only runs started at or after this time (unix ms).
    #[arg(long, value_name = "MS")]
    pub started_from: Option<i64>,
    /// Only runs started before this time (unix ms).
    #[arg(long, value_name = "MS")]
    pub started_to: Option<i64>,
    /// Only runs last changed at or after this time (unix ms).
    #[arg(long, value_name = "MS")]
    pub updated_from: Option<i64>,
    /// Only runs last changed before this time (unix ms).
    #[arg(long, value_name = "MS")]
    pub updated_to: Option<i64>,
    /// Only forks of this run.
    #[arg(long, value_name = "RUN")]
    pub fork_of: Option<String>,
    /// Only runs nested in this run.
    #[arg(long, value_name = "RUN")]
    pub nested_in: Option<String>,
    /// Only faulted runs whose fault contains this text.
    #[arg(long, value_name = "TEXT")]
    pub fault: Option<String>,
    /// Only paused runs waiting on a call at this node.
    #[arg(long, value_name = "NODE")]
    pub waiting_node: Option<String>,
    /// Only paused runs waiting on a call to this Tool (std/human#input).
    #[arg(long, value_name = "TOOL")]
    pub waiting_tool: Option<String>,
    /// A search attribute the run must have (repeatable): NAME=VALUE, the
    /// value read as JSON when it is a number, true, false or a quoted
    /// string, else as text (--attr customer=acme --attr n=3).
    #[arg(long = "attr", value_name = "NAME=VALUE")]
    pub attrs: Vec<String>,
    /// Newest first (pages with --before).
    #[arg(long)]
    pub newest: bool,
    /// Newest first: start before this run id (the previous page's cursor).
    #[arg(long, value_name = "RUN", requires = "newest")]
    pub before: Option<String>,
    /// Also print how many runs the filters select, by state and flow.
    #[arg(long)]
    pub counts: bool,
    /// Only runs in this namespace (with --server, one of the token's).
    #[arg(long, value_name = "NS", value_parser = namespace_arg)]
    pub namespace: Option<Namespace>,
}

/// A `--namespace` value, checked as the store checks it.
pub(crate) fn namespace_arg(s: &str) -> std::result::Result<Namespace, String> {
    Namespace::parse(s).map_err(|e| e.to_string())
}

/// `--attr NAME=VALUE` as a name and a typed value.
fn attr(a: &str) -> Result<(String, Json)> {
    let (name, text) = a.split_once('=').ok_or_else(|| {
        Error::Refused(format!(
            "--attr {a:?} is not NAME=VALUE (e.g. --attr customer=acme)"
        ))
    })?;
    let value = match serde_json::from_str::<Json>(text) {
        Ok(v @ (Json::Number(_) | Json::Bool(_) | Json::String(_))) => v,
        _ => Json::String(text.to_string()),
    };
    Ok((name.to_string(), value))
}

/// The query `flow runs` asks, checked as the store checks it (a bad
/// value is refused before anything is read, locally and remotely alike).
pub(crate) fn query(
    limit: Option<u32>,
    after: Option<String>,
    state: Option<&str>,
    f: &RunsFilter,
) -> Result<RunListQuery> {
    let states = match state {
        None => Vec::new(),
        Some(s) => parse_states(s).map_err(Error::Refused)?,
    };
    if f.newest && after.is_some() {
        return Err(Error::Refused(
            "--after pages oldest first: with --newest give --before".into(),
        ));
    }
    let (entry_module, entry_function) = f.entry.as_deref().map(parse_entry).unwrap_or_default();
    let q = RunListQuery {
        limit,
        cursor: if f.newest { f.before.clone() } else { after },
        order: if f.newest {
            RunOrder::Newest
        } else {
            RunOrder::Oldest
        },
        states,
        flow: f.flow.clone(),
        entry_module,
        entry_function,
        started: TimeRange {
            from: f.started_from,
            to: f.started_to,
        },
        updated: TimeRange {
            from: f.updated_from,
            to: f.updated_to,
        },
        fork_of: f.fork_of.clone(),
        nested_in: f.nested_in.clone(),
        fault: f.fault.clone(),
        attrs: f.attrs.iter().map(|a| attr(a)).collect::<Result<_>>()?,
        waiting_node: f.waiting_node.clone(),
        waiting_tool: f.waiting_tool.clone(),
        namespaces: Namespaces::All.narrowed(f.namespace.as_ref()),
        ..RunListQuery::default()
    };
    q.check().map_err(|e| Error::Refused(e.to_string()))?;
    Ok(q)
}

/// The same query as the server takes it: `GET /v1/runs`' parameters,
/// and the run selection of `POST /v1/gate` and `POST /v1/recover`.
pub(crate) fn runs_query(
    limit: Option<u32>,
    after: Option<&str>,
    state: Option<&str>,
    f: &RunsFilter,
) -> Result<RunsQuery> {
    let ms = |flag: &str, v: Option<i64>| {
        v.map(|v| {
            u64::try_from(v).map_err(|_| {
                Error::Refused(format!("--{flag} {v}: a time in unix ms is 0 or more"))
            })
        })
        .transpose()
    };
    let attrs = (!f.attrs.is_empty()).then(|| {
        let m: serde_json::Map<String, Json> =
            f.attrs.iter().filter_map(|a| attr(a).ok()).collect();
        Json::Object(m).to_string()
    });
    Ok(RunsQuery {
        limit,
        after: if f.newest {
            None
        } else {
            after.map(str::to_string)
        },
        before: if f.newest { f.before.clone() } else { None },
        order: f.newest.then(|| "newest".to_string()),
        state: state.map(str::to_string),
        flow: f.flow.clone(),
        entry: f.entry.clone(),
        started_from: ms("started-from", f.started_from)?,
        started_to: ms("started-to", f.started_to)?,
        updated_from: ms("updated-from", f.updated_from)?,
        updated_to: ms("updated-to", f.updated_to)?,
        fork_of: f.fork_of.clone(),
        nested_in: f.nested_in.clone(),
        fault: f.fault.clone(),
        waiting_node: f.waiting_node.clone(),
        waiting_tool: f.waiting_tool.clone(),
        attrs,
        counts: f.counts.then_some(true),
        namespace: f.namespace.as_ref().map(Namespace::to_string),
        ..RunsQuery::default()
    })
}

/// `2026-12-06T02:30:01Z` from unix ms (UTC; days to a civil date as in
/// Howard Hinnant's `civil_from_days`).
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A duration as people read it: `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub(crate) fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", s, ms % 1000 / 100),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A row's lineage: `fork of RUN@N`, `nested in RUN`, or `-`.
fn lineage(r: &Json) -> String {
    let mut parts = Vec::new();
    if let Some(p) = r["parent"]["run"].as_str() {
        parts.push(format!("fork of {p}@{}", r["parent"]["checkpoint"]));
    }
    if let Some(o) = r["outer"]["run"].as_str() {
        parts.push(format!("nested in {o}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// Prints a `GET /v1/runs` answer (or the local one, the same JSON): a
/// header, one row per run (`RUN  [NAMESPACE]  STATE (RECORD)  STARTED
/// DURATION  FLOW  ENTRY  LINEAGE`; DURATION is from Start to the run's
/// last change; NAMESPACE when a row is outside `default`, so a page
/// without it is `default`'s alone), the counts when asked, then the
/// command for the next page with every flag of this one.
fn print(g: &Global, v: &Json, limit: Option<u32>, state: Option<&str>, f: &RunsFilter) {
    let rows = v["runs"].as_array().map_or(&[][..], |r| r);
    let spaced = rows.iter().any(|r| {
        r["namespace"]
            .as_str()
            .is_some_and(|n| n != Namespace::DEFAULT)
    });
    let namespace = |n: &str| {
        if spaced {
            format!("{n:<12}  ")
        } else {
            String::new()
        }
    };
    if rows.is_empty() {
        out!("no runs");
    } else {
        out!(
            "{:<30}  {}{:<9}  {:<22}  {:<20}  {:>8}  {:<16}  {:<16}  LINEAGE",
            "RUN",
            namespace("NAMESPACE"),
            "STATE",
            "(RECORD)",
            "STARTED",
            "DURATION",
            "FLOW",
            "ENTRY"
        );
    }
    for r in rows {
        let text = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        let created = r["createdMs"].as_i64().unwrap_or(0);
        let updated = r["updatedMs"].as_i64().unwrap_or(created);
        out!(
            "{:<30}  {}{:<9}  {:<22}  {:<20}  {:>8}  {:<16}  {:<16}  {}",
            text("run"),
            namespace(&text("namespace")),
            text("state"),
            format!("({})", text("record")),
            utc(created),
            duration(updated - created),
            r["flow"]["id"].as_str().unwrap_or("-"),
            r["entry"]["module"].as_str().unwrap_or("-"),
            lineage(r)
        );
    }
    for p in v["problems"].as_array().into_iter().flatten() {
        eprintln!("problem: {p}");
    }
    let c = &v["counts"];
    if c.is_object() {
        let states: Vec<String> = c["byState"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        let flows: Vec<String> = c["byFlow"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| format!("{} {}", x["flow"].as_str().unwrap_or("-"), x["count"]))
            .collect();
        out!("total: {}", c["total"]);
        out!("by state: {}", states.join(", "));
        out!(
            "by flow: {}",
            if flows.is_empty() {
                "-".to_string()
            } else {
                flows.join(", ")
            }
        );
    }
    let next = if f.newest {
        v["nextBefore"].as_str()
    } else {
        v["nextAfter"].as_str()
    };
    if let Some(next) = next {
        out!("more: {}", more(g, next, limit, state, f));
    }
}

/// The next page's command: every flag of this one, the cursor moved.
fn more(g: &Global, next: &str, limit: Option<u32>, state: Option<&str>, f: &RunsFilter) -> String {
    let mut cmd = format!("{} runs", flow_cmd(g));
    let mut add = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            cmd.push_str(&format!(" {flag} {}", shell_quote(&v)));
        }
    };
    if f.newest {
        add("--before", Some(next.to_string()));
    } else {
        add("--after", Some(next.to_string()));
    }
    add("--state", state.map(str::to_string));
    add("--limit", limit.map(|l| l.to_string()));
    add("--flow", f.flow.clone());
    add("--entry", f.entry.clone());
    add("--started-from", f.started_from.map(|v| v.to_string()));
    add("--started-to", f.started_to.map(|v| v.to_string()));
    add("--updated-from", f.updated_from.map(|v| v.to_string()));
    add("--updated-to", f.updated_to.map(|v| v.to_string()));
    add("--fork-of", f.fork_of.clone());
    add("--nested-in", f.nested_in.clone());
    add("--fault", f.fault.clone());
    add("--waiting-node", f.waiting_node.clone());
    add("--waiting-tool", f.waiting_tool.clone());
    add(
        "--namespace",
        f.namespace.as_ref().map(Namespace::to_string),
    );
    for a in &f.attrs {
        add("--attr", Some(a.clone()));
    }
    if f.newest {
        cmd.push_str(" --newest");
    }
    if f.counts {
        cmd.push_str(" --counts");
    }
    cmd
}

/// `flow runs` on the store under `--data`: the server's own page builder
/// over the local store, so `--json` and the text are what `--server`
/// prints.
pub(super) fn local(
    g: &Global,
    limit: Option<u32>,
    after: Option<String>,
    state: Option<String>,
    filter: &RunsFilter,
) -> Result<u8> {
    let q = query(limit, after, state.as_deref(), filter)?;
    // No store yet: no runs, and none is created (a read leaves nothing
    // behind).
    let list = if g.data.join("flow.db").exists() {
        let store = super::open_store(g)?;
        crate::http::listing::runs_page(&*store, &q, filter.counts)?
    } else {
        RunList {
            runs: Vec::new(),
            next_after: None,
            next_before: None,
            problems: Vec::new(),
            scanned: 0,
            counts: None,
        }
    };
    show(g, &list, limit, state.as_deref(), filter);
    Ok(0)
}

/// `flow --server URL runs`: `GET /v1/runs` with the same query.
pub(super) async fn remote(
    g: &Global,
    c: &Client,
    limit: Option<u32>,
    after: Option<String>,
    state: Option<String>,
    filter: &RunsFilter,
) -> Result<u8> {
    // Checked here as the store checks it: the same refusal as without
    // --server, before anything is sent.
    query(limit, after.clone(), state.as_deref(), filter)?;
    let q = runs_query(limit, after.as_deref(), state.as_deref(), filter)?;
    let list = c.list_runs(&q).await?;
    show(g, &list, limit, state.as_deref(), filter);
    Ok(0)
}

/// A page of runs: `--json` as it is, else [`print`].
fn show(g: &Global, list: &RunList, limit: Option<u32>, state: Option<&str>, f: &RunsFilter) {
    let v = serde_json::to_value(list).unwrap_or(Json::Null);
    if g.json {
        out!("{v}");
    } else {
        print(g, &v, limit, state, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_and_durations() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_765_000_000_123), "2025-12-06T05:46:40Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_345), "12.3s");
        assert_eq!(duration(245_000), "4m05s");
        assert_eq!(duration(7_380_000), "2h03m");
        assert_eq!(duration(273_600_000), "3d04h");
    }

    #[test]
    fn attrs_are_typed() {
        assert_eq!(attr("n=3").unwrap().1, json!(3));
        assert_eq!(attr("c=acme").unwrap().1, json!("acme"));
        assert_eq!(attr("c=\"3\"").unwrap().1, json!("3"));
        assert_eq!(attr("v=true").unwrap().1, json!(true));
        assert_eq!(attr("o={\"a\":1}").unwrap().1, json!("{\"a\":1}"));
        assert!(attr("nothing").is_err());
    }
}
