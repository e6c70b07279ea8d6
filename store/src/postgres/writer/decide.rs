//! Step 2 of a batch (see the parent module): each command decided in
//! memory against the heads the batch read and locked, and the rows it
//! adds to the batch's one write.

use super::{Command, Out, Plan};
use crate::api::*;
use crate::checkpoint::CkptCaches;
use crate::error::{Error, Result};
use crate::hash::parse_hash;
use crate::index::Head;
use crate::merkle::NewBlob;
use crate::postgres::sql::{NewRun, Rows};
use crate::prepare::{
    CheckedStart, host_head, host_row, import_over, plan_import, prepare_append, prepare_change,
};
use flow_abi::fact::RunId;
use flow_abi::json::canonical;

/// Decides a host record against the batch's heads.
fn host_decision(
    plan: &mut Plan,
    run: &RunId,
    record: &HostRecord,
    at_ms: i64,
) -> Result<HostRecordRow> {
    let id = run.to_string();
    let head = plan
        .heads
        .get(&id)
        .ok_or_else(|| Error::UnknownRun(id.clone()))?
        .clone();
    let seq = plan.host_seq.entry(id.clone()).or_insert(0);
    *seq += 1;
    let seq = *seq;
    crate::postgres::waiting::on_host(&mut plan.rows, &mut plan.waits, &id, &record.details);
    plan.rows.host.push((
        id.clone(),
        seq,
        record.kind().as_str(),
        at_ms,
        head.last_n as i64,
        head.last_hash,
        canonical(&record.details.to_json()),
    ));
    if let Some(h) = host_head(&head, record.kind(), at_ms) {
        plan.heads.insert(id.clone(), h.clone());
        plan.changed.insert(id, h);
    }
    Ok(host_row(seq as u64, record.clone(), at_ms, &head))
}

/// Refuses a `fresh` command whose run's Create was refused (or is not
/// in this batch): it would land on another run of that id.
fn check_fresh(plan: &Plan, run: &RunId, fresh: bool) -> Result<()> {
    if fresh && !plan.created.contains(run.as_str()) {
        return Err(Error::UnknownRun(run.to_string()));
    }
    Ok(())
}

/// Decides one command against the batch's heads (see [`crate::prepare`]).
pub(super) fn decide(
    plan: &mut Plan,
    cache: &mut CkptCaches<String>,
    cmd: &Command,
    start: Option<Result<CheckedStart>>,
) -> Result<Out> {
    match cmd {
        Command::Create { at_ms, records, .. } => {
            let mut checked = start.ok_or(Error::WriterGone)??;
            let run = checked.run.clone();
            if plan.heads.contains_key(run.as_str()) {
                return Err(Error::RunExists(run.to_string()));
            }
            let f = checked.store()?;
            for b in checked.blobs.drain(..) {
                plan.rows.refs.insert((run.to_string(), b.hash));
                plan.rows.blobs.insert(b.hash, b.body);
            }
            let state_attrs =
                crate::index::parse_state_attrs(checked.meta.state_attrs_column().as_deref());
            let id = run.to_string();
            let parent = checked.meta.parent.clone();
            plan.rows.runs.push(NewRun {
                meta: checked.meta,
                state: RunState::Running,
                ending: None,
                last_n: 1,
                last_hash: f.hash,
                at_ms: *at_ms,
                imported: false,
                fault: None,
            });
            let appended = f.appended(&run);
            plan.rows
                .facts
                .push((id.clone(), 1, f.kind.as_str(), f.hash, f.body));
            plan.heads.insert(
                id.clone(),
                Head {
                    key: 0,
                    last_n: 1,
                    last_hash: f.hash,
                    ending: None,
                    state: RunState::Running,
                    updated_ms: *at_ms,
                    state_ms: *at_ms,
                    state_attrs,
                },
            );
            plan.host_seq.insert(id.clone(), 0);
            plan.created.insert(id.clone());
            plan.notes.insert(id, 1);
            for r in records {
                if let HostDetails::Recovered { recovery } = &r.details {
                    let (parent, checkpoint) = parent.clone().unwrap_or_default();
                    plan.rows.recovery_forks.push(RecoveryFork {
                        fork: run.to_string(),
                        recovery: recovery.clone(),
                        run: parent,
                        checkpoint,
                    });
                }
                host_decision(plan, &run, r, r.at_ms.unwrap_or(*at_ms))?;
            }
            Ok(Out::Appended(appended))
        }
        Command::Append {
            run,
            fact,
            at_ms,
            fresh,
            ..
        } => {
            check_fresh(plan, run, *fresh)?;
            let id = run.to_string();
            let head = plan
                .heads
                .get(&id)
                .ok_or_else(|| Error::UnknownRun(id.clone()))?;
            let was = head.state;
            let p = match fact {
                Appending::Fact(fact) => {
                    let prev = match plan.ckpt.get(&id) {
                        Some(v) => v.as_ref(),
                        None => cache.get(&id),
                    };
                    prepare_append(run, head, fact.clone(), *at_ms, prev)?
                }
                Appending::Changed {
                    n,
                    task,
                    node,
                    change,
                } => {
                    // The base is taken (the change is applied to it in
                    // place): a batch that does not commit leaves the run
                    // with none in memory (`load_bases` reads it back).
                    let kept = match plan.ckpt.insert(id.clone(), None) {
                        Some(v) => v,
                        None => cache.take(&id),
                    };
                    let base = kept.ok_or_else(|| {
                        Error::InvalidFact(format!(
                            "{run} has no Checkpoint for a change to follow"
                        ))
                    })?;
                    let (task, node) = (task.clone(), node.clone());
                    prepare_change(run, head, *n, task, node, change.clone(), *at_ms, base)?
                }
            };
            add_blobs(&mut plan.rows, &id, p.blobs);
            crate::postgres::waiting::on_append(&mut plan.rows, &id, was);
            if let Some(f) = p.fault {
                plan.rows.faults.push((id.clone(), f));
            }
            if let Some(a) = p.state_attrs {
                // The batch's latest Checkpoint of the run wins.
                plan.rows.state_attrs.insert(id.clone(), a);
            }
            let appended = p.fact.appended(run);
            plan.rows.facts.push((
                id.clone(),
                p.fact.n,
                p.fact.kind.as_str(),
                p.fact.hash,
                p.fact.body,
            ));
            if let Some(c) = p.ckpt {
                plan.ckpt.insert(id.clone(), c);
            }
            plan.notes.insert(id.clone(), p.fact.n);
            plan.heads.insert(id.clone(), p.head.clone());
            plan.changed.insert(id, p.head);
            Ok(Out::Appended(appended))
        }
        Command::Host {
            run,
            record,
            at_ms,
            fresh,
            ..
        } => {
            check_fresh(plan, run, *fresh)?;
            host_decision(plan, run, record, *at_ms).map(Out::Host)
        }
        // Taken apart when received; never decided as one.
        Command::Many(_) => Err(Error::WriterGone),
        Command::Import {
            namespace,
            archives,
            at_ms,
            ..
        } => {
            // Every archive is decided before any row is added: one that
            // conflicts refuses them all and the plan is left as it was.
            let mut decided = Vec::with_capacity(archives.len());
            for a in archives {
                decided.push(match plan.heads.get(a.run.as_str()) {
                    Some(h) => Err(import_over(a, h.last_n, &h.last_hash)?),
                    None => Ok(plan_import(a, namespace)?),
                });
            }
            let mut outcomes = Vec::with_capacity(archives.len());
            for (a, d) in archives.iter().zip(decided) {
                outcomes.push(match d {
                    Err(present) => present,
                    Ok(p) => import_rows(plan, a, p, *at_ms),
                });
            }
            Ok(Out::Import(outcomes))
        }
    }
}

/// Adds a new imported run's rows to the plan.
fn import_rows(
    plan: &mut Plan,
    a: &crate::archive::VerifiedArchive,
    p: crate::prepare::ImportPlan,
    at_ms: i64,
) -> ImportOutcome {
    let id = a.run.to_string();
    // A run id may come back after a deletion: no checkpoint base this
    // process remembers of the deleted run may serve it.
    plan.ckpt.insert(id.clone(), None);
    add_blobs(&mut plan.rows, &id, a.blobs.clone());
    for h in &a.holes {
        plan.rows.holes.insert((id.clone(), *h));
    }
    for f in &a.facts {
        plan.rows.facts.push((
            id.clone(),
            f.n,
            f.kind.as_str(),
            f.hash,
            f.body.as_str().into(),
        ));
    }
    for (i, r) in a.host.iter().enumerate() {
        plan.rows.host.push((
            id.clone(),
            (i + 1) as i64,
            r.kind().as_str(),
            r.at_ms,
            r.head.n as i64,
            parse_hash(&r.head.hash).unwrap_or([0; 32]),
            canonical(&r.details.to_json()),
        ));
    }
    plan.heads.insert(
        id.clone(),
        Head {
            key: 0,
            last_n: p.last_n,
            last_hash: p.last_hash,
            ending: p.ending,
            state: p.state,
            updated_ms: at_ms,
            state_ms: at_ms,
            state_attrs: crate::index::parse_state_attrs(p.meta.state_attrs_column().as_deref()),
        },
    );
    plan.host_seq.insert(id.clone(), a.host.len() as i64);
    plan.notes.insert(id, p.last_n);
    plan.rows.runs.push(NewRun {
        meta: p.meta,
        state: p.state,
        ending: p.ending,
        last_n: p.last_n,
        last_hash: p.last_hash,
        at_ms,
        imported: true,
        fault: p.fault,
    });
    ImportOutcome::Imported {
        run: a.run.clone(),
        facts: p.last_n,
    }
}

fn add_blobs(rows: &mut Rows, run: &str, blobs: Vec<NewBlob>) {
    for b in blobs {
        rows.refs.insert((run.to_string(), b.hash));
        rows.blobs.entry(b.hash).or_insert(b.body);
    }
}
