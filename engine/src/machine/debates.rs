//! Debates: the rounds of a `debate` node.

use super::helpers::*;
use super::*;

impl Machine {
    /// The `model` (the agent's, else `model_defaults`', else "default")
    /// and `system` (the agent's persona) of an agent's model turn.
    pub(super) fn agent_args(&self, agent: &Agent) -> Map<String, Json> {
        let model = agent
            .model
            .clone()
            .or_else(|| {
                self.flow()
                    .model_defaults
                    .as_ref()
                    .and_then(|d| d.model.clone())
            })
            .unwrap_or_else(|| "default".into());
        let mut args = Map::new();
        args.insert("model".into(), Json::String(model));
        args.insert("system".into(), Json::String(persona(agent)));
        args
    }

    pub(super) fn debate_cfg(&self, node: &Node) -> Result<crate::model::AgentDebate, String> {
        match &node.kind {
            NodeKind::AgentDebate(d) => Ok(d.clone()),
            _ => Err(format!("node {} is not an agent_debate", node.id)),
        }
    }

    /// Picks the next speaker (round_robin; `auto` reads as round_robin) or
    /// asks the custom selection function.
    pub(super) fn debate_next(&mut self, task: &str, node: &Node) -> Step {
        let d = self.debate_cfg(node)?;
        let Some(Stage::Debate(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        if st.round >= d.max_rounds {
            return self.debate_end(task, node);
        }
        if d.speaker_selection == Some(SpeakerSelection::Custom)
            && let Some(f) = &d.speaker_selection_fn_ref
        {
            let mut input = Map::new();
            input.insert(
                "agents".into(),
                Json::Array(d.agents.iter().map(|a| Json::String(a.clone())).collect()),
            );
            // GAP-FN-1: speaker `(transcript, agents) → Text`.
            input.insert("transcript".into(), Json::Array(st.transcript.clone()));
            let mut args = Map::new();
            args.insert("input".into(), Json::Object(input));
            return self.call(
                task,
                &node.id,
                &f.identity(),
                Json::Object(args),
                Purpose::DebateSpeaker,
            );
        }
        let n = d.agents.len().max(1) as u64;
        let speaker = d
            .agents
            .get((st.round % n) as usize)
            .cloned()
            .ok_or_else(|| format!("node {}: no agents", node.id))?;
        self.debate_turn(task, node, speaker)
    }

    pub(super) fn debate_turn(&mut self, task: &str, node: &Node, speaker: String) -> Step {
        let d = self.debate_cfg(node)?;
        let Some(Stage::Debate(st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        if !d.agents.contains(&speaker) {
            return Err(format!(
                "node {}: {speaker:?} is not one of the debate's agents",
                node.id
            ));
        }
        if !d.allow_repeat_speaker && st.last_speaker.as_deref() == Some(speaker.as_str()) {
            return Err(format!(
                "node {}: {speaker} would speak twice in a row",
                node.id
            ));
        }
        let agent = self
            .flow()
            .agents
            .iter()
            .find(|a| a.id == speaker)
            .cloned()
            .ok_or_else(|| format!("node {}: no agent {speaker}", node.id))?;
        let mut args = self.agent_args(&agent);
        let topic = node
            .description
            .clone()
            .or_else(|| node.label.clone())
            .unwrap_or_else(|| "Continue the discussion.".into());
        args.insert(
            "prompt".into(),
            Json::String(format!(
                "Round {} of {}. {topic}",
                st.round + 1,
                d.max_rounds
            )),
        );
        if !st.transcript.is_empty() {
            args.insert("messages".into(), Json::Array(st.transcript.clone()));
        }
        if let Some(c) = self.context_for(task, &node.id) {
            args.insert("context".into(), c);
        }
        self.call(
            task,
            &node.id,
            "std/llm#chat",
            Json::Object(args),
            Purpose::DebateTurn(speaker),
        )
    }

    pub(super) fn debate_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        speaker: &str,
        outcome: &Outcome,
    ) -> Step {
        let d = self.debate_cfg(node)?;
        let Outcome::Ok(v) = outcome else {
            return Err(failed_msg(&node.id, call, "std/llm#chat", outcome));
        };
        let text = v
            .get("text")
            .cloned()
            .ok_or_else(|| format!("node {}: the model's answer has no \"text\"", node.id))?;
        let Some(Stage::Debate(mut st)) = self.tasks.get(task).map(|t| t.stage.clone()) else {
            return Err("debate stage lost".into());
        };
        let mut turn = Map::new();
        turn.insert("speaker".into(), Json::String(speaker.to_string()));
        turn.insert("text".into(), text.clone());
        st.transcript.push(Json::Object(turn));
        st.round += 1;
        st.last_speaker = Some(speaker.to_string());
        self.set_stage(task, Stage::Debate(st));
        match &d.termination_condition {
            Some(Condition::Expr(e)) => {
                let holds = e.eval(&self.scope(task, Some(&text))).map_err(|err| {
                    format!(
                        "node {}: termination condition {}",
                        node.id,
                        expr_error(e, &err)
                    )
                })?;
                if holds {
                    return self.debate_end(task, node);
                }
                self.debate_next(task, node)
            }
            Some(Condition::FnRef(f)) => {
                // GAP-AGENT-3: the termination condition sees
                // `{last_message, transcript, state}`.
                let transcript = match self.tasks.get(task).map(|t| &t.stage) {
                    Some(Stage::Debate(st)) => Json::Array(st.transcript.clone()),
                    _ => Json::Array(Vec::new()),
                };
                let mut input = Map::new();
                input.insert("last_message".into(), text);
                input.insert("state".into(), self.task_state(task).clone());
                input.insert("transcript".into(), transcript);
                let mut args = Map::new();
                args.insert("input".into(), Json::Object(input));
                self.call(
                    task,
                    &node.id,
                    &f.identity(),
                    Json::Object(args),
                    Purpose::DebateStop,
                )
            }
            None => self.debate_next(task, node),
        }
    }

    /// The debate is over: `output_field` gets `{transcript, last_message}`
    /// (GAP-AGENT-3) — or, when `state_schema` declares the field a string
    /// (or a list of strings it appends to), the last message: the
    /// reference's "the conversation transcript or last message" (FS-AD-7).
    pub(super) fn debate_end(&mut self, task: &str, node: &Node) -> Step {
        let d = self.debate_cfg(node)?;
        let (transcript, last) = match self.tasks.get(task).map(|t| &t.stage) {
            Some(Stage::Debate(st)) => (
                st.transcript.clone(),
                st.transcript
                    .last()
                    .and_then(|t| t.get("text").cloned())
                    .unwrap_or(Json::Null),
            ),
            _ => (Vec::new(), Json::Null),
        };
        if let Some(f) = &d.output_field {
            let f = f.clone();
            let value = if self.value_type(&f).is_some_and(|t| *t.base() == Type::Text) {
                last
            } else {
                let mut out = Map::new();
                out.insert("last_message".into(), last);
                out.insert("transcript".into(), Json::Array(transcript));
                Json::Object(out)
            };
            self.write_key(task, &f, value)
                .map_err(|e| format!("node {}: {e}", node.id))?;
        }
        self.route(task);
        Ok(())
    }
}
