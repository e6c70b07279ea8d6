//! Rules on each node type's config, its references to agents, stores and
//! tools, and a tool_invoke's maps against the tool's schemas.

use super::{Checker, is_flow_id};
use crate::diag::{Code, push_token};
use crate::model::{
    self, AgentDebate, JoinReducer, MemoryAccess, NodeKind, RetrievalMode, Schema,
    SpeakerSelection, TransformMode,
};
use crate::read::Cx;
use serde_json::Value;
use std::collections::BTreeSet;

impl<'f> Checker<'f> {
    pub(super) fn node(&self, cx: &mut Cx, n: &model::Node) {
        let at = |k: &str| push_token(&n.ptr, k);
        if let Some(fb) = n.kind.fail_branch() {
            self.node_exists(
                cx,
                &fb.target,
                push_token(&at("fail_branch"), "target"),
                "fail_branch target",
            );
        }
        match &n.kind {
            NodeKind::Input(i) => {
                // FS-IN-2: the input schema is "Validated against state_schema":
                // each input field becomes a state key (REQUIREMENTS GAP-STATE-5).
                if let Some(s) = &i.output_schema
                    && let Value::Object(m) = &s.json
                {
                    let (props, base) = if s.shorthand {
                        (Some(m), s.ptr.clone())
                    } else {
                        (
                            m.get("properties").and_then(Value::as_object),
                            push_token(&s.ptr, "properties"),
                        )
                    };
                    for k in props.into_iter().flat_map(|p| p.keys()) {
                        self.writes(cx, k, push_token(&base, k));
                    }
                }
                if i.output_schema.is_none() && self.flow.state_schema.is_none() {
                    cx.push(
                        Code::SchemaNote,
                        &n.ptr,
                        "the input node has no output_schema and the flow has no state_schema: any input object is accepted",
                    );
                }
            }
            NodeKind::Output(_) => {}
            NodeKind::LlmCall(l) => {
                // buildaharness's validateCrossRefs: "llm_call requires
                // either prompt_template (inline) or prompt_ref
                // (Langfuse-managed)", and a warning when both are set.
                match (&l.prompt_template, &l.prompt_ref) {
                    (None, None) => cx.push(
                        Code::MissingField,
                        &n.ptr,
                        format!("llm_call `{}` needs `prompt_template` (inline) or `prompt_ref` (a managed prompt); neither is set", n.id),
                    ),
                    (Some(_), Some(_)) => cx.push(
                        Code::IgnoredForMode,
                        at("prompt_template"),
                        "`prompt_template` is ignored: `prompt_ref` takes precedence (FS-LLM-5)",
                    ),
                    _ => {}
                }
                if let Some(t) = &l.system_prompt {
                    self.template(cx, t, at("system_prompt"));
                }
                if let Some(t) = &l.prompt_template {
                    self.template(cx, t, at("prompt_template"));
                }
                match &l.output_key {
                    Some(k) => self.writes(cx, k, at("output_key")),
                    // FS-LLM-8: "Canvas warns if absent and structured_output is also absent".
                    None if l.structured_output.is_none() => cx.push(
                        Code::LostResult,
                        &n.ptr,
                        format!("llm_call `{}` has no output_key (and no structured_output): its result is lost", n.id),
                    ),
                    None => cx.push(
                        Code::LostResult,
                        &n.ptr,
                        format!("llm_call `{}` has structured_output but no output_key: its result is not written to state", n.id),
                    ),
                }
            }
            NodeKind::ToolInvoke(t) => {
                self.tool(cx, &t.tool_id, at("tool_id"));
                for (k, p) in &t.input_map {
                    self.reads(cx, p, &push_token(&at("input_map"), k), false);
                }
                for (k, tg) in &t.output_map {
                    self.writes(cx, &tg.field, push_token(&at("output_map"), k));
                }
                if let Some(def) = self.flow.tools.get(&t.tool_id) {
                    self.tool_fields(cx, n, t, def);
                }
            }
            NodeKind::Condition(c) => {
                for b in &c.branches {
                    self.node_exists(cx, &b.target, push_token(&b.ptr, "target"), "branch target");
                    self.condition(cx, &b.condition, push_token(&b.ptr, "condition"), false);
                }
                self.node_exists(
                    cx,
                    &c.default_target,
                    at("default_target"),
                    "default_target",
                );
            }
            NodeKind::ParallelFork(f) => {
                let distinct: BTreeSet<&str> = f.targets.iter().map(String::as_str).collect();
                // FS-PF-2: "At least two node IDs to execute in parallel."
                if distinct.len() < 2 {
                    cx.push(
                        Code::TooFewTargets,
                        at("targets"),
                        format!(
                            "parallel_fork `{}` needs at least 2 distinct targets, found {}",
                            n.id,
                            distinct.len()
                        ),
                    );
                }
                let mut seen = BTreeSet::new();
                for (i, t) in f.targets.iter().enumerate() {
                    let tptr = push_token(&at("targets"), &i.to_string());
                    if !seen.insert(t.as_str()) {
                        cx.push(
                            Code::DuplicateId,
                            &tptr,
                            format!("target `{t}` is listed twice"),
                        );
                    }
                    self.node_exists(cx, t, tptr, "fork target");
                }
                for (branch, m) in &f.input_map {
                    let bptr = push_token(&at("input_map"), branch);
                    if !distinct.contains(branch.as_str()) {
                        cx.push(
                            Code::UnknownBranch,
                            &bptr,
                            format!("input_map names `{branch}`, which is not one of this fork's targets"),
                        );
                    }
                    for (k, p) in m {
                        self.reads(cx, p, &push_token(&bptr, k), false);
                    }
                }
            }
            NodeKind::ParallelJoin(j) => {
                match (j.join_reducer, &j.join_fn_ref) {
                    (JoinReducer::FnRef, None) => cx.push(
                        Code::MissingForMode,
                        &n.ptr,
                        "join_reducer `fn_ref` needs `join_fn_ref`",
                    ),
                    (JoinReducer::Merge | JoinReducer::Append, Some(_)) => cx.push(
                        Code::IgnoredForMode,
                        at("join_fn_ref"),
                        "`join_fn_ref` is ignored: join_reducer is not `fn_ref`",
                    ),
                    _ => {}
                }
                match &j.output_key {
                    Some(k) => self.writes(cx, k, at("output_key")),
                    // FS-PJ-5: "Canvas warns if absent."
                    None => cx.push(
                        Code::LostResult,
                        &n.ptr,
                        format!("parallel_join `{}` has no output_key: the joined result is only visible through the branches' own writes", n.id),
                    ),
                }
            }
            NodeKind::Hitl(h) => {
                if let Some(t) = &h.prompt {
                    self.template(cx, t, at("prompt"));
                }
                match &h.output_key {
                    Some(k) => self.writes(cx, k, at("output_key")),
                    None => cx.push(
                        Code::LostResult,
                        &n.ptr,
                        format!("hitl_breakpoint `{}` has no output_key: the human's reply is not written to state", n.id),
                    ),
                }
            }
            NodeKind::MemoryRead(m) => {
                self.store(cx, &m.store_id, at("store_id"));
                // FS-MR-4/5: key_expr "required when retrieval_mode is key_value",
                // query_expr "required when retrieval_mode is semantic".
                let (need, needed, unused) = match m.retrieval_mode {
                    RetrievalMode::KeyValue => (
                        "key_expr",
                        m.key_expr.is_some(),
                        m.query_expr.is_some().then_some("query_expr"),
                    ),
                    RetrievalMode::Semantic => (
                        "query_expr",
                        m.query_expr.is_some(),
                        m.key_expr.is_some().then_some("key_expr"),
                    ),
                };
                let mode = match m.retrieval_mode {
                    RetrievalMode::KeyValue => "key_value",
                    RetrievalMode::Semantic => "semantic",
                };
                if !needed {
                    cx.push(
                        Code::MissingForMode,
                        &n.ptr,
                        format!("memory_read in `{mode}` mode needs `{need}`"),
                    );
                }
                let mut ignored: Vec<&str> = unused.into_iter().collect();
                if m.retrieval_mode == RetrievalMode::KeyValue {
                    // FS-MR-6/7: top_k and min_score are "Semantic mode only."
                    if m.top_k.is_some() {
                        ignored.push("top_k");
                    }
                    if m.min_score.is_some() {
                        ignored.push("min_score");
                    }
                }
                for k in ignored {
                    cx.push(
                        Code::IgnoredForMode,
                        at(k),
                        format!("`{k}` is ignored in `{mode}` mode"),
                    );
                }
                for p in [&m.key_expr, &m.query_expr].into_iter().flatten() {
                    let k = if Some(p) == m.key_expr.as_ref() {
                        "key_expr"
                    } else {
                        "query_expr"
                    };
                    self.reads(cx, p, &at(k), false);
                }
                self.writes(cx, &m.output_key, at("output_key"));
            }
            NodeKind::MemoryWrite(m) => {
                self.store(cx, &m.store_id, at("store_id"));
                self.reads(cx, &m.key_expr, &at("key_expr"), false);
                self.reads(cx, &m.value_expr, &at("value_expr"), false);
            }
            NodeKind::Transform(t) => match t.mode {
                TransformMode::Mapping => {
                    // buildaharness's schema tests draw `mapping: []`
                    // handlers and accept them: a no-op, worth a warning.
                    if t.assignments.is_empty() {
                        cx.push(
                            Code::NoEffect,
                            &n.ptr,
                            format!("transform `{}` has no `mapping` (or `output_map`) entries: it changes nothing", n.id),
                        );
                    }
                    if t.fn_ref.is_some() {
                        cx.push(
                            Code::IgnoredForMode,
                            at("fn_ref"),
                            "`fn_ref` is ignored in `mapping` mode",
                        );
                    }
                    for a in &t.assignments {
                        self.reads(cx, &a.from, &a.from_ptr, false);
                        self.writes(cx, &a.to.field, a.to_ptr.clone());
                    }
                }
                TransformMode::FnRef => {
                    if t.fn_ref.is_none() {
                        cx.push(
                            Code::MissingForMode,
                            &n.ptr,
                            "a transform in `fn_ref` mode needs `fn_ref`",
                        );
                    }
                    if !t.assignments.is_empty() {
                        cx.push(
                            Code::IgnoredForMode,
                            &n.ptr,
                            "`mapping`/`output_map` are ignored in `fn_ref` mode",
                        );
                    }
                }
            },
            NodeKind::Subgraph(s) => {
                if !s.flow_ref.is_empty() && !is_flow_id(&s.flow_ref) {
                    cx.push(
                        Code::BadId,
                        at("flow_ref"),
                        format!("flow_ref `{}` must be a flow id (kebab-case)", s.flow_ref),
                    );
                }
                for (k, p) in &s.input_map {
                    self.reads(cx, p, &push_token(&at("input_map"), k), false);
                }
                for (k, tg) in &s.output_map {
                    self.writes(cx, &tg.field, push_token(&at("output_map"), k));
                }
            }
            NodeKind::AgentRole(a) => {
                let c = |k: &str| push_token(&at("config"), k);
                self.agent(cx, &a.agent_ref, c("agent_ref"));
                self.template(cx, &a.task_description, c("task_description"));
                match (a.memory_access, &a.memory_store_id) {
                    (MemoryAccess::Shared, None) => cx.push(
                        Code::MissingForMode,
                        at("config"),
                        "memory_access `shared` needs `memory_store_id`",
                    ),
                    (MemoryAccess::Shared, Some(s)) => self.store(cx, s, c("memory_store_id")),
                    (MemoryAccess::Isolated, Some(_)) => cx.push(
                        Code::IgnoredForMode,
                        c("memory_store_id"),
                        "`memory_store_id` is ignored: memory_access is `isolated`",
                    ),
                    (MemoryAccess::Isolated, None) => {}
                }
                match &a.output_field {
                    Some(k) => self.writes(cx, k, c("output_field")),
                    None => cx.push(
                        Code::LostResult,
                        at("config"),
                        format!(
                            "agent_role `{}` has no output_field: its result is lost",
                            n.id
                        ),
                    ),
                }
            }
            NodeKind::AgentDebate(d) => self.debate(cx, n, d),
            NodeKind::Harness(h) => {
                // FS-HN-1: "These nodes are only valid when
                // harness_meta.enabled: true."
                if !self.flow.harness_meta.as_ref().is_some_and(|m| m.enabled) {
                    cx.push(
                        Code::HarnessNode,
                        push_token(&n.ptr, "type"),
                        format!("harness node type `{}` is only valid in a flow with `harness_meta.enabled: true`", h.node_type),
                    );
                }
                if let Some(e) = &h.evidence {
                    let cfg = at("harness_config");
                    self.tool(cx, &e.source_tool, push_token(&cfg, "source_tool"));
                    self.writes(cx, crate::model::EVIDENCE_KEY, cfg);
                }
            }
            NodeKind::Unknown(t) => {
                if !t.is_empty() {
                    cx.push(
                        Code::UnknownNodeType,
                        push_token(&n.ptr, "type"),
                        format!("unknown node type `{t}`; the base types are input, output, llm_call, tool_invoke, condition, parallel_fork, parallel_join, hitl_breakpoint, memory_read, memory_write, transform, subgraph, agent_role, agent_debate"),
                    );
                }
            }
        }
    }

    /// A tool_invoke's maps against the tool's declared schemas (FS-TI-3/4;
    /// REQUIREMENTS GAP-TOOL-3: "without `input_map`, each parameter takes
    /// `state[param]`; a missing required parameter ... a check error when
    /// `state_schema` shows it").
    fn tool_fields(
        &self,
        cx: &mut Cx,
        n: &model::Node,
        t: &model::ToolInvoke,
        def: &model::ToolDef,
    ) {
        let at = |k: &str| push_token(&n.ptr, k);
        if let Some((params, required)) = def.input_schema.as_ref().and_then(schema_fields) {
            for k in t.input_map.keys() {
                if !params.contains(k) {
                    cx.push(
                        Code::ToolField,
                        push_token(&at("input_map"), k),
                        format!(
                            "tool `{}` takes no parameter `{k}`; its parameters are {}",
                            t.tool_id,
                            list(&params)
                        ),
                    );
                }
            }
            for r in &required {
                if t.input_map.contains_key(r) {
                    continue;
                }
                if !t.input_map.is_empty() {
                    cx.push(
                        Code::ToolField,
                        at("input_map"),
                        format!(
                            "tool `{}` requires the parameter `{r}`, which input_map does not give",
                            t.tool_id
                        ),
                    );
                } else if self.declared.is_some() && !self.written.contains(r) {
                    cx.push(
                        Code::ToolField,
                        &n.ptr,
                        format!(
                            "tool `{}` requires the parameter `{r}`; with no input_map it is read from state key `{r}`, which nothing declares or writes",
                            t.tool_id
                        ),
                    );
                }
            }
        }
        if let Some((fields, _)) = def.output_schema.as_ref().and_then(schema_fields) {
            for k in t.output_map.keys() {
                if !fields.contains(k) {
                    cx.push(
                        Code::ToolField,
                        push_token(&at("output_map"), k),
                        format!(
                            "tool `{}` replies with no field `{k}`; its reply fields are {}",
                            t.tool_id,
                            list(&fields)
                        ),
                    );
                }
            }
        }
    }

    fn debate(&self, cx: &mut Cx, n: &model::Node, d: &AgentDebate) {
        let c = |k: &str| push_token(&push_token(&n.ptr, "config"), k);
        let distinct: BTreeSet<&str> = d.agents.iter().map(String::as_str).collect();
        // FS-AD-2: "At least 2 agent IDs from the agents array."
        if distinct.len() < 2 {
            cx.push(
                Code::TooFewAgents,
                c("agents"),
                format!(
                    "agent_debate `{}` needs at least 2 distinct agents, found {}",
                    n.id,
                    distinct.len()
                ),
            );
        }
        for (i, a) in d.agents.iter().enumerate() {
            self.agent(cx, a, push_token(&c("agents"), &i.to_string()));
        }
        match (d.speaker_selection, &d.speaker_selection_fn_ref) {
            (Some(SpeakerSelection::Custom), None) => cx.push(
                Code::MissingForMode,
                push_token(&n.ptr, "config"),
                "speaker_selection `custom` needs `speaker_selection_fn_ref`",
            ),
            (Some(SpeakerSelection::Auto | SpeakerSelection::RoundRobin) | None, Some(_)) => cx
                .push(
                    Code::IgnoredForMode,
                    c("speaker_selection_fn_ref"),
                    "`speaker_selection_fn_ref` is ignored: speaker_selection is not `custom`",
                ),
            _ => {}
        }
        if let Some(t) = &d.termination_condition {
            self.condition(cx, t, c("termination_condition"), true);
        }
        if let Some(k) = &d.output_field {
            self.writes(cx, k, c("output_field"));
        }
    }

    fn agent(&self, cx: &mut Cx, id: &str, ptr: String) {
        if !id.is_empty() && !self.agents.contains(id) {
            cx.push(
                Code::UnknownAgent,
                ptr,
                format!(
                    "`{id}` is not an agent of this flow{}",
                    super::suggest::did_you_mean(id, self.agents.iter().copied())
                ),
            );
        }
    }

    /// A memory store reference. buildaharness checks it "only when
    /// memory_stores is explicitly declared"; a flow without any passes the
    /// id to `std/memory` as written, with a warning.
    fn store(&self, cx: &mut Cx, id: &str, ptr: String) {
        if id.is_empty() || self.flow.memory_stores.contains_key(id) {
            return;
        }
        if self.flow.declares_memory_stores {
            cx.push(
                Code::UnknownStore,
                ptr,
                format!("`{id}` is not in the flow's `memory_stores`"),
            );
        } else {
            cx.push(
                Code::NoRegistry,
                ptr,
                format!(
                    "the flow declares no `memory_stores`: store `{id}` is used by id as written"
                ),
            );
        }
    }

    /// A tool reference (tool_id, an agent's tool, gather_evidence's
    /// source_tool). As for stores, buildaharness checks it "only when
    /// tools is explicitly declared"; a flow without `tools` binds it by
    /// `<module>#<id>` (no declared schema), with a warning.
    pub(super) fn tool(&self, cx: &mut Cx, id: &str, ptr: String) {
        if id.is_empty() || self.flow.tools.contains_key(id) {
            return;
        }
        if self.flow.declares_tools {
            cx.push(
                Code::UnknownTool,
                ptr,
                format!(
                    "tool `{id}` is not in the flow's `tools` registry{}",
                    super::suggest::did_you_mean(id, self.flow.tools.keys().map(String::as_str))
                ),
            );
        } else {
            cx.push(
                Code::NoRegistry,
                ptr,
                format!(
                    "the flow declares no `tools`: tool `{id}` is the declaration `{}#{id}`, with no schema, bound in flow.toml like any tool",
                    self.module
                ),
            );
        }
    }
}

/// The fields of an object schema (shorthand: all required; full: its
/// `properties` and `required`); `None` when it names no fields.
fn schema_fields(s: &Schema) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let Value::Object(m) = &s.json else {
        return None;
    };
    if s.shorthand {
        let all: BTreeSet<String> = m.keys().cloned().collect();
        return Some((all.clone(), all));
    }
    let props = m.get("properties").and_then(Value::as_object)?;
    let required = m
        .get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    Some((props.keys().cloned().collect(), required))
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
