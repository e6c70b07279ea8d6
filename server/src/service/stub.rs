//! A fork cut short after its Start: its Start is durable (the fork was
//! acknowledged), but the process ended before the fork's first
//! Checkpoint was. Its history cannot be replayed (a fork's history holds
//! its starting Checkpoint second), yet nothing of the fork happened: the
//! machine is started again exactly as the fork started it — the
//! Checkpoint's node, from the parent's Checkpoint fact the Start names,
//! with the state the Start records as its input — and its first effects
//! (that Checkpoint first) are recorded by the drive that continues it.

use super::RunService;
use super::drive::{Step, steps};
use super::prepare::read_start;
use crate::error::{Error, Result};
use crate::source::Sources;
use flow_abi::fact::{Fact, Parent};
use flow_engine::machine::Machine;
use flow_engine::program::Program;
use flow_store::{FactRef, RunId};
use std::sync::Arc;

/// A fork started again: its program, its machine, and its first steps.
pub(super) struct Restarted {
    pub program: Arc<Program>,
    pub machine: Machine,
    pub first: Vec<Step>,
}

impl RunService {
    /// The machine of a fork whose history is only its Start (`None` for
    /// any other run), with the fork's first steps still to record.
    pub(super) fn fork_restarted(&self, run: &RunId, head: &FactRef) -> Result<Option<Restarted>> {
        if head.n != 1 {
            return Ok(None);
        }
        let store = &*self.inner.store;
        let start = read_start(store, run)?;
        let Fact::Start {
            parent:
                Some(Parent {
                    run: parent,
                    checkpoint,
                }),
            input,
            entry,
            ..
        } = &start
        else {
            return Ok(None);
        };
        let node = match store
            .read_after(parent, checkpoint - 1, 1)?
            .into_iter()
            .next()
            .map(|f| f.fact)
        {
            Some(Fact::Checkpoint { n, node, .. }) if n == *checkpoint => node,
            _ => {
                return Err(Error::Unreadable(format!(
                    "{run} is a fork cut short after its Start, and its parent {parent} no longer holds Checkpoint {checkpoint} to start it from; fork {parent} again"
                )));
            }
        };
        let program = self.program(&Sources::from_start(store, &start)?)?;
        let (machine, effects) =
            Machine::resume_at(program.clone(), &entry.module, &node, input.clone())
                .map_err(|e| Error::Unreadable(format!("{run} cannot be started again: {e}")))?;
        Ok(Some(Restarted {
            program,
            machine,
            first: steps(effects),
        }))
    }
}
