//! A writer batch's rows, and writing them in one pipelined round trip
//! with the statements its connection prepared (`statements`) —
//! inside a transaction the writer began, or (`Wrap::Whole`) with its
//! BEGIN, its fence and its COMMIT in that same round trip.

pub(super) use super::statements::Conn;
use crate::api::*;
use crate::error::Error;
use crate::index::{Head, ending_text};
use crate::prepare::StartMeta;
use crate::seal::Place;
use futures_util::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet};
use std::task::Poll;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// The rows one batch writes, column by column.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) blobs: BTreeMap<[u8; 32], Vec<u8>>,
    pub(super) runs: Vec<NewRun>,
    pub(super) facts: Vec<FactRow>,
    pub(super) host: Vec<HostRow>,
    /// `(run, reason)` of each faulted End appended.
    pub(super) faults: Vec<(String, String)>,
    /// Each run's state search attributes as of its batch's latest
    /// Checkpoint: the declared names, and the rows they have now.
    pub(super) state_attrs: BTreeMap<String, crate::prepare::StateAttrs>,
    /// `(run, blob hash)`: the blob references of the batch's facts, Starts
    /// and imports (migration 0012), written with them.
    pub(super) refs: BTreeSet<(String, [u8; 32])>,
    /// `(run, blob hash)`: the holes of imported runs (migration 0018).
    pub(super) holes: BTreeSet<(String, [u8; 32])>,
    /// Runs whose waiting calls (migration 0013) go: they left paused or
    /// paused again.
    pub(super) unwait: BTreeSet<String>,
    /// `(run, row)`: the waiting calls of the batch's pauses, written after
    /// `unwait`.
    pub(super) waiting: Vec<(String, crate::waiting::WaitingRow)>,
    /// The forks a recovery made (migration 0014), written with their
    /// Starts.
    pub(super) recovery_forks: Vec<crate::api::RecoveryFork>,
}

/// `(run, n, kind, hash, body)`.
pub(super) type FactRow = (String, u64, &'static str, [u8; 32], std::sync::Arc<str>);

/// `(run, seq, kind, at_ms, head_n, head_hash, details)`.
type HostRow = (String, i64, &'static str, i64, i64, [u8; 32], String);

/// A pipelined statement and what its answer is.
type Step<'a> = (BoxFuture<'a, Result<u64, tokio_postgres::Error>>, Answer);

/// What a pipelined statement's answer means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The rows it affected: exactly this many (`None`: any).
    Rows(Option<usize>),
    /// The transaction's id (the `xmin` of every row it writes).
    Xid,
    /// COMMIT's.
    Commit,
}

/// How a batch's write is framed.
pub(super) enum Wrap<'a> {
    /// Inside the transaction the writer began (and read the heads in); it
    /// commits once the answers are checked.
    Open,
    /// The whole transaction in this one round trip: BEGIN, the fence,
    /// the rows, COMMIT. The fence locks the `runs` rows of `ids` in id
    /// order (as the heads read does) and fails the transaction unless
    /// each row's `xmin` is still the one in `xmins` — the row version
    /// this writer last wrote or read, so the heads it remembers are the
    /// stored ones and every decision made on them holds; a statement
    /// that fails aborts the transaction and COMMIT then rolls it back.
    Whole {
        ids: &'a [&'a str],
        xmins: &'a [i64],
    },
}

/// What a written batch tells the writer.
pub(super) struct Written {
    /// The transaction's id (32 bits, as a row's `xmin` reads): the row
    /// version of every `runs` row the batch wrote.
    pub(super) xid: i64,
}

pub(super) struct NewRun {
    pub(super) meta: StartMeta,
    pub(super) state: RunState,
    pub(super) ending: Option<Ending>,
    pub(super) last_n: u64,
    pub(super) last_hash: [u8; 32],
    pub(super) at_ms: i64,
    /// An archive import (`runs.imported_ms` = `at_ms`).
    pub(super) imported: bool,
    /// A faulted End's reason (an import's).
    pub(super) fault: Option<String>,
}

/// Why a batch did not commit.
pub(super) struct Failed {
    pub(super) error: Error,
    /// COMMIT was sent and its answer lost: the outcome is unknown.
    pub(super) unknown: bool,
    /// The server refused a new run's id as taken (a concurrent create).
    pub(super) unique: bool,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed {
            error,
            unknown: false,
            unique: false,
        }
    }
}

impl From<tokio_postgres::Error> for Failed {
    fn from(e: tokio_postgres::Error) -> Failed {
        Failed {
            unique: e.code() == Some(&SqlState::UNIQUE_VIOLATION),
            error: Error::from(e),
            unknown: false,
        }
    }
}

/// Writes a batch's rows in one pipelined round trip, checking each count,
/// framed as `wrap` says.
pub(super) async fn write(
    conn: &Conn,
    seal: &crate::seal::Sealer,
    channel: &str,
    r: &Rows,
    changed: &BTreeMap<String, Head>,
    notes: &BTreeMap<String, u64>,
    wrap: Wrap<'_>,
) -> Result<Written, Failed> {
    let c = &conn.client;
    let st = &conn.st;
    let blob_hash: Vec<&[u8]> = r.blobs.keys().map(|h| &h[..]).collect();
    // Sealed as bound (docs/custody.md "Encryption at rest"); as they are
    // when the store is not encrypted.
    let blob_body: Vec<std::borrow::Cow<'_, [u8]>> = r
        .blobs
        .iter()
        .map(|(h, b)| seal.seal(Place::Blob(h), b))
        .collect::<Result<_, Error>>()?;
    let blob_body: Vec<&[u8]> = blob_body.iter().map(|b| &b[..]).collect();
    let lock_keys: Vec<i64> = r.refs.iter().map(|(_, h)| blob_lock_key(h)).collect();
    let ref_run: Vec<&str> = r.refs.iter().map(|(id, _)| id.as_str()).collect();
    let ref_hash: Vec<&[u8]> = r.refs.iter().map(|(_, h)| &h[..]).collect();
    let hole_run: Vec<&str> = r.holes.iter().map(|(id, _)| id.as_str()).collect();
    let hole_hash: Vec<&[u8]> = r.holes.iter().map(|(_, h)| &h[..]).collect();
    let run_id: Vec<&str> = r.runs.iter().map(|x| x.meta.run.as_str()).collect();
    let run_state: Vec<&str> = r.runs.iter().map(|x| x.state.as_str()).collect();
    let run_em: Vec<&str> = r
        .runs
        .iter()
        .map(|x| x.meta.entry_module.as_str())
        .collect();
    let run_ef: Vec<&str> = r
        .runs
        .iter()
        .map(|x| x.meta.entry_function.as_str())
        .collect();
    let run_prog: Vec<&str> = r.runs.iter().map(|x| x.meta.program.as_str()).collect();
    let run_pr: Vec<Option<&str>> = r
        .runs
        .iter()
        .map(|x| x.meta.parent.as_ref().map(|p| p.0.as_str()))
        .collect();
    let run_pc: Vec<Option<i64>> = r
        .runs
        .iter()
        .map(|x| x.meta.parent.as_ref().map(|p| p.1 as i64))
        .collect();
    let run_or: Vec<Option<&str>> = r
        .runs
        .iter()
        .map(|x| x.meta.outer.as_ref().map(|o| o.0.as_str()))
        .collect();
    let run_oc: Vec<Option<&str>> = r
        .runs
        .iter()
        .map(|x| x.meta.outer.as_ref().map(|o| o.1.as_str()))
        .collect();
    let run_end: Vec<Option<&str>> = r.runs.iter().map(|x| x.ending.map(ending_text)).collect();
    let run_n: Vec<i64> = r.runs.iter().map(|x| x.last_n as i64).collect();
    let run_h: Vec<&[u8]> = r.runs.iter().map(|x| &x.last_hash[..]).collect();
    let run_t: Vec<i64> = r.runs.iter().map(|x| x.at_ms).collect();
    let run_imp: Vec<Option<i64>> = r
        .runs
        .iter()
        .map(|x| x.imported.then_some(x.at_ms))
        .collect();
    let run_flow: Vec<Option<&str>> = r.runs.iter().map(|x| x.meta.flow_id.as_deref()).collect();
    let run_fault: Vec<Option<&str>> = r.runs.iter().map(|x| x.fault.as_deref()).collect();
    let run_sa: Vec<Option<String>> = r.runs.iter().map(|x| x.meta.state_attrs_column()).collect();
    let run_ns: Vec<&str> = r.runs.iter().map(|x| x.meta.namespace.as_str()).collect();
    let run_inh: Vec<bool> = r.runs.iter().map(|x| x.meta.inherit).collect();
    let attrs = r
        .runs
        .iter()
        .flat_map(|x| x.meta.attrs.iter().map(move |(n, v)| (n, v, &x.meta.run)));
    let (mut a_name, mut a_value, mut a_run) = (Vec::new(), Vec::new(), Vec::new());
    for (n, v, run) in attrs {
        a_name.push(n.as_str());
        a_value.push(v.as_str());
        a_run.push(run.as_str());
    }
    let (mut d_run, mut d_name) = (Vec::new(), Vec::new());
    for (run, (names, now)) in &r.state_attrs {
        for n in names {
            d_run.push(run.as_str());
            d_name.push(n.as_str());
        }
        for (n, v) in now {
            a_name.push(n.as_str());
            a_value.push(v.as_str());
            a_run.push(run.as_str());
        }
    }
    let x_id: Vec<&str> = r.faults.iter().map(|f| f.0.as_str()).collect();
    let x_f: Vec<&str> = r.faults.iter().map(|f| f.1.as_str()).collect();
    let f_id: Vec<&str> = r.facts.iter().map(|f| f.0.as_str()).collect();
    let f_n: Vec<i64> = r.facts.iter().map(|f| f.1 as i64).collect();
    let f_kind: Vec<&str> = r.facts.iter().map(|f| f.2).collect();
    let f_hash: Vec<&[u8]> = r.facts.iter().map(|f| &f.3[..]).collect();
    let f_body: Vec<std::borrow::Cow<'_, str>> = r
        .facts
        .iter()
        .map(|f| seal.seal_text(Place::Fact(&f.3), &f.4))
        .collect::<Result<_, Error>>()?;
    let f_body: Vec<&str> = f_body.iter().map(|b| &**b).collect();
    let h_id: Vec<&str> = r.host.iter().map(|h| h.0.as_str()).collect();
    let h_seq: Vec<i64> = r.host.iter().map(|h| h.1).collect();
    let h_kind: Vec<&str> = r.host.iter().map(|h| h.2).collect();
    let h_at: Vec<i64> = r.host.iter().map(|h| h.3).collect();
    let h_n: Vec<i64> = r.host.iter().map(|h| h.4).collect();
    let h_hash: Vec<&[u8]> = r.host.iter().map(|h| &h.5[..]).collect();
    let h_det: Vec<std::borrow::Cow<'_, str>> = r
        .host
        .iter()
        .map(|h| seal.seal_text(Place::Host(&h.5, h.1, h.2), &h.6))
        .collect::<Result<_, Error>>()?;
    let h_det: Vec<&str> = h_det.iter().map(|d| &**d).collect();
    let u_id: Vec<&str> = changed.keys().map(String::as_str).collect();
    let u_n: Vec<i64> = changed.values().map(|h| h.last_n as i64).collect();
    let u_h: Vec<&[u8]> = changed.values().map(|h| &h.last_hash[..]).collect();
    let u_s: Vec<&str> = changed.values().map(|h| h.state.as_str()).collect();
    let u_e: Vec<Option<&str>> = changed
        .values()
        .map(|h| h.ending.map(ending_text))
        .collect();
    let u_t: Vec<i64> = changed.values().map(|h| h.updated_ms).collect();
    let u_st: Vec<i64> = changed.values().map(|h| h.state_ms).collect();
    let notes: Vec<String> = notes.iter().map(|(r, n)| format!("{r}:{n}")).collect();
    let un_id: Vec<&str> = r.unwait.iter().map(String::as_str).collect();
    let w = &r.waiting;
    let w_id: Vec<&str> = w.iter().map(|(id, _)| id.as_str()).collect();
    let w_call: Vec<&str> = w.iter().map(|(_, x)| x.call.as_str()).collect();
    let w_task: Vec<&str> = w.iter().map(|(_, x)| x.task.as_str()).collect();
    let w_node: Vec<&str> = w.iter().map(|(_, x)| x.node.as_str()).collect();
    let w_tool: Vec<&str> = w.iter().map(|(_, x)| x.tool.as_str()).collect();
    let w_fact: Vec<i64> = w.iter().map(|(_, x)| x.fact as i64).collect();
    let w_since: Vec<i64> = w.iter().map(|(_, x)| x.since_ms).collect();
    let w_due: Vec<Option<i64>> = w.iter().map(|(_, x)| x.due_ms).collect();
    let rf = &r.recovery_forks;
    let rf_fork: Vec<&str> = rf.iter().map(|x| x.fork.as_str()).collect();
    let rf_rec: Vec<&str> = rf.iter().map(|x| x.recovery.as_str()).collect();
    let rf_run: Vec<&str> = rf.iter().map(|x| x.run.as_str()).collect();
    let rf_cp: Vec<i64> = rf.iter().map(|x| x.checkpoint as i64).collect();

    type P<'a> = &'a (dyn ToSql + Sync);
    let p_blobs: [P<'_>; 2] = [&blob_hash, &blob_body];
    let p_locks: [P<'_>; 1] = [&lock_keys];
    let p_refs: [P<'_>; 2] = [&ref_run, &ref_hash];
    let p_holes: [P<'_>; 2] = [&hole_run, &hole_hash];
    let p_runs: [P<'_>; 19] = [
        &run_id, &run_state, &run_em, &run_ef, &run_prog, &run_pr, &run_pc, &run_or, &run_oc,
        &run_end, &run_n, &run_h, &run_t, &run_imp, &run_flow, &run_fault, &run_sa, &run_ns,
        &run_inh,
    ];
    let p_attrs: [P<'_>; 3] = [&a_name, &a_value, &a_run];
    let p_unattr: [P<'_>; 2] = [&d_run, &d_name];
    let p_faults: [P<'_>; 2] = [&x_id, &x_f];
    let p_facts: [P<'_>; 5] = [&f_id, &f_n, &f_kind, &f_hash, &f_body];
    let p_host: [P<'_>; 7] = [&h_id, &h_seq, &h_kind, &h_at, &h_n, &h_hash, &h_det];
    let p_update: [P<'_>; 7] = [&u_id, &u_n, &u_h, &u_s, &u_e, &u_t, &u_st];
    let p_notify: [P<'_>; 2] = [&channel, &notes];
    let p_unwait: [P<'_>; 1] = [&un_id];
    let p_wait: [P<'_>; 8] = [
        &w_id, &w_call, &w_task, &w_node, &w_tool, &w_fact, &w_since, &w_due,
    ];
    let p_rf: [P<'_>; 4] = [&rf_fork, &rf_rec, &rf_run, &rf_cp];
    let (whole, fence_ids, fence_xmins): (bool, &[&str], &[i64]) = match wrap {
        Wrap::Open => (false, &[], &[]),
        Wrap::Whole { ids, xmins } => (true, ids, xmins),
    };
    let fence_count = fence_ids.len() as i64;
    let p_fence: [P<'_>; 3] = [&fence_ids, &fence_xmins, &fence_count];
    use Answer::Rows as R;
    let mut steps: Vec<Step<'_>> = Vec::new();
    if whole {
        let begin = c.batch_execute("BEGIN");
        steps.push((Box::pin(async move { begin.await.map(|()| 0) }), R(None)));
        steps.push((Box::pin(c.execute(&st.fence, &p_fence)), R(Some(1))));
    }
    if !lock_keys.is_empty() {
        steps.push((Box::pin(c.execute(&st.blob_locks, &p_locks)), R(None)));
    }
    if !blob_hash.is_empty() {
        steps.push((Box::pin(c.execute(&st.blobs, &p_blobs)), R(None)));
    }
    if !run_id.is_empty() {
        steps.push((
            Box::pin(c.execute(&st.runs, &p_runs)),
            R(Some(run_id.len())),
        ));
    }
    if !f_id.is_empty() {
        steps.push((
            Box::pin(c.execute(&st.facts, &p_facts)),
            R(Some(f_id.len())),
        ));
    }
    if !h_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.host, &p_host)), R(Some(h_id.len()))));
    }
    // A run's old waiting calls go before its new ones are written.
    if !un_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.unwait, &p_unwait)), R(None)));
    }
    if !w_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.wait, &p_wait)), R(None)));
    }
    if !ref_run.is_empty() {
        steps.push((Box::pin(c.execute(&st.refs, &p_refs)), R(None)));
    }
    if !hole_run.is_empty() {
        steps.push((Box::pin(c.execute(&st.holes, &p_holes)), R(None)));
    }
    if !rf_fork.is_empty() {
        steps.push((Box::pin(c.execute(&st.recovery_forks, &p_rf)), R(None)));
    }
    if !u_id.is_empty() {
        steps.push((
            Box::pin(c.execute(&st.update, &p_update)),
            R(Some(u_id.len())),
        ));
    }
    // The state attributes' old rows go before the new ones are written.
    if !d_run.is_empty() {
        steps.push((Box::pin(c.execute(&st.unattr, &p_unattr)), R(None)));
    }
    if !a_name.is_empty() {
        steps.push((Box::pin(c.execute(&st.attrs, &p_attrs)), R(None)));
    }
    if !x_id.is_empty() {
        steps.push((
            Box::pin(c.execute(&st.faults, &p_faults)),
            R(Some(x_id.len())),
        ));
    }
    if !notes.is_empty() {
        steps.push((Box::pin(c.execute(&st.notify, &p_notify)), R(None)));
    }
    let xid = c.query_one(&st.xid, &[]);
    steps.push((
        Box::pin(async move { xid.await?.try_get::<_, i64>(0).map(|x| x as u64) }),
        Answer::Xid,
    ));
    if whole {
        let commit = c.batch_execute("COMMIT");
        steps.push((
            Box::pin(async move { commit.await.map(|()| 0) }),
            Answer::Commit,
        ));
    }
    // Poll each once, in order, so every request is sent before any answer
    // is awaited (tokio-postgres sends a request when its future is first
    // polled; the server runs them in that order).
    let mut results: Vec<Option<Result<u64, tokio_postgres::Error>>> = Vec::new();
    for (f, _) in steps.iter_mut() {
        results.push(match futures_util::poll!(f.as_mut()) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        });
    }
    // The first failure, and whether the server refused a statement (the
    // transaction is then aborted: a COMMIT after it rolls back).
    let mut first_error: Option<(Failed, bool)> = None;
    let (mut xid, mut committed) = (0, None);
    for ((f, answer), got) in steps.into_iter().zip(results) {
        let r = match got {
            Some(r) => r,
            None => f.await,
        };
        match (r, answer) {
            (Ok(n), Answer::Rows(Some(w))) if n != w as u64 => {
                first_error.get_or_insert((
                    Failed::from(Error::CommitFailed(format!(
                        "a statement wrote {n} rows, not {w}"
                    ))),
                    false,
                ));
            }
            (Ok(_), Answer::Rows(_)) => {}
            (Ok(x), Answer::Xid) => xid = x as i64,
            (Ok(_), Answer::Commit) => committed = Some(Ok(())),
            (Err(e), Answer::Commit) => committed = Some(Err(e)),
            (Err(e), _) => {
                let refused = e.as_db_error().is_some();
                first_error.get_or_insert((Failed::from(e), refused));
            }
        }
    }
    match (committed, first_error) {
        // Open: the writer commits, or rolls back on any failure.
        (None, None) => Ok(Written { xid }),
        (None, Some((f, _))) => Err(f),
        (Some(Ok(())), None) => Ok(Written { xid }),
        // A refused statement aborted the transaction: COMMIT rolled back.
        (Some(_), Some((f, true))) => Err(f),
        // COMMIT said so, but a count was wrong (which the fence rules
        // out) or its answer came with an earlier failure that the server
        // never sent: what was stored is not known.
        (Some(Ok(())), Some((f, false))) => Err(Failed { unknown: true, ..f }),
        (Some(Err(e)), first) => {
            // The server refused COMMIT (rolled back); a lost connection
            // leaves it unknown.
            let unknown = e.as_db_error().is_none();
            let f = first.map_or_else(|| Failed::from(e), |(f, _)| f);
            Err(Failed { unknown, ..f })
        }
    }
}
