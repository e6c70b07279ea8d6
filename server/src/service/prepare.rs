//! Getting a run ready to drive on, before anything is recorded: the
//! machine of a resumed run (the cached one, or the history replayed) with
//! the reply admitted and the crash's open calls settled; a fork's Start
//! and machine. Every refusal happens here, so a refused request records
//! nothing (issue 17, item 2).

use super::RunService;
use super::admit::{Reply, admit};
use super::drive::{Step, ToDispatch, steps};
use super::nested::{DeepReply, NestedCall};
use super::runs::Seen;
use super::settle::Crashed;
use super::store::Store;
use crate::error::{Error, Result};
use crate::host::HUMAN;
use crate::source::Sources;
use flow_abi::fact::{CallId, Entry, Fact, Outer, Parent};
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Machine, OpenCall};
use flow_engine::program::Program;
use flow_engine::replay::{Replayed, Replayer, Verdict};
use flow_store::{Choice, FactKind, FactRef, HostDetails, HostRecordRow, RunId};
use serde_json::{Map, Value as Json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A run's Start fact.
pub(super) fn start_fact(
    run: &RunId,
    module: &str,
    sources: &Sources,
    input: Json,
    parent: Option<(&RunId, u64)>,
    outer: Option<(&RunId, &CallId)>,
) -> Fact {
    Fact::Start {
        n: 1,
        run: run.clone(),
        data: flow_abi::DATA_VERSION.to_string(),
        entry: Entry {
            module: module.to_string(),
            function: flow_engine::program::ENTRY.to_string(),
        },
        program: sources.program_hash(),
        sources: sources.start_entries(),
        input,
        parent: parent.map(|(run, checkpoint)| Parent {
            run: run.clone(),
            checkpoint,
        }),
        outer: outer.map(|(run, call)| Outer {
            run: run.clone(),
            call: call.clone(),
        }),
    }
}

/// A Reply the host decided (admitted on resume, or settling a crash).
pub(super) fn reply_fact(call: &CallId, outcome: Outcome) -> Fact {
    Fact::Reply {
        n: 0,
        call: call.clone(),
        outcome,
    }
}

/// A run's Start, values loaded (one fact read, not the history).
pub(super) fn read_start(store: &dyn Store, run: &RunId) -> Result<Fact> {
    let first = store.read_after(run, 0, 1)?;
    let start = first
        .first()
        .filter(|f| f.kind() == FactKind::Start)
        .ok_or_else(|| Error::Unreadable(format!("{run} has no Start")))?;
    Ok(store.expand_fact(run, start)?)
}

/// The sources a run's Start records.
pub(super) fn start_sources(store: &dyn Store, run: &RunId) -> Result<Sources> {
    Sources::from_start(store, &read_start(store, run)?)
}

/// What a resume drives on with.
pub(super) struct Resumed {
    pub program: Arc<Program>,
    pub machine: Machine,
    pub first: Vec<Step>,
    pub resend: Vec<ToDispatch>,
    pub resumed_call: Option<String>,
    pub bound: super::bind::Bound,
}

/// A resume's machine before binding: see [`RunService::ready`].
pub(super) struct Ready {
    pub program: Arc<Program>,
    pub machine: Machine,
    pub first: Vec<Step>,
    pub resend: Vec<ToDispatch>,
    /// Tool calls a crash or halt left open, to settle with the run's Tools.
    pub crashed: Crashed,
    /// With a reply: the other calls open before it, whose remote workers
    /// may still hold them.
    pub others: Vec<OpenCall>,
    /// The run's host records, read once for the whole resume.
    pub records: Vec<HostRecordRow>,
}

/// The host's decision for the calls out when a run was halted or its
/// host crashed, chosen by whoever continues it (`POST …/resume {"open":
/// …}`, `flow resume --open …`); without one, each call's binding decides
/// (`resend = true` sends it again, else `Unknown`). Calls never sent are
/// sent either way, and calls held by remote workers stay theirs.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    serde::Deserialize,
    serde::Serialize,
    utoipa::ToSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum OpenChoice {
    /// Send each call again with the same `(run, call)` pair: it may run
    /// twice.
    Resend,
    /// Settle each call `Unknown`: it may or may not have happened.
    Unknown,
}

impl OpenChoice {
    pub fn as_str(self) -> &'static str {
        Choice::from(self).as_str()
    }
}

impl From<OpenChoice> for Choice {
    fn from(o: OpenChoice) -> Choice {
        match o {
            OpenChoice::Resend => Choice::Resend,
            OpenChoice::Unknown => Choice::Unknown,
        }
    }
}

impl RunService {
    /// A run's history replayed against its recorded program (the checked
    /// program from the cache by program hash) while it is read: the
    /// store's walk hands each verified logical fact to the engine as it
    /// is read, on the walk's own thread, so memory holds a few facts (one
    /// Checkpoint's whole state each), never every Checkpoint's state at
    /// once. `see` is shown each fact on its way to the engine. A fact that
    /// cannot be read is an error, whatever the replay made of the facts
    /// before it.
    pub fn replayed(
        &self,
        run: &RunId,
        see: &mut dyn FnMut(&Fact),
    ) -> Result<(Arc<Program>, Replayed)> {
        self.replayed_until(run, &mut |f| {
            see(f);
            true
        })
    }

    /// [`RunService::replayed`] as far as `see` answers true: the replay
    /// of the history's prefix up to and with the fact it answered false.
    pub fn replayed_until(
        &self,
        run: &RunId,
        see: &mut dyn FnMut(&Fact) -> bool,
    ) -> Result<(Arc<Program>, Replayed)> {
        let store: &dyn Store = &*self.inner.store;
        let mut replaying: Option<(Arc<Program>, Replayer)> = None;
        let mut refused = None;
        let walked = store.walk_logical(run, &mut |f, change| {
            let more = see(f);
            if replaying.is_none() {
                match Sources::from_start(store, f).and_then(|s| self.program(&s)) {
                    Ok(p) => replaying = Some((p.clone(), Replayer::new(p))),
                    Err(e) => {
                        refused = Some(e);
                        return false;
                    }
                }
            }
            // A replay that diverged stops the walk.
            replaying.as_mut().is_some_and(|(_, r)| r.push(f, change)) && more
        });
        if let Some(e) = refused {
            return Err(e);
        }
        // A fact that holds a hole (a redacted value) ends the replay
        // there: incomplete with reason hole (GAP-RPL-1), and no machine
        // to continue from.
        if let Err(flow_store::Error::Hole { n, .. }) = walked {
            let program = match replaying {
                Some((p, _)) => p,
                None => self.program(&start_sources(store, run)?)?,
            };
            let hole = Replayed {
                verdict: Verdict::Hole { fact: n },
                machine: None,
                unrecorded: Vec::new(),
            };
            return Ok((program, hole));
        }
        walked?;
        let (program, r) =
            replaying.ok_or_else(|| Error::Unreadable(format!("{run} has no Start")))?;
        Ok((program, r.finish()))
    }

    /// The machine of `run` at `head`: the cached one when the run is still
    /// where its drive paused it, else the history replayed. The Replies
    /// and Closes still to record (effects derived past the record's end)
    /// come first in `first`; `recorded` says which open calls have a
    /// durable Call.
    pub(super) async fn machine_at(
        &self,
        run: &RunId,
        head: &FactRef,
    ) -> Result<(Arc<Program>, Machine, Vec<Step>, Option<BTreeSet<CallId>>)> {
        // A machine kept since the pause holds the run's values in memory:
        // once any is redacted (a hole, perhaps by another server), it is
        // not used, and the replay below refuses to continue.
        if let Some((program, machine)) = self.inner.paused.at(run, head)
            && self.inner.store.holes(run)?.is_empty()
        {
            return Ok((program, machine, Vec::new(), None));
        }
        let this = self.clone();
        let (r, h) = (run.clone(), head.clone());
        tokio::task::spawn_blocking(move || {
            if let Some(f) = this.fork_restarted(&r, &h)? {
                return Ok((f.program, f.machine, f.first, Some(BTreeSet::new())));
            }
            let mut recorded = BTreeSet::new();
            let (program, replayed) = this.replayed(&r, &mut |f| {
                if let Fact::Call { call, .. } = f {
                    recorded.insert(call.clone());
                }
            })?;
            let machine = match (replayed.verdict, replayed.machine) {
                (Verdict::Hole { fact }, _) => {
                    return Err(Error::Conflict(format!(
                        "{r} holds a redacted value (a hole) at fact {fact} that continuing it needs: it cannot be resumed; fork it from a checkpoint before that fact, or from a later one supplying the redacted fields with --set"
                    )));
                }
                (Verdict::Diverged { fact, reason }, _) => {
                    return Err(Error::Unreadable(format!(
                        "{r} does not replay against its program: diverged at fact {fact}: {reason}"
                    )));
                }
                (_, None) => return Err(Error::Unreadable(format!("{r} cannot be rebuilt"))),
                (_, Some(m)) => m,
            };
            Ok((program, machine, steps(replayed.unrecorded), Some(recorded)))
        })
        .await
        .map_err(|e| Error::Unreadable(format!("a replay task ended: {e}")))?
    }

    /// Resume steps 4–6 of the seed ("Pause and resume"): the machine at
    /// the record's end, durable hitl deadlines that passed applied, the
    /// supplied reply admitted (decoded against the call's declared type),
    /// or else the calls a crash left open settled. `deep` carries a reply
    /// down to a nested run (see `nested.rs`).
    pub(super) async fn prepare_resume(
        &self,
        run: &RunId,
        seen: Seen,
        reply: Option<Reply>,
        deep: Option<DeepReply>,
        open: Option<OpenChoice>,
    ) -> Result<Resumed> {
        let Seen { info, records } = seen;
        let resumed_call = reply
            .as_ref()
            .map(|r| r.call.clone())
            .or_else(|| deep.as_ref().map(|d| d.reply.call.clone()));
        let Ready {
            program,
            mut machine,
            mut first,
            mut resend,
            crashed,
            others,
            records,
        } = self
            .ready(run, &info.last_fact, records, reply, deep, open)
            .await?;
        // Bound after every refusal: a refused resume starts no Tool.
        let imported = info.imported_ms.is_some();
        let (bound, _) = self
            .bind_at(run, &program, &info.program, imported, &records)
            .await?;
        // Calls parked for (or out at) remote workers stay theirs: the
        // drive attaches to them again.
        let module = machine.module().to_string();
        for c in others {
            if bound.host.is_remote(&module, &c.tool)
                && self.worker_queued(&bound.host, run, &c).await
            {
                resend.push(ToDispatch {
                    call: c.call.clone(),
                    tool: c.tool.clone(),
                    args: args_of(&c),
                    nested: None,
                    attempt: 1,
                });
            }
        }
        if !crashed.calls.is_empty() {
            match self
                .settle(run, &bound.host, &mut machine, crashed, open, &mut first)
                .await
            {
                Ok(r) => resend.extend(r),
                Err(e) => {
                    bound.release().await;
                    return Err(e);
                }
            }
        }
        Ok(Resumed {
            program,
            machine,
            first,
            resend,
            resumed_call,
            bound,
        })
    }

    /// The part of a resume that binds nothing (a nested run's resume uses
    /// the outer run's Tools): the machine at `head`, passed deadlines
    /// applied, and then one of three: `reply` admitted; `deep` carried to
    /// the nested run it goes to; or, with neither, every nested run the
    /// run drives continued and the other calls a crash left open handed
    /// back to be settled.
    pub(super) async fn ready(
        &self,
        run: &RunId,
        head: &FactRef,
        records: Vec<flow_store::HostRecordRow>,
        reply: Option<Reply>,
        deep: Option<DeepReply>,
        choice: Option<OpenChoice>,
    ) -> Result<Ready> {
        let (program, mut machine, mut first, recorded) = self.machine_at(run, head).await?;
        // Ended, with its End recorded (a fork cut short after its Start
        // may end within its first steps, still to record).
        if machine.ending().is_some() && first.is_empty() {
            return Err(Error::Conflict(format!(
                "{run} has ended; nothing to resume"
            )));
        }
        expire_passed(&mut machine, &records, &mut first)?;
        let links = super::nested::links(&records);
        let open = machine.open_calls();
        let mut resend = Vec::new();
        let mut crashed = Crashed::of(&records, head);
        let answered = reply
            .as_ref()
            .map(|r| r.call.clone())
            .or_else(|| deep.as_ref().map(|d| d.reply.call.clone()));
        let others: Vec<OpenCall> = match &answered {
            Some(a) => open
                .iter()
                .filter(|c| &c.call != a && c.tool != HUMAN)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if let Some(reply) = &reply {
            let (call, outcome) = admit(run, &program, &machine, reply)?;
            first.push(Step::Fact(reply_fact(&call, outcome.clone())));
            first.push(Step::Host(super::times::timing(
                &call,
                None,
                None,
                None,
                Some(super::deadlines::now_ms()),
                Some("person"),
            )));
            let more = machine
                .feed(call.as_str(), &outcome)
                .map_err(|e| Error::Conflict(e.to_string()))?;
            first.extend(steps(more));
        } else if let Some(d) = deep {
            let (next, below) = d
                .below
                .split_first()
                .ok_or_else(|| Error::Conflict(format!("no nested run of {run} to answer")))?;
            let c = open
                .iter()
                .find(|c| links.get(&c.call) == Some(next))
                .ok_or_else(|| {
                    Error::Conflict(format!("{run} has no open call driving nested run {next}"))
                })?;
            let carried = DeepReply {
                below: below.to_vec(),
                reply: d.reply,
            };
            resend.extend(super::nested::continue_call(
                &program,
                c,
                next.clone(),
                Some(carried),
                None,
            ));
        } else {
            // Calls a crash left open (not the human ones, which stay open
            // until answered). A cached machine was left at a pause: every
            // call it has open is recorded. A nested run's call continues
            // that run (one never created starts now).
            for c in open
                .into_iter()
                .filter(|c| c.tool != HUMAN)
                .filter(|c| recorded.as_ref().is_none_or(|r| r.contains(&c.call)))
            {
                match (program.nested_module(&c.tool), links.get(&c.call)) {
                    (Some(_), Some(n)) => resend.extend(super::nested::continue_call(
                        &program,
                        &c,
                        n.clone(),
                        None,
                        choice,
                    )),
                    (Some(m), None) => resend.push(ToDispatch {
                        call: c.call.clone(),
                        tool: c.tool.clone(),
                        args: args_of(&c),
                        nested: Some(NestedCall::start(m.to_string())),
                        attempt: 1,
                    }),
                    (None, _) => crashed.calls.push(c),
                }
            }
        }
        Ok(Ready {
            program,
            machine,
            first,
            resend,
            crashed,
            others,
            records,
        })
    }
}

/// Durable hitl deadlines that passed while nothing drove the run: each
/// call is closed (`timeout`) as the engine says (DESIGN §4), its Timeout
/// Reply and what follows added to `first` with its timing record.
fn expire_passed(
    machine: &mut Machine,
    records: &[flow_store::HostRecordRow],
    first: &mut Vec<Step>,
) -> Result<()> {
    let now = super::deadlines::now_ms();
    for r in records {
        let HostDetails::Timeout { call, due_ms } = &r.details else {
            continue;
        };
        if *due_ms <= now && machine.is_open(call.as_str()) {
            let more = machine
                .expire(call.as_str())
                .map_err(|e| Error::Conflict(e.to_string()))?;
            let when = super::times::timing(call, None, None, None, Some(now), Some("timeout"));
            // The Timeout Reply comes first among them; its timing rides
            // with it.
            first.extend(steps(machine.settle(more)));
            first.push(Step::Host(when));
        }
    }
    Ok(())
}

/// An open call's args object.
pub(super) fn args_of(c: &OpenCall) -> Map<String, Json> {
    match &c.args {
        Json::Object(m) => m.clone(),
        _ => Map::new(),
    }
}
