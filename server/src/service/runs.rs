//! Starting, resuming and forking runs: every refusal comes back before
//! anything is recorded, and each returns once what it acknowledges is
//! durable (the module header of `service` says which facts).
//!
//! A resume reads its run once, under its claim: the run's info and host
//! records in one round trip ([`Seen`]), handed to every step after it
//! (where the machine comes from, passed deadlines, the crash's open calls,
//! binding). Only a reply routed to or through a nested run reads more
//! (`nested.rs`).

use super::OpenChoice;
use super::admit::Reply;
use super::bind::Bound;
use super::lease::Claim;
use super::outcome::{Accepted, Gate, new_run_id};
use super::spawn::Start;
use super::store::blocking;
use super::{ForkAt, RunService, drive, nested, prepare, whatif};
use crate::error::{Error, Result};
use crate::source::Sources;
use flow_store::{FactRef, HostRecord, HostRecordRow, Namespace, RunId, RunInfo};
use serde_json::json;
use std::sync::atomic::Ordering;

/// A run as a resume reads it, once: where its history stands, and its
/// host records.
pub(super) struct Seen {
    pub info: RunInfo,
    pub records: Vec<HostRecordRow>,
}

impl Seen {
    pub(super) fn read(store: &dyn super::store::Store, run: &RunId) -> flow_store::Result<Seen> {
        Ok(Seen {
            info: store.run_info(run)?,
            records: store.host_records(run)?,
        })
    }
}

impl RunService {
    /// Starts a run: the program checks, the input decodes, every Tool is
    /// bound, then Start is recorded; returns once Start is durable, and
    /// drives on in a task. A refusal records nothing.
    /// The run goes to `namespace` (issue 40 item 4).
    pub async fn start(
        &self,
        namespace: &Namespace,
        sources: Sources,
        input: &str,
    ) -> Result<Accepted> {
        self.start_inner(namespace, sources, input, None).await
    }

    /// [`RunService::start`], with driving held until the [`Gate`] opens
    /// (or is dropped): the MCP server tells its client that Start was
    /// accepted "before further driving" (seed, "Accepted-Start transport
    /// view").
    pub async fn start_gated(
        &self,
        namespace: &Namespace,
        sources: Sources,
        input: &str,
    ) -> Result<(Accepted, Gate)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let accepted = self
            .start_inner(namespace, sources, input, Some(rx))
            .await?;
        Ok((accepted, Gate(tx)))
    }

    async fn start_inner(
        &self,
        namespace: &Namespace,
        sources: Sources,
        input: &str,
        gate: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<Accepted> {
        self.refuse_if_stopping()?;
        let (sources, program) = {
            let this = self.clone();
            self.inner
                .checks
                .run(sources.size(), move || {
                    let p = this.program(&sources)?;
                    Ok::<_, Error>((sources, p))
                })
                .await?
        };
        let input = flow_abi::json::parse(input)
            .map_err(|e| Error::Refused(format!("input is not valid JSON: {e}")))?;
        self.within_step_limit(&program)?;
        let (machine, effects) =
            drive::start_machine(program.clone(), program.root.clone(), input.clone())
                .await?
                .map_err(|e| Error::Refused(e.to_string()))?;
        let hash = sources.program_hash();
        let bound = self
            .inner
            .bindings
            .bind(
                &self.inner.store,
                &program,
                &hash,
                sources.dir.clone(),
                self.inner.running.runtime(),
            )
            .await?;
        let run = new_run_id();
        let start = prepare::start_fact(&run, &program.root, &sources, input, None, None);
        let first = drive::steps(effects);
        let Some(gate) = gate else {
            // Start and the first round in one commit (issue 42): the
            // answer waits for it, so it still acknowledges a durable
            // Start, and the first Calls are durable before they are sent.
            let claim = match self.claim(&run, false).await {
                Ok(c) => c,
                Err(e) => {
                    bound.release().await;
                    return Err(e);
                }
            };
            let creating = drive::creating(namespace, start, &sources, &bound.tools, Vec::new());
            let head = FactRef {
                n: 1,
                hash: String::new(),
            };
            let start = Start {
                creating: Some(creating),
                gate: None,
            };
            return self
                .spawn_drive(
                    claim,
                    bound,
                    program,
                    machine,
                    first,
                    Vec::new(),
                    head,
                    start,
                )
                .await
                .acknowledged()
                .await;
        };
        let (claim, bound, head) = self
            .create(&run, namespace, start, sources, bound, Vec::new())
            .await?;
        self.started(&run);
        Ok(self
            .spawn_drive(
                claim,
                bound,
                program,
                machine,
                first,
                Vec::new(),
                head,
                Start {
                    creating: None,
                    gate: Some(gate),
                },
            )
            .await
            .accepted)
    }

    /// A new run's Start is durable: counted, and told to `/v1/events`.
    pub(super) fn started(&self, run: &RunId) {
        self.inner.stats.started.fetch_add(1, Ordering::Relaxed);
        self.publish(run.as_str(), "running", json!({"started": true}));
    }

    /// Resumes a run: admits `reply` for an open call, or with none
    /// continues a crashed or halted run (settling the calls a crash left
    /// open), and drives on. Returns once the Reply and the facts of the
    /// first step are durable; every refusal comes first.
    ///
    /// A nested run is resumed through the outermost run whose drive
    /// carries it, and a reply sent to an outer run for a call of a nested
    /// run goes down to that run (`nested.rs`): the [`Accepted`] run is
    /// then that outermost run.
    pub async fn resume(&self, run: &RunId, reply: Option<Reply>) -> Result<Accepted> {
        self.resume_with(run, reply, None, None).await
    }

    /// [`RunService::resume`] by a caller the timing record names (`by`:
    /// the answering token's tag over HTTP; issue 38 §3).
    pub async fn resume_by(
        &self,
        run: &RunId,
        reply: Reply,
        by: Option<String>,
    ) -> Result<Accepted> {
        self.resume_with(run, Some(reply), None, by).await
    }

    /// Continues a halted or crashed run (a resume with no reply), with
    /// the host's decision for the calls that were out chosen: `open`
    /// (see [`OpenChoice`]); `None` leaves it to each call's binding. The
    /// choice holds for the nested runs it continues too (NEST-19: their
    /// calls out at the halt are settled as any call out at a halt is).
    pub async fn continue_run(&self, run: &RunId, open: Option<OpenChoice>) -> Result<Accepted> {
        self.resume_with(run, None, open, None).await
    }

    async fn resume_with(
        &self,
        run: &RunId,
        reply: Option<Reply>,
        open: Option<OpenChoice>,
        by: Option<String>,
    ) -> Result<Accepted> {
        self.refuse_if_stopping()?;
        if let Some((claim, seen)) = self.claim_direct(run, reply.as_ref()).await? {
            return self.resume_routed(claim, seen, reply, None, open, by).await;
        }
        let route = self.route(run, reply).await?;
        let claim = self.claim(&route.root, true).await?;
        let seen = self.seen(&route.root).await?;
        self.resume_routed(claim, seen, route.reply, route.deep, open, by)
            .await
    }

    /// The common resume: `run` is its own outermost run and `reply`, if
    /// any, is for one of its own calls. Then `run` is claimed and read
    /// once under the claim. `None` (nothing held) when the resume has to
    /// be routed: the run is nested, or drives nested runs a reply may be
    /// for.
    async fn claim_direct(
        &self,
        run: &RunId,
        reply: Option<&Reply>,
    ) -> Result<Option<(Claim, Seen)>> {
        let claim = match self.claim(run, true).await {
            Ok(c) => c,
            // A nested run is driven by its outer run's drive: routing
            // finds that run. Any other is refused as driven.
            Err(e @ (Error::Conflict(_) | Error::Leased { .. })) => {
                let r = run.clone();
                let nested = blocking(&self.inner.store, move |s| {
                    Ok(s.run_info(&r)?.outer.is_some())
                })
                .await?;
                return if nested { Ok(None) } else { Err(e) };
            }
            Err(e) => return Err(e),
        };
        let seen = self.seen(run).await?;
        let direct = seen.info.outer.is_none()
            && (reply.is_none() || nested::links(&seen.records).is_empty());
        Ok(direct.then_some((claim, seen)))
    }

    /// `run`, read once ([`Seen`]).
    async fn seen(&self, run: &RunId) -> Result<Seen> {
        let r = run.clone();
        blocking(&self.inner.store, move |s| Ok(Seen::read(s, &r)?)).await
    }

    /// [`RunService::resume`] of a run claimed already: it is read under
    /// the claim.
    pub(super) async fn resume_claimed(
        &self,
        claim: Claim,
        reply: Option<Reply>,
    ) -> Result<Accepted> {
        let seen = self.seen(&claim.run).await?;
        self.resume_routed(claim, seen, reply, None, None, None)
            .await
    }

    async fn resume_routed(
        &self,
        claim: Claim,
        seen: Seen,
        reply: Option<Reply>,
        deep: Option<nested::DeepReply>,
        open: Option<OpenChoice>,
        by: Option<String>,
    ) -> Result<Accepted> {
        let run = &claim.run.clone();
        if seen.info.ending.is_some() {
            return Err(Error::Conflict(match &reply {
                Some(r) => format!("{run} has ended; call {} is not open", r.call),
                None => format!("{run} has ended; nothing to resume"),
            }));
        }
        let head = seen.info.last_fact.clone();
        let prepare::Resumed {
            program,
            machine,
            mut first,
            resend,
            resumed_call,
            bound,
        } = self.prepare_resume(run, seen, reply, deep, open).await?;
        // The person's reply's timing names who answered.
        if let Some(by) = by {
            for step in &mut first {
                if let drive::Step::Host(flow_store::HostDetails::Timing(t)) = step
                    && t.via.as_deref() == Some("person")
                {
                    t.by = Some(by.clone());
                }
            }
        }
        self.inner.stats.resumed.fetch_add(1, Ordering::Relaxed);
        self.publish(run.as_str(), "running", json!({"resumed": resumed_call}));
        let accepted = self
            .spawn_drive(
                claim,
                bound,
                program,
                machine,
                first,
                resend,
                head,
                Start::default(),
            )
            .await;
        accepted.acknowledged().await
    }

    /// Forks a run from a root-task Checkpoint: a new run whose Start names
    /// the parent and checkpoint, whose first Checkpoint is that node with
    /// that state (fields replaced as `sets` say, each decoded against
    /// `state_schema`). It runs the recorded program, or `onto` when that
    /// fits (FORK-4), bound as a start of `onto` would be. At
    /// [`ForkAt::WhatIf`], from the Checkpoint before a recorded Call, that
    /// call answered with the reply given ([`whatif`]). Returns once the
    /// fork's Start is durable, with the Checkpoint it started from.
    pub async fn fork(
        &self,
        parent: &RunId,
        at: ForkAt,
        sets: &[(String, String)],
        onto: Option<Sources>,
    ) -> Result<(Accepted, u64)> {
        self.fork_recorded(parent, at, sets, onto, Vec::new()).await
    }

    /// [`RunService::fork`], with `records` (a recovery's, say) written in
    /// the commit of the fork's Start.
    pub(super) async fn fork_recorded(
        &self,
        parent: &RunId,
        at: ForkAt,
        sets: &[(String, String)],
        onto: Option<Sources>,
        records: Vec<HostRecord>,
    ) -> Result<(Accepted, u64)> {
        self.refuse_if_stopping()?;
        let onto_dir = onto.as_ref().map(|s| s.dir.clone());
        // Onto a large program: its check holds a permit (the recorded
        // program is checked once and cached).
        let permit = self
            .inner
            .checks
            .permit(onto.as_ref().map_or(0, Sources::size))?;
        let (fork, checkpoint, first, recorded) = {
            let (this, p, sets) = (self.clone(), parent.clone(), sets.to_vec());
            tokio::task::spawn_blocking(move || {
                // Forked on the parent's program: bound as the parent was,
                // from the host records made with its Start, read in this
                // same hand-off.
                let recorded = match onto {
                    Some(_) => None,
                    None => {
                        let store = &*this.inner.store;
                        let imported = store.run_info(&p)?.imported_ms.is_some();
                        Some((imported, store.start_records(&p)?))
                    }
                };
                let _held = permit;
                let (checkpoint, replacement) = match at {
                    ForkAt::Checkpoint(n) => (n, None),
                    ForkAt::WhatIf { call, reply } => {
                        let (n, r) = this.what_if_point(&p, &call, &reply)?;
                        (n, Some(r))
                    }
                };
                let mut fork = this.prepare_fork(&p, checkpoint, &sets, onto)?;
                let first = match replacement {
                    None => drive::steps(std::mem::take(&mut fork.effects)),
                    Some(r) => whatif::answered(&mut fork, &r, checkpoint)?,
                };
                Ok::<_, Error>((fork, checkpoint, first, recorded))
            })
            .await
            .map_err(|e| Error::Unreadable(format!("a store task ended: {e}")))??
        };
        self.within_step_limit(&fork.program)?;
        let (bound, dir) = match onto_dir {
            // Onto a new program: bound as a start of it would be.
            Some(dir) => (
                self.inner
                    .bindings
                    .bind(
                        &self.inner.store,
                        &fork.program,
                        &fork.hash,
                        dir.clone(),
                        self.inner.running.runtime(),
                    )
                    .await?,
                dir,
            ),
            None => {
                let (imported, records) = recorded.unwrap_or_default();
                self.bind_at(parent, &fork.program, &fork.hash, imported, &records)
                    .await?
            }
        };
        let run = fork.run.clone();
        let mut sources = fork.sources.clone();
        sources.dir = dir;
        let (claim, bound, head) = self
            // The store places a fork beside its parent.
            .create(
                &run,
                &Namespace::default(),
                fork.start.clone(),
                sources,
                bound,
                records,
            )
            .await?;
        self.inner.stats.started.fetch_add(1, Ordering::Relaxed);
        self.publish(
            run.as_str(),
            "running",
            json!({"forked": {"run": parent.as_str(), "checkpoint": checkpoint}}),
        );
        let accepted = self
            .spawn_drive(
                claim,
                bound,
                fork.program,
                fork.machine,
                first,
                Vec::new(),
                head,
                Start::default(),
            )
            .await
            .accepted;
        Ok((accepted, checkpoint))
    }

    /// Claims a new run and records its Start with `records` (durable on
    /// return); on a refusal the bound Tools are let go and nothing is
    /// recorded.
    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        run: &RunId,
        namespace: &Namespace,
        start: flow_abi::fact::Fact,
        sources: Sources,
        bound: Bound,
        records: Vec<HostRecord>,
    ) -> Result<(Claim, Bound, FactRef)> {
        let created = match self.claim(run, false).await {
            Ok(claim) => {
                let s = self.inner.store.clone();
                let committing = self.inner.commits.begin();
                let tools = bound.tools.clone();
                let namespace = namespace.clone();
                tokio::task::spawn_blocking(move || {
                    let _committing = committing;
                    drive::create(&*s, &namespace, start, &sources, &tools, records)
                })
                .await
                .map_err(|e| Error::Unreadable(format!("the store's writer: {e}")))
                .and_then(|r| r)
                .map(|head| (claim, head))
            }
            Err(e) => Err(e),
        };
        match created {
            Ok((claim, head)) => Ok((claim, bound, head)),
            Err(e) => {
                bound.release().await;
                Err(e)
            }
        }
    }
}
