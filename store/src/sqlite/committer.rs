//! Who runs the writer's next batch: the caller itself when the writer is
//! idle, else the writer thread (issue 16).
//!
//! A command comes to [`Committer::submit`]. If nothing is queued and
//! nothing is being committed, the calling thread takes the writer and
//! commits the command at once, answering itself: a lone run's step (W1)
//! costs no hand-off to another thread and back, two wake-ups a step that
//! on a VM cost more than the rest of the step's own work. Otherwise the
//! command is queued and the writer thread commits it with everything else
//! that is waiting, in one transaction (group commit across runs, as
//! before).
//!
//! Inline commits are for a lone writer only: a command that has to queue
//! (another commit was under way) turns them off, and they come back once
//! the writer thread ran a batch of one command (nobody else was waiting).
//! Under concurrent runs (W2) every commit is then a group commit; left on,
//! an inline commit took one run's step alone, an fsync of its own, and
//! blocked an async worker through it.
//!
//! Order holds: a command goes inline only when the queue is empty and no
//! batch the thread took is still being run, and an inline commit holds
//! the writer until it is done, so a command submitted after another one
//! never commits before it. A caller's thread blocks for at most its own
//! commit (one fsync); at most one caller commits inline at a time.

use super::MAX_BATCH;
use super::writer::{Command, Writer, refuse};
use crate::error::Error;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

pub(crate) struct Committer {
    queue: Mutex<Queue>,
    /// The writer thread waits here for commands.
    ready: Condvar,
    /// Submitters wait here for room (back-pressure).
    room: Condvar,
    writer: Mutex<Writer>,
    depth: usize,
}

struct Queue {
    cmds: VecDeque<Command>,
    /// Commands the writer thread took and has not finished.
    taken: usize,
    /// Whether a caller finding the writer idle may commit inline.
    inline: bool,
    closed: bool,
}

impl Committer {
    pub(crate) fn new(writer: Writer, depth: usize) -> Committer {
        Committer {
            queue: Mutex::new(Queue {
                cmds: VecDeque::new(),
                taken: 0,
                inline: true,
                closed: false,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
            writer: Mutex::new(writer),
            depth: depth.max(1),
        }
    }

    /// Commits `cmd` on this thread if the writer is idle, else queues it
    /// for the writer thread; its replies answer either way.
    pub(crate) fn submit(&self, cmd: Command) {
        let Ok(mut q) = self.queue.lock() else {
            return refuse(cmd, &|| Error::WriterGone);
        };
        while !q.closed && q.cmds.len() >= self.depth {
            q = match self.room.wait(q) {
                Ok(q) => q,
                Err(_) => return refuse(cmd, &|| Error::WriterGone),
            };
        }
        if q.closed {
            drop(q);
            return refuse(cmd, &|| Error::WriterGone);
        }
        if q.inline
            && q.cmds.is_empty()
            && q.taken == 0
            && let Ok(mut w) = self.writer.try_lock()
        {
            drop(q);
            let mut batch = Vec::new();
            cmd.flatten_into(&mut batch);
            return w.run_batch(batch);
        }
        // Contention: commits go to the writer thread, grouped.
        q.inline = false;
        q.cmds.push_back(cmd);
        drop(q);
        self.ready.notify_one();
    }

    /// The writer thread: commits what is queued, batch by batch, until
    /// [`Committer::close`]; then folds the WAL in.
    pub(crate) fn run(&self) {
        while let Some((batch, submitted)) = self.take() {
            self.room.notify_all();
            match self.writer() {
                Some(mut w) => w.run_batch(batch),
                None => batch
                    .into_iter()
                    .for_each(|c| refuse(c, &|| Error::WriterGone)),
            }
            if let Ok(mut q) = self.queue.lock() {
                q.taken = 0;
                // A batch of one: nobody else was waiting to commit.
                q.inline |= submitted == 1 && q.cmds.is_empty();
            }
        }
        if let Some(mut w) = self.writer() {
            w.close();
        }
    }

    /// Refuses what comes from now on and ends the writer thread once the
    /// queue is drained.
    pub(crate) fn close(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.closed = true;
        }
        self.ready.notify_all();
        self.room.notify_all();
    }

    /// The next batch and how many submitted commands it holds, waiting
    /// for one; `None` once closed and drained.
    fn take(&self) -> Option<(Vec<Command>, usize)> {
        let mut q = self.queue.lock().ok()?;
        while q.cmds.is_empty() {
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).ok()?;
        }
        let (mut batch, mut submitted) = (Vec::new(), 0);
        while batch.len() < MAX_BATCH
            && let Some(c) = q.cmds.pop_front()
        {
            c.flatten_into(&mut batch);
            submitted += 1;
        }
        q.taken = batch.len();
        Some((batch, submitted))
    }

    /// The writer, unless a panic while it was held poisoned it.
    fn writer(&self) -> Option<MutexGuard<'_, Writer>> {
        self.writer.lock().ok()
    }
}
