//! Checkpoints by change: when the host asks for them
//! ([`Machine::checkpoint_by_change`]), a Checkpoint of the same state as
//! the machine's previous Checkpoint carries what the writes since touched
//! ([`StateChange`]) instead of a copy of the whole state, so a step of a
//! run whose state grows costs what it changed. Every write goes through
//! `Machine::put`, which notes the field here; anything else that could
//! make the previous Checkpoint's state another one (a branch task made or
//! dropped) forgets the base, and the next Checkpoint is whole again.
//!
//! Nothing here changes a fact: the logical Checkpoint is the same whole
//! state either way, and replay, which compares whole states, never asks
//! for changes.

use super::{Effect, Machine};
use crate::model::Reducer;
use crate::path::Target;
use flow_abi::fact::{FieldChange, StateChange};
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// Which state object a task's writes go to: a branch's own (`Some(task)`)
/// or the run's (`None`).
type StateKey = Option<String>;

/// What the machine tracks once the host asked for Checkpoints by change.
#[derive(Debug, Clone, Default)]
pub(super) struct Changes {
    /// The state the previous Checkpoint carried and the fields written in
    /// it since; `None` until a whole Checkpoint is taken.
    base: Option<(StateKey, BTreeMap<String, Touch>)>,
}

/// How a field was written since the base.
#[derive(Debug, Clone, Copy)]
enum Touch {
    /// Only appended to, starting from a list of `from` items.
    Append { from: usize },
    /// Written some other way.
    Set,
}

impl Machine {
    /// From now on a Checkpoint of the same state as this machine's
    /// previous one is given by what changed ([`Effect::Changed`]); the
    /// next Checkpoint is whole. The host calls this when it takes the
    /// machine to record its effects in order, and must then record every
    /// Checkpoint effect before the next one, or call this again.
    pub fn checkpoint_by_change(&mut self) {
        self.changes = Some(Changes::default());
    }

    /// The state object `task` writes to.
    fn state_key(&self, task: &str) -> StateKey {
        self.tasks
            .get(task)
            .filter(|t| t.local.is_some())
            .map(|_| task.to_string())
    }

    /// Notes a write of `target` through `reducer`, before it is applied.
    pub(super) fn note_write(&mut self, task: &str, target: &Target, reducer: Reducer) {
        let Some(c) = &self.changes else { return };
        let Some((key, _)) = &c.base else { return };
        let written = self.state_key(task);
        if *key != written {
            return;
        }
        let now = self
            .task_state(task)
            .get(&target.field)
            .and_then(Json::as_array)
            .map(Vec::len);
        let Some((_, touched)) = self.changes.as_mut().and_then(|c| c.base.as_mut()) else {
            return;
        };
        let appends = reducer == Reducer::Append && target.below.is_empty();
        let touch = match (touched.get(&target.field), now) {
            (Some(t @ Touch::Append { .. }), Some(_)) if appends => *t,
            (None, Some(from)) if appends => Touch::Append { from },
            _ => Touch::Set,
        };
        touched.insert(target.field.clone(), touch);
    }

    /// A branch task `task` was made or dropped: if the base was its
    /// state, the next Checkpoint is whole.
    pub(super) fn note_task(&mut self, task: &str) {
        if let Some(c) = self.changes.as_mut()
            && matches!(&c.base, Some((Some(k), _)) if k == task)
        {
            c.base = None;
        }
    }

    /// The Checkpoint effect of `task` at `node`: by change when the
    /// previous Checkpoint was of the same state, else whole. Either way it
    /// becomes the base.
    pub(super) fn checkpoint_effect(&mut self, task: &str, node: &str) -> Effect {
        let key = self.state_key(task);
        let Some(c) = self.changes.as_mut() else {
            return self.whole_checkpoint(task, node);
        };
        let touched = match c.base.take() {
            Some((k, touched)) if k == key => Some(touched),
            _ => None,
        };
        c.base = Some((key, BTreeMap::new()));
        let change = touched.and_then(|t| self.change_of(task, t));
        match change {
            Some(change) => Effect::Changed {
                task: task.to_string(),
                node: node.to_string(),
                change,
            },
            None => self.whole_checkpoint(task, node),
        }
    }

    fn whole_checkpoint(&self, task: &str, node: &str) -> Effect {
        Effect::Checkpoint {
            task: task.to_string(),
            node: node.to_string(),
            state: self.task_state(task).clone(),
        }
    }

    /// The change the `touched` fields of `task`'s state make; `None` when
    /// the state is not an object or a field is not as noted (the
    /// Checkpoint is then whole).
    fn change_of(&self, task: &str, touched: BTreeMap<String, Touch>) -> Option<StateChange> {
        let state = self.task_state(task).as_object()?;
        let mut fields = BTreeMap::new();
        for (k, t) in touched {
            let v = state.get(&k)?;
            let c = match t {
                Touch::Set => FieldChange::Set(v.clone()),
                Touch::Append { from } => FieldChange::Append {
                    from,
                    items: v.as_array()?.get(from..)?.to_vec(),
                },
            };
            fields.insert(k, c);
        }
        Some(StateChange {
            fields,
            len: state.len(),
        })
    }
}
