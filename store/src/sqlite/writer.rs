//! The writer: the only connection that writes (see the module doc of
//! `sqlite`; `committer` says which thread runs each batch). Group commit:
//! one `BEGIN IMMEDIATE` … `COMMIT` per batch. A refused command changes
//! nothing and the rest of the batch commits: imports, deletions and
//! redactions run in a SAVEPOINT of their own, rolled back alone; a create,
//! an append or a host record needs none (see `append`, `host`): it is
//! refused before its first write, and a failure after that breaks the
//! batch, which rolls back whole.
//!
//! Here the commands and the writer's memory; `batch` runs a batch,
//! `append` creates runs and appends facts, `host` adds host records,
//! `import` writes verified archives.

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::{CkptCache, CkptCaches};
use crate::error::{Error, Result};
use crate::index::{Head, HeadColumns};
use crate::step::Reply;
use crate::tail::Heads;
use flow_abi::fact::Fact;
use flow_abi::fact::RunId;
use rusqlite::{Connection, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

mod append;
mod batch;
mod host;
mod import;

pub(crate) enum Command {
    Create {
        namespace: Namespace,
        start: Fact,
        sources: Vec<SourceText>,
        records: Vec<HostRecord>,
        at_ms: i64,
        reply: Reply<Appended>,
    },
    Append {
        run: RunId,
        fact: Appending,
        at_ms: i64,
        reply: Reply<Appended>,
        /// Of a run created in the same batch (see `StepCommand`).
        fresh: bool,
    },
    /// Commands to take into one batch (a run's step).
    Many(Vec<Command>),
    Host {
        run: RunId,
        record: HostRecord,
        at_ms: i64,
        reply: SyncSender<Result<HostRecordRow>>,
        /// Of a run created in the same batch (see `StepCommand`).
        fresh: bool,
    },
    /// Archives imported together: all or none (one savepoint).
    Import {
        namespace: Namespace,
        archives: Vec<VerifiedArchive>,
        at_ms: i64,
        reply: SyncSender<Result<Vec<ImportOutcome>>>,
    },
    /// Folds the WAL into the database file (outside any transaction).
    Checkpoint(SyncSender<Result<()>>),
    /// Deletes a run (`delete`).
    Delete {
        run: RunId,
        how: Deletion,
        at_ms: i64,
        reply: SyncSender<Result<Deleted>>,
    },
    /// Makes blobs holes of a run (`redact`).
    Redact {
        run: RunId,
        holes: crate::sqlite::redact::Holes,
        at_ms: i64,
        reply: SyncSender<Result<Redacted>>,
    },
}

crate::step::step_command!(Command);

type CacheUpdate = Option<(i64, Option<CkptCache>)>;

pub(crate) struct Writer {
    conn: Connection,
    heads: Arc<Heads>,
    cache: CkptCaches<i64>,
    run_heads: HashMap<String, Head>,
    /// Set by a create, append or host record that failed after its first
    /// write: the batch cannot commit (it holds part of a command), so it
    /// rolls back.
    broken: Option<String>,
    /// Seals the value columns of every row written (docs/custody.md).
    seal: crate::seal::Sealer,
}

/// Most run heads the writer remembers between batches.
const HEADS_BUDGET: usize = 100_000;

// The writer is the only writer, so a run's head, once loaded, is
// authoritative; a batch changes copies and writes each changed run's row
// once, just before COMMIT (so N appends to a run in one batch cost one
// UPDATE).

/// What the commands of the current batch changed, not yet committed.
#[derive(Default)]
struct Batch {
    ckpt: HashMap<i64, Option<CkptCache>>,
    heads: HashMap<String, Head>,
    gone: Vec<String>,
    /// Runs created by this batch: a `fresh` command needs its run here.
    created: HashSet<String>,
}

impl Batch {
    /// Refuses a `fresh` command whose run's Create was refused (or is
    /// not in this batch): it would land on another run of that id.
    fn check_fresh(&self, run: &RunId, fresh: bool) -> Result<()> {
        if fresh && !self.created.contains(run.as_str()) {
            return Err(Error::UnknownRun(run.to_string()));
        }
        Ok(())
    }
}

/// A successful command's changes to the writer's memory.
#[derive(Default)]
struct Effects {
    ckpt: CacheUpdate,
    head: Option<(String, Head)>,
    /// A deleted run: its id and key leave the writer's memory.
    gone: Option<(String, i64)>,
}

impl Writer {
    pub(crate) fn new(conn: Connection, heads: Arc<Heads>, seal: crate::seal::Sealer) -> Writer {
        Writer {
            conn,
            heads,
            cache: CkptCaches::new(),
            run_heads: HashMap::new(),
            broken: None,
            seal,
        }
    }

    /// `written`, a write after a command's first (see `batch`): its
    /// failure leaves the batch broken, since the batch holds part of the
    /// command, and says what `what` was writing.
    fn after_first_write<T, E: Into<Error>>(
        &mut self,
        written: std::result::Result<T, E>,
        what: impl FnOnce() -> String,
    ) -> Result<T> {
        written.map_err(|e| {
            let e = e.into();
            self.broken = Some(format!("{}: {e}", what()));
            e
        })
    }

    /// Runs one batch (see `committer`): its commands in one transaction,
    /// a WAL checkpoint among them between two transactions.
    pub(crate) fn run_batch(&mut self, batch: Vec<Command>) {
        let mut pending = Vec::with_capacity(batch.len());
        for cmd in batch {
            match cmd {
                Command::Checkpoint(reply) => {
                    self.commit_batch(std::mem::take(&mut pending));
                    let r = self
                        .conn
                        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                        .map_err(Error::from);
                    let _ = reply.send(r);
                }
                other => pending.push(other),
            }
        }
        self.commit_batch(pending);
    }

    /// The last thing the writer does: folds the WAL into the database.
    pub(crate) fn close(&mut self) {
        let _ = self
            .conn
            .execute_batch("PRAGMA optimize; PRAGMA wal_checkpoint(TRUNCATE);");
    }

    /// Runs transaction-control statements through the statement cache
    /// (they run once or twice per command, so parsing them each time shows).
    fn control(&self, sql: &[&str]) -> rusqlite::Result<()> {
        for q in sql {
            self.conn.prepare_cached(q)?.execute([])?;
        }
        Ok(())
    }

    fn forget(&mut self) {
        self.cache.clear();
        self.run_heads.clear();
    }

    /// The run's head as of this point in the batch.
    fn head(&self, run: &RunId, batch: &Batch) -> Result<Head> {
        if let Some(h) = batch
            .heads
            .get(run.as_str())
            .or_else(|| self.run_heads.get(run.as_str()))
        {
            return Ok(h.clone());
        }
        let head = self
            .conn
            .prepare_cached(
                "SELECT key, last_n, last_hash, ending, state, updated_ms, state_ms, state_attrs FROM runs WHERE id = ?1",
            )?
            .query_row([run.as_str()], |r| {
                Ok(HeadColumns {
                    key: r.get(0)?,
                    last_n: r.get(1)?,
                    last_hash: r.get_ref(2)?.as_blob()?,
                    ending: r.get_ref(3)?.as_str_or_null()?,
                    state: r.get_ref(4)?.as_str()?,
                    updated_ms: r.get(5)?,
                    state_ms: r.get(6)?,
                    state_attrs: r.get_ref(7)?.as_str_or_null()?,
                }
                .check(run))
            })
            .optional()?;
        head.ok_or_else(|| Error::UnknownRun(run.to_string()))?
    }
}

impl Command {
    /// Adds this command to a batch, a [`Command::Many`] as its parts.
    pub(crate) fn flatten_into(self, batch: &mut Vec<Command>) {
        match self {
            Command::Many(cmds) => cmds.into_iter().for_each(|c| c.flatten_into(batch)),
            c => batch.push(c),
        }
    }
}

fn fail(cmd: Command, msg: &str) {
    refuse(cmd, &|| Error::CommitFailed(msg.to_string()));
}

/// Answers every reply of `cmd` with `err()`.
pub(crate) fn refuse(cmd: Command, err: &dyn Fn() -> Error) {
    match cmd {
        Command::Create { reply, .. } => reply(Err(err())),
        Command::Append { reply, .. } => reply(Err(err())),
        Command::Many(cmds) => cmds.into_iter().for_each(|c| refuse(c, err)),
        Command::Host { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Import { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Checkpoint(reply) => {
            let _ = reply.send(Err(err()));
        }
        Command::Delete { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Redact { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
    }
}
