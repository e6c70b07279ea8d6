//! Preparing a fork (FORK-1..4): its Start and machine from the parent's
//! Start and one root Checkpoint, on the recorded program or on a newer one
//! that fits.

use super::prepare::{read_start, start_fact};
use super::{RunService, new_run_id};
use crate::error::{Error, Result};
use crate::source::Sources;
use flow_abi::fact::Fact;
use flow_abi::schema::pointer_token;
use flow_engine::machine::{Effect, Machine};
use flow_engine::program::Program;
use flow_store::RunId;
use serde_json::Value as Json;
use std::sync::Arc;

/// What a fork starts with.
pub(super) struct Fork {
    pub run: RunId,
    pub hash: String,
    pub sources: Sources,
    pub program: Arc<Program>,
    pub start: Fact,
    pub machine: Machine,
    pub effects: Vec<Effect>,
}

impl RunService {
    /// A fork's Start and machine, from the parent's Start and the one
    /// Checkpoint (whatever the parent's length: nothing else is read).
    /// A fork's Start and machine. With `onto`, the fork runs that program
    /// instead of the recorded one, if it fits (FORK-4): see [`fit`].
    pub(super) fn prepare_fork(
        &self,
        parent: &RunId,
        checkpoint: u64,
        sets: &[(String, String)],
        onto: Option<Sources>,
    ) -> Result<Fork> {
        let store = &*self.inner.store;
        let start = read_start(store, parent)?;
        let recorded = Sources::from_start(store, &start)?;
        let recorded_program = self.program(&recorded)?;
        let missing =
            || Error::NotFound(format!("{parent} has no Checkpoint at fact {checkpoint}"));
        if checkpoint < 2 {
            return Err(missing());
        }
        let cp = store
            .read_after(parent, checkpoint - 1, 1)
            .map_err(|e| match e {
                flow_store::Error::UnknownRun(_) => Error::from(e),
                flow_store::Error::InvalidArgument(_) => missing(),
                e => Error::from(e),
            })?;
        let Some(Fact::Checkpoint { task, node, .. }) = cp
            .into_iter()
            .next()
            .filter(|f| f.n == checkpoint)
            .map(|f| f.fact)
        else {
            return Err(missing());
        };
        if task != "root" {
            return Err(Error::Refused(format!(
                "fact {checkpoint} is a checkpoint of parallel branch {task}; fork from a root checkpoint"
            )));
        }
        // A state that holds a hole (a redacted value) is forked only once
        // every hole is supplied (`--set` of its field).
        let (mut state, holed) = match store.checkpoint_state(parent, checkpoint) {
            Ok(s) => (s, false),
            Err(flow_store::Error::Hole { .. }) => {
                (store.checkpoint_state_shown(parent, checkpoint)?, true)
            }
            Err(e) => return Err(e.into()),
        };
        let (sources, program, module) = match onto {
            None => {
                let module = match &start {
                    Fact::Start { entry, .. } => entry.module.clone(),
                    _ => recorded_program.root.clone(),
                };
                (recorded, recorded_program, module)
            }
            Some(onto) => {
                let program = self.program(&onto)?;
                fit(&recorded_program, &program, &node, &state)?;
                let module = program.root.clone();
                (onto, program, module)
            }
        };
        for (field, text) in sets {
            let v = Machine::decode_state_field(&program, &module, field, text)
                .map_err(Error::Refused)?;
            if let Json::Object(m) = &mut state {
                m.insert(field.clone(), v);
            }
        }
        if holed && let Some(at) = hole_at(&state, &store.holes(parent)?) {
            return Err(Error::Conflict(format!(
                "the state of {parent} at checkpoint {checkpoint} holds a redacted value (a hole) at /state{at}: supply the field with --set (its whole value), or fork from a checkpoint before the value"
            )));
        }
        let (machine, effects) = Machine::resume_at(program.clone(), &module, &node, state.clone())
            .map_err(|e| Error::Refused(e.to_string()))?;
        let run = new_run_id();
        let start = start_fact(
            &run,
            &module,
            &sources,
            state,
            Some((parent, checkpoint)),
            None,
        );
        Ok(Fork {
            run,
            hash: sources.program_hash(),
            sources,
            program,
            start,
            machine,
            effects,
        })
    }
}

/// The JSON pointer (from the state's root) of the first hole marker in
/// `v` that names one of `holes`, if any.
fn hole_at(v: &Json, holes: &[String]) -> Option<String> {
    match v {
        Json::Object(m) => {
            if flow_store::merkle::as_hole_marker(m).is_some_and(|h| holes.iter().any(|x| x == h)) {
                return Some(String::new());
            }
            m.iter()
                .find_map(|(k, c)| hole_at(c, holes).map(|at| format!("/{}{at}", pointer_token(k))))
        }
        Json::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, c)| hole_at(c, holes).map(|at| format!("/{i}{at}"))),
        _ => None,
    }
}

/// Whether a fork may run `new` from a checkpoint of a run of `recorded`
/// at `node` with `state`: running-a-program, "Forks": the new program
/// "must have a top-level function of the same name in the same module,
/// and every argument must fit its parameter types. Otherwise the fork is
/// refused" (FORK-4). For a FlowSpec (REQUIREMENTS, FORK-4): the same flow
/// `id`, a node of the checkpoint's id, and a state that decodes against the
/// new `state_schema` (fields it does not declare are carried, as a record
/// carries extra members; a required field the state lacks does not fit).
pub(super) fn fit(recorded: &Program, new: &Program, node: &str, state: &Json) -> Result<()> {
    let refused = |why: String| Error::Refused(format!("the program does not fit the fork: {why}"));
    let (Some(old), Some(m)) = (recorded.root_module(), new.root_module()) else {
        return Err(refused("a program has no root module".into()));
    };
    let (old_id, new_id) = (&old.report.flow.id, &m.report.flow.id);
    if old_id != new_id {
        return Err(refused(format!(
            "its flow id is {new_id:?}, the run's is {old_id:?}"
        )));
    }
    if m.node(node).is_none() {
        return Err(refused(format!(
            "it has no node {node:?}, the checkpoint's node"
        )));
    }
    let ty = m
        .report
        .flow
        .state_schema
        .as_ref()
        .and_then(|ss| m.report.schema_types.get(&ss.schema.ptr));
    if let Some(ty) = ty {
        flow_abi::decode_json(state, ty, &m.report.types).map_err(|e| {
            refused(format!(
                "the checkpoint's state does not fit its state_schema: {e}"
            ))
        })?;
    }
    Ok(())
}
