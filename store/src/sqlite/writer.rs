//! The writer: the only connection that writes (see the module doc of
//! `sqlite`; `committer` says which thread runs each batch). Group commit:
//! one `BEGIN IMMEDIATE` … `COMMIT` per batch. A refused command changes nothing and the rest of the batch
//! commits: creates, host records and imports run in a SAVEPOINT of their
//! own, rolled back alone; an append needs none (see `append`).

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::{CkptCache, CkptCaches};
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::hash::parse_hash;
use crate::index::{Head, HeadColumns, ending_text};
use crate::merkle::NewBlob;
use crate::prepare::{
    Reply, StartMeta, check_start, host_head, host_row, import_over, plan_import, prepare_append,
    prepare_change, sync_reply,
};
use crate::tail::Heads;
use flow_abi::fact::Fact;
use flow_abi::fact::RunId;
use flow_abi::json::canonical;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

pub(crate) enum Command {
    Create {
        start: Fact,
        sources: Vec<SourceText>,
        records: Vec<HostRecord>,
        at_ms: i64,
        reply: SyncSender<Result<Appended>>,
    },
    Append {
        run: RunId,
        fact: Appending,
        at_ms: i64,
        reply: Reply<Appended>,
    },
    /// Commands to take into one batch (a run's step).
    Many(Vec<Command>),
    Host {
        run: RunId,
        record: HostRecord,
        at_ms: i64,
        reply: SyncSender<Result<HostRecordRow>>,
    },
    Import {
        archive: Box<VerifiedArchive>,
        at_ms: i64,
        reply: SyncSender<Result<ImportOutcome>>,
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
}

type CacheUpdate = Option<(i64, Option<CkptCache>)>;

/// Sends a held result; the argument is the commit error, if any.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// A command's result, held until the batch commits.
struct Done {
    answer: Answer,
    notify: Option<HeadNote>,
}

fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T>) -> Answer {
    Box::new(move |commit_error: Option<&str>| {
        let out = match (commit_error, result) {
            (Some(msg), Ok(_)) => Err(Error::CommitFailed(msg.to_string())),
            (_, r) => r,
        };
        reply(out);
    })
}

pub(crate) struct Writer {
    conn: Connection,
    heads: Arc<Heads>,
    cache: CkptCaches<i64>,
    run_heads: HashMap<String, Head>,
    /// Set by an append that failed after its fact was written: the
    /// batch cannot commit (it holds part of a command), so it rolls back.
    broken: Option<String>,
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
    pub(crate) fn new(conn: Connection, heads: Arc<Heads>) -> Writer {
        Writer {
            conn,
            heads,
            cache: CkptCaches::new(),
            run_heads: HashMap::new(),
            broken: None,
        }
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

    fn commit_batch(&mut self, cmds: Vec<Command>) {
        if cmds.is_empty() {
            return;
        }
        let mut done: Vec<Done> = Vec::with_capacity(cmds.len());
        let mut batch = Batch::default();
        if let Err(e) = self.control(&["BEGIN IMMEDIATE"]) {
            let msg = e.to_string();
            for cmd in cmds {
                fail(cmd, &msg);
            }
            return;
        }
        let mut control_error: Option<String> = None;
        let mut rest = cmds.into_iter();
        for cmd in rest.by_ref() {
            // An append needs no savepoint of its own (see `append`): it
            // writes nothing before it is admitted, then its fact in one
            // statement, refused whole or done. (A savepoint per fact also
            // copied each page it touched into SQLite's sub-journal.)
            let guarded = !matches!(cmd, Command::Append { .. });
            if guarded && let Err(e) = self.control(&["SAVEPOINT cmd"]) {
                control_error = Some(e.to_string());
                fail(cmd, &e.to_string());
                break;
            }
            let (d, effects) = self.exec(cmd, &mut batch);
            let end: &[&str] = match (guarded, effects.is_some()) {
                (false, _) => &[],
                (true, true) => &["RELEASE cmd"],
                (true, false) => &["ROLLBACK TO cmd", "RELEASE cmd"],
            };
            if let Some(msg) = self.broken.take() {
                control_error = Some(msg);
                done.push(d);
                break;
            }
            if let Err(e) = self.control(end) {
                control_error = Some(e.to_string());
                done.push(d);
                break;
            }
            if let Some(fx) = effects {
                if let Some((k, v)) = fx.ckpt {
                    batch.ckpt.insert(k, v);
                }
                if let Some((run, h)) = fx.head {
                    batch.heads.insert(run, h);
                }
                if let Some((run, key)) = fx.gone {
                    // SQLite may give a later run the same key: nothing
                    // of this one may stay behind under it.
                    batch.heads.remove(&run);
                    batch.ckpt.insert(key, None);
                    batch.gone.push(run);
                }
            }
            done.push(d);
        }
        let commit = match control_error {
            Some(msg) => Err(msg),
            None => self
                .write_heads(&batch)
                .and_then(|()| self.control(&["COMMIT"]).map_err(|e| e.to_string())),
        };
        match commit {
            Ok(()) => {
                for (k, v) in batch.ckpt {
                    self.cache.set(k, v);
                }
                if self.run_heads.len() + batch.heads.len() > HEADS_BUDGET {
                    self.run_heads.clear();
                }
                self.run_heads.extend(batch.heads);
                for run in &batch.gone {
                    self.run_heads.remove(run);
                }
                let notes = HeadNote::gather(done.iter_mut().filter_map(|d| d.notify.take()));
                for d in done {
                    (d.answer)(None);
                }
                // Heads move only after COMMIT: a subscriber never sees a
                // fact that could still roll back.
                self.heads.bump(&notes);
            }
            Err(msg) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                // Memory may now be ahead of the database: forget it. The
                // next checkpoint of each run is a snapshot.
                self.forget();
                for d in done {
                    (d.answer)(Some(&msg));
                }
                for cmd in rest {
                    fail(cmd, &msg);
                }
            }
        }
    }

    /// One UPDATE per run the batch changed. A run whose committed head is
    /// in memory with the same state has only its unindexed columns set: a
    /// step's commit then writes the runs row's page and no index page
    /// (SQLite rewrites an index entry whenever an UPDATE sets one of its
    /// columns, even to the value it had).
    fn write_heads(&self, batch: &Batch) -> Result<(), String> {
        let e = |e: rusqlite::Error| e.to_string();
        for (run, h) in &batch.heads {
            let steady = self.run_heads.get(run).is_some_and(|old| h.same_state(old));
            if steady {
                self.conn
                    .prepare_cached("UPDATE runs SET last_n = ?1, last_hash = ?2, updated_ms = ?3 WHERE key = ?4")
                    .map_err(e)?
                    .execute(params![h.last_n as i64, &h.last_hash[..], h.updated_ms, h.key])
                    .map_err(e)?;
            } else {
                self.conn
                    .prepare_cached("UPDATE runs SET last_n = ?1, last_hash = ?2, state = ?3, ending = ?4, updated_ms = ?5, state_ms = ?6 WHERE key = ?7")
                    .map_err(e)?
                    .execute(params![
                        h.last_n as i64,
                        &h.last_hash[..],
                        h.state.as_str(),
                        h.ending.map(ending_text),
                        h.updated_ms,
                        h.state_ms,
                        h.key
                    ])
                    .map_err(e)?;
            }
        }
        Ok(())
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

    /// Runs one command; `None` effects means it failed and is rolled back.
    fn exec(&mut self, cmd: Command, batch: &mut Batch) -> (Done, Option<Effects>) {
        match cmd {
            Command::Create {
                start,
                sources,
                records,
                at_ms,
                reply,
            } => {
                let r = self.create(start, &sources, records, at_ms, batch);
                let fx = r.as_ref().ok().map(|_| Effects::default());
                let notify = r.as_ref().ok().map(HeadNote::of);
                (
                    Done {
                        answer: answer(sync_reply(reply), r),
                        notify,
                    },
                    fx,
                )
            }
            Command::Append {
                run,
                fact,
                at_ms,
                reply,
            } => match self.append(&run, fact, at_ms, batch) {
                Ok((a, fx)) => {
                    let notify = Some(HeadNote::of(&a));
                    (
                        Done {
                            answer: answer(reply, Ok(a)),
                            notify,
                        },
                        Some(fx),
                    )
                }
                Err(e) => (
                    Done {
                        answer: answer::<Appended>(reply, Err(e)),
                        notify: None,
                    },
                    None,
                ),
            },
            Command::Host {
                run,
                record,
                at_ms,
                reply,
            } => match self.host(&run, record, at_ms, batch) {
                Ok((row, fx)) => (
                    Done {
                        answer: answer(sync_reply(reply), Ok(row)),
                        notify: None,
                    },
                    Some(fx),
                ),
                Err(e) => (
                    Done {
                        answer: answer::<HostRecordRow>(sync_reply(reply), Err(e)),
                        notify: None,
                    },
                    None,
                ),
            },
            Command::Import {
                archive,
                at_ms,
                reply,
            } => {
                let r = self.import(&archive, at_ms, batch);
                let fx = r.as_ref().ok().map(|_| Effects::default());
                let notify = match &r {
                    Ok(ImportOutcome::Imported { run, facts }) => Some(HeadNote {
                        run: run.to_string(),
                        n: *facts,
                        facts: Vec::new(),
                    }),
                    _ => None,
                };
                (
                    Done {
                        answer: answer(sync_reply(reply), r),
                        notify,
                    },
                    fx,
                )
            }
            Command::Many(cmds) => {
                // Taken apart when received; never run as one.
                for c in cmds {
                    fail(c, "a nested batch");
                }
                (
                    Done {
                        answer: Box::new(|_| {}),
                        notify: None,
                    },
                    None,
                )
            }
            Command::Delete {
                run,
                how,
                at_ms,
                reply,
            } => {
                let r = self.head(&run, batch).and_then(|head| {
                    super::delete::delete(&self.conn, &run, &head, &how, at_ms)
                        .map(|d| (d, head.key))
                });
                let fx = r.as_ref().ok().map(|(_, key)| Effects {
                    gone: Some((run.to_string(), *key)),
                    ..Effects::default()
                });
                (
                    Done {
                        answer: answer(sync_reply(reply), r.map(|(d, _)| d)),
                        notify: None,
                    },
                    fx,
                )
            }
            Command::Checkpoint(reply) => {
                let r: Result<()> = Ok(());
                (
                    Done {
                        answer: answer(sync_reply(reply), r),
                        notify: None,
                    },
                    Some(Effects::default()),
                )
            }
        }
    }

    fn insert_blobs(&self, blobs: &[NewBlob]) -> Result<()> {
        // Most facts have none: no statement to find in the cache.
        if blobs.is_empty() {
            return Ok(());
        }
        let mut st = self.conn.prepare_cached(
            "INSERT INTO blobs (hash, body) VALUES (?1, ?2) ON CONFLICT (hash) DO NOTHING",
        )?;
        for b in blobs {
            st.execute(params![&b.hash[..], &b.body])?;
        }
        Ok(())
    }

    fn insert_fact(
        &self,
        key: i64,
        n: u64,
        kind: FactKind,
        hash: &[u8; 32],
        body: &str,
    ) -> Result<()> {
        let mut st = self.conn.prepare_cached(
            "INSERT INTO facts (run_key, n, kind, hash, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        st.execute(params![key, n as i64, kind.as_str(), &hash[..], body])?;
        Ok(())
    }

    fn insert_run(
        &self,
        meta: &StartMeta,
        state: RunState,
        ending: Option<Ending>,
        last_n: u64,
        last_hash: &[u8; 32],
        at_ms: i64,
    ) -> Result<i64> {
        let mut st = self.conn.prepare_cached(
            "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, flow_id, state_attrs)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13, ?14, ?15)",
        )?;
        st.execute(params![
            meta.run,
            state.as_str(),
            meta.entry_module,
            meta.entry_function,
            meta.program,
            meta.parent.as_ref().map(|p| p.0.as_str()),
            meta.parent.as_ref().map(|p| p.1 as i64),
            meta.outer.as_ref().map(|o| o.0.as_str()),
            meta.outer.as_ref().map(|o| o.1.as_str()),
            ending.map(ending_text),
            last_n as i64,
            &last_hash[..],
            at_ms,
            meta.flow_id,
            meta.state_attrs_column(),
        ])?;
        let key = self.conn.last_insert_rowid();
        let mut attr = self.conn.prepare_cached(
            "INSERT OR IGNORE INTO run_attrs (name, value, run) VALUES (?1, ?2, ?3)",
        )?;
        for (name, value) in &meta.attrs {
            attr.execute(params![name, value, meta.run])?;
        }
        Ok(key)
    }

    fn create(
        &mut self,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<Appended> {
        let mut checked = check_start(start, sources)?;
        let run = checked.run.clone();
        if batch.heads.contains_key(run.as_str()) || self.run_heads.contains_key(run.as_str()) {
            return Err(Error::RunExists(run.to_string()));
        }
        let exists: Option<i64> = self
            .conn
            .prepare_cached("SELECT key FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get(0))
            .optional()?;
        if exists.is_some() {
            return Err(Error::RunExists(run.to_string()));
        }
        let fact = checked.store()?;
        self.insert_blobs(&checked.blobs)?;
        let key = self.insert_run(&checked.meta, RunState::Running, None, 1, &fact.hash, at_ms)?;
        super::delete::insert_refs(&self.conn, key, &checked.blobs)?;
        self.insert_fact(key, 1, fact.kind, &fact.hash, &fact.body)?;
        for r in records {
            if let HostDetails::Recovered { recovery } = &r.details {
                super::recoveries::insert_fork(
                    &self.conn,
                    recovery,
                    run.as_str(),
                    checked.meta.parent.as_ref(),
                )?;
            }
            // A record that moves the head (a pause) has no place at Start.
            let at = r.at_ms.unwrap_or(at_ms);
            self.host(&run, r, at, batch)?;
        }
        Ok(fact.appended(&run))
    }

    fn append(
        &mut self,
        run: &RunId,
        fact: Appending,
        at_ms: i64,
        batch: &mut Batch,
    ) -> Result<(Appended, Effects)> {
        let head = self.head(run, batch)?;
        let key = head.key;
        let was_paused = head.state == RunState::Paused;
        let p = match fact {
            Appending::Fact(fact) => {
                let prev_ckpt = match batch.ckpt.get(&key) {
                    Some(v) => v.as_ref(),
                    None => self.cache.get(&key),
                };
                prepare_append(run, &head, fact, at_ms, prev_ckpt)?
            }
            Appending::Changed {
                n,
                task,
                node,
                change,
            } => {
                // The base is taken (the change is applied to it in place):
                // until this append is in, the run has none in memory, and a
                // refused append leaves it so.
                let kept = match batch.ckpt.insert(key, None) {
                    Some(v) => v,
                    None => self.cache.take(&key),
                };
                let base = match kept {
                    Some(b) => b,
                    None => {
                        super::read::on(&self.conn, |db| crate::read::latest_checkpoint(db, run))?
                    }
                };
                prepare_change(run, &head, n, task, node, change, at_ms, base)?
            }
        };
        // Without a savepoint (see `commit_batch`): the fact first, whose
        // INSERT is refused whole (a statement is atomic), then its blobs;
        // once the fact is in, a failure leaves the batch broken.
        self.insert_fact(key, p.fact.n, p.fact.kind, &p.fact.hash, &p.fact.body)?;
        if let Err(e) = self.insert_blobs(&p.blobs).and_then(|()| {
            super::delete::insert_refs(&self.conn, key, &p.blobs).map_err(Error::from)
        }) {
            self.broken = Some(format!("writing the blobs of fact {}: {e}", p.fact.n));
            return Err(e);
        }
        if was_paused && let Err(e) = super::waiting::clear(&self.conn, key) {
            self.broken = Some(format!(
                "clearing the waiting calls at fact {}: {e}",
                p.fact.n
            ));
            return Err(e);
        }
        if let Some(fault) = &p.fault
            && let Err(e) = self
                .conn
                .prepare_cached("UPDATE runs SET fault = ?1 WHERE key = ?2")
                .and_then(|mut st| st.execute(params![fault, key]))
        {
            self.broken = Some(format!("writing the fault of fact {}: {e}", p.fact.n));
            return Err(e.into());
        }
        if let Some((names, now)) = &p.state_attrs
            && let Err(e) = self.write_state_attrs(run, names, now)
        {
            self.broken = Some(format!(
                "writing the search attributes of fact {}: {e}",
                p.fact.n
            ));
            return Err(e.into());
        }
        Ok((
            p.fact.appended(run),
            Effects {
                ckpt: p.ckpt.map(|c| (key, c)),
                head: Some((run.to_string(), p.head)),
                gone: None,
            },
        ))
    }

    /// A Checkpoint's state search attributes: the declared names' rows
    /// replaced by what its state gives now.
    fn write_state_attrs(
        &self,
        run: &RunId,
        names: &[String],
        now: &[(String, String)],
    ) -> rusqlite::Result<()> {
        let mut del = self
            .conn
            .prepare_cached("DELETE FROM run_attrs WHERE name = ?1 AND run = ?2")?;
        for n in names {
            del.execute(params![n, run.as_str()])?;
        }
        let mut ins = self.conn.prepare_cached(
            "INSERT OR IGNORE INTO run_attrs (name, value, run) VALUES (?1, ?2, ?3)",
        )?;
        for (n, v) in now {
            ins.execute(params![n, v, run.as_str()])?;
        }
        Ok(())
    }

    fn host(
        &mut self,
        run: &RunId,
        record: HostRecord,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<(HostRecordRow, Effects)> {
        let head = self.head(run, batch)?;
        let seq: i64 = self
            .conn
            .prepare_cached(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM host_records WHERE run_key = ?1",
            )?
            .query_row([head.key], |r| r.get(0))?;
        let details = canonical(&record.details.to_json());
        self.conn
            .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
            .execute(params![head.key, seq, record.kind().as_str(), at_ms, head.last_n as i64, &head.last_hash[..], details])?;
        super::waiting::on_host(&self.conn, head.key, run, &record.details, at_ms)?;
        let fx = Effects {
            head: host_head(&head, record.kind(), at_ms).map(|h| (run.to_string(), h)),
            ..Effects::default()
        };
        Ok((host_row(seq as u64, record, at_ms, &head), fx))
    }

    fn import(&mut self, a: &VerifiedArchive, at_ms: i64, batch: &Batch) -> Result<ImportOutcome> {
        if let Ok(h) = self.head(&a.run, batch) {
            return import_over(a, h.last_n, &h.last_hash);
        }
        let existing: Option<(i64, Vec<u8>)> = self
            .conn
            .prepare_cached("SELECT last_n, last_hash FROM runs WHERE id = ?1")?
            .query_row([a.run.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((n, h)) = existing {
            return import_over(a, n as u64, &h);
        }
        let plan = plan_import(a)?;
        self.insert_blobs(&a.blobs)?;
        let key = self.insert_run(
            &plan.meta,
            plan.state,
            plan.ending,
            plan.last_n,
            &plan.last_hash,
            at_ms,
        )?;
        self.conn
            .prepare_cached("UPDATE runs SET imported_ms = ?1, fault = ?2 WHERE key = ?3")?
            .execute(params![at_ms, plan.fault, key])?;
        super::delete::insert_refs(&self.conn, key, &a.blobs)?;
        for f in &a.facts {
            self.insert_fact(key, f.n, f.kind, &f.hash, &f.body)?;
        }
        for (i, r) in a.host.iter().enumerate() {
            let head = parse_hash(&r.head.hash).unwrap_or([0; 32]);
            self.conn
                .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
                .execute(params![key, (i + 1) as i64, r.kind().as_str(), r.at_ms, r.head.n as i64, &head[..], canonical(&r.details.to_json())])?;
        }
        Ok(ImportOutcome::Imported {
            run: a.run.clone(),
            facts: plan.last_n,
        })
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
        Command::Create { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
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
    }
}
