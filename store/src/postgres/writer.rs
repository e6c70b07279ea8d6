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
//! 3. One pipelined round trip (`sql`) writes everything: blobs, new runs, facts,
//!    host records, the changed heads, and `pg_notify` for each run that
//!    moved (delivered only if the transaction commits). Counts are checked.
//! 4. `COMMIT` (durable: `synchronous_commit = on`), then callers are
//!    answered and the local heads bumped.
//!
//! **One round trip when the heads are known.** After each commit the
//! writer remembers the head of every run the batch touched, with the
//! version (`xmin`) of its `runs` row as it left it. A batch of appends
//! and host records whose runs are all remembered is decided against
//! those heads first and sent as one pipeline: `BEGIN`, a fence that
//! locks the rows in id order and fails unless each is still at the
//! version remembered (so the remembered heads are the stored ones, and
//! every decision stands exactly as step 2 would make it), the rows, and
//! `COMMIT`. A step of a lone run then costs one round trip and the WAL
//! flush instead of three. If the fence or any statement fails, the
//! server rolls the whole transaction back; the writer forgets those
//! heads and runs the batch again through steps 1–4.
//!
//! If a statement fails the transaction is rolled back and, when the batch
//! held several commands, each is retried alone, so one bad command fails
//! alone as with SQLite's savepoints. If the connection is lost during
//! COMMIT the outcome is unknown: every command of that batch gets
//! `CommitUnknown` and none is retried.
//!
//! **The writer thread drives its own connection.** The connection lives
//! on a current-thread runtime the writer owns, so a batch's round trip is
//! sent, waited for and read on the writer thread itself, with no hand-off
//! to the store's shared runtime and back (two thread wake-ups each way, a
//! step's largest cost on a busy machine after the WAL flush). Between
//! batches the thread waits inside that runtime for the next command
//! (`wake`), so the connection is still read and a server that closed it
//! is noticed before the next batch is sent.
//!
//! Step 2 lives in `decide` (writer/decide.rs); the commands and their
//! answers in `command` (writer/command.rs).

use super::MAX_BATCH;
use super::Shared;
use super::read::Session;
use super::sql::{Conn, Failed, Rows, Wrap, write};
use crate::api::*;
use crate::checkpoint::{CkptCache, CkptCaches};
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::index::{Head, HeadColumns};
use crate::prepare::{CheckedStart, check_start};
use crate::tail::Heads;
use flow_abi::fact::RunId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio_postgres::Config;
use tokio_postgres::types::ToSql;

mod command;
mod decide;

pub(crate) use command::{Command, Out};
use decide::decide;

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
    /// The rows of the batch's pauses (`waiting::load`).
    waits: HashMap<String, Vec<crate::waiting::WaitingRow>>,
    /// The `xmin` of each touched run's row as read (or remembered).
    xmin: HashMap<String, i64>,
    /// The transaction's id: the `xmin` of every row it writes.
    xid: i64,
    /// Runs created by this batch: a `fresh` command needs its run here.
    created: HashSet<String>,
}

impl Plan {
    /// Whether the batch wrote `id`'s `runs` row (its `xmin` is then the
    /// batch's transaction).
    fn wrote_row(&self, id: &str) -> bool {
        self.changed.contains_key(id)
            || self.rows.runs.iter().any(|r| r.meta.run.as_str() == id)
            || self.rows.faults.iter().any(|(r, _)| r == id)
    }
}

/// A run's head as this writer last committed or read it, and the version
/// of its `runs` row then.
struct Known {
    head: Head,
    host_seq: i64,
    xmin: i64,
}

/// Runs whose heads the writer remembers, at most (then it starts over).
const KNOWN_BUDGET: usize = 16_384;

/// Longest wait for a command before the channel is looked at again (a
/// missed wake-up costs at most this).
const IDLE: Duration = Duration::from_secs(1);

pub(crate) struct Writer {
    /// The writer's own runtime: drives its connection (see the module
    /// doc); only ever entered from the writer's thread.
    rt: Arc<Runtime>,
    /// Told after each command is queued.
    wake: Arc<Notify>,
    /// The read pool, for a base read back (`load_bases`).
    shared: Arc<Shared>,
    cfg: Config,
    channel: String,
    conn: Option<Conn>,
    heads: Arc<Heads>,
    cache: CkptCaches<String>,
    waits: HashMap<String, Vec<crate::waiting::WaitingRow>>,
    /// Commands committed since the run counters' deltas were last folded.
    unfolded: usize,
    /// The heads of runs this writer committed to, for one-round-trip
    /// batches (see the module doc).
    known: HashMap<String, Known>,
}

impl Writer {
    /// Connects (so a store that cannot write fails at open). Queuing a
    /// command must be followed by `wake.notify_one()`.
    pub(crate) fn open(
        shared: Arc<Shared>,
        cfg: Config,
        channel: String,
        heads: Arc<Heads>,
        wake: Arc<Notify>,
    ) -> Result<Writer> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("writer runtime", e))?;
        let mut w = Writer {
            rt: Arc::new(rt),
            wake,
            shared,
            cfg,
            channel,
            conn: None,
            heads,
            cache: CkptCaches::new(),
            waits: HashMap::new(),
            unfolded: 0,
            known: HashMap::new(),
        };
        let rt = w.rt.clone();
        rt.block_on(w.ensure_conn())?;
        rt.block_on(w.fold_counts())?;
        Ok(w)
    }

    async fn ensure_conn(&mut self) -> Result<&Conn> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(Conn::open(&self.cfg).await?);
        }
        self.conn.as_ref().ok_or(Error::WriterGone)
    }

    /// Folds the run counters' deltas (`counts::fold`) on the writer's
    /// connection, between two batches.
    async fn fold_counts(&mut self) -> Result<()> {
        let conn = self.ensure_conn().await?;
        super::counts::fold(&conn.client).await?;
        self.unfolded = 0;
        Ok(())
    }

    /// The next command, waiting for it inside the writer's runtime (so
    /// its connection is read meanwhile); `None` once every handle is
    /// dropped.
    fn next(&self, rx: &Receiver<Command>) -> Option<Command> {
        loop {
            match rx.try_recv() {
                Ok(c) => return Some(c),
                Err(TryRecvError::Disconnected) => return None,
                // A command queued after the look above left a permit:
                // `notified` then returns at once.
                Err(TryRecvError::Empty) => {
                    let wake = &self.wake;
                    self.rt.block_on(async {
                        let _ = tokio::time::timeout(IDLE, wake.notified()).await;
                    });
                }
            }
        }
    }

    /// The loop: take one command, drain more without waiting, commit them
    /// together. Ends when every handle is dropped.
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        while let Some(first) = self.next(&rx) {
            let mut batch = Vec::new();
            first.flatten_into(&mut batch);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(c) => c.flatten_into(&mut batch),
                    Err(_) => break,
                }
            }
            self.unfolded += batch.len();
            self.commit(batch, true);
            if self.unfolded >= super::counts::FOLD_EVERY {
                let rt = self.rt.clone();
                // A fold that fails (a lost connection) leaves the deltas
                // counted where they are and is tried again after the
                // next batch; the batch's own error, if any, was answered.
                let _ = rt.block_on(self.fold_counts());
            }
        }
    }

    fn commit(&mut self, cmds: Vec<Command>, may_split: bool) {
        let rt = self.rt.clone();
        self.load_bases(&cmds);
        self.waits = super::waiting::load(&self.shared, &cmds);
        let known = self.all_known(&cmds);
        let mut result = rt.block_on(self.batch(&cmds, known));
        if known && result.as_ref().is_err_and(|f| !f.unknown) {
            // Rolled back (a row moved since, or a statement failed):
            // forget those heads and go through the locked read. Deciding
            // may have taken checkpoint bases: read them back.
            for id in cmds.iter().flat_map(Command::run_ids) {
                self.known.remove(&id);
            }
            self.load_bases(&cmds);
            result = rt.block_on(self.batch(&cmds, false));
        }
        if let Err(f) = &result
            && !f.unknown
            && self.conn.as_ref().is_none_or(|c| c.client.is_closed())
        {
            // The connection was gone before COMMIT (a restarted server, a
            // terminated backend): nothing was stored, so one retry on a
            // new connection is safe.
            self.load_bases(&cmds);
            result = rt.block_on(self.batch(&cmds, false));
        }
        match result {
            Ok((outs, plan)) => {
                self.remember(&plan);
                for (run, c) in plan.ckpt {
                    self.cache.set(run, c);
                }
                let notes = HeadNote::gather(outs.iter().flat_map(|o| match o {
                    Ok(Out::Appended(a)) => vec![HeadNote::of(a)],
                    Ok(Out::Import(outcomes)) => {
                        outcomes.iter().filter_map(HeadNote::imported).collect()
                    }
                    _ => Vec::new(),
                }));
                for (cmd, out) in cmds.into_iter().zip(outs) {
                    cmd.answer(out);
                }
                // Heads move only after COMMIT: a subscriber never sees a
                // fact that could still roll back.
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
                for id in cmds.iter().flat_map(Command::run_ids) {
                    self.known.remove(&id);
                }
                // Rolled back: run each alone, so only the bad one fails —
                // a Create with the `fresh` commands after it, which need
                // it in their batch.
                let mut alone: Vec<Vec<Command>> = Vec::new();
                for cmd in cmds {
                    match alone.last_mut() {
                        Some(group) if cmd.fresh() => group.push(cmd),
                        _ => alone.push(vec![cmd]),
                    }
                }
                for group in alone {
                    self.commit(group, false);
                }
            }
            Err(f) => {
                for id in cmds.iter().flat_map(Command::run_ids) {
                    self.known.remove(&id);
                }
                let msg = f.error.to_string();
                for cmd in cmds {
                    let err = match (&cmd, f.unique) {
                        (Command::Create { .. }, true) => Error::RunExists(cmd.run_ids().concat()),
                        _ => Error::CommitFailed(msg.clone()),
                    };
                    cmd.answer(Err(err));
                }
            }
        }
    }

    fn forget(&mut self) {
        self.cache.clear();
        self.known.clear();
    }

    /// Whether `cmds` are appends and host records of runs whose heads
    /// this writer remembers: the batch can go in one round trip.
    fn all_known(&self, cmds: &[Command]) -> bool {
        cmds.iter().all(|c| match c {
            Command::Append { run, .. } | Command::Host { run, .. } => {
                self.known.contains_key(run.as_str())
            }
            _ => false,
        })
    }

    /// Remembers the heads a committed batch left, each with its row's
    /// version: the batch's transaction where it wrote the row, else the
    /// version it read (or remembered).
    fn remember(&mut self, plan: &Plan) {
        if self.known.len() + plan.heads.len() > KNOWN_BUDGET {
            self.known.clear();
        }
        for (id, head) in &plan.heads {
            let xmin = if plan.wrote_row(id) {
                plan.xid
            } else {
                match plan.xmin.get(id) {
                    Some(x) => *x,
                    None => continue,
                }
            };
            self.known.insert(
                id.clone(),
                Known {
                    head: head.clone(),
                    host_seq: plan.host_seq.get(id).copied().unwrap_or(0),
                    xmin,
                },
            );
        }
    }

    /// Reads back the latest Checkpoint of each run that a change in
    /// `cmds` follows and the cache does not hold (nor an earlier command
    /// of the batch makes), so `decide` has every base in hand. A run whose
    /// base cannot be read is left out: its change is refused.
    fn load_bases(&mut self, cmds: &[Command]) {
        let mut made = std::collections::HashSet::new();
        for c in cmds {
            let Command::Append { run, fact, .. } = c else {
                continue;
            };
            let id = run.to_string();
            if matches!(fact, Appending::Changed { .. })
                && !made.contains(&id)
                && !self.cache.contains(&id)
            {
                let mut s = Session::new(self.shared.clone());
                let seal = s.seal();
                let base = crate::seal::read::opened(&mut s, &seal, |db| {
                    crate::read::latest_checkpoint(db, run)
                });
                s.finish();
                if let Ok(base) = base {
                    self.cache.set(id.clone(), Some(base));
                }
            }
            if fact.kind() == FactKind::Checkpoint {
                made.insert(id);
            }
        }
    }

    /// One transaction for `cmds` in one round trip, decided against the
    /// heads this writer remembers (every run of `cmds` has one; see
    /// [`Writer::all_known`]); the answers and what changed, or why
    /// nothing was stored.
    async fn batch_known(&mut self, cmds: &[Command]) -> Result<(Vec<Result<Out>>, Plan), Failed> {
        let mut ids: Vec<&str> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::Append { run, .. } | Command::Host { run, .. } => Some(run.as_str()),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut plan = Plan {
            waits: self.waits.clone(),
            ..Plan::default()
        };
        let mut xmins = Vec::with_capacity(ids.len());
        for id in &ids {
            let k = self.known.get(*id).ok_or(Error::WriterGone)?;
            plan.heads.insert(id.to_string(), k.head.clone());
            plan.host_seq.insert(id.to_string(), k.host_seq);
            plan.xmin.insert(id.to_string(), k.xmin);
            xmins.push(k.xmin);
        }
        let outs: Vec<Result<Out>> = cmds
            .iter()
            .map(|cmd| decide(&mut plan, &mut self.cache, cmd, None))
            .collect();
        let channel = self.channel.clone();
        self.ensure_conn().await?;
        let conn = self.conn.as_ref().ok_or(Error::WriterGone)?;
        let wrap = Wrap::Whole {
            ids: &ids,
            xmins: &xmins,
        };
        let seal = &self.shared.seal;
        let written = write(
            conn,
            seal,
            &channel,
            &plan.rows,
            &plan.changed,
            &plan.notes,
            wrap,
        )
        .await?;
        plan.xid = written.xid;
        Ok((outs, plan))
    }

    /// One transaction for `cmds` (in one round trip when `known`); the
    /// answers and what changed, or why nothing was stored.
    async fn batch(
        &mut self,
        cmds: &[Command],
        known: bool,
    ) -> Result<(Vec<Result<Out>>, Plan), Failed> {
        if known {
            return self.batch_known(cmds).await;
        }
        // Starts are checked before any lookup: their errors come first.
        let starts: Vec<Option<Result<CheckedStart>>> = cmds
            .iter()
            .map(|c| match c {
                Command::Create {
                    namespace,
                    start,
                    sources,
                    ..
                } => Some(check_start(start.clone(), sources).map(|mut c| {
                    c.meta.namespace = namespace.clone();
                    c
                })),
                _ => None,
            })
            .collect();
        let mut ids: Vec<String> = cmds.iter().flat_map(Command::run_ids).collect();
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
            let mut plan = Plan {
                waits: self.waits.clone(),
                ..Plan::default()
            };
            for r in rows? {
                let id: String = r.try_get(0)?;
                let Ok(run) = RunId::parse(&id) else { continue };
                let last_hash: Vec<u8> = r.try_get(3)?;
                let ending: Option<String> = r.try_get(4)?;
                let state: String = r.try_get(5)?;
                let state_attrs: Option<String> = r.try_get(9)?;
                let head = HeadColumns {
                    key: r.try_get(1)?,
                    last_n: r.try_get(2)?,
                    last_hash: &last_hash,
                    ending: ending.as_deref(),
                    state: &state,
                    updated_ms: r.try_get(6)?,
                    state_ms: r.try_get(7)?,
                    state_attrs: state_attrs.as_deref(),
                }
                .check(&run)?;
                plan.host_seq.insert(id.clone(), r.try_get(8)?);
                plan.xmin.insert(id.clone(), r.try_get(10)?);
                plan.heads.insert(id, head);
            }
            let outs: Vec<Result<Out>> = cmds
                .iter()
                .zip(starts)
                .map(|(cmd, start)| decide(&mut plan, &mut self.cache, cmd, start))
                .collect();
            let wrap = Wrap::Open;
            let written = write(
                conn,
                &self.shared.seal,
                &channel,
                &plan.rows,
                &plan.changed,
                &plan.notes,
                wrap,
            )
            .await?;
            plan.xid = written.xid;
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
