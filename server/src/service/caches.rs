//! The service's two private caches, each owning its lock: checked
//! programs by program hash and root, and paused runs' machines. Neither
//! is ever the truth: a miss checks the program again or replays the
//! history (the seed's "runtime's own snapshot of a run ... a private
//! cache": a resume that uses it behaves exactly as one that does not).
//! A poisoned lock is a miss.

use crate::error::Result;
use crate::source::Sources;
use flow_engine::machine::{Machine, OpenCall};
use flow_engine::program::Program;
use flow_store::{FactRef, RunId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Checked programs kept at most (by program hash).
const PROGRAMS: usize = 256;
/// Paused machines kept at most.
const PAUSED: usize = 4096;

/// Checked programs, by program hash and root module.
#[derive(Default)]
pub(super) struct Programs(Mutex<HashMap<String, Arc<Program>>>);

impl Programs {
    /// The checked program of `sources`, from the cache by program hash
    /// and root (a nested run's sources are its outer run's, rooted at its
    /// own module).
    pub(super) fn get(&self, sources: &Sources) -> Result<Arc<Program>> {
        let key = format!("{} {}", sources.program_hash(), sources.root);
        if let Some(p) = self.0.lock().ok().and_then(|p| p.get(&key).cloned()) {
            return Ok(p);
        }
        let p = sources.program()?;
        if let Ok(mut cache) = self.0.lock() {
            if cache.len() >= PROGRAMS {
                cache.clear();
            }
            cache.insert(key, p.clone());
        }
        Ok(p)
    }
}

/// A paused run's machine, kept while the run's head is `head`.
struct Paused {
    head: FactRef,
    program: Arc<Program>,
    machine: Machine,
}

/// Paused runs' machines, each valid while its run's head is the fact the
/// drive paused it at.
#[derive(Default)]
pub(super) struct PausedMachines(Mutex<HashMap<RunId, Paused>>);

impl PausedMachines {
    pub(super) fn remember(
        &self,
        run: &RunId,
        head: FactRef,
        program: Arc<Program>,
        machine: Machine,
    ) {
        if let Ok(mut p) = self.0.lock() {
            if p.len() >= PAUSED {
                p.clear();
            }
            p.insert(
                run.clone(),
                Paused {
                    head,
                    program,
                    machine,
                },
            );
        }
    }

    /// Forgets `run`'s machine (halted, or driven on elsewhere).
    pub(super) fn forget(&self, run: &RunId) {
        if let Ok(mut p) = self.0.lock() {
            p.remove(run);
        }
    }

    /// A copy of the machine of `run`, if the run is still at `head` (a
    /// refused resume leaves the entry).
    pub(super) fn at(&self, run: &RunId, head: &FactRef) -> Option<(Arc<Program>, Machine)> {
        let p = self.0.lock().ok()?;
        let c = p.get(run).filter(|c| c.head == *head)?;
        Some((c.program.clone(), c.machine.clone()))
    }

    /// The calls open in `run`'s machine, if the run is still at `head`.
    pub(super) fn open_calls(&self, run: &RunId, head: &FactRef) -> Option<Vec<OpenCall>> {
        let p = self.0.lock().ok()?;
        p.get(run)
            .filter(|c| c.head == *head)
            .map(|c| c.machine.open_calls())
    }
}
