//! Replies: a call's outcome admitted and continued (validators, retries, `fail_branch`).

use super::helpers::*;
use super::*;

impl Machine {
    pub(super) fn on_reply(&mut self, call: &str, p: Pending, outcome: &Outcome) -> Step {
        let program = self.program.clone();
        let node = program
            .module(&self.module)
            .and_then(|m| m.node(&p.node))
            .ok_or_else(|| format!("no node {}", p.node))?;
        let task = p.task.clone();
        match p.purpose {
            Purpose::Node => match outcome {
                Outcome::Ok(v) => self.node_ok(&task, node, call, v.clone()),
                failed => self.node_failed(&task, node, call, failed),
            },
            Purpose::Sleep => self.node_call(&task, node),
            Purpose::Validate(value) => {
                // GAP-FN-1: `{valid: Bool, reason?: Text}`; a bare Bool is
                // read as `{valid}`.
                let (valid, reason) = match outcome {
                    Outcome::Ok(Json::Bool(b)) => (*b, None),
                    Outcome::Ok(Json::Object(m))
                        if matches!(m.get("valid"), Some(Json::Bool(_))) =>
                    {
                        (
                            m.get("valid") == Some(&Json::Bool(true)),
                            m.get("reason").and_then(Json::as_str).map(str::to_string),
                        )
                    }
                    Outcome::Ok(other) => {
                        return Err(format!(
                            "node {}: output validator answered {}, not {{\"valid\": Bool, \"reason\"?: Text}}",
                            node.id,
                            flow_abi::json::canonical(other)
                        ));
                    }
                    failed => {
                        return Err(format!(
                            "node {}: output validator call {call} failed: {failed}",
                            node.id
                        ));
                    }
                };
                let v = validator(node).cloned();
                match (valid, v) {
                    (true, _) | (false, None) => self.finish_node(&task, node, call, value),
                    (false, Some(v)) => match v.on_fail {
                        OnFail::Raise => Err(format!(
                            "node {}: output failed validation{}",
                            node.id,
                            reason
                                .as_deref()
                                .map(|r| format!(": {r}"))
                                .unwrap_or_default()
                        )),
                        OnFail::Skip => {
                            self.route(&task);
                            Ok(())
                        }
                        OnFail::Retry => {
                            let n = self.tasks.get(&task).map_or(0, |t| t.validations);
                            if n >= v.max_retries {
                                return Err(format!(
                                    "node {}: output failed validation after {} retries",
                                    node.id, v.max_retries
                                ));
                            }
                            if let Some(t) = self.tasks.get_mut(&task) {
                                t.validations += 1;
                            }
                            self.node_call(&task, node)
                        }
                    },
                }
            }
            Purpose::Transform => match outcome {
                Outcome::Ok(Json::Object(m)) => {
                    for (k, v) in m {
                        self.write_key(&task, k, v.clone()).map_err(|e| {
                            format!("node {}: call {call} to {}: {e}", node.id, p.tool)
                        })?;
                    }
                    self.route(&task);
                    Ok(())
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: transform function answered {}, not an object of state fields",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::Route(i) => match outcome {
                Outcome::Ok(Json::Bool(true)) => {
                    let to = self.route_target(&node.id, i)?;
                    self.goto(&task, to);
                    Ok(())
                }
                Outcome::Ok(Json::Bool(false)) => {
                    self.set_stage(&task, Stage::Route { next: i + 1 });
                    Ok(())
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: condition function answered {}, not a boolean",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::Join => match outcome {
                Outcome::Ok(v) => self.finish_join(&task, node, Some(v.clone())),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::AgentChat => self.agent_reply(&task, node, call, outcome),
            Purpose::AgentApprove => {
                let approved = matches!(outcome, Outcome::Ok(Json::Object(m)) if m.get("approved") == Some(&Json::Bool(true)));
                let Some(Stage::Agent(mut st)) = self.tasks.get(&task).map(|t| t.stage.clone())
                else {
                    return Err("agent stage lost".into());
                };
                if approved {
                    let (tool, args) = st.queue.first().cloned().ok_or("no pending tool")?;
                    self.call(&task, &node.id, &tool, args, Purpose::AgentTool)
                } else {
                    let (tool, _) = st.queue.remove(0);
                    st.messages.push(tool_message(
                        &tool,
                        &Json::String("denied by the reviewer".into()),
                    ));
                    self.set_stage(&task, Stage::Agent(st));
                    self.agent_continue(&task, node)
                }
            }
            Purpose::AgentTool => {
                let Some(Stage::Agent(mut st)) = self.tasks.get(&task).map(|t| t.stage.clone())
                else {
                    return Err("agent stage lost".into());
                };
                let (tool, _) = st.queue.remove(0);
                st.messages.push(tool_message(&tool, &outcome.to_json()));
                self.set_stage(&task, Stage::Agent(st));
                self.agent_continue(&task, node)
            }
            Purpose::DebateTurn(speaker) => self.debate_reply(&task, node, call, &speaker, outcome),
            Purpose::Prompt => self.prompt_reply(&task, node, call, outcome),
            Purpose::Harness => self.harness_reply(&task, node, call, &p.tool, outcome),
            Purpose::Evidence => self.evidence_reply(&task, node, call, &p.tool, outcome),
            Purpose::DebateSpeaker => match outcome {
                Outcome::Ok(Json::String(s)) => self.debate_turn(&task, node, s.clone()),
                Outcome::Ok(other) => Err(format!(
                    "node {}: speaker selection answered {}, not an agent id",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
            Purpose::DebateStop => match outcome {
                Outcome::Ok(Json::Bool(stop)) => {
                    if *stop {
                        self.debate_end(&task, node)
                    } else {
                        self.debate_next(&task, node)
                    }
                }
                Outcome::Ok(other) => Err(format!(
                    "node {}: termination function answered {}, not a boolean",
                    node.id,
                    flow_abi::json::canonical(other)
                )),
                failed => Err(failed_msg(&node.id, call, &p.tool, failed)),
            },
        }
    }

    pub(super) fn node_ok(&mut self, task: &str, node: &Node, call: &str, v: Json) -> Step {
        let value = match self.node_value(node, v) {
            Ok(value) => value,
            Err(why) => return self.node_failed(task, node, call, &Outcome::BadReply(why)),
        };
        if let Some(val) = validator(node) {
            // GAP-FN-1: validator `(output, state) → {valid, reason?}`.
            let mut input = Map::new();
            input.insert("output".into(), value.clone());
            input.insert("state".into(), self.task_state(task).clone());
            let input = Json::Object(input);
            let mut args = Map::new();
            args.insert("input".into(), input);
            return self.call(
                task,
                &node.id,
                &val.fn_ref.identity(),
                Json::Object(args),
                Purpose::Validate(value),
            );
        }
        self.finish_node(task, node, call, value)
    }

    /// Writes a node's result into the state and routes on. Every write is
    /// checked against `state_schema` first: one that does not fit makes
    /// the reply a `BadReply` naming the path and the type, handled like any
    /// failed reply (retry, `fail_branch`, else a fault), with nothing
    /// written.
    pub(super) fn finish_node(&mut self, task: &str, node: &Node, call: &str, value: Json) -> Step {
        let writes = result_writes(node, value)?;
        if let Err(why) = self.check_writes(task, &writes) {
            return self.node_failed(task, node, call, &Outcome::BadReply(why));
        }
        for (target, v) in writes {
            let reducer = self.reducer_of(&target.field);
            self.put(task, &target, v, reducer);
        }
        self.route(task);
        Ok(())
    }

    /// The value a node's own Ok reply stands for: a structured llm
    /// answer decoded against its schema, a plain one's `text`, else the
    /// reply itself. `Err` is the reason the reply is a BadReply of the
    /// call (GAP-LLM-1, GAP-FAIL-1).
    fn node_value(&self, node: &Node, v: Json) -> Result<Json, String> {
        let NodeKind::LlmCall(l) = &node.kind else {
            return Ok(v);
        };
        match &l.structured_output {
            Some(s) => {
                let m = self.module_ref();
                match m.report.schema_types.get(&s.ptr) {
                    Some(t) => decode_json(&v, t, &m.report.types)
                        .map(|x| x.to_json())
                        .map_err(|e| format!("the answer does not fit structured_output: {e}")),
                    None => Ok(v),
                }
            }
            None => v
                .get("text")
                .cloned()
                .ok_or_else(|| "the model's answer has no \"text\"".to_string()),
        }
    }

    /// Whether every write fits its state field (all are checked before
    /// any lands); `Err` names the first that does not.
    fn check_writes(&self, task: &str, writes: &[(Target, Json)]) -> Step {
        writes.iter().try_for_each(|(target, v)| {
            self.check_write(task, target, v, self.reducer_of(&target.field))
        })
    }

    /// Why an Ok `outcome` for `call` is, on admission, a BadReply of that
    /// call: it is the node's own call and the machine would fail it at
    /// once — a structured answer that does not fit its schema, a plain
    /// answer without `text`, or a result that does not fit the state
    /// fields it is written to (`typed.rs`), for a node without an output
    /// validator (whose writes wait for the validator's answer). `None`
    /// when the reply is admitted as it is.
    ///
    /// Hosts record an implementation's reply as `BadReply(why)` (PRO-13,
    /// LIVE-2: "one that does not decode ... is admitted as BadReply"), so
    /// the history says why the node failed where it failed; a supplied
    /// resume reply is refused instead and nothing is recorded (RES-10,
    /// GAP-RES-1). Fed to the machine, `BadReply(why)` takes the same path,
    /// with the same reason, as the Ok reply does: a history recorded
    /// either way replays to the same facts.
    pub fn misfit(&self, call: &str, outcome: &Outcome) -> Option<String> {
        let Outcome::Ok(v) = outcome else {
            return None;
        };
        let p = self.calls.get(call)?;
        if p.purpose != Purpose::Node {
            return None;
        }
        let node = self.node(&p.node)?;
        let value = match self.node_value(node, v.clone()) {
            Ok(value) => value,
            Err(why) => return Some(why),
        };
        if validator(node).is_some() {
            return None;
        }
        // A result that cannot be written at all faults the run: not a
        // reply's failure.
        let writes = result_writes(node, value).ok()?;
        self.check_writes(&p.task, &writes).err()
    }

    /// A failed call of the node itself: retry, route to fail_branch, or
    /// fault (DESIGN §4: "A failed call with no fail_branch faults the run
    /// with a message naming the node and the call").
    pub(super) fn node_failed(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        outcome: &Outcome,
    ) -> Step {
        let fb = node.kind.fail_branch().cloned();
        let Some(fb) = fb else {
            let tool = self.calls_tool(node);
            return Err(failed_msg(&node.id, call, &tool, outcome));
        };
        let attempts = self.tasks.get(task).map_or(1, |t| t.attempts);
        if let Some(r) = &fb.retry
            && attempts < r.max_attempts
        {
            // GAP-RETRY-1: fixed = delay_ms, exponential = delay_ms·2^(n−1)
            // for the n-th retry (delay_ms defaults to 1000 in the model).
            let base = r.delay_ms;
            let ms = match r.backoff {
                Some(crate::model::Backoff::Exponential) => {
                    base.saturating_mul(1u64 << (attempts - 1).min(32))
                }
                _ => base,
            };
            let mut args = Map::new();
            args.insert("ms".into(), Json::Number(ms.into()));
            return self.call(
                task,
                &node.id,
                "std/clock#sleep",
                Json::Object(args),
                Purpose::Sleep,
            );
        }
        let mut e = Map::new();
        e.insert("node".into(), Json::String(node.id.clone()));
        e.insert("call".into(), Json::String(call.to_string()));
        e.insert("outcome".into(), outcome.to_json());
        self.error = Some(Json::Object(e));
        self.goto(task, fb.target.clone());
        Ok(())
    }

    pub(super) fn calls_tool(&self, node: &Node) -> String {
        match &node.kind {
            NodeKind::ToolInvoke(t) => format!("{}#{}", self.module, t.tool_id),
            NodeKind::LlmCall(_) => "std/llm#chat".into(),
            NodeKind::Hitl(_) => "std/human#input".into(),
            other => other.type_name().to_string(),
        }
    }
}

/// The writes a node's result makes, in order (GAP-TOOL-3, GAP-LLM-4).
fn result_writes(node: &Node, value: Json) -> Result<Vec<(Target, Json)>, String> {
    let mut out = Vec::new();
    let each_key = |value: Json, out: &mut Vec<(Target, Json)>| {
        if let Json::Object(m) = value {
            out.extend(m.into_iter().map(|(k, v)| (key_target(&k), v)));
        }
    };
    match &node.kind {
        // Without output_map, an object reply is written key by key into
        // the same-named state keys.
        NodeKind::ToolInvoke(t) if t.output_map.is_empty() => each_key(value, &mut out),
        NodeKind::ToolInvoke(t) => {
            for (field, target) in &t.output_map {
                let v = value.get(field).cloned().ok_or_else(|| {
                    format!(
                        "node {}: tool {} replied without field {field:?} that output_map reads",
                        node.id, t.tool_id
                    )
                })?;
                out.push((target.clone(), v));
            }
        }
        NodeKind::Subgraph(s) => {
            for (field, target) in &s.output_map {
                let v = value.get(field).cloned().unwrap_or(Json::Null);
                out.push((target.clone(), v));
            }
        }
        // A structured answer without output_key writes each top-level key
        // to the same-named state key, through its reducer.
        NodeKind::LlmCall(l) if l.output_key.is_none() && l.structured_output.is_some() => {
            each_key(value, &mut out)
        }
        other => {
            if let Some(k) = output_key_of(other) {
                out.push((key_target(k), value));
            }
        }
    }
    Ok(out)
}
