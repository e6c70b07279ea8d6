//! The worker queue's writer on SQLite: a thread of its own with its own
//! connection, committing every queue write that is waiting in one
//! IMMEDIATE transaction (group commit, each write in its own SAVEPOINT),
//! as the history writer does for facts.
//!
//! Why a writer of its own: SQLite has one write lock, which the history
//! writer holds for each of its commits (an fsync each); with many calls
//! out at workers at once, writes taken one at a time would queue behind
//! it one by one (3 per call: queued, claimed, answered). Batched, they
//! share each turn of the lock. Nobody is answered before the COMMIT, so
//! a claim is never handed out before it is stored.
//!
//! The connection runs at `synchronous = NORMAL` (see `workers`): its
//! commits survive a crash of the process and become durable with the
//! history writer's next commit. The thread starts at the first queue
//! write, so a store with no workers has none; dropping the store joins it.

use super::now_ms;
use crate::error::{Error, Result};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// Queue writes committed in one transaction, at most.
const MAX_BATCH: usize = 256;
/// Writes waiting before callers wait (back-pressure).
const DEPTH: usize = 4096;

/// Called once the batch a write ran in committed (or failed to).
type Finish = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;
/// One write: run inside the batch's transaction (`None` when the batch
/// could not begin), answering through the `Finish` it returns.
type Job = Box<dyn FnOnce(Option<&Connection>) -> Finish + Send>;

/// The queue writer's handle, kept in the store.
#[derive(Default)]
pub(crate) struct QueueWriter {
    tx: Mutex<Option<SyncSender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for QueueWriter {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
    }
}

impl QueueWriter {
    /// Runs `f` in the next batch; returns its result once the batch has
    /// committed.
    pub(crate) fn write<T: Send + 'static>(
        &self,
        path: &Path,
        f: impl FnOnce(&Connection, i64) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = sync_channel(1);
        let job: Job = Box::new(move |conn| {
            let out = match conn {
                Some(c) => in_savepoint(c, |c| f(c, now_ms())),
                None => Err(Error::CommitFailed(
                    "the worker queue's batch did not begin".into(),
                )),
            };
            Box::new(move |committed| {
                let _ = reply.send(match committed {
                    Ok(()) => out,
                    Err(why) => Err(Error::CommitFailed(why)),
                });
            })
        });
        self.sender(path)?
            .send(job)
            .map_err(|_| Error::WriterGone)?;
        answer.recv().map_err(|_| Error::WriterGone)?
    }

    /// The channel to the thread, started on first use.
    fn sender(&self, path: &Path) -> Result<SyncSender<Job>> {
        let mut tx = self.tx.lock().map_err(|_| Error::WriterGone)?;
        if let Some(t) = tx.as_ref() {
            return Ok(t.clone());
        }
        let conn = Connection::open(path)?;
        // The history writer holds the write lock for one commit at a time
        // (a few hundred µs); SQLite's own busy timeout sleeps whole
        // milliseconds between tries.
        conn.busy_handler(Some(retry_soon))?;
        conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
        let (send, recv) = sync_channel(DEPTH);
        let handle = std::thread::Builder::new()
            .name("flow-store-queue".into())
            .spawn(move || run(conn, recv))
            .map_err(|e| Error::io(path, e))?;
        if let Ok(mut t) = self.thread.lock() {
            *t = Some(handle);
        }
        *tx = Some(send.clone());
        Ok(send)
    }
}

/// Tries the write lock again every 50 µs, for 5 s in all.
fn retry_soon(tries: i32) -> bool {
    std::thread::sleep(Duration::from_micros(50));
    tries < 100_000
}

/// `f` inside a SAVEPOINT: its writes are kept if it succeeds, undone if
/// it fails, without touching the rest of the batch.
fn in_savepoint<T>(c: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    c.execute_batch("SAVEPOINT queue_write")?;
    match f(c) {
        Ok(v) => {
            c.execute_batch("RELEASE queue_write")?;
            Ok(v)
        }
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK TO queue_write; RELEASE queue_write");
            Err(e)
        }
    }
}

fn run(conn: Connection, rx: Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let begun = conn.execute_batch("BEGIN IMMEDIATE").is_ok();
        let finishes: Vec<Finish> = jobs
            .into_iter()
            .map(|j| j(begun.then_some(&conn)))
            .collect();
        let committed = if begun {
            conn.execute_batch("COMMIT").map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                e.to_string()
            })
        } else {
            Err("the worker queue's transaction did not begin".into())
        };
        for f in finishes {
            f(committed.clone());
        }
    }
}
