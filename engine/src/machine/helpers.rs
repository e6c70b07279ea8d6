//! Free helpers of the interpreter: task construction, routes, messages, input decoding and state writes through reducers.

use super::*;

impl Task {
    /// Can run without outside input.
    pub(super) fn ready(&self) -> bool {
        matches!(self.stage, Stage::Enter | Stage::Route { .. })
    }

    pub(super) fn new(node: String, parent: Option<String>, local: Option<Json>) -> Task {
        Task {
            node,
            stage: Stage::Enter,
            k: 0,
            parent,
            local,
            writes: Vec::new(),
            attempts: 0,
            validations: 0,
            passing_join: false,
            prompt: None,
        }
    }
}

pub(super) fn unreachable_module() -> &'static Module {
    // A Machine is only made for a module of its program; this keeps the
    // type checker honest without a panic path in release code.
    static EMPTY: std::sync::OnceLock<Module> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| {
        Module::new(
            String::new(),
            crate::check::check(&Json::Null),
            BTreeMap::new(),
        )
    })
}

/// The route out of `node`: its conditional branches in order (a
/// condition node's own, else its conditional edge's) and the default
/// target (a condition's or conditional edge's `default_target`, else the
/// target of its direct edge). A condition node's direct edges only repeat
/// its targets and are ignored (GAP-GRAPH-1), and so is a direct edge that
/// draws the node's fail_branch ([`crate::model::route_edges`]).
pub(super) fn route_of<'m>(
    m: &'m Module,
    node: &str,
) -> (Vec<(&'m Condition, &'m str)>, Option<&'m str>) {
    let Some((n, edges)) = m.node_and_out_edges(node) else {
        return (Vec::new(), None);
    };
    if let NodeKind::Condition(c) = &n.kind {
        return (
            c.branches
                .iter()
                .map(|b| (&b.condition, b.target.as_str()))
                .collect(),
            Some(c.default_target.as_str()),
        );
    }
    let mut direct = None;
    for e in crate::model::route_edges(n, edges) {
        match &e.kind {
            EdgeKind::Conditional {
                branches,
                default_target,
            } => {
                return (
                    branches
                        .iter()
                        .map(|b| (&b.condition, b.to.as_str()))
                        .collect(),
                    Some(default_target.as_str()),
                );
            }
            EdgeKind::Direct { to, .. } => {
                if direct.is_none() {
                    direct = Some(to.as_str());
                }
            }
        }
    }
    (Vec::new(), direct)
}

/// `` `expr`: why ``, naming the expression once even when the error names
/// the (same) failing sub-expression.
pub(super) fn expr_error(e: &impl std::fmt::Display, err: &impl std::fmt::Display) -> String {
    let whole = format!("`{e}`");
    let why = err.to_string();
    match why.strip_prefix(&format!("{whole}: ")) {
        Some(rest) => format!("{whole}: {rest}"),
        None => format!("{whole}: {why}"),
    }
}

pub(super) fn failed_msg(node: &str, call: &str, tool: &str, outcome: &Outcome) -> String {
    format!("node {node}: call {call} to {tool} failed: {outcome}")
}

pub(super) fn validator(node: &Node) -> Option<&OutputValidator> {
    match &node.kind {
        NodeKind::LlmCall(l) => l.output_validator.as_ref(),
        NodeKind::ToolInvoke(t) => t.output_validator.as_ref(),
        _ => None,
    }
}

/// The state key a node's result goes to.
pub(super) fn output_key_of(kind: &NodeKind) -> Option<&str> {
    match kind {
        NodeKind::LlmCall(l) => l.output_key.as_deref(),
        NodeKind::Hitl(h) => h.output_key.as_deref(),
        NodeKind::MemoryRead(r) => Some(&r.output_key),
        NodeKind::ParallelJoin(j) => j.output_key.as_deref(),
        NodeKind::AgentRole(a) => a.output_field.as_deref(),
        NodeKind::AgentDebate(d) => d.output_field.as_deref(),
        _ => None,
    }
}

pub(super) fn output_key(node: &Node) -> Option<&str> {
    output_key_of(&node.kind)
}

pub(super) fn persona(agent: &Agent) -> String {
    let mut s = String::new();
    for (label, v) in [
        ("Name", &agent.name),
        ("Role", &agent.role),
        ("Goal", &agent.goal),
        ("Backstory", &agent.backstory),
    ] {
        if let Some(v) = v {
            if !s.is_empty() {
                s.push('\n');
            }
            s.push_str(label);
            s.push_str(": ");
            s.push_str(v);
        }
    }
    s
}

pub(super) fn tool_message(tool: &str, result: &Json) -> Json {
    let mut m = Map::new();
    m.insert("speaker".into(), Json::String("tool".into()));
    m.insert("tool".into(), Json::String(tool.to_string()));
    m.insert("result".into(), result.clone());
    Json::Object(m)
}

pub(super) fn fn_input(state: &Json, value: Option<&Json>) -> Json {
    let mut m = Map::new();
    m.insert("state".into(), state.clone());
    if let Some(v) = value {
        m.insert("value".into(), v.clone());
    }
    Json::Object(m)
}

pub(super) fn model_params(p: &crate::model::ModelParams) -> Json {
    let mut m = Map::new();
    let num = |n: &serde_json::Number| Json::Number(n.clone());
    if let Some(v) = &p.temperature {
        m.insert("temperature".into(), num(v));
    }
    if let Some(v) = p.max_tokens {
        m.insert("max_tokens".into(), Json::Number(v.into()));
    }
    if let Some(v) = &p.top_p {
        m.insert("top_p".into(), num(v));
    }
    if let Some(v) = &p.frequency_penalty {
        m.insert("frequency_penalty".into(), num(v));
    }
    if let Some(v) = &p.presence_penalty {
        m.insert("presence_penalty".into(), num(v));
    }
    if let Some(v) = &p.stop {
        m.insert(
            "stop".into(),
            Json::Array(v.iter().map(|s| Json::String(s.clone())).collect()),
        );
    }
    Json::Object(m)
}

/// Decodes run input against the input node's `output_schema` (or the
/// `state_schema` when it has none); unknown fields refuse the run.
pub(super) fn decode_input(m: &Module, input_node: &Node, input: &Json) -> Result<Json, String> {
    let Json::Object(obj) = input else {
        return Err("input is a JSON object keyed by field name".into());
    };
    let ptr = match &input_node.kind {
        NodeKind::Input(i) => i.output_schema.as_ref().map(|s| s.ptr.clone()),
        _ => None,
    }
    .or_else(|| {
        m.report
            .flow
            .state_schema
            .as_ref()
            .map(|s| s.schema.ptr.clone())
    });
    let Some(ty) = ptr.and_then(|p| m.report.schema_types.get(&p)) else {
        // No schema at all: any object (json.Value).
        return Ok(input.clone());
    };
    let fields = crate::program::record_fields(ty, &m.report.types);
    if !fields.is_empty() {
        for k in obj.keys() {
            if !fields.iter().any(|f| &f.name == k) {
                return Err(format!(
                    "$.{k}: unknown input field (expected {})",
                    fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    decode_json(input, ty, &m.report.types)
        .map(|v| v.to_json())
        .map_err(|e| e.to_string())
}

/// Writes `value` at `target` through `reducer` (for a whole field; a write
/// below a field replaces that member).
pub(super) fn apply(state: &mut Json, target: &Target, value: Json, reducer: Reducer) {
    if !state.is_object() {
        *state = Json::Object(Map::new());
    }
    let Json::Object(root) = state else { return };
    if !target.below.is_empty() {
        let mut cur = root.entry(target.field.clone()).or_insert(Json::Null);
        for (i, name) in target.below.iter().enumerate() {
            if !cur.is_object() {
                *cur = Json::Object(Map::new());
            }
            let Json::Object(m) = cur else { return };
            if i + 1 == target.below.len() {
                m.insert(name.clone(), value);
                return;
            }
            cur = m.entry(name.clone()).or_insert(Json::Null);
        }
        return;
    }
    let slot = root.entry(target.field.clone()).or_insert(Json::Null);
    match reducer {
        Reducer::Append => {
            let mut items = match std::mem::take(slot) {
                Json::Array(a) => a,
                Json::Null => Vec::new(),
                other => vec![other],
            };
            match value {
                Json::Array(a) => items.extend(a),
                v => items.push(v),
            }
            *slot = Json::Array(items);
        }
        Reducer::Merge => merge_into(slot, value),
        Reducer::Replace | Reducer::Custom => *slot = value,
    }
}

/// Deep object merge: objects merge member by member, anything else is
/// replaced.
pub(super) fn merge_into(slot: &mut Json, value: Json) {
    match (slot, value) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, v) in b {
                merge_into(a.entry(k).or_insert(Json::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The target of a whole state field.
pub(super) fn key_target(key: &str) -> Target {
    Target {
        field: key.to_string(),
        below: Vec::new(),
    }
}

pub(super) fn set_member(state: &mut Json, key: &str, v: Json) {
    if let Json::Object(m) = state {
        m.insert(key.to_string(), v);
    }
}
