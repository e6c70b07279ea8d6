//! The writer thread: the only connection that writes (see the module doc of
//! `sqlite`). Group commit: one `BEGIN IMMEDIATE` … `COMMIT` per drained
//! batch, each command in its own SAVEPOINT so a refused command is rolled
//! back alone and the rest of the batch commits.

use super::MAX_BATCH;
use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::{CkptCache, store_checkpoint};
use crate::error::{Error, Result};
use crate::fact::{FactKind, read_logical, store_fact};
use crate::hash::{blob_hash, chain_next, chain_start, from_column, hash_text, parse_hash};
use crate::merkle::NewBlob;
use crate::tail::Heads;
use flow_abi::fact::RunId;
use flow_abi::fact::{Ending as FactEnding, Fact};
use flow_abi::json::canonical;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

/// Logical bytes of checkpoint states the writer keeps to compute deltas.
const CACHE_BUDGET: u64 = 64 << 20;

pub(crate) enum Command {
    Create {
        start: Value,
        sources: Vec<SourceText>,
        at_ms: i64,
        reply: SyncSender<Result<Appended>>,
    },
    Append {
        run: RunId,
        fact: Value,
        at_ms: i64,
        reply: SyncSender<Result<Appended>>,
    },
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
}

type CacheUpdate = Option<(i64, Option<CkptCache>)>;

/// Sends a held result; the argument is the commit error, if any.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// A command's result, held until the batch commits.
struct Done {
    answer: Answer,
    notify: Option<(String, u64)>,
}

fn answer<T: Send + 'static>(reply: SyncSender<Result<T>>, result: Result<T>) -> Answer {
    Box::new(move |commit_error: Option<&str>| {
        let out = match (commit_error, result) {
            (Some(msg), Ok(_)) => Err(Error::CommitFailed(msg.to_string())),
            (_, r) => r,
        };
        // A caller that stopped waiting is not an error of the store.
        let _ = reply.send(out);
    })
}

pub(crate) struct Writer {
    conn: Connection,
    heads: Arc<Heads>,
    cache: HashMap<i64, CkptCache>,
    cache_bytes: u64,
    run_heads: HashMap<String, Head>,
}

/// A runs row as the writer reads it: key, last_n, last_hash, ending, state, updated_ms.
type HeadRow = (i64, i64, Vec<u8>, Option<String>, String, i64);

/// Most run heads the writer remembers between batches.
const HEADS_BUDGET: usize = 100_000;

/// The writer's view of a run's row in the index. The writer is the only
/// writer, so once loaded it is authoritative; a batch changes copies and
/// writes each changed run's row once, just before COMMIT (so N appends to a
/// run in one batch cost one UPDATE).
#[derive(Clone, Debug)]
struct Head {
    key: i64,
    last_n: u64,
    last_hash: [u8; 32],
    ending: Option<Ending>,
    state: RunState,
    updated_ms: i64,
}

/// What the commands of the current batch changed, not yet committed.
#[derive(Default)]
struct Batch {
    ckpt: HashMap<i64, Option<CkptCache>>,
    heads: HashMap<String, Head>,
}

/// A successful command's changes to the writer's memory.
#[derive(Default)]
struct Effects {
    ckpt: CacheUpdate,
    head: Option<(String, Head)>,
}

/// What the runs index keeps from a Start fact.
struct StartMeta {
    run: String,
    entry_module: String,
    entry_function: String,
    program: String,
    parent: Option<(String, u64)>,
    outer: Option<(String, String)>,
}

fn start_meta(start: &Fact) -> Result<StartMeta> {
    let Fact::Start {
        run,
        entry,
        program,
        parent,
        outer,
        ..
    } = start
    else {
        return Err(Error::InvalidFact("a run begins with Start, fact 1".into()));
    };
    Ok(StartMeta {
        run: run.to_string(),
        entry_module: entry.module.clone(),
        entry_function: entry.function.clone(),
        program: program.clone(),
        parent: parent.as_ref().map(|p| (p.run.to_string(), p.checkpoint)),
        outer: outer
            .as_ref()
            .map(|o| (o.run.to_string(), o.call.to_string())),
    })
}

fn ending_of(end: &Fact) -> Option<Ending> {
    match end {
        Fact::End {
            ending: FactEnding::Completed { .. },
            ..
        } => Some(Ending::Completed),
        Fact::End {
            ending: FactEnding::Faulted(_),
            ..
        } => Some(Ending::Faulted),
        _ => None,
    }
}

fn ending_text(e: Ending) -> &'static str {
    match e {
        Ending::Completed => "completed",
        Ending::Faulted => "faulted",
    }
}

impl Writer {
    pub(crate) fn new(conn: Connection, heads: Arc<Heads>) -> Writer {
        Writer {
            conn,
            heads,
            cache: HashMap::new(),
            cache_bytes: 0,
            run_heads: HashMap::new(),
        }
    }

    /// The loop: take one command, drain more without waiting, commit them
    /// together. Ends when every handle is dropped.
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
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
        self.cache_bytes = 0;
        self.run_heads.clear();
    }

    fn commit_batch(&mut self, cmds: Vec<Command>) {
        if cmds.is_empty() {
            return;
        }
        let mut done: Vec<Done> = Vec::with_capacity(cmds.len());
        let mut batch = Batch::default();
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            let msg = e.to_string();
            for cmd in cmds {
                fail(cmd, &msg);
            }
            return;
        }
        let mut control_error: Option<String> = None;
        let mut rest = cmds.into_iter();
        for cmd in rest.by_ref() {
            if let Err(e) = self.control(&["SAVEPOINT cmd"]) {
                control_error = Some(e.to_string());
                fail(cmd, &e.to_string());
                break;
            }
            let (d, effects) = self.exec(cmd, &batch);
            let end: &[&str] = if effects.is_some() {
                &["RELEASE cmd"]
            } else {
                &["ROLLBACK TO cmd", "RELEASE cmd"]
            };
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
            }
            done.push(d);
        }
        let commit = match control_error {
            Some(msg) => Err(msg),
            None => self
                .write_heads(&batch)
                .and_then(|()| self.conn.execute_batch("COMMIT").map_err(|e| e.to_string())),
        };
        match commit {
            Ok(()) => {
                for (k, v) in batch.ckpt {
                    self.set_cache(k, v);
                }
                if self.run_heads.len() + batch.heads.len() > HEADS_BUDGET {
                    self.run_heads.clear();
                }
                self.run_heads.extend(batch.heads);
                let notes: Vec<(String, u64)> =
                    done.iter_mut().filter_map(|d| d.notify.take()).collect();
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

    /// One UPDATE per run the batch changed.
    fn write_heads(&self, batch: &Batch) -> Result<(), String> {
        let mut st = self
            .conn
            .prepare_cached("UPDATE runs SET last_n = ?1, last_hash = ?2, state = ?3, ending = ?4, updated_ms = ?5 WHERE key = ?6")
            .map_err(|e| e.to_string())?;
        for h in batch.heads.values() {
            st.execute(params![
                h.last_n as i64,
                &h.last_hash[..],
                h.state.as_str(),
                h.ending.map(ending_text),
                h.updated_ms,
                h.key
            ])
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn set_cache(&mut self, key: i64, v: Option<CkptCache>) {
        if let Some(old) = self.cache.remove(&key) {
            self.cache_bytes = self.cache_bytes.saturating_sub(old.logical_len);
        }
        if let Some(v) = v {
            if self.cache_bytes + v.logical_len > CACHE_BUDGET {
                // Simple and bounded: start over. Evicted runs snapshot next.
                self.cache.clear();
                self.cache_bytes = 0;
            }
            if v.logical_len <= CACHE_BUDGET {
                self.cache_bytes += v.logical_len;
                self.cache.insert(key, v);
            }
        }
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
        let row: Option<HeadRow> = self
            .conn
            .prepare_cached(
                "SELECT key, last_n, last_hash, ending, state, updated_ms FROM runs WHERE id = ?1",
            )?
            .query_row([run.as_str()], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .optional()?;
        let (key, last_n, last_hash, ending, state, updated_ms) =
            row.ok_or_else(|| Error::UnknownRun(run.to_string()))?;
        let bad = |what: &str| {
            Error::corrupt(
                run.as_str(),
                last_n as u64,
                format!("the runs index holds a malformed {what}"),
            )
        };
        Ok(Head {
            key,
            last_n: last_n as u64,
            last_hash: from_column(&last_hash).ok_or_else(|| bad("hash"))?,
            ending: match ending.as_deref() {
                None => None,
                Some("completed") => Some(Ending::Completed),
                Some("faulted") => Some(Ending::Faulted),
                Some(_) => return Err(bad("ending")),
            },
            state: RunState::parse(&state).ok_or_else(|| bad("state"))?,
            updated_ms,
        })
    }

    /// Runs one command; `None` effects means it failed and is rolled back.
    fn exec(&mut self, cmd: Command, batch: &Batch) -> (Done, Option<Effects>) {
        match cmd {
            Command::Create {
                start,
                sources,
                at_ms,
                reply,
            } => {
                let r = self.create(start, &sources, at_ms, batch);
                let fx = r.as_ref().ok().map(|_| Effects::default());
                let notify = r.as_ref().ok().map(|a| (a.run.to_string(), a.n));
                (
                    Done {
                        answer: answer(reply, r),
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
                    let notify = Some((a.run.to_string(), a.n));
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
                        answer: answer(reply, Ok(row)),
                        notify: None,
                    },
                    Some(fx),
                ),
                Err(e) => (
                    Done {
                        answer: answer::<HostRecordRow>(reply, Err(e)),
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
                    Ok(ImportOutcome::Imported { run, facts }) => Some((run.to_string(), *facts)),
                    _ => None,
                };
                (
                    Done {
                        answer: answer(reply, r),
                        notify,
                    },
                    fx,
                )
            }
            Command::Checkpoint(reply) => {
                let r: Result<()> = Ok(());
                (
                    Done {
                        answer: answer(reply, r),
                        notify: None,
                    },
                    Some(Effects::default()),
                )
            }
        }
    }

    fn insert_blobs(&self, blobs: &[NewBlob]) -> Result<()> {
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
            "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13)",
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
        ])?;
        Ok(self.conn.last_insert_rowid())
    }

    fn create(
        &mut self,
        start: Value,
        sources: &[SourceText],
        at_ms: i64,
        batch: &Batch,
    ) -> Result<Appended> {
        let typed = read_logical(start)?;
        let Fact::Start {
            n: 1,
            run,
            sources: listed,
            ..
        } = &typed
        else {
            return Err(Error::InvalidFact("a run begins with Start, fact 1".into()));
        };
        let (run, listed) = (run.clone(), listed.clone());
        let meta = start_meta(&typed)?;
        let start = typed.into_json();
        // DESIGN §3: "sources are always blobs". Start lists each by hash;
        // the text must be handed over and match.
        let mut blobs = Vec::new();
        for s in &listed {
            let module = s.module.as_str();
            let text = sources.iter().find(|t| t.module == module).ok_or_else(|| {
                Error::InvalidFact(format!("no source text was given for module {module:?}"))
            })?;
            let h = blob_hash(text.text.as_bytes());
            if parse_hash(&s.hash) != Some(h) || s.length != text.text.chars().count() as u64 {
                return Err(Error::InvalidFact(format!(
                    "source {module:?} does not match its hash or length in Start"
                )));
            }
            blobs.push(NewBlob {
                hash: h,
                body: text.text.as_bytes().to_vec(),
            });
        }
        if let Some(extra) = sources
            .iter()
            .find(|t| !listed.iter().any(|s| s.module == t.module))
        {
            return Err(Error::InvalidFact(format!(
                "source {:?} is not listed in Start",
                extra.module
            )));
        }
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
        let stored = store_fact(&start, FactKind::Start, &mut blobs)?;
        self.insert_blobs(&blobs)?;
        let body = canonical(&stored);
        let h = chain_next(&chain_start(run.as_str()), &body);
        let key = self.insert_run(&meta, RunState::Running, None, 1, &h, at_ms)?;
        self.insert_fact(key, 1, FactKind::Start, &h, &body)?;
        Ok(Appended {
            run,
            n: 1,
            hash: hash_text(&h),
        })
    }

    fn append(
        &mut self,
        run: &RunId,
        fact: Value,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<(Appended, Effects)> {
        let head = self.head(run, batch)?;
        let typed = read_logical(fact)?;
        let (kind, n) = (typed.kind(), typed.n());
        if kind == FactKind::Start {
            return Err(Error::InvalidFact("Start only begins a run".into()));
        }
        if head.ending.is_some() {
            return Err(Error::Ended {
                run: run.to_string(),
                n,
            });
        }
        if n != head.last_n + 1 {
            return Err(Error::WrongNumber {
                run: run.to_string(),
                expected: head.last_n + 1,
                got: n.to_string(),
            });
        }
        let key = head.key;
        let mut blobs = Vec::new();
        let end = ending_of(&typed);
        let fact = typed.into_json();
        let (stored, ckpt) = match kind {
            FactKind::Checkpoint => {
                let prev_ckpt = match batch.ckpt.get(&key) {
                    Some(v) => v.as_ref(),
                    None => self.cache.get(&key),
                };
                let (s, c) = store_checkpoint(fact, n, prev_ckpt, &mut blobs)?;
                (s, Some((key, Some(c))))
            }
            FactKind::End => (store_fact(&fact, kind, &mut blobs)?, Some((key, None))),
            _ => (store_fact(&fact, kind, &mut blobs)?, None),
        };
        self.insert_blobs(&blobs)?;
        let body = canonical(&stored);
        let h = chain_next(&head.last_hash, &body);
        self.insert_fact(key, n, kind, &h, &body)?;
        let state = match end {
            Some(Ending::Completed) => RunState::Completed,
            Some(Ending::Faulted) => RunState::Faulted,
            None => RunState::Running,
        };
        let new_head = Head {
            key,
            last_n: n,
            last_hash: h,
            ending: end,
            state,
            updated_ms: at_ms,
        };
        Ok((
            Appended {
                run: run.clone(),
                n,
                hash: hash_text(&h),
            },
            Effects {
                ckpt,
                head: Some((run.to_string(), new_head)),
            },
        ))
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
        let details = canonical(&record.details);
        self.conn
            .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
            .execute(params![head.key, seq, record.kind.as_str(), at_ms, head.last_n as i64, &head.last_hash[..], details])?;
        let new_state = match record.kind {
            HostRecordKind::Halt => Some(RunState::Halted),
            HostRecordKind::Pause => Some(RunState::Paused),
            _ => None,
        };
        let mut fx = Effects::default();
        if let Some(s) = new_state
            && head.ending.is_none()
        {
            let mut h = head.clone();
            h.state = s;
            h.updated_ms = at_ms;
            fx.head = Some((run.to_string(), h));
        }
        let row = HostRecordRow {
            seq: seq as u64,
            kind: record.kind,
            at_ms,
            head: FactRef {
                n: head.last_n,
                hash: hash_text(&head.last_hash),
            },
            details: record.details,
        };
        Ok((row, fx))
    }

    fn import(&mut self, a: &VerifiedArchive, at_ms: i64, batch: &Batch) -> Result<ImportOutcome> {
        if let Ok(h) = self.head(&a.run, batch) {
            let (last_n, last_hash) = a.last();
            return if h.last_n == last_n && h.last_hash == last_hash {
                Ok(ImportOutcome::AlreadyPresent { run: a.run.clone() })
            } else {
                Err(Error::Conflict(a.run.to_string()))
            };
        }
        let (last_n, last_hash) = a.last();
        let existing: Option<(i64, Vec<u8>)> = self
            .conn
            .prepare_cached("SELECT last_n, last_hash FROM runs WHERE id = ?1")?
            .query_row([a.run.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((n, h)) = existing {
            return if n as u64 == last_n && h[..] == last_hash[..] {
                Ok(ImportOutcome::AlreadyPresent { run: a.run.clone() })
            } else {
                Err(Error::Conflict(a.run.to_string()))
            };
        }
        let first = a.facts.first().ok_or_else(|| Error::ArchiveRefused {
            component: "history.jsonl".into(),
            fact: None,
            reason: "empty history".into(),
        })?;
        // Verified already; read again only for the runs index. A Start is
        // never a delta, and an End's output is opaque to the reader.
        let meta = start_meta(&read_logical(first.fact.clone())?)?;
        let ending = match a.facts.last() {
            Some(f) if f.kind == FactKind::End => ending_of(&read_logical(f.fact.clone())?),
            _ => None,
        };
        let decision = a
            .host
            .iter()
            .rev()
            .find(|r| matches!(r.kind, HostRecordKind::Halt | HostRecordKind::Pause))
            .filter(|r| r.head.n == last_n && r.head.hash == hash_text(&last_hash))
            .map(|r| r.kind);
        let state = match (ending, decision) {
            (Some(Ending::Completed), _) => RunState::Completed,
            (Some(Ending::Faulted), _) => RunState::Faulted,
            (None, Some(HostRecordKind::Halt)) => RunState::Halted,
            (None, Some(HostRecordKind::Pause)) => RunState::Paused,
            _ => RunState::Running,
        };
        self.insert_blobs(&a.blobs)?;
        let key = self.insert_run(&meta, state, ending, last_n, &last_hash, at_ms)?;
        for f in &a.facts {
            self.insert_fact(key, f.n, f.kind, &f.hash, &f.body)?;
        }
        for (i, r) in a.host.iter().enumerate() {
            let head = parse_hash(&r.head.hash).unwrap_or([0; 32]);
            self.conn
                .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
                .execute(params![key, (i + 1) as i64, r.kind.as_str(), r.at_ms, r.head.n as i64, &head[..], canonical(&r.details)])?;
        }
        Ok(ImportOutcome::Imported {
            run: a.run.clone(),
            facts: last_n,
        })
    }
}

fn fail(cmd: Command, msg: &str) {
    let err = || Error::CommitFailed(msg.to_string());
    match cmd {
        Command::Create { reply, .. } | Command::Append { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Host { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Import { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Checkpoint(reply) => {
            let _ = reply.send(Err(err()));
        }
    }
}
