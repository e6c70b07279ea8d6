//! The writer thread: the one connection of this store that appends (see
//! the module doc of `postgres`). Group commit: every command queued when a
//! batch starts is decided in memory and written by a fixed handful of
//! statements in one transaction.
//!
//! 1. `BEGIN` and `SELECT … FROM runs WHERE id = ANY(…) ORDER BY id FOR
//!    UPDATE`: the head of every run the batch touches, read and locked
//!    inside the transaction. Each append is checked against that stored
//!    head (n must follow the stored last fact), so a writer whose view is
//!    stale — another server appended — is refused, never forked: the
//!    fencing the multi-server lease relies on. Rows are locked in id order
//!    and blobs inserted in hash order, so two writers cannot deadlock on
//!    each other's batches.
//! 2. Each command is decided by [`crate::prepare`] against those heads
//!    (and the earlier commands of the batch); a refused one changes
//!    nothing.
//! 3. One pipelined round trip writes everything: blobs, new runs, facts,
//!    host records, the changed heads, and `pg_notify` for each run that
//!    moved (delivered only if the transaction commits). Counts are checked.
//! 4. `COMMIT` (durable: `synchronous_commit = on`), then callers are
//!    answered and the local heads bumped.
//!
//! If a statement fails the transaction is rolled back and, when the batch
//! held several commands, each is retried alone, so one bad command fails
//! alone as with SQLite's savepoints. If the connection is lost during
//! COMMIT the outcome is unknown: every command of that batch gets
//! `CommitUnknown` and none is retried.

use super::MAX_BATCH;
use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::checkpoint::CkptCache;
use crate::error::{Error, Result};
use crate::hash::{hash_text, parse_hash};
use crate::id::RunId;
use crate::index::{Head, ending_text};
use crate::merkle::NewBlob;
use crate::prepare::{
    CheckedStart, StartMeta, check_start, host_head, host_row, import_over, plan_import,
    prepare_append,
};
use crate::tail::Heads;
use flow_abi::json::canonical;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};
use std::task::Poll;
use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Statement};

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
}

/// A command's answer, held until its batch commits.
enum Out {
    Appended(Appended),
    Host(HostRecordRow),
    Import(ImportOutcome),
}

impl Command {
    fn run_id(&self) -> Option<String> {
        match self {
            Command::Create { start, .. } => {
                start.get("run").and_then(Value::as_str).map(str::to_string)
            }
            Command::Append { run, .. } | Command::Host { run, .. } => Some(run.to_string()),
            Command::Import { archive, .. } => Some(archive.run.to_string()),
        }
    }

    fn answer(self, out: Result<Out>) {
        // A caller that stopped waiting is not an error of the store.
        match self {
            Command::Create { reply, .. } | Command::Append { reply, .. } => {
                let _ = reply.send(out.and_then(|o| match o {
                    Out::Appended(a) => Ok(a),
                    _ => Err(Error::WriterGone),
                }));
            }
            Command::Host { reply, .. } => {
                let _ = reply.send(out.and_then(|o| match o {
                    Out::Host(h) => Ok(h),
                    _ => Err(Error::WriterGone),
                }));
            }
            Command::Import { reply, .. } => {
                let _ = reply.send(out.and_then(|o| match o {
                    Out::Import(i) => Ok(i),
                    _ => Err(Error::WriterGone),
                }));
            }
        }
    }
}

/// The statements the writer prepares once per connection.
struct Statements {
    heads: Statement,
    blobs: Statement,
    runs: Statement,
    facts: Statement,
    host: Statement,
    update: Statement,
    notify: Statement,
}

struct Conn {
    client: Client,
    st: Statements,
}

/// The rows one batch writes, column by column.
#[derive(Default)]
struct Rows {
    blobs: BTreeMap<[u8; 32], Vec<u8>>,
    runs: Vec<NewRun>,
    facts: Vec<(String, u64, &'static str, [u8; 32], String)>,
    host: Vec<HostRow>,
}

/// `(run, seq, kind, at_ms, head_n, head_hash, details)`.
type HostRow = (String, i64, &'static str, i64, i64, [u8; 32], String);

/// A pipelined statement and the rows it must affect (`None`: any).
type Step<'a> = (
    BoxFuture<'a, Result<u64, tokio_postgres::Error>>,
    Option<usize>,
);

struct NewRun {
    meta: StartMeta,
    state: RunState,
    ending: Option<Ending>,
    last_n: u64,
    last_hash: [u8; 32],
    at_ms: i64,
}

/// What a batch decided, before it is written.
#[derive(Default)]
struct Plan {
    rows: Rows,
    /// Heads as of the end of the batch; `changed` are written back.
    heads: HashMap<String, Head>,
    changed: BTreeMap<String, Head>,
    host_seq: HashMap<String, i64>,
    ckpt: HashMap<String, Option<CkptCache>>,
    notes: BTreeMap<String, u64>,
}

/// Why a batch did not commit.
struct Failed {
    error: Error,
    /// COMMIT was sent and its answer lost: the outcome is unknown.
    unknown: bool,
    /// The server refused a new run's id as taken (a concurrent create).
    unique: bool,
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

pub(crate) struct Writer {
    handle: Handle,
    cfg: Config,
    channel: String,
    conn: Option<Conn>,
    heads: Arc<Heads>,
    cache: HashMap<String, CkptCache>,
    cache_bytes: u64,
}

impl Writer {
    /// Connects (so a store that cannot write fails at open).
    pub(crate) fn open(
        handle: Handle,
        cfg: Config,
        channel: String,
        heads: Arc<Heads>,
    ) -> Result<Writer> {
        let mut w = Writer {
            handle,
            cfg,
            channel,
            conn: None,
            heads,
            cache: HashMap::new(),
            cache_bytes: 0,
        };
        let h = w.handle.clone();
        h.block_on(w.ensure_conn())?;
        Ok(w)
    }

    async fn ensure_conn(&mut self) -> Result<&Conn> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let client = super::connect::connect(&self.cfg).await?;
            let st = Statements {
                heads: client
                    .prepare(
                        "SELECT r.id, r.key, r.last_n, r.last_hash, r.ending, r.state, r.updated_ms,
                                (SELECT COALESCE(MAX(h.seq), 0) FROM host_records h WHERE h.run_key = r.key)
                         FROM runs r WHERE r.id = ANY($1::text[]) ORDER BY r.id FOR UPDATE OF r",
                    )
                    .await?,
                blobs: client
                    .prepare(
                        "INSERT INTO blobs (hash, body) SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (hash) DO NOTHING",
                    )
                    .await?,
                runs: client
                    .prepare(
                        "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms)
                         SELECT id, state, em, ef, program, pr, pc, orun, ocall, ending, n, h, t, t
                         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::bytea[], $13::int8[])
                           AS u(id, state, em, ef, program, pr, pc, orun, ocall, ending, n, h, t)",
                    )
                    .await?,
                facts: client
                    .prepare(
                        "INSERT INTO facts (run_key, n, kind, hash, body)
                         SELECT r.key, u.n, u.kind, u.hash, u.body
                         FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[], $5::text[]) AS u(id, n, kind, hash, body)
                         JOIN runs r ON r.id = u.id",
                    )
                    .await?,
                host: client
                    .prepare(
                        "INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details)
                         SELECT r.key, u.seq, u.kind, u.at, u.hn, u.hh, u.details
                         FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::bytea[], $7::text[]) AS u(id, seq, kind, at, hn, hh, details)
                         JOIN runs r ON r.id = u.id",
                    )
                    .await?,
                update: client
                    .prepare(
                        "UPDATE runs AS r SET last_n = u.n, last_hash = u.h, state = u.s, ending = u.e, updated_ms = u.t
                         FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::text[], $5::text[], $6::int8[]) AS u(id, n, h, s, e, t)
                         WHERE r.id = u.id",
                    )
                    .await?,
                notify: client
                    .prepare("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                    .await?,
            };
            self.conn = Some(Conn { client, st });
        }
        self.conn.as_ref().ok_or(Error::WriterGone)
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
            self.commit(batch, true);
        }
    }

    fn commit(&mut self, cmds: Vec<Command>, may_split: bool) {
        let handle = self.handle.clone();
        let mut result = handle.block_on(self.batch(&cmds));
        if let Err(f) = &result
            && !f.unknown
            && self.conn.as_ref().is_none_or(|c| c.client.is_closed())
        {
            // The connection was gone before COMMIT (a restarted server, a
            // terminated backend): nothing was stored, so one retry on a
            // new connection is safe.
            result = handle.block_on(self.batch(&cmds));
        }
        match result {
            Ok((outs, plan)) => {
                for (run, c) in plan.ckpt {
                    self.set_cache(run, c);
                }
                for (cmd, out) in cmds.into_iter().zip(outs) {
                    cmd.answer(out);
                }
                // Heads move only after COMMIT: a subscriber never sees a
                // fact that could still roll back.
                let notes: Vec<(String, u64)> = plan.notes.into_iter().collect();
                self.heads.bump(&notes);
            }
            Err(f) if f.unknown => {
                // The cache may be ahead of the database: forget it. The
                // next checkpoint of each run is a snapshot.
                self.forget();
                let msg = f.error.to_string();
                for cmd in cmds {
                    cmd.answer(Err(Error::CommitUnknown(msg.clone())));
                }
            }
            Err(_) if may_split && cmds.len() > 1 => {
                // Rolled back: run each alone, so only the bad one fails.
                for cmd in cmds {
                    self.commit(vec![cmd], false);
                }
            }
            Err(f) => {
                let msg = f.error.to_string();
                for cmd in cmds {
                    let err = match (&cmd, f.unique) {
                        (Command::Create { .. }, true) => {
                            Error::RunExists(cmd.run_id().unwrap_or_default())
                        }
                        _ => Error::CommitFailed(msg.clone()),
                    };
                    cmd.answer(Err(err));
                }
            }
        }
    }

    fn forget(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
    }

    fn set_cache(&mut self, run: String, v: Option<CkptCache>) {
        if let Some(old) = self.cache.remove(&run) {
            self.cache_bytes = self.cache_bytes.saturating_sub(old.logical_len);
        }
        if let Some(v) = v {
            if self.cache_bytes + v.logical_len > CACHE_BUDGET {
                // Simple and bounded: start over. Evicted runs snapshot next.
                self.forget();
            }
            if v.logical_len <= CACHE_BUDGET {
                self.cache_bytes += v.logical_len;
                self.cache.insert(run, v);
            }
        }
    }

    /// One transaction for `cmds`; the answers and what changed, or why
    /// nothing was stored.
    async fn batch(&mut self, cmds: &[Command]) -> Result<(Vec<Result<Out>>, Plan), Failed> {
        // Starts are checked before any lookup: their errors come first.
        let starts: Vec<Option<Result<CheckedStart>>> = cmds
            .iter()
            .map(|c| match c {
                Command::Create { start, sources, .. } => Some(check_start(start, sources)),
                _ => None,
            })
            .collect();
        let mut ids: Vec<String> = cmds.iter().filter_map(Command::run_id).collect();
        ids.sort();
        ids.dedup();
        let channel = self.channel.clone();
        self.ensure_conn().await?;
        let conn = self.conn.as_ref().ok_or(Error::WriterGone)?;
        let c = &conn.client;
        let p_ids: [&(dyn ToSql + Sync); 1] = [&ids];
        let (begin, rows) = tokio::join!(c.batch_execute("BEGIN"), c.query(&conn.st.heads, &p_ids));
        let result = async {
            begin?;
            let mut plan = Plan::default();
            for r in rows? {
                let id: String = r.try_get(0)?;
                let Ok(run) = RunId::parse(&id) else { continue };
                let last_hash: Vec<u8> = r.try_get(3)?;
                let ending: Option<String> = r.try_get(4)?;
                let state: String = r.try_get(5)?;
                let head = Head::from_columns(
                    &run,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    &last_hash,
                    ending.as_deref(),
                    &state,
                    r.try_get(6)?,
                )?;
                plan.host_seq.insert(id.clone(), r.try_get(7)?);
                plan.heads.insert(id, head);
            }
            let outs: Vec<Result<Out>> = cmds
                .iter()
                .zip(starts)
                .map(|(cmd, start)| decide(&mut plan, &self.cache, cmd, start))
                .collect();
            write(conn, &channel, &plan).await?;
            Ok::<_, Failed>((outs, plan))
        }
        .await;
        match result {
            Ok(done) => match c.batch_execute("COMMIT").await {
                Ok(()) => Ok(done),
                Err(e) => {
                    // A server's refusal of COMMIT rolled back; a lost
                    // connection leaves it unknown.
                    let unknown = e.as_db_error().is_none();
                    Err(Failed {
                        unknown,
                        ..Failed::from(e)
                    })
                }
            },
            Err(f) => {
                let _ = c.batch_execute("ROLLBACK").await;
                Err(f)
            }
        }
    }
}

/// Decides one command against the batch's heads (see [`crate::prepare`]).
fn decide(
    plan: &mut Plan,
    cache: &HashMap<String, CkptCache>,
    cmd: &Command,
    start: Option<Result<CheckedStart>>,
) -> Result<Out> {
    match cmd {
        Command::Create {
            start: fact, at_ms, ..
        } => {
            let mut checked = start.ok_or(Error::WriterGone)??;
            let run = checked.run.clone();
            if plan.heads.contains_key(run.as_str()) {
                return Err(Error::RunExists(run.to_string()));
            }
            let f = checked.store(fact)?;
            for b in checked.blobs.drain(..) {
                plan.rows.blobs.insert(b.hash, b.body);
            }
            let id = run.to_string();
            plan.rows.runs.push(NewRun {
                meta: checked.meta,
                state: RunState::Running,
                ending: None,
                last_n: 1,
                last_hash: f.hash,
                at_ms: *at_ms,
            });
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
                },
            );
            plan.host_seq.insert(id.clone(), 0);
            plan.notes.insert(id, 1);
            Ok(Out::Appended(Appended {
                run,
                n: 1,
                hash: hash_text(&f.hash),
            }))
        }
        Command::Append {
            run, fact, at_ms, ..
        } => {
            let id = run.to_string();
            let head = plan
                .heads
                .get(&id)
                .ok_or_else(|| Error::UnknownRun(id.clone()))?;
            let prev = match plan.ckpt.get(&id) {
                Some(v) => v.as_ref(),
                None => cache.get(&id),
            };
            let p = prepare_append(run, head, fact.clone(), *at_ms, prev)?;
            add_blobs(&mut plan.rows, p.blobs);
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
            Ok(Out::Appended(Appended {
                run: run.clone(),
                n: p.fact.n,
                hash: hash_text(&p.fact.hash),
            }))
        }
        Command::Host {
            run, record, at_ms, ..
        } => {
            let id = run.to_string();
            let head = plan
                .heads
                .get(&id)
                .ok_or_else(|| Error::UnknownRun(id.clone()))?
                .clone();
            let seq = plan.host_seq.entry(id.clone()).or_insert(0);
            *seq += 1;
            let seq = *seq;
            plan.rows.host.push((
                id.clone(),
                seq,
                record.kind.as_str(),
                *at_ms,
                head.last_n as i64,
                head.last_hash,
                canonical(&record.details),
            ));
            if let Some(h) = host_head(&head, record.kind, *at_ms) {
                plan.heads.insert(id.clone(), h.clone());
                plan.changed.insert(id, h);
            }
            Ok(Out::Host(host_row(
                seq as u64,
                record.clone(),
                *at_ms,
                &head,
            )))
        }
        Command::Import {
            archive: a, at_ms, ..
        } => {
            let id = a.run.to_string();
            if let Some(h) = plan.heads.get(&id) {
                return import_over(a, h.last_n, &h.last_hash).map(Out::Import);
            }
            let p = plan_import(a)?;
            add_blobs(&mut plan.rows, a.blobs.clone());
            for f in &a.facts {
                plan.rows
                    .facts
                    .push((id.clone(), f.n, f.kind.as_str(), f.hash, f.body.clone()));
            }
            for (i, r) in a.host.iter().enumerate() {
                plan.rows.host.push((
                    id.clone(),
                    (i + 1) as i64,
                    r.kind.as_str(),
                    r.at_ms,
                    r.head.n as i64,
                    parse_hash(&r.head.hash).unwrap_or([0; 32]),
                    canonical(&r.details),
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
                    updated_ms: *at_ms,
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
                at_ms: *at_ms,
            });
            Ok(Out::Import(ImportOutcome::Imported {
                run: a.run.clone(),
                facts: p.last_n,
            }))
        }
    }
}

fn add_blobs(rows: &mut Rows, blobs: Vec<NewBlob>) {
    for b in blobs {
        rows.blobs.entry(b.hash).or_insert(b.body);
    }
}

/// Writes a batch's rows in one pipelined round trip, checking each count.
async fn write(conn: &Conn, channel: &str, plan: &Plan) -> Result<(), Failed> {
    let c = &conn.client;
    let st = &conn.st;
    let r = &plan.rows;
    let blob_hash: Vec<&[u8]> = r.blobs.keys().map(|h| &h[..]).collect();
    let blob_body: Vec<&[u8]> = r.blobs.values().map(Vec::as_slice).collect();
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
    let f_id: Vec<&str> = r.facts.iter().map(|f| f.0.as_str()).collect();
    let f_n: Vec<i64> = r.facts.iter().map(|f| f.1 as i64).collect();
    let f_kind: Vec<&str> = r.facts.iter().map(|f| f.2).collect();
    let f_hash: Vec<&[u8]> = r.facts.iter().map(|f| &f.3[..]).collect();
    let f_body: Vec<&str> = r.facts.iter().map(|f| f.4.as_str()).collect();
    let h_id: Vec<&str> = r.host.iter().map(|h| h.0.as_str()).collect();
    let h_seq: Vec<i64> = r.host.iter().map(|h| h.1).collect();
    let h_kind: Vec<&str> = r.host.iter().map(|h| h.2).collect();
    let h_at: Vec<i64> = r.host.iter().map(|h| h.3).collect();
    let h_n: Vec<i64> = r.host.iter().map(|h| h.4).collect();
    let h_hash: Vec<&[u8]> = r.host.iter().map(|h| &h.5[..]).collect();
    let h_det: Vec<&str> = r.host.iter().map(|h| h.6.as_str()).collect();
    let u_id: Vec<&str> = plan.changed.keys().map(String::as_str).collect();
    let u_n: Vec<i64> = plan.changed.values().map(|h| h.last_n as i64).collect();
    let u_h: Vec<&[u8]> = plan.changed.values().map(|h| &h.last_hash[..]).collect();
    let u_s: Vec<&str> = plan.changed.values().map(|h| h.state.as_str()).collect();
    let u_e: Vec<Option<&str>> = plan
        .changed
        .values()
        .map(|h| h.ending.map(ending_text))
        .collect();
    let u_t: Vec<i64> = plan.changed.values().map(|h| h.updated_ms).collect();
    let notes: Vec<String> = plan.notes.iter().map(|(r, n)| format!("{r}:{n}")).collect();

    type P<'a> = &'a (dyn ToSql + Sync);
    let p_blobs: [P<'_>; 2] = [&blob_hash, &blob_body];
    let p_runs: [P<'_>; 13] = [
        &run_id, &run_state, &run_em, &run_ef, &run_prog, &run_pr, &run_pc, &run_or, &run_oc,
        &run_end, &run_n, &run_h, &run_t,
    ];
    let p_facts: [P<'_>; 5] = [&f_id, &f_n, &f_kind, &f_hash, &f_body];
    let p_host: [P<'_>; 7] = [&h_id, &h_seq, &h_kind, &h_at, &h_n, &h_hash, &h_det];
    let p_update: [P<'_>; 6] = [&u_id, &u_n, &u_h, &u_s, &u_e, &u_t];
    let p_notify: [P<'_>; 2] = [&channel, &notes];
    // (statement, rows it must affect: None = any)
    let mut steps: Vec<Step<'_>> = Vec::new();
    if !blob_hash.is_empty() {
        steps.push((Box::pin(c.execute(&st.blobs, &p_blobs)), None));
    }
    if !run_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.runs, &p_runs)), Some(run_id.len())));
    }
    if !f_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.facts, &p_facts)), Some(f_id.len())));
    }
    if !h_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.host, &p_host)), Some(h_id.len())));
    }
    if !u_id.is_empty() {
        steps.push((Box::pin(c.execute(&st.update, &p_update)), Some(u_id.len())));
    }
    if !notes.is_empty() {
        steps.push((Box::pin(c.execute(&st.notify, &p_notify)), None));
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
    let mut first_error = None;
    for ((f, want), got) in steps.into_iter().zip(results) {
        let r = match got {
            Some(r) => r,
            None => f.await,
        };
        match r {
            Ok(n) => {
                if let Some(w) = want
                    && n != w as u64
                    && first_error.is_none()
                {
                    first_error = Some(Failed::from(Error::CommitFailed(format!(
                        "a statement wrote {n} rows, not {w}"
                    ))));
                }
            }
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(Failed::from(e));
                }
            }
        }
    }
    match first_error {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
