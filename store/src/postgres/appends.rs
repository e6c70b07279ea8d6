//! The store's write traits on Postgres: each call is one command to the
//! writer thread (a step's facts and records one command, so one batch),
//! answered once its batch has committed.

use super::{PostgresStore, writer};
use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::error::{Error, Result};
use crate::sqlite::now_ms;
use crate::step::{Creation, step_commands, sync_reply};
use flow_abi::fact::{Fact, RunId};

impl AppendFacts for PostgresStore {
    fn create_run_in(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
    ) -> Result<Appended> {
        let sources = sources.to_vec();
        self.send(|reply| writer::Command::Create {
            namespace: namespace.clone(),
            start,
            sources,
            records,
            at_ms: now_ms(),
            reply: sync_reply(reply),
        })
    }

    fn append(&self, run: &RunId, fact: Fact) -> Result<Appended> {
        let run = run.clone();
        self.send(|reply| writer::Command::Append {
            run,
            fact: fact.into(),
            at_ms: now_ms(),
            reply: sync_reply(reply),
            fresh: false,
        })
    }

    /// One command holding every fact and record, so the writer takes them
    /// into one batch: one transaction and one fsync for the lot.
    fn append_all_with_then(
        &self,
        run: &RunId,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    ) {
        self.submit(step_commands(run, None, facts, records, done));
    }

    /// As one command, like a step (see `append_all_with_then`).
    fn create_run_then(
        &self,
        namespace: &Namespace,
        start: Fact,
        sources: &[SourceText],
        created: Vec<HostRecord>,
        facts: Vec<Appending>,
        records: Vec<HostRecord>,
        done: AppendDone,
    ) {
        let Fact::Start { run, .. } = &start else {
            return done(Err(Error::InvalidFact(
                "a run is created with a Start".into(),
            )));
        };
        let run = run.clone();
        let creation = Creation {
            namespace: namespace.clone(),
            start,
            sources: sources.to_vec(),
            records: created,
        };
        self.submit(step_commands(&run, Some(creation), facts, records, done));
    }
}

impl PostgresStore {
    /// Hands a step's commands to the writer as one command, so it takes
    /// them into one batch: one transaction for the lot.
    fn submit(&self, cmds: Vec<writer::Command>) {
        let cmd = writer::Command::Many(cmds);
        match self.sender() {
            Ok(s) => match s.send(cmd) {
                Ok(()) => self.inner.wake.notify_one(),
                Err(std::sync::mpsc::SendError(cmd)) => cmd.answer(Err(Error::WriterGone)),
            },
            Err(e) => cmd.answer(Err(e)),
        }
    }
}

impl HostRecords for PostgresStore {
    fn record_host(&self, run: &RunId, record: HostRecord) -> Result<HostRecordRow> {
        let run = run.clone();
        let at_ms = record.at_ms.unwrap_or_else(now_ms);
        self.send(|reply| writer::Command::Host {
            run,
            record,
            at_ms,
            reply,
            fresh: false,
        })
    }

    fn host_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::host_records(s, &run))
    }

    fn start_records(&self, run: &RunId) -> Result<Vec<HostRecordRow>> {
        let run = run.clone();
        self.snapshot(move |s| crate::read::start_records(s, &run))
    }
}

impl ImportRuns for PostgresStore {
    fn import_verified_all_in(
        &self,
        namespace: &Namespace,
        archives: Vec<VerifiedArchive>,
    ) -> Result<Vec<ImportOutcome>> {
        crate::archive::check_distinct(&archives)?;
        self.send(|reply| writer::Command::Import {
            namespace: namespace.clone(),
            archives,
            at_ms: now_ms(),
            reply,
        })
    }
}
