//! A run's step as a backend writer's commands: the replies a writer
//! hands each command's result to, the run's creation a step may begin
//! with, and the commands of one step's commit in order (the same for
//! both backends; what each command decides is `prepare`'s).

use crate::api::*;
use crate::error::{Error, Result};
use flow_abi::fact::{Fact, RunId};
use std::sync::Arc;

/// Where a writer hands one append's result: a waiting caller's channel,
/// or its share of a whole [`AppendDone`].
pub(crate) type Reply<T> = Box<dyn FnOnce(Result<T>) + Send>;

/// A reply that a caller waits for on `tx`.
pub(crate) fn sync_reply<T: Send + 'static>(
    tx: std::sync::mpsc::SyncSender<Result<T>>,
) -> Reply<T> {
    Box::new(move |r| {
        // A caller that stopped waiting is not an error of the store.
        let _ = tx.send(r);
    })
}

/// Waits for what a queued append (`queue`, given its `done`) answers.
pub(crate) fn wait_for(queue: impl FnOnce(AppendDone)) -> Result<Vec<Appended>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    queue(Box::new(move |r| {
        let _ = tx.send(r);
    }));
    rx.recv().map_err(|_| Error::WriterGone)?
}

/// A run's creation that a step's commit begins with (see
/// [`AppendFacts::create_run_then`]).
pub(crate) struct Creation {
    /// Where a root run goes (a fork or nested run inherits its parent's
    /// or outer run's: [`StartMeta::inherit`]).
    pub namespace: Namespace,
    pub start: Fact,
    pub sources: Vec<SourceText>,
    pub records: Vec<HostRecord>,
}

/// A backend writer's commands, as a step's commit needs them.
pub(crate) trait StepCommand {
    fn create(creation: Creation, at_ms: i64, reply: Reply<Appended>) -> Self;
    /// `fresh`: of a run created by a Create before it in the same batch,
    /// and refused (changing nothing) unless that Create was accepted.
    fn append(run: RunId, fact: Appending, at_ms: i64, reply: Reply<Appended>, fresh: bool)
    -> Self;
    /// A record whose own answer nobody waits for (see
    /// [`AppendFacts::append_all_with_then`]); `fresh` as for `append`.
    fn host(run: RunId, record: HostRecord, at_ms: i64, fresh: bool) -> Self;
}

/// Implements [`StepCommand`] for a backend writer's `Command` enum, whose
/// `Create`, `Append` and `Host` variants have the same fields in both
/// backends (one definition for both).
macro_rules! step_command {
    ($command:ident) => {
        impl crate::step::StepCommand for $command {
            fn create(
                c: crate::step::Creation,
                at_ms: i64,
                reply: crate::step::Reply<crate::api::Appended>,
            ) -> $command {
                $command::Create {
                    namespace: c.namespace,
                    start: c.start,
                    sources: c.sources,
                    records: c.records,
                    at_ms,
                    reply,
                }
            }

            fn append(
                run: flow_abi::fact::RunId,
                fact: crate::api::Appending,
                at_ms: i64,
                reply: crate::step::Reply<crate::api::Appended>,
                fresh: bool,
            ) -> $command {
                $command::Append {
                    run,
                    fact,
                    at_ms,
                    reply,
                    fresh,
                }
            }

            fn host(
                run: flow_abi::fact::RunId,
                record: crate::api::HostRecord,
                at_ms: i64,
                fresh: bool,
            ) -> $command {
                let (reply, _) = std::sync::mpsc::sync_channel(1);
                $command::Host {
                    run,
                    record,
                    at_ms,
                    reply,
                    fresh,
                }
            }
        }
    };
}
pub(crate) use step_command;

/// A step's writer commands, in commit order: the run's creation if it
/// is new, one append per fact, then the records that ride after them.
/// Once every reply is in, `done` gets every `Appended` (Start's first),
/// in order, or the first refusal.
pub(crate) fn step_commands<C: StepCommand>(
    run: &RunId,
    creation: Option<Creation>,
    facts: Vec<Appending>,
    records: Vec<HostRecord>,
    done: AppendDone,
) -> Vec<C> {
    let at_ms = crate::sqlite::now_ms();
    let fresh = creation.is_some();
    let mut replies = gathered(usize::from(creation.is_some()) + facts.len(), done).into_iter();
    let mut cmds = Vec::with_capacity(replies.len() + records.len());
    if let Some(c) = creation
        && let Some(reply) = replies.next()
    {
        cmds.push(C::create(c, at_ms, reply));
    }
    for (fact, reply) in facts.into_iter().zip(replies) {
        cmds.push(C::append(run.clone(), fact, at_ms, reply, fresh));
    }
    for record in records {
        let at = record.at_ms.unwrap_or(at_ms);
        cmds.push(C::host(run.clone(), record, at, fresh));
    }
    cmds
}

/// One reply per fact of a queued append (see [`queued`]).
fn gathered(count: usize, done: AppendDone) -> Vec<Reply<Appended>> {
    struct Gather {
        got: Vec<Option<Result<Appended>>>,
        left: usize,
        done: Option<AppendDone>,
    }
    let g = Arc::new(std::sync::Mutex::new(Gather {
        got: (0..count).map(|_| None).collect(),
        left: count,
        done: Some(done),
    }));
    if count == 0
        && let Ok(mut g) = g.lock()
        && let Some(done) = g.done.take()
    {
        done(Ok(Vec::new()));
    }
    (0..count)
        .map(|i| {
            let g = g.clone();
            Box::new(move |r: Result<Appended>| {
                let Ok(mut g) = g.lock() else { return };
                g.got[i] = Some(r);
                g.left -= 1;
                if g.left == 0
                    && let Some(done) = g.done.take()
                {
                    let all = g.got.drain(..).map(|r| r.unwrap_or(Err(Error::WriterGone)));
                    done(all.collect());
                }
            }) as Reply<Appended>
        })
        .collect()
}
