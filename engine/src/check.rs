//! The checker: every rule a FlowSpec document must pass before a run.
//!
//! Rules come from the reference (`seeds/flowspec-reference.txt`), issue 4
//! item 1 and DESIGN §4, with REQUIREMENTS Part D where they leave a choice.
//! All problems are reported at once, sorted by [`crate::diag::sort`].
//!
//! Looseness for real files (DESIGN §4): node ids with `_`; the three
//! template spellings; shorthand or full schemas; `condition` and
//! `parallel_fork` targets repeated as direct edges (ignored for routing);
//! `last_wins` as `replace`; edges without `type`; an input node without
//! `output_schema`; transform `output_map` as well as `mapping`, with
//! `$.output.key` targets.

use crate::diag::{self, Code, Diagnostic, push_token};
use crate::expr::Expr;
use crate::model::{
    self, AgentDebate, Condition, EdgeKind, Flow, JoinReducer, MemoryAccess, NodeKind, Reducer,
    RetrievalMode, Schema, SpeakerSelection, ToolSource, TransformMode, WaitFor,
};
use crate::path::{Path, Root};
use crate::read::Cx;
use crate::template::Template;
use flow_abi::{Type, TypeSet};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The outcome of checking one document.
#[derive(Debug, Clone)]
pub struct Report {
    /// The model as read; holds placeholders where there are errors.
    pub flow: Flow,
    /// The declarations the flow's schemas were read into.
    pub types: TypeSet,
    /// The Flow type of each embedded schema that read cleanly, keyed by the
    /// schema's JSON Pointer ([`crate::model::Schema::ptr`]).
    pub schema_types: BTreeMap<String, Type>,
    /// Every problem, sorted (errors and warnings together).
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The flow, only when it checks with no errors (safe to run).
    pub fn flow(&self) -> Option<&Flow> {
        (!self.has_errors()).then_some(&self.flow)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }
}

/// Reads and checks a FlowSpec document. Schema declarations are named
/// after the module `<flow id>.json`; use [`check_module`] to name the file.
pub fn check(doc: &Value) -> Report {
    let module = match doc.get("id") {
        Some(Value::String(id)) if !id.is_empty() => format!("{id}.json"),
        _ => "flow.json".to_string(),
    };
    check_module(doc, &module)
}

/// Reads and checks a FlowSpec document whose path relative to the program
/// root is `module` (e.g. `support.json`, DESIGN §2 "Declaration identity").
pub fn check_module(doc: &Value, module: &str) -> Report {
    let (flow, diags) = model::parse(doc);
    let mut cx = Cx { diags };
    // Graph rules need both lists; when one is not an array, its wrong type
    // is the one useful diagnostic, not a dead end at every node.
    let graph = ["nodes", "edges"]
        .iter()
        .all(|k| doc.get(k).is_some_and(Value::is_array));
    Checker::new(&flow).run(&mut cx, graph);
    let mut types = TypeSet::new();
    let schema_types = read_schemas(&mut cx, &flow, &mut types, module);
    let mut diagnostics = cx.diags;
    diag::sort(&mut diagnostics);
    diagnostics.dedup();
    Report {
        flow,
        types,
        schema_types,
        diagnostics,
    }
}

/// How a schema is read: any type, or an object whose properties are fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Any,
    Fields,
}

/// Every schema embedded in the flow, with the root name its declarations
/// are named under.
fn schemas(flow: &Flow) -> Vec<(&Schema, String, Shape)> {
    let mut out = Vec::new();
    if let Some(s) = &flow.state_schema {
        out.push((&s.schema, "state".to_string(), Shape::Fields));
    }
    for n in &flow.nodes {
        let root = |what: &str| format!("nodes.{}.{what}", n.id);
        match &n.kind {
            NodeKind::Input(i) => out.extend(
                i.output_schema
                    .as_ref()
                    .map(|s| (s, root("input"), Shape::Fields)),
            ),
            NodeKind::Output(o) => out.extend(
                o.input_schema
                    .as_ref()
                    .map(|s| (s, root("output"), Shape::Fields)),
            ),
            NodeKind::Hitl(h) => out.extend(
                h.resume_schema
                    .as_ref()
                    .map(|s| (s, root("resume"), Shape::Any)),
            ),
            NodeKind::LlmCall(l) => out.extend(
                l.structured_output
                    .as_ref()
                    .map(|s| (s, root("structured"), Shape::Any)),
            ),
            NodeKind::AgentRole(a) => out.extend(
                a.structured_output
                    .as_ref()
                    .map(|s| (s, root("structured"), Shape::Any)),
            ),
            _ => {}
        }
    }
    for (key, t) in &flow.tools {
        out.extend(
            t.input_schema
                .as_ref()
                .map(|s| (s, format!("tools.{key}.input"), Shape::Fields)),
        );
        out.extend(
            t.output_schema
                .as_ref()
                .map(|s| (s, format!("tools.{key}.output"), Shape::Any)),
        );
    }
    out
}

/// Reads every embedded schema into Flow types through flow-abi (DESIGN §2)
/// and maps its diagnostics into ours (FS0601 errors, FS0602 warnings; the
/// flow-abi code is kept as the subcode). Pointers are already absolute:
/// each schema is read at its own pointer in the FlowSpec file.
fn read_schemas(
    cx: &mut Cx,
    flow: &Flow,
    types: &mut TypeSet,
    module: &str,
) -> BTreeMap<String, Type> {
    use flow_abi::schema::{self as abi_schema, ReadContext, Severity as AbiSeverity};
    let mut out = BTreeMap::new();
    let mut ctx = ReadContext::new(types, module);
    for (schema, root, shape) in schemas(flow) {
        // FS-ST-9: `reducer` and `reducer_fn_ref` are FlowSpec keywords, not
        // JSON Schema; `reducer` is an annotation to flow-abi, the other is
        // removed here.
        let json = if root == "state" {
            strip_reducer_refs(&schema.json)
        } else {
            schema.json.clone()
        };
        let ty = abi_schema::read_any(&json, &root, &schema.ptr, &mut ctx);
        if shape == Shape::Fields
            && let Some(t) = &ty
            && !is_object_type(t, ctx.types)
        {
            cx.push(
                Code::BadSchema,
                &schema.ptr,
                format!(
                    "this schema must describe a JSON object (`properties`, or the shorthand map of field name to schema), not {}",
                    t.describe(ctx.types)
                ),
            );
            continue;
        }
        if let Some(ty) = ty {
            out.insert(schema.ptr.clone(), ty);
        }
    }
    for d in ctx.diagnostics {
        let code = match d.severity {
            AbiSeverity::Error => Code::BadSchema,
            AbiSeverity::Warning => Code::SchemaNote,
        };
        let mut diag = Diagnostic::new(code, d.pointer, d.message);
        diag.subcode = Some(d.code);
        cx.diags.push(diag);
    }
    out
}

/// Whether `ty` is carried as a JSON object: a record, or a dict keyed by
/// text (`{"type":"object"}` with no `properties`).
fn is_object_type(ty: &Type, types: &TypeSet) -> bool {
    match ty.base() {
        Type::Named(id) => matches!(types.get(*id).body, flow_abi::Body::Record(_)),
        Type::Dict(k, _) => matches!(**k, Type::Text),
        _ => false,
    }
}

fn strip_reducer_refs(json: &Value) -> Value {
    let mut json = json.clone();
    if let Some(Value::Object(props)) = json.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(m) = p {
                m.remove("reducer_fn_ref");
            }
        }
    }
    json
}

/// The flow id form of buildaharness's schema: `^[a-z0-9][a-z0-9-]*[a-z0-9]$`.
pub fn is_flow_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The node id form of buildaharness's schema: `^[a-z0-9][a-z0-9-_]*$`
/// (kebab-case, or with `_` as real files write them). The same rule reads
/// the task and call ids of a history (flow-abi's fact module).
pub use flow_abi::fact::is_node_id;

struct Checker<'f> {
    flow: &'f Flow,
    /// Node id → index of its first occurrence.
    index: BTreeMap<&'f str, usize>,
    agents: BTreeSet<&'f str>,
    /// State keys `state_schema` declares, when it declares any.
    declared: Option<BTreeSet<&'f str>>,
    /// Keys that something writes (declared, input fields, node outputs).
    written: BTreeSet<String>,
}

impl<'f> Checker<'f> {
    fn new(flow: &'f Flow) -> Checker<'f> {
        let mut index = BTreeMap::new();
        for (i, n) in flow.nodes.iter().enumerate() {
            index.entry(n.id.as_str()).or_insert(i);
        }
        let declared = flow
            .state_schema
            .as_ref()
            .filter(|s| !s.fields.is_empty())
            .map(|s| s.fields.keys().map(String::as_str).collect::<BTreeSet<_>>());
        Checker {
            flow,
            index,
            agents: flow.agents.iter().map(|a| a.id.as_str()).collect(),
            declared,
            written: BTreeSet::new(),
        }
    }

    fn run(mut self, cx: &mut Cx, graph: bool) {
        self.ids(cx);
        self.state_schema(cx);
        self.registry(cx);
        self.collect_written();
        for node in &self.flow.nodes {
            self.node(cx, node);
        }
        self.edges(cx);
        if graph {
            let succ = self.routes(cx);
            self.reachability(cx, &succ);
            self.forks(cx, &succ);
        }
        self.flow_config(cx);
    }

    fn node_exists(&self, cx: &mut Cx, id: &str, ptr: String, what: &str) -> bool {
        if self.index.contains_key(id) {
            return true;
        }
        if id.is_empty() {
            // Already reported as missing or empty.
            return false;
        }
        cx.push(
            Code::UnknownNode,
            ptr,
            format!("{what} `{id}` is not a node of this flow"),
        );
        false
    }

    // ----------------------------------------------------------- ids, counts

    fn ids(&self, cx: &mut Cx) {
        let f = self.flow;
        if !f.id.is_empty() && !is_flow_id(&f.id) {
            cx.push(
                Code::BadId,
                "/id",
                format!("flow id `{}` must be kebab-case: lowercase letters, digits and `-`, at least 2 characters, not starting or ending with `-`", f.id),
            );
        }
        // FS-TOP-7: "Array of node objects (minimum 2)."
        if f.nodes.len() < 2 {
            cx.push(
                Code::TooFewNodes,
                "/nodes",
                format!("a flow needs at least 2 nodes, found {}", f.nodes.len()),
            );
        }
        // FS-IN-3: "Every flow must have exactly one input node."
        let inputs: Vec<_> = f
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Input(_)))
            .collect();
        if inputs.is_empty() {
            cx.push(
                Code::InputCount,
                "/nodes",
                "a flow needs exactly one `input` node, found none",
            );
        }
        for extra in inputs.iter().skip(1) {
            cx.push(
                Code::InputCount,
                push_token(&extra.ptr, "type"),
                format!(
                    "a flow needs exactly one `input` node; `{}` is another one after `{}`",
                    extra.id, inputs[0].id
                ),
            );
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for n in &f.nodes {
            if n.id.is_empty() {
                continue;
            }
            if !is_node_id(&n.id) {
                cx.push(
                    Code::BadId,
                    push_token(&n.ptr, "id"),
                    format!("node id `{}` must use lowercase letters, digits, `-` and `_`, starting with a letter or digit", n.id),
                );
            }
            if let Some(first) = seen.insert(&n.id, &n.ptr) {
                cx.push(
                    Code::DuplicateId,
                    push_token(&n.ptr, "id"),
                    format!("node id `{}` is already used by the node at {first}", n.id),
                );
                seen.insert(&n.id, first);
            }
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for a in &f.agents {
            if a.id.is_empty() {
                continue;
            }
            if let Some(first) = seen.insert(&a.id, &a.ptr) {
                cx.push(
                    Code::DuplicateId,
                    push_token(&a.ptr, "id"),
                    format!(
                        "agent id `{}` is already used by the agent at {first}",
                        a.id
                    ),
                );
                seen.insert(&a.id, first);
            }
        }
    }

    // ----------------------------------------------------------- registries

    fn state_schema(&self, cx: &mut Cx) {
        let Some(s) = &self.flow.state_schema else {
            return;
        };
        for (name, field) in &s.fields {
            let rptr = push_token(&field.ptr, "reducer");
            match field.reducer {
                Reducer::Custom => {
                    cx.push(
                        Code::Unsupported,
                        &rptr,
                        format!("state field `{name}` uses a `custom` reducer, which flowd does not run yet (fn_ref reducers are planned); use replace, append or merge"),
                    );
                    if field.reducer_fn_ref.is_none() {
                        cx.push(
                            Code::MissingForMode,
                            &field.ptr,
                            format!("the `custom` reducer of `{name}` needs `reducer_fn_ref`"),
                        );
                    }
                }
                _ if field.reducer_fn_ref.is_some() => cx.push(
                    Code::IgnoredForMode,
                    push_token(&field.ptr, "reducer_fn_ref"),
                    format!("`reducer_fn_ref` of `{name}` is ignored: its reducer is not `custom`"),
                ),
                _ => {}
            }
        }
        for (i, r) in s.required.iter().enumerate() {
            if !s.fields.contains_key(r) {
                cx.push(
                    Code::UndeclaredStateKey,
                    push_token(&push_token(&s.schema.ptr, "required"), &i.to_string()),
                    format!("`{r}` is required but not among the state_schema properties"),
                );
            }
        }
    }

    fn registry(&self, cx: &mut Cx) {
        let f = self.flow;
        for a in &f.agents {
            for (i, t) in a.tools.iter().enumerate() {
                if !f.tools.contains_key(t) {
                    cx.push(
                        Code::UnknownTool,
                        push_token(&push_token(&a.ptr, "tools"), &i.to_string()),
                        format!("agent `{}` lists tool `{t}`, which is not in the flow's `tools` registry", a.id),
                    );
                }
            }
        }
        for (key, t) in &f.tools {
            match (&t.source, &t.mcp_server_url) {
                (Some(ToolSource::Mcp), None) => cx.push(
                    Code::MissingForMode,
                    &t.ptr,
                    format!("tool `{key}` has source `mcp` and needs `mcp_server_url`"),
                ),
                // FS-TOOL-3: "Must reference an environment variable — never hardcode."
                (Some(ToolSource::Mcp), Some(url)) if url.contains("://") => cx.push(
                    Code::LiteralUrl,
                    push_token(&t.ptr, "mcp_server_url"),
                    format!("tool `{key}` hardcodes `{url}`; the reference asks for an environment reference such as `${{MCP_URL}}` or `env:MCP_URL`"),
                ),
                (Some(ToolSource::Mcp), Some(_)) => {}
                (_, Some(_)) => cx.push(
                    Code::IgnoredForMode,
                    push_token(&t.ptr, "mcp_server_url"),
                    format!("`mcp_server_url` of tool `{key}` is ignored: its source is not `mcp`"),
                ),
                _ => {}
            }
        }
    }

    fn flow_config(&self, cx: &mut Cx) {
        let Some(c) = &self.flow.flow_config else {
            return;
        };
        if c.process_type.as_deref() == Some("hierarchical") && c.manager_agent_ref.is_none() {
            cx.push(
                Code::IgnoredValue,
                "/flow_config/process_type",
                "process_type `hierarchical` needs `manager_agent_ref` in CrewAI; flowd does not use process_type",
            );
        }
        if let Some(m) = &c.manager_agent_ref
            && !self.agents.contains(m.as_str())
        {
            cx.push(
                Code::UnknownAgent,
                "/flow_config/manager_agent_ref",
                format!("`{m}` is not an agent of this flow"),
            );
        }
        if let Some(a) = &c.a2a_config {
            for (key, r) in [
                ("input_schema_ref", &a.input_schema_ref),
                ("output_schema_ref", &a.output_schema_ref),
            ] {
                if let Some(id) = r {
                    self.node_exists(cx, id, format!("/flow_config/a2a_config/{key}"), key);
                }
            }
        }
    }

    // ----------------------------------------------------------- state keys

    fn collect_written(&mut self) {
        let mut w = BTreeSet::new();
        if let Some(d) = &self.declared {
            w.extend(d.iter().map(|s| s.to_string()));
        }
        for n in &self.flow.nodes {
            match &n.kind {
                NodeKind::Input(i) => {
                    if let Some(Value::Object(m)) = i.output_schema.as_ref().map(|s| &s.json) {
                        let props = if i.output_schema.as_ref().is_some_and(|s| s.shorthand) {
                            Some(m)
                        } else {
                            m.get("properties").and_then(Value::as_object)
                        };
                        w.extend(props.into_iter().flat_map(|p| p.keys().cloned()));
                    }
                }
                NodeKind::LlmCall(l) => w.extend(l.output_key.clone()),
                NodeKind::Hitl(h) => w.extend(h.output_key.clone()),
                NodeKind::ParallelJoin(j) => w.extend(j.output_key.clone()),
                NodeKind::MemoryRead(m) => {
                    w.insert(m.output_key.clone());
                }
                NodeKind::AgentRole(a) => w.extend(a.output_field.clone()),
                NodeKind::AgentDebate(d) => w.extend(d.output_field.clone()),
                NodeKind::ToolInvoke(t) => w.extend(t.output_map.values().map(|t| t.field.clone())),
                NodeKind::Subgraph(s) => w.extend(s.output_map.values().map(|t| t.field.clone())),
                NodeKind::Transform(t) => {
                    w.extend(t.assignments.iter().map(|a| a.to.field.clone()))
                }
                _ => {}
            }
        }
        self.written = w;
    }

    /// A state key a node writes should be declared when `state_schema`
    /// declares fields (warning: the write still happens, untyped).
    fn writes(&self, cx: &mut Cx, key: &str, ptr: String) {
        if let Some(d) = &self.declared
            && !key.is_empty()
            && !d.contains(key)
        {
            cx.push(
                Code::UndeclaredStateKey,
                ptr,
                format!("writes state key `{key}`, which state_schema does not declare; its value is untyped"),
            );
        }
    }

    /// Checks a path's root is allowed here and that a state key it reads is
    /// written somewhere.
    fn reads(&self, cx: &mut Cx, p: &Path, ptr: &str, last_message_ok: bool) {
        match p.root {
            Root::LastMessage if !last_message_ok => cx.push(
                Code::BadRoot,
                ptr,
                format!("`{p}` is only defined in an agent_debate termination_condition"),
            ),
            Root::State => {
                if let (Some(_), Some(k)) = (&self.declared, p.first_key())
                    && !self.written.contains(k)
                {
                    cx.push(
                        Code::UndeclaredStateKey,
                        ptr,
                        format!("reads `{p}`, but state key `{k}` is neither declared in state_schema nor written by any node"),
                    );
                }
            }
            _ => {}
        }
    }

    fn template(&self, cx: &mut Cx, t: &Template, ptr: String) {
        for p in t.paths() {
            self.reads(cx, p, &ptr, false);
        }
    }

    fn condition(&self, cx: &mut Cx, c: &Condition, ptr: String, last_message_ok: bool) {
        if let Condition::Expr(e) = c {
            let eptr = push_token(&ptr, "expr");
            for p in Expr::paths(e) {
                self.reads(cx, p, &eptr, last_message_ok);
            }
        }
    }

    // ----------------------------------------------------------- nodes

    fn node(&self, cx: &mut Cx, n: &model::Node) {
        let at = |k: &str| push_token(&n.ptr, k);
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
                if l.prompt_ref.is_some() {
                    cx.push(
                        Code::Unsupported,
                        at("prompt_ref"),
                        "`prompt_ref` (a Langfuse-managed prompt) is not supported yet; write the prompt in `prompt_template`",
                    );
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
                if let Some(fb) = &l.fail_branch {
                    self.node_exists(
                        cx,
                        &fb.target,
                        push_token(&at("fail_branch"), "target"),
                        "fail_branch target",
                    );
                }
            }
            NodeKind::ToolInvoke(t) => {
                if !t.tool_id.is_empty() && !self.flow.tools.contains_key(&t.tool_id) {
                    cx.push(
                        Code::UnknownTool,
                        at("tool_id"),
                        format!("tool `{}` is not in the flow's `tools` registry", t.tool_id),
                    );
                }
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
                    if t.assignments.is_empty() {
                        cx.push(
                            Code::MissingForMode,
                            &n.ptr,
                            "a transform in `mapping` mode needs `mapping` (or `output_map`) with at least one entry",
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
            NodeKind::Harness(t) => {
                let enabled = self.flow.harness_meta.as_ref().is_some_and(|h| h.enabled);
                let why = if enabled {
                    ""
                } else {
                    " (and harness_meta.enabled is not true, which buildaharness requires for them)"
                };
                cx.push(
                    Code::HarnessNode,
                    push_token(&n.ptr, "type"),
                    format!("harness node type `{t}` is not supported by flowd yet{why}"),
                );
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
                format!("`{id}` is not an agent of this flow"),
            );
        }
    }

    fn store(&self, cx: &mut Cx, id: &str, ptr: String) {
        if !id.is_empty() && !self.flow.memory_stores.contains_key(id) {
            cx.push(
                Code::UnknownStore,
                ptr,
                format!("`{id}` is not in the flow's `memory_stores`"),
            );
        }
    }

    // ----------------------------------------------------------- edges, graph

    fn edges(&self, cx: &mut Cx) {
        for e in &self.flow.edges {
            self.node_exists(cx, &e.from, push_token(&e.ptr, "from"), "edge source");
            match &e.kind {
                EdgeKind::Direct {
                    to, context_from, ..
                } => {
                    let to_ok = self.node_exists(cx, to, push_token(&e.ptr, "to"), "edge target");
                    for (i, c) in context_from.iter().enumerate() {
                        let cptr = push_token(&push_token(&e.ptr, "context_from"), &i.to_string());
                        if !self.node_exists(cx, c, cptr.clone(), "context_from node") {
                            continue;
                        }
                        if !self.has_output(c) {
                            cx.push(
                                Code::IgnoredValue,
                                cptr,
                                format!("context_from names `{c}`, which writes no output key, so it adds nothing"),
                            );
                        }
                    }
                    if to_ok
                        && !context_from.is_empty()
                        && let Some(&i) = self.index.get(to.as_str())
                        && !matches!(
                            self.flow.nodes[i].kind,
                            NodeKind::LlmCall(_) | NodeKind::AgentRole(_)
                        )
                    {
                        // DESIGN §4: context goes to "an llm_call or agent_role".
                        cx.push(
                            Code::IgnoredValue,
                            push_token(&e.ptr, "context_from"),
                            format!(
                                "context_from is passed only to llm_call and agent_role nodes; `{to}` is of type {}, so it is ignored",
                                self.flow.nodes[i].kind.type_name()
                            ),
                        );
                    }
                }
                EdgeKind::Conditional {
                    branches,
                    default_target,
                } => {
                    for b in branches {
                        self.node_exists(cx, &b.to, push_token(&b.ptr, "to"), "branch target");
                        self.condition(cx, &b.condition, push_token(&b.ptr, "condition"), false);
                    }
                    self.node_exists(
                        cx,
                        default_target,
                        push_token(&e.ptr, "default_target"),
                        "default_target",
                    );
                }
            }
        }
    }

    fn has_output(&self, id: &str) -> bool {
        let Some(&i) = self.index.get(id) else {
            return false;
        };
        match &self.flow.nodes[i].kind {
            NodeKind::LlmCall(l) => l.output_key.is_some(),
            NodeKind::Hitl(h) => h.output_key.is_some(),
            NodeKind::ParallelJoin(j) => j.output_key.is_some(),
            NodeKind::MemoryRead(_) => true,
            NodeKind::AgentRole(a) => a.output_field.is_some(),
            NodeKind::AgentDebate(d) => d.output_field.is_some(),
            NodeKind::ToolInvoke(t) => !t.output_map.is_empty(),
            NodeKind::Subgraph(s) => !s.output_map.is_empty(),
            NodeKind::Transform(t) => !t.assignments.is_empty(),
            _ => false,
        }
    }

    /// Routing (DESIGN §4 "Graph rules", REQUIREMENTS GAP-GRAPH-1/2):
    /// condition and fork nodes route only by their own fields, and their
    /// direct edges must repeat one of their targets; an output node ends
    /// the run; any other node has exactly one outgoing route. Returns each
    /// node's successors (by index), fail_branch targets included.
    fn routes(&self, cx: &mut Cx) -> Vec<Vec<usize>> {
        let nodes = &self.flow.nodes;
        let mut out_edges: Vec<Vec<&model::Edge>> = vec![Vec::new(); nodes.len()];
        for e in &self.flow.edges {
            if let Some(&i) = self.index.get(e.from.as_str()) {
                out_edges[i].push(e);
            }
        }
        let idx = |id: &str| self.index.get(id).copied();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            if self.index.get(n.id.as_str()) != Some(&i) {
                continue; // a duplicate id; reported already
            }
            let own: Option<Vec<&str>> = match &n.kind {
                NodeKind::Condition(c) => Some(
                    c.branches
                        .iter()
                        .map(|b| b.target.as_str())
                        .chain(std::iter::once(c.default_target.as_str()))
                        .collect(),
                ),
                NodeKind::ParallelFork(f) => Some(f.targets.iter().map(String::as_str).collect()),
                _ => None,
            };
            if let Some(targets) = own {
                for e in &out_edges[i] {
                    match &e.kind {
                        EdgeKind::Direct { to, .. } if targets.contains(&to.as_str()) => {}
                        EdgeKind::Direct { to, .. } => cx.push(
                            Code::StrayEdge,
                            push_token(&e.ptr, "to"),
                            format!(
                                "{} `{}` routes only by its own targets; this edge to `{to}` is not one of them",
                                n.kind.type_name(),
                                n.id
                            ),
                        ),
                        EdgeKind::Conditional { .. } => cx.push(
                            Code::StrayEdge,
                            &e.ptr,
                            format!(
                                "{} `{}` routes only by its own targets; a conditional edge out of it is never followed",
                                n.kind.type_name(),
                                n.id
                            ),
                        ),
                    }
                }
                succ[i] = targets.into_iter().filter_map(idx).collect();
                continue;
            }
            if matches!(n.kind, NodeKind::Output(_)) {
                for e in &out_edges[i] {
                    cx.push(
                        Code::OutputEdge,
                        &e.ptr,
                        format!("`{}` is an output node: the run ends there and this edge is never followed", n.id),
                    );
                }
                continue;
            }
            match out_edges[i].as_slice() {
                [] => {
                    if !matches!(n.kind, NodeKind::Harness(_) | NodeKind::Unknown(_)) {
                        cx.push(
                            Code::DeadEnd,
                            &n.ptr,
                            format!(
                                "`{}` has no outgoing edge; only an output node may end the flow",
                                n.id
                            ),
                        );
                    }
                }
                [first, rest @ ..] => {
                    for e in rest {
                        cx.push(
                            Code::MultipleRoutes,
                            &e.ptr,
                            format!(
                                "`{}` already routes by the edge at {}; a node has one outgoing route (fan out with a parallel_fork, branch with a condition or a conditional edge)",
                                n.id, first.ptr
                            ),
                        );
                    }
                    succ[i] = match &first.kind {
                        EdgeKind::Direct { to, .. } => idx(to).into_iter().collect(),
                        EdgeKind::Conditional {
                            branches,
                            default_target,
                        } => branches
                            .iter()
                            .map(|b| b.to.as_str())
                            .chain(std::iter::once(default_target.as_str()))
                            .filter_map(idx)
                            .collect(),
                    };
                }
            }
            if let NodeKind::LlmCall(l) = &n.kind
                && let Some(fb) = &l.fail_branch
                && let Some(t) = idx(&fb.target)
            {
                succ[i].push(t);
            }
        }
        succ
    }

    fn reachability(&self, cx: &mut Cx, succ: &[Vec<usize>]) {
        let nodes = &self.flow.nodes;
        let Some(start) = nodes
            .iter()
            .position(|n| matches!(n.kind, NodeKind::Input(_)))
        else {
            return;
        };
        let mut seen = vec![false; nodes.len()];
        let mut queue = VecDeque::from([start]);
        seen[start] = true;
        while let Some(i) = queue.pop_front() {
            for &j in &succ[i] {
                if !seen[j] {
                    seen[j] = true;
                    queue.push_back(j);
                }
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if !seen[i] && self.index.get(n.id.as_str()) == Some(&i) {
                cx.push(
                    Code::Unreachable,
                    &n.ptr,
                    format!(
                        "`{}` cannot be reached from the input node `{}`; it never runs",
                        n.id, nodes[start].id
                    ),
                );
            }
        }
        let output_reached = nodes
            .iter()
            .enumerate()
            .any(|(i, n)| seen[i] && matches!(n.kind, NodeKind::Output(_)));
        if !output_reached {
            cx.push(
                Code::NoOutputReachable,
                "/nodes",
                format!("no output node can be reached from the input node `{}`, so no run can complete", nodes[start].id),
            );
        }
    }

    /// Each fork's branches must meet at one parallel_join, and no branch
    /// may reach an output before it (REQUIREMENTS GAP-PAR-1, GAP-GRAPH-3).
    /// Nested forks inside a branch are walked through their own join.
    fn forks(&self, cx: &mut Cx, succ: &[Vec<usize>]) {
        const MAX_NESTING: usize = 32;
        let nodes = &self.flow.nodes;
        for (fi, n) in nodes.iter().enumerate() {
            let NodeKind::ParallelFork(f) = &n.kind else {
                continue;
            };
            if self.index.get(n.id.as_str()) != Some(&fi) {
                continue;
            }
            let mut joins_per_target: Vec<(String, BTreeSet<usize>)> = Vec::new();
            let mut problem = false;
            for t in &f.targets {
                let Some(&ti) = self.index.get(t.as_str()) else {
                    continue;
                };
                let mut joins = BTreeSet::new();
                let mut seen = BTreeSet::new();
                let mut stack = vec![(ti, 0usize)];
                while let Some((i, depth)) = stack.pop() {
                    if !seen.insert((i, depth)) {
                        continue;
                    }
                    let next_depth = match &nodes[i].kind {
                        NodeKind::ParallelJoin(_) if depth == 0 => {
                            joins.insert(i);
                            continue;
                        }
                        NodeKind::ParallelJoin(_) => depth - 1,
                        NodeKind::ParallelFork(_) if i == fi => {
                            // A cycle back to this fork without a join.
                            continue;
                        }
                        NodeKind::ParallelFork(_) => (depth + 1).min(MAX_NESTING),
                        NodeKind::Output(_) => {
                            if !problem {
                                cx.push(
                                    Code::ForkJoin,
                                    push_token(&n.ptr, "targets"),
                                    format!(
                                        "branch `{t}` of parallel_fork `{}` reaches output node `{}` before a parallel_join; branches must meet at a join",
                                        n.id, nodes[i].id
                                    ),
                                );
                                problem = true;
                            }
                            continue;
                        }
                        _ => depth,
                    };
                    for &j in &succ[i] {
                        stack.push((j, next_depth));
                    }
                }
                joins_per_target.push((t.clone(), joins));
            }
            if problem {
                continue;
            }
            let all: BTreeSet<usize> = joins_per_target
                .iter()
                .flat_map(|(_, j)| j.iter().copied())
                .collect();
            let one = all.len() == 1 && joins_per_target.iter().all(|(_, j)| j.len() == 1);
            if !one && !joins_per_target.is_empty() {
                let detail = joins_per_target
                    .iter()
                    .map(|(t, j)| {
                        let names: Vec<&str> = j.iter().map(|&i| nodes[i].id.as_str()).collect();
                        if names.is_empty() {
                            format!("`{t}` reaches no join")
                        } else {
                            format!("`{t}` reaches {}", names.join(", "))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                cx.push(
                    Code::ForkJoin,
                    push_token(&n.ptr, "targets"),
                    format!("the branches of parallel_fork `{}` must all meet at one parallel_join: {detail}", n.id),
                );
                continue;
            }
            if let Some(&ji) = all.iter().next()
                && let NodeKind::ParallelJoin(j) = &nodes[ji].kind
                && let WaitFor::Count(k) = j.wait_for
                && k > f.targets.len() as u64
            {
                cx.push(
                    Code::OutOfRange,
                    push_token(&nodes[ji].ptr, "wait_for"),
                    format!(
                        "wait_for {k} is more than the {} branches of parallel_fork `{}`",
                        f.targets.len(),
                        n.id
                    ),
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_forms() {
        assert!(is_flow_id("rag-agent-flow"));
        assert!(is_flow_id("a1"));
        assert!(!is_flow_id("a"));
        assert!(!is_flow_id("-ab"));
        assert!(!is_flow_id("ab-"));
        assert!(!is_flow_id("a_b"));
        assert!(is_node_id("assess_legal"));
        assert!(is_node_id("a"));
        assert!(is_node_id("x-"));
        assert!(!is_node_id("_a"));
        assert!(!is_node_id("A"));
        assert!(!is_node_id(""));
    }
}
