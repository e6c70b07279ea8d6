//! Plumbing: the module, tasks, state reads and writes, faults.

use super::helpers::*;
use super::*;

impl Machine {
    pub(super) fn module_ref(&self) -> &Module {
        // The module was checked to exist when the machine was made.
        self.program
            .module(&self.module)
            .unwrap_or_else(|| unreachable_module())
    }

    pub(super) fn flow(&self) -> &Flow {
        &self.module_ref().report.flow
    }

    pub(super) fn node(&self, id: &str) -> Option<&Node> {
        self.module_ref().node(id)
    }

    pub(super) fn fault(&mut self, why: String) {
        if self.ended.is_some() {
            return;
        }
        let calls: Vec<CallId> = self.calls.keys().cloned().collect();
        for c in calls {
            self.out.push(Effect::Close {
                call: c,
                reason: "run faulted".into(),
            });
        }
        self.calls.clear();
        let e = Ending::Faulted(why);
        self.out.push(Effect::End(e.clone()));
        self.ended = Some(e);
        self.tasks.clear();
    }

    pub(super) fn task_state(&self, task: &str) -> &Json {
        self.tasks
            .get(task)
            .and_then(|t| t.local.as_ref())
            .unwrap_or(&self.state)
    }

    pub(super) fn scope<'a>(&'a self, task: &str, last_message: Option<&'a Json>) -> Scope<'a> {
        Scope {
            state: self.task_state(task),
            last_message,
            error: self.error.as_ref(),
        }
    }

    pub(super) fn resolve(&self, task: &str, path: &Path) -> Result<Json, String> {
        path.resolve(&self.scope(task, None))
            .map(|v| v.cloned().unwrap_or(Json::Null))
            .map_err(|e| format!("{path}: {e}"))
    }

    /// Issues a call for `task`; the task waits.
    pub(super) fn call(
        &mut self,
        task: &str,
        node: &str,
        tool: &str,
        args: Json,
        purpose: Purpose,
    ) -> Step {
        let fingerprint = self
            .module_ref()
            .fingerprint(tool)
            .ok_or_else(|| format!("node {node}: no declaration {tool}"))?;
        let t = self
            .tasks
            .get_mut(task)
            .ok_or_else(|| format!("no task {task}"))?;
        t.k += 1;
        let call = CallId::new(task, t.k).map_err(|e| format!("node {node}: {e}"))?;
        if t.stage == Stage::Enter {
            t.stage = Stage::Waiting;
        }
        let nested = self.program.nested_module(tool).map(str::to_string);
        self.out.push(Effect::Call {
            call: call.clone(),
            task: task.to_string(),
            node: node.to_string(),
            tool: tool.to_string(),
            fingerprint,
            args: args.clone(),
            nested,
        });
        if purpose == Purpose::Node
            && tool == "std/human#input"
            && let Some(NodeKind::Hitl(h)) = self.node(node).map(|n| &n.kind)
            && let Some(seconds) = h.timeout_seconds
        {
            self.out.push(Effect::Deadline {
                call: call.clone(),
                seconds,
            });
        }
        self.calls.insert(
            call,
            Pending {
                task: task.to_string(),
                node: node.to_string(),
                tool: tool.to_string(),
                args,
                purpose,
            },
        );
        Ok(())
    }

    /// Writes `value` at `target` in `task`'s state through the field's
    /// reducer, once it fits the field's declared type (`typed.rs`); a
    /// value that does not is not written, and the error names the path
    /// and the type.
    pub(super) fn write(&mut self, task: &str, target: &Target, value: Json) -> Step {
        let reducer = self.reducer_of(&target.field);
        self.check_write(task, target, &value, reducer)?;
        self.put(task, target, value, reducer);
        Ok(())
    }

    /// Writes `value` at `target` through `reducer`, checked already.
    pub(super) fn put(&mut self, task: &str, target: &Target, value: Json, reducer: Reducer) {
        self.note_write(task, target, reducer);
        let is_branch = self.tasks.get(task).is_some_and(|t| t.local.is_some());
        if is_branch {
            if let Some(t) = self.tasks.get_mut(task) {
                t.writes.push((target.clone(), value.clone()));
                if let Some(local) = t.local.as_mut() {
                    apply(local, target, value, reducer);
                }
            }
        } else {
            apply(&mut self.state, target, value, reducer);
        }
    }

    pub(super) fn reducer_of(&self, field: &str) -> Reducer {
        self.flow()
            .state_schema
            .as_ref()
            .and_then(|s| s.fields.get(field))
            .map_or(Reducer::Replace, |f| f.reducer)
    }

    pub(super) fn write_key(&mut self, task: &str, key: &str, value: Json) -> Step {
        self.write(task, &key_target(key), value)
    }
}
