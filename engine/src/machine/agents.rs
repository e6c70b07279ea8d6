//! Agent nodes: the model/tool loop of an `agent_role`.

use super::helpers::*;
use super::*;

impl Machine {
    pub(super) fn agent_of(&self, node: &Node) -> Result<(Agent, crate::model::AgentRole), String> {
        let NodeKind::AgentRole(a) = &node.kind else {
            return Err(format!("node {} is not an agent_role", node.id));
        };
        let agent = self
            .flow()
            .agents
            .iter()
            .find(|x| x.id == a.agent_ref)
            .cloned()
            .ok_or_else(|| format!("node {}: no agent {}", node.id, a.agent_ref))?;
        Ok((agent, a.clone()))
    }

    /// One model turn of the ReAct loop (DESIGN §4: "a bounded ReAct loop
    /// of `std/llm#chat` Calls and Tool Calls (max_iter)"). The last
    /// allowed turn offers no tools, so the agent must answer.
    pub(super) fn agent_turn(&mut self, task: &str, node: &Node) -> Step {
        let (agent, role) = self.agent_of(node)?;
        let Some(Stage::Agent(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        let mut args = self.agent_args(&agent);
        let mut prompt = role
            .task_description
            .render(&self.scope(task, None))
            .map_err(|e| format!("node {}: {e}", node.id))?;
        if let Some(x) = &role.expected_output {
            prompt.push_str("\n\nExpected output: ");
            prompt.push_str(x);
        }
        args.insert("prompt".into(), Json::String(prompt));
        if !st.messages.is_empty() {
            args.insert("messages".into(), Json::Array(st.messages.clone()));
        }
        if st.iter + 1 < agent.max_iter && !agent.tools.is_empty() {
            let m = self.module_ref();
            let tools = agent
                .tools
                .iter()
                .filter_map(|t| {
                    let id = format!("{}#{t}", m.path);
                    let d = m.decls.get(&id)?;
                    let mut o = Map::new();
                    o.insert("tool".into(), Json::String(t.clone()));
                    if let Some(doc) = &d.doc {
                        o.insert("description".into(), Json::String(doc.clone()));
                    }
                    o.insert("signature".into(), d.signature(&m.report.types, true));
                    Some(Json::Object(o))
                })
                .collect();
            args.insert("tools".into(), Json::Array(tools));
        }
        if let Some(t) = self.agent_answer_type(&role) {
            let m = self.module_ref();
            args.insert(
                "schema".into(),
                flow_abi::schema::generate(&t, &m.report.types, true),
            );
        }
        if let Some(c) = self.context_for(task, &node.id) {
            args.insert("context".into(), c);
        }
        self.call(
            task,
            &node.id,
            "std/llm#chat",
            Json::Object(args),
            Purpose::AgentChat,
        )
    }

    /// The type an agent's answer is asked for and decoded against: its
    /// `structured_output`, else the declared type of its `output_field`
    /// when that is neither Text nor json.Value (the answer is written
    /// there, and must fit: issue 11, item 2); `None` for a plain answer.
    fn agent_answer_type(&self, role: &crate::model::AgentRole) -> Option<Type> {
        let m = self.module_ref();
        match &role.structured_output {
            Some(s) => m.report.schema_types.get(&s.ptr).cloned(),
            None => role
                .output_field
                .as_deref()
                .and_then(|f| self.answer_type(f))
                .cloned(),
        }
    }

    pub(super) fn agent_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        outcome: &Outcome,
    ) -> Step {
        let (agent, role) = self.agent_of(node)?;
        let Outcome::Ok(v) = outcome else {
            return Err(failed_msg(&node.id, call, "std/llm#chat", outcome));
        };
        let Some(Stage::Agent(mut st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        st.iter += 1;
        let asked: Vec<(String, Json)> = v
            .get("tool_calls")
            .and_then(Json::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| {
                        let t = c.get("tool")?.as_str()?;
                        Some((
                            t.to_string(),
                            c.get("args").cloned().unwrap_or(Json::Object(Map::new())),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if asked.is_empty() {
            // GAP-AGENT-1: `{"final": v}` is the answer; a plain
            // `{"text": …}` (or the structured value itself) is read the
            // same way an llm_call's answer is.
            let answer = v.get("final");
            let result = match self.agent_answer_type(&role) {
                Some(t) => {
                    let what = if role.structured_output.is_some() {
                        "structured_output".to_string()
                    } else {
                        format!("the type of its output_field {:?}", role.output_field)
                    };
                    decode_json(answer.unwrap_or(v), &t, &self.module_ref().report.types)
                        .map(|x| x.to_json())
                        .map_err(|e| format!("node {}: answer does not fit {what}: {e}", node.id))?
                }
                None => answer.or_else(|| v.get("text")).cloned().ok_or_else(|| {
                    format!(
                        "node {}: the model's answer has neither \"final\" nor \"text\"",
                        node.id
                    )
                })?,
            };
            if let Some(f) = &role.output_field {
                let f = f.clone();
                self.write_key(task, &f, result)
                    .map_err(|e| format!("node {}: {e}", node.id))?;
            }
            self.route(task);
            return Ok(());
        }
        if st.iter >= agent.max_iter {
            return Err(format!(
                "node {}: agent {} did not answer within max_iter {}",
                node.id, agent.id, agent.max_iter
            ));
        }
        for (tool, _) in &asked {
            if !agent.tools.contains(tool) {
                return Err(format!(
                    "node {}: the model asked for tool {tool:?}, which agent {} does not have",
                    node.id, agent.id
                ));
            }
        }
        let mut turn = Map::new();
        turn.insert("speaker".into(), Json::String(agent.id.clone()));
        turn.insert("text".into(), v.get("text").cloned().unwrap_or(Json::Null));
        turn.insert(
            "tool_calls".into(),
            v.get("tool_calls").cloned().unwrap_or(Json::Null),
        );
        st.messages.push(Json::Object(turn));
        st.queue = asked
            .into_iter()
            .map(|(t, a)| (format!("{}#{t}", self.module), a))
            .collect();
        self.set_stage(task, Stage::Agent(st));
        self.agent_continue(task, node)
    }

    /// Makes the next queued tool call (asking approval first when the node
    /// says so), or the next model turn.
    pub(super) fn agent_continue(&mut self, task: &str, node: &Node) -> Step {
        let (_, role) = self.agent_of(node)?;
        let Some(Stage::Agent(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("agent stage lost".into());
        };
        let Some((tool, args)) = st.queue.first().cloned() else {
            return self.agent_turn(task, node);
        };
        if role.tool_approval == ToolApproval::Human {
            let mut a = Map::new();
            a.insert(
                "prompt".into(),
                Json::String(format!(
                    "Approve the call of {tool} with {}?",
                    flow_abi::json::canonical(&args)
                )),
            );
            let schema: Json = serde_json::from_str(
                r#"{"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]}"#,
            )
            .unwrap_or(Json::Null);
            a.insert("schema".into(), schema);
            return self.call(
                task,
                &node.id,
                "std/human#input",
                Json::Object(a),
                Purpose::AgentApprove,
            );
        }
        self.call(task, &node.id, &tool, args, Purpose::AgentTool)
    }
}
