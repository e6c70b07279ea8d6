//! Parallel branches: fork, join, and the winners' writes in target order.

use super::helpers::*;
use super::*;

impl Machine {
    pub(super) fn arrive_at_join(&mut self, task: &str, join: &str) -> Step {
        let parent = self
            .tasks
            .get(task)
            .and_then(|t| t.parent.clone())
            .ok_or("branch without parent")?;
        self.set_stage(task, Stage::AtJoin);
        let Some(Stage::Forked(mut fw)) = self.tasks.get(&parent).map(|t| t.stage.clone()) else {
            return Err(format!(
                "branch {task} reached join {join} but its fork is gone"
            ));
        };
        fw.done.push(task.to_string());
        if fw.join.is_none() {
            fw.join = Some(join.to_string());
        }
        let wait_for = match self.node(join).map(|n| &n.kind) {
            Some(NodeKind::ParallelJoin(j)) => j.wait_for,
            _ => WaitFor::All,
        };
        let need = match wait_for {
            WaitFor::All => fw.branches.len(),
            WaitFor::Any => 1,
            WaitFor::Count(n) => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(fw.branches.len()),
        };
        let satisfied = fw.done.len() >= need;
        self.set_stage(&parent, Stage::Forked(fw.clone()));
        if !satisfied {
            return Ok(());
        }
        // Close the branches that did not make it, with their open calls.
        for b in &fw.branches {
            if !fw.done.contains(b) {
                self.close_task(b);
            }
        }
        let join_node = self.node(join).cloned().ok_or("join vanished")?;
        if let NodeKind::ParallelJoin(j) = &join_node.kind
            && j.join_reducer == crate::model::JoinReducer::FnRef
            && let Some(f) = &j.join_fn_ref
        {
            let results = Json::Array(
                self.winners(&parent)
                    .iter()
                    .map(|b| self.branch_result(b))
                    .collect(),
            );
            // GAP-FN-1: join `(results: List<json.Value>) → json.Value`,
            // the winners' results in target order.
            let mut input = Map::new();
            input.insert("results".into(), results);
            let mut args = Map::new();
            args.insert("input".into(), Json::Object(input));
            if let Some(t) = self.tasks.get_mut(&parent) {
                t.node = join.to_string();
            }
            return self.call(
                &parent,
                join,
                &f.identity(),
                Json::Object(args),
                Purpose::Join,
            );
        }
        self.finish_join(&parent, &join_node, None)
    }

    /// The branches that reached the join and count, in target order.
    pub(super) fn winners(&self, parent: &str) -> Vec<String> {
        match self.tasks.get(parent).map(|t| &t.stage) {
            Some(Stage::Forked(fw)) => fw
                .branches
                .iter()
                .filter(|b| fw.done.contains(b) && self.tasks.contains_key(*b))
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A branch's result: the final value of each state field it wrote.
    pub(super) fn branch_result(&self, branch: &str) -> Json {
        let Some(t) = self.tasks.get(branch) else {
            return Json::Object(Map::new());
        };
        let local = t.local.as_ref();
        let mut m = Map::new();
        for (target, _) in &t.writes {
            if let Some(v) = local.and_then(|l| l.get(&target.field)) {
                m.insert(target.field.clone(), v.clone());
            }
        }
        Json::Object(m)
    }

    pub(super) fn finish_join(&mut self, parent: &str, join: &Node, reduced: Option<Json>) -> Step {
        let winners = self.winners(parent);
        let results: Vec<Json> = winners.iter().map(|b| self.branch_result(b)).collect();
        let writes: Vec<(Target, Json)> = winners
            .iter()
            .filter_map(|b| self.tasks.get(b))
            .flat_map(|t| t.writes.clone())
            .collect();
        for b in &winners {
            self.note_task(b);
            self.tasks.remove(b);
        }
        let at = |e: String| format!("node {}: {e}", join.id);
        for (target, v) in writes {
            self.write(parent, &target, v).map_err(at)?;
        }
        if let NodeKind::ParallelJoin(j) = &join.kind
            && let Some(key) = &j.output_key
        {
            let value = reduced.unwrap_or_else(|| match j.join_reducer {
                crate::model::JoinReducer::Append => Json::Array(results.clone()),
                _ => {
                    let mut acc = Json::Object(Map::new());
                    for r in &results {
                        merge_into(&mut acc, r.clone());
                    }
                    acc
                }
            });
            self.write_key(parent, key, value).map_err(at)?;
        }
        // The parent continues at the join node, which checkpoints there
        // and passes through it.
        if let Some(t) = self.tasks.get_mut(parent) {
            t.node = join.id.clone();
            t.stage = Stage::Enter;
            t.passing_join = true;
        }
        Ok(())
    }

    /// Removes a task and its descendants, closing their open calls.
    pub(super) fn close_task(&mut self, task: &str) {
        let doomed: Vec<String> = self
            .tasks
            .keys()
            .filter(|id| *id == task || id.starts_with(&format!("{task}/")))
            .cloned()
            .collect();
        for id in &doomed {
            self.note_task(id);
            self.tasks.remove(id);
        }
        let calls: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, p)| doomed.contains(&p.task))
            .map(|(c, _)| c.clone())
            .collect();
        for c in calls {
            self.calls.remove(&c);
            self.out.push(Effect::Close {
                call: c,
                reason: "join satisfied".into(),
            });
        }
    }
}
