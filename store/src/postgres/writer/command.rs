//! A command to the writer thread (an append, a run's creation, a host
//! record, an import, or several taken into one batch) and how it is
//! answered once its batch commits.

use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::error::{Error, Result};
use crate::step::Reply;
use flow_abi::fact::{Fact, RunId};
use std::sync::mpsc::SyncSender;

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
    /// Archives imported together: all or none.
    Import {
        namespace: Namespace,
        archives: Vec<VerifiedArchive>,
        at_ms: i64,
        reply: SyncSender<Result<Vec<ImportOutcome>>>,
    },
}

/// A command's answer, held until its batch commits.
pub(crate) enum Out {
    Appended(Appended),
    Host(HostRecordRow),
    Import(Vec<ImportOutcome>),
}

crate::step::step_command!(Command);

impl Command {
    /// The runs this command writes (an import's several).
    /// Whether it belongs to a Create before it (see `StepCommand`).
    pub(super) fn fresh(&self) -> bool {
        matches!(
            self,
            Command::Append { fresh: true, .. } | Command::Host { fresh: true, .. }
        )
    }

    pub(super) fn run_ids(&self) -> Vec<String> {
        match self {
            Command::Create { start, .. } => match start {
                Fact::Start { run, .. } => vec![run.to_string()],
                _ => Vec::new(),
            },
            Command::Append { run, .. } | Command::Host { run, .. } => vec![run.to_string()],
            Command::Import { archives, .. } => {
                archives.iter().map(|a| a.run.to_string()).collect()
            }
            Command::Many(_) => Vec::new(),
        }
    }

    /// Adds this command to a batch, a [`Command::Many`] as its parts.
    pub(super) fn flatten_into(self, batch: &mut Vec<Command>) {
        match self {
            Command::Many(cmds) => cmds.into_iter().for_each(|c| c.flatten_into(batch)),
            c => batch.push(c),
        }
    }

    pub(crate) fn answer(self, out: Result<Out>) {
        // A caller that stopped waiting is not an error of the store.
        match self {
            Command::Create { reply, .. } | Command::Append { reply, .. } => {
                reply(out.and_then(|o| match o {
                    Out::Appended(a) => Ok(a),
                    _ => Err(Error::WriterGone),
                }))
            }
            // Taken apart when received; never answered as one.
            Command::Many(cmds) => {
                for c in cmds {
                    c.answer(Err(Error::WriterGone));
                }
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
