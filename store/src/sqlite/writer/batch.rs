//! Group commit: a batch's commands in one transaction, an import, delete
//! or redaction each in a savepoint of its own (a create, append or host
//! record needs none: see `append`, `host`); the answers held until COMMIT.

use super::{Batch, Command, Effects, HEADS_BUDGET, Writer, fail};
use crate::api::*;
use crate::error::{Error, Result};
use crate::index::ending_text;
use crate::step::{Reply, sync_reply};
use rusqlite::params;

/// Sends a held result; the argument is the commit error, if any.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// A command's result, held until the batch commits.
struct Done {
    answer: Answer,
    notify: Vec<HeadNote>,
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

impl Writer {
    pub(super) fn commit_batch(&mut self, cmds: Vec<Command>) {
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
            // A create, an append or a host record needs no savepoint of
            // its own (see `append`, `host`): each writes nothing before it
            // is admitted, its first write is one statement, refused whole
            // or done, and a failure after it leaves the batch broken. (A
            // savepoint copied each page a command touched into SQLite's
            // sub-journal: a new run's 17 pages of 16 KiB, about 100 µs of
            // a one-step run's CPU, issue 42.)
            let guarded = !matches!(
                cmd,
                Command::Append { .. } | Command::Create { .. } | Command::Host { .. }
            );
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
                let notes =
                    HeadNote::gather(done.iter_mut().flat_map(|d| std::mem::take(&mut d.notify)));
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

    /// Runs one command; `None` effects means it failed and is rolled back.
    fn exec(&mut self, cmd: Command, batch: &mut Batch) -> (Done, Option<Effects>) {
        match cmd {
            Command::Create {
                namespace,
                start,
                sources,
                records,
                at_ms,
                reply,
            } => {
                let r = self.create(namespace, start, &sources, records, at_ms, batch);
                if let Ok(a) = &r {
                    batch.created.insert(a.run.to_string());
                }
                let fx = r.as_ref().ok().map(|_| Effects::default());
                let notify = r.as_ref().ok().map(HeadNote::of).into_iter().collect();
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
                fresh,
            } => match batch
                .check_fresh(&run, fresh)
                .and_then(|()| self.append(&run, fact, at_ms, batch))
            {
                Ok((a, fx)) => {
                    let notify = vec![HeadNote::of(&a)];
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
                        notify: Vec::new(),
                    },
                    None,
                ),
            },
            Command::Host {
                run,
                record,
                at_ms,
                reply,
                fresh,
            } => match batch
                .check_fresh(&run, fresh)
                .and_then(|()| self.host(&run, record, at_ms, batch))
            {
                Ok((row, fx)) => (
                    Done {
                        answer: answer(sync_reply(reply), Ok(row)),
                        notify: Vec::new(),
                    },
                    Some(fx),
                ),
                Err(e) => (
                    Done {
                        answer: answer::<HostRecordRow>(sync_reply(reply), Err(e)),
                        notify: Vec::new(),
                    },
                    None,
                ),
            },
            Command::Import {
                namespace,
                archives,
                at_ms,
                reply,
            } => {
                // One savepoint for them all: a refused archive rolls
                // back the ones imported before it.
                let r: Result<Vec<ImportOutcome>> = archives
                    .iter()
                    .map(|a| self.import(a, &namespace, at_ms, batch))
                    .collect();
                let fx = r.as_ref().ok().map(|_| Effects::default());
                let notify = r.iter().flatten().filter_map(HeadNote::imported).collect();
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
                        notify: Vec::new(),
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
                    crate::sqlite::delete::delete(&self.conn, &run, &head, &how, at_ms)
                        .map(|d| (d, head.key))
                });
                let fx = r.as_ref().ok().map(|(_, key)| Effects {
                    gone: Some((run.to_string(), *key)),
                    ..Effects::default()
                });
                (
                    Done {
                        answer: answer(sync_reply(reply), r.map(|(d, _)| d)),
                        notify: Vec::new(),
                    },
                    fx,
                )
            }
            Command::Redact {
                run,
                holes,
                at_ms,
                reply,
            } => {
                let r = self.head(&run, batch).and_then(|head| {
                    crate::sqlite::redact::redact(&self.conn, &run, &head, &holes, at_ms)
                        .map(|d| (d, head.key))
                });
                // The writer's memory of the run's latest state may hold a
                // value that is a hole now: it goes.
                let fx = r.as_ref().ok().map(|(_, key)| Effects {
                    ckpt: Some((*key, None)),
                    ..Effects::default()
                });
                (
                    Done {
                        answer: answer(sync_reply(reply), r.map(|(d, _)| d)),
                        notify: Vec::new(),
                    },
                    fx,
                )
            }
            Command::Checkpoint(reply) => {
                let r: Result<()> = Ok(());
                (
                    Done {
                        answer: answer(sync_reply(reply), r),
                        notify: Vec::new(),
                    },
                    Some(Effects::default()),
                )
            }
        }
    }
}
