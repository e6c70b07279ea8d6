//! The loop: ready tasks entered in task-id order until every task waits, and what entering each node kind does.

use super::helpers::*;
use super::*;

impl Machine {
    /// Runs ready tasks until every task waits, the run ends, or the slice
    /// is full ([`SLICE`]; then [`Machine::busy`] is true).
    pub(super) fn run(&mut self) {
        self.run_within(SLICE);
    }

    /// [`Machine::run`] with a slice of at most `limit` effects.
    pub(super) fn run_within(&mut self, limit: usize) {
        let limit = limit.clamp(1, SLICE);
        while self.ended.is_none() && self.out.len() < limit {
            let next = self
                .tasks
                .iter()
                .find(|(_, t)| t.ready())
                .map(|(id, _)| id.clone());
            let Some(task) = next else { break };
            let r = match self.tasks.get(&task).map(|t| t.stage.clone()) {
                Some(Stage::Enter) => self.enter(&task),
                Some(Stage::Route { next }) => self.choose_route(&task, next),
                _ => Ok(()),
            };
            if let Err(why) = r {
                self.fault(why);
            }
        }
        if self.ended.is_none() && self.tasks.is_empty() && self.out.len() < limit {
            self.fault("every task ended without reaching an output node".into());
        }
    }

    pub(super) fn enter(&mut self, task: &str) -> Step {
        let node_id = self
            .tasks
            .get(task)
            .map(|t| t.node.clone())
            .ok_or("no task")?;
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(format!(
                "step limit of {} node executions reached at node {node_id}",
                self.max_steps
            ));
        }
        // Borrow the node from a handle on the program, not from `self`, so
        // no per-step clone of the node is needed.
        let program = self.program.clone();
        let node = program
            .module(&self.module)
            .and_then(|m| m.node(&node_id))
            .ok_or_else(|| format!("no node {node_id}"))?;
        // A branch that reaches a parallel_join stops there; its parent
        // joins it (target order, DESIGN §4).
        let passing = self
            .tasks
            .get_mut(task)
            .map(|t| std::mem::take(&mut t.passing_join))
            .unwrap_or(false);
        if let NodeKind::ParallelJoin(_) = node.kind
            && !passing
            && self.tasks.get(task).is_some_and(|t| t.parent.is_some())
        {
            return self.arrive_at_join(task, &node_id);
        }
        let branch_live = self.tasks.len() > 1;
        if task != "root" || !branch_live {
            let checkpoint = self.checkpoint_effect(task, &node_id);
            self.out.push(checkpoint);
        }
        if let Some(t) = self.tasks.get_mut(task) {
            t.attempts = 0;
            t.validations = 0;
            t.prompt = None;
        }
        match &node.kind {
            NodeKind::Input(_) | NodeKind::ParallelJoin(_) => {
                self.route(task);
                Ok(())
            }
            NodeKind::Output(o) => {
                if task != "root" {
                    return Err(format!(
                        "parallel branch {task} reached output node {node_id} before its join"
                    ));
                }
                let output = self.project_output(o.input_schema.as_ref().map(|s| &s.ptr));
                let e = Ending::Completed {
                    exit: o.exit_code.clone(),
                    output,
                };
                self.out.push(Effect::End(e.clone()));
                self.ended = Some(e);
                Ok(())
            }
            NodeKind::Condition(_) => {
                self.set_stage(task, Stage::Route { next: 0 });
                Ok(())
            }
            NodeKind::ParallelFork(f) => {
                let mut branches = Vec::new();
                let base = self.task_state(task).clone();
                for target in &f.targets {
                    let id = format!("{task}/{target}");
                    let mut local = base.clone();
                    if let Some(map) = f.input_map.get(target) {
                        for (key, path) in map {
                            let v = self.resolve(task, path)?;
                            set_member(&mut local, key, v);
                        }
                    }
                    self.note_task(&id);
                    self.tasks.insert(
                        id.clone(),
                        Task::new(target.clone(), Some(task.to_string()), Some(local)),
                    );
                    branches.push(id);
                }
                self.set_stage(
                    task,
                    Stage::Forked(Box::new(ForkWait {
                        branches,
                        done: Vec::new(),
                        join: None,
                    })),
                );
                Ok(())
            }
            NodeKind::Transform(t) if t.mode == TransformMode::Mapping => {
                for a in &t.assignments {
                    let v = self.resolve(task, &a.from)?;
                    self.write(task, &a.to, v)
                        .map_err(|e| format!("node {node_id}: {e}"))?;
                }
                self.route(task);
                Ok(())
            }
            NodeKind::AgentRole(_) => {
                self.set_stage(
                    task,
                    Stage::Agent(Box::new(AgentStage {
                        iter: 0,
                        messages: Vec::new(),
                        queue: Vec::new(),
                    })),
                );
                self.agent_turn(task, node)
            }
            NodeKind::AgentDebate(_) => {
                self.set_stage(
                    task,
                    Stage::Debate(Box::new(DebateStage {
                        round: 0,
                        transcript: Vec::new(),
                        last_speaker: None,
                    })),
                );
                self.debate_next(task, node)
            }
            NodeKind::Harness(h) => self.harness_call(task, node, h),
            NodeKind::Unknown(t) => Err(format!("node {node_id}: node type {t} is not supported")),
            _ => self.node_call(task, node),
        }
    }

    pub(super) fn set_stage(&mut self, task: &str, stage: Stage) {
        if let Some(t) = self.tasks.get_mut(task) {
            t.stage = stage;
        }
    }

    /// The node's own call (tool_invoke, llm_call, hitl, memory, subgraph,
    /// transform fn_ref).
    pub(super) fn node_call(&mut self, task: &str, node: &Node) -> Step {
        if self.needs_prompt(task, node) {
            return self.fetch_prompt(task, node);
        }
        let (tool, args, purpose) = self.node_args(task, node)?;
        if let Some(t) = self.tasks.get_mut(task) {
            t.attempts += 1;
        }
        self.call(task, &node.id, &tool, args, purpose)
    }

    pub(super) fn node_args(
        &self,
        task: &str,
        node: &Node,
    ) -> Result<(String, Json, Purpose), String> {
        let module = self.module_ref();
        let flow = &module.report.flow;
        let mut args = Map::new();
        let tool = match &node.kind {
            NodeKind::ToolInvoke(t) => {
                let tool = [module.path.as_str(), "#", &t.tool_id].concat();
                if t.input_map.is_empty() {
                    args = self.args_from_state(task, &node.id, &t.tool_id)?;
                } else {
                    for (param, path) in &t.input_map {
                        args.insert(param.clone(), self.resolve(task, path)?);
                    }
                }
                tool
            }
            NodeKind::LlmCall(l) => {
                let defaults = flow.model_defaults.as_ref();
                let model = l
                    .model
                    .clone()
                    .or_else(|| defaults.and_then(|d| d.model.clone()))
                    .unwrap_or_else(|| "default".into());
                args.insert("model".into(), Json::String(model));
                let scope = self.scope(task, None);
                let render = |t: &crate::template::Template| {
                    t.render(&scope)
                        .map_err(|e| format!("node {}: {e}", node.id))
                };
                if let Some(s) = &l.system_prompt {
                    args.insert("system".into(), Json::String(render(s)?));
                }
                // FS-LLM-5: a fetched `prompt_ref` "takes precedence over
                // prompt_template".
                let fetched = self.tasks.get(task).and_then(|t| t.prompt.as_ref());
                let prompt = match (&l.prompt_ref, fetched, &l.prompt_template) {
                    (Some(_), Some(t), _) => render(t)?,
                    (Some(r), None, _) => {
                        return Err(format!(
                            "node {}: prompt {:?} was not fetched",
                            node.id, r.name
                        ));
                    }
                    (None, _, Some(t)) => render(t)?,
                    (None, _, None) => String::new(),
                };
                args.insert("prompt".into(), Json::String(prompt));
                let params = l
                    .model_params
                    .as_ref()
                    .or_else(|| defaults.and_then(|d| d.model_params.as_ref()));
                if let Some(p) = params {
                    args.insert("params".into(), model_params(p));
                }
                if let Some(s) = &l.structured_output {
                    args.insert("schema".into(), self.schema_of(&s.ptr));
                }
                if let Some(c) = self.context_for(task, &node.id) {
                    args.insert("context".into(), c);
                }
                "std/llm#chat".into()
            }
            NodeKind::Hitl(h) => {
                if let Some(p) = &h.prompt {
                    let text = p
                        .render(&self.scope(task, None))
                        .map_err(|e| format!("node {}: {e}", node.id))?;
                    args.insert("prompt".into(), Json::String(text));
                }
                if let Some(s) = &h.resume_schema {
                    args.insert("schema".into(), self.schema_of(&s.ptr));
                }
                "std/human#input".into()
            }
            NodeKind::MemoryRead(r) => {
                args.insert("store".into(), Json::String(r.store_id.clone()));
                match r.retrieval_mode {
                    RetrievalMode::KeyValue => {
                        let key = r
                            .key_expr
                            .as_ref()
                            .ok_or_else(|| format!("node {}: no key_expr", node.id))?;
                        args.insert("key".into(), self.resolve(task, key)?);
                        "std/memory#read".into()
                    }
                    RetrievalMode::Semantic => {
                        let q = r
                            .query_expr
                            .as_ref()
                            .ok_or_else(|| format!("node {}: no query_expr", node.id))?;
                        args.insert("query".into(), self.resolve(task, q)?);
                        args.insert("top_k".into(), Json::Number(r.top_k().into()));
                        if let Some(s) = &r.min_score {
                            args.insert("min_score".into(), Json::Number(s.clone()));
                        }
                        "std/memory#search".into()
                    }
                }
            }
            NodeKind::MemoryWrite(w) => {
                args.insert("store".into(), Json::String(w.store_id.clone()));
                args.insert("key".into(), self.resolve(task, &w.key_expr)?);
                args.insert("value".into(), self.resolve(task, &w.value_expr)?);
                let mode = match w.write_mode {
                    WriteMode::Upsert => "upsert",
                    WriteMode::Overwrite => "overwrite",
                };
                args.insert("mode".into(), Json::String(mode.into()));
                "std/memory#write".into()
            }
            NodeKind::Subgraph(s) => {
                let sub = module
                    .subflows
                    .get(&s.flow_ref)
                    .ok_or_else(|| format!("node {}: no flow {}", node.id, s.flow_ref))?;
                let input = if s.input_map.is_empty() {
                    self.task_state(task).clone()
                } else {
                    let mut m = Map::new();
                    for (k, p) in &s.input_map {
                        m.insert(k.clone(), self.resolve(task, p)?);
                    }
                    Json::Object(m)
                };
                args.insert("input".into(), input);
                subflow_entry(sub)
            }
            NodeKind::Transform(t) => {
                let f = t
                    .fn_ref
                    .as_ref()
                    .ok_or_else(|| format!("node {}: no fn_ref", node.id))?;
                args.insert("input".into(), fn_input(self.task_state(task), None));
                return Ok((f.identity(), Json::Object(args), Purpose::Transform));
            }
            other => {
                return Err(format!(
                    "node {}: {} makes no call",
                    node.id,
                    other.type_name()
                ));
            }
        };
        Ok((tool, Json::Object(args), Purpose::Node))
    }

    /// GAP-TOOL-3: without input_map each parameter of tool `tool_id`
    /// takes state[param]; a missing required one faults.
    pub(super) fn args_from_state(
        &self,
        task: &str,
        node: &str,
        tool_id: &str,
    ) -> Result<Map<String, Json>, String> {
        let module = self.module_ref();
        let mut args = Map::new();
        let state = self.task_state(task);
        let Some(d) = module.decls.get(&format!("{}#{tool_id}", module.path)) else {
            return Ok(args);
        };
        for p in &d.params {
            match state.get(&p.name) {
                Some(v) => {
                    args.insert(p.name.clone(), v.clone());
                }
                None if matches!(p.ty, Type::Option(_)) => {}
                None => {
                    return Err(format!(
                        "node {node}: tool {tool_id} needs parameter {:?}, which the state does not hold (no input_map)",
                        p.name
                    ));
                }
            }
        }
        Ok(args)
    }

    /// The generated schema of an embedded schema (what a Tool is sent).
    pub(super) fn schema_of(&self, ptr: &str) -> Json {
        let m = self.module_ref();
        m.report
            .schema_types
            .get(ptr)
            .map_or(Json::Object(Map::new()), |t| {
                flow_abi::schema::generate(t, &m.report.types, true)
            })
    }

    /// DESIGN §4: "`context_from`: the listed nodes' `output_key` values are
    /// passed to an llm_call or agent_role as a `context` argument, in list
    /// order."
    pub(super) fn context_for(&self, task: &str, node: &str) -> Option<Json> {
        let ids: Vec<&String> = self
            .module_ref()
            .in_edges(node)
            .filter_map(|e| match &e.kind {
                EdgeKind::Direct {
                    to, context_from, ..
                } if to == node => Some(context_from),
                _ => None,
            })
            .flatten()
            .collect();
        if ids.is_empty() {
            return None;
        }
        let state = self.task_state(task);
        let items = ids
            .iter()
            .map(|id| {
                self.node(id)
                    .and_then(output_key)
                    .and_then(|k| state.get(k).cloned())
                    .unwrap_or(Json::Null)
            })
            .collect();
        Some(Json::Array(items))
    }

    pub(super) fn project_output(&self, schema_ptr: Option<&String>) -> Json {
        let m = self.module_ref();
        let fields = schema_ptr
            .and_then(|p| m.report.schema_types.get(p))
            .map(|t| crate::program::record_fields(t, &m.report.types));
        match (fields, &self.state) {
            (Some(fields), Json::Object(state)) if !fields.is_empty() => Json::Object(
                fields
                    .iter()
                    .filter_map(|f| state.get(&f.name).map(|v| (f.name.clone(), v.clone())))
                    .collect(),
            ),
            _ => self.state.clone(),
        }
    }
}
