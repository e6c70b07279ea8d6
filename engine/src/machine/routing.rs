//! Routing: the edge out of a finished node.

use super::helpers::*;
use super::*;

impl Machine {
    /// The node finished: choose the route out.
    pub(super) fn route(&mut self, task: &str) {
        self.set_stage(task, Stage::Route { next: 0 });
    }

    pub(super) fn goto(&mut self, task: &str, to: String) {
        if let Some(t) = self.tasks.get_mut(task) {
            t.node = to;
            t.stage = Stage::Enter;
        }
    }

    /// Branch `i` of the route out of `node`: a condition node's branches,
    /// else its conditional edge's.
    pub(super) fn route_target(&self, node: &str, i: usize) -> Result<String, String> {
        let (branches, _) = route_of(self.module_ref(), node);
        branches
            .get(i)
            .map(|(_, to)| to.to_string())
            .ok_or_else(|| format!("node {node}: no branch {i}"))
    }

    /// Tries conditional branches from `next` on: the first that holds
    /// wins, else the default (DESIGN §4: "first matching branch wins, else
    /// `default_target`").
    pub(super) fn choose_route(&mut self, task: &str, next: usize) -> Step {
        let node = self
            .tasks
            .get(task)
            .map(|t| t.node.clone())
            .ok_or("no task")?;
        // Borrow the routes from a handle on the program: no clone of the
        // conditions per step.
        let program = self.program.clone();
        let module = program
            .module(&self.module)
            .ok_or_else(|| format!("no module {}", self.module))?;
        let (branches, default) = route_of(module, &node);
        for (i, (cond, to)) in branches.iter().enumerate().skip(next) {
            match cond {
                Condition::Expr(e) => {
                    let holds = e
                        .eval(&self.scope(task, None))
                        .map_err(|err| format!("node {node}: condition {}", expr_error(e, &err)))?;
                    if holds {
                        self.goto(task, to.to_string());
                        return Ok(());
                    }
                }
                Condition::FnRef(f) => {
                    let mut args = Map::new();
                    args.insert("input".into(), fn_input(self.task_state(task), None));
                    self.set_stage(task, Stage::Route { next: i });
                    self.call(
                        task,
                        &node,
                        &f.identity(),
                        Json::Object(args),
                        Purpose::Route(i),
                    )?;
                    // The reply decides; the task waits.
                    if let Some(t) = self.tasks.get_mut(task) {
                        t.stage = Stage::Waiting;
                    }
                    return Ok(());
                }
            }
        }
        match default {
            Some(to) => {
                self.goto(task, to.to_string());
                Ok(())
            }
            None => Err(format!("node {node} has no route out")),
        }
    }
}
