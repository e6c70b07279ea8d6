//! Reading a FlowSpec document's top level, its schemas, agents, tools,
//! memory stores and configuration.

use super::read_edge::read_edge;
use super::read_node::read_node;
use super::{
    A2aConfig, Agent, CheckpointConfig, Flow, FlowConfig, HarnessMeta, MemoryConfig, MemoryStore,
    ModelDefaults, ModelParams, Reducer, RuntimeHints, Schema, SpecVersion, StateField,
    StateSchema, StoreKind, StreamingConfig, TelemetryConfig, ToolDef, ToolSource,
};
use crate::diag::{Code, Diagnostic, push_token};
use crate::read::{Cx, Obj, kind};
use serde_json::Value;
use std::collections::BTreeMap;

/// Reads a FlowSpec document. Returns the model and every problem found
/// while reading (in emission order; [`crate::check::check`] sorts).
pub fn parse(doc: &Value) -> (Flow, Vec<Diagnostic>) {
    let mut cx = Cx::default();
    let flow = read_flow(&mut cx, doc);
    (flow, cx.diags)
}

fn empty_flow() -> Flow {
    Flow {
        spec_version: SpecVersion::V1_0_0,
        id: String::new(),
        name: None,
        description: None,
        runtime_hints: None,
        state_schema: None,
        agents: Vec::new(),
        nodes: Vec::new(),
        edges: Vec::new(),
        tools: BTreeMap::new(),
        memory_stores: BTreeMap::new(),
        declares_tools: false,
        declares_memory_stores: false,
        model_defaults: None,
        flow_config: None,
        harness_meta: None,
    }
}

fn read_flow(cx: &mut Cx, doc: &Value) -> Flow {
    let mut flow = empty_flow();
    let Some(mut o) = Obj::new(cx, doc, "", "a FlowSpec document") else {
        return flow;
    };
    match o.req_str(cx, "spec_version").as_deref() {
        Some("0.2.0") => flow.spec_version = SpecVersion::V0_2_0,
        Some("1.0.0") | None => {}
        Some(other) => cx.push(
            Code::UnsupportedVersion,
            "/spec_version",
            format!("spec_version `{other}` is not supported; flowd reads \"0.2.0\" and \"1.0.0\""),
        ),
    }
    flow.id = req_id(cx, &mut o, "id");
    flow.name = o.str(cx, "name");
    flow.description = o.str(cx, "description");
    if let Some(v) = o.get("runtime_hints") {
        flow.runtime_hints = read_runtime_hints(cx, v, "/runtime_hints");
    }
    if let Some(v) = o.get("state_schema") {
        flow.state_schema = read_state_schema(cx, v, "/state_schema");
    }
    if let Some(v) = o.get("agents") {
        flow.agents = read_array(cx, v, "/agents", "`agents`", read_agent);
    }
    if let Some(v) = o.req(cx, "nodes") {
        flow.nodes = read_array(cx, v, "/nodes", "`nodes`", read_node);
    }
    if let Some(v) = o.req(cx, "edges") {
        flow.edges = read_array(cx, v, "/edges", "`edges`", read_edge);
    }
    if let Some(v) = o.get("tools") {
        flow.declares_tools = true;
        flow.tools = read_named(cx, v, "/tools", "`tools`", read_tool);
    }
    if let Some(v) = o.get("memory_stores") {
        flow.declares_memory_stores = true;
        flow.memory_stores = read_named(cx, v, "/memory_stores", "`memory_stores`", read_store);
    }
    if let Some(v) = o.get("model_defaults") {
        flow.model_defaults = read_model_defaults(cx, v, "/model_defaults");
    }
    if let Some(v) = o.get("flow_config") {
        flow.flow_config = read_flow_config(cx, v, "/flow_config");
    }
    if let Some(v) = o.get("harness_meta") {
        flow.harness_meta = read_harness_meta(cx, v, "/harness_meta");
    }
    o.finish(cx);
    flow
}

/// A required id; an explicit empty string is reported here (the checker
/// validates the form of non-empty ids).
pub(super) fn req_id(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> String {
    let id = o.req_str(cx, key).unwrap_or_default();
    if id.is_empty() && o.has(key) && o.map.get(key).is_some_and(Value::is_string) {
        cx.push(Code::BadId, o.at(key), "an id must not be empty");
    }
    id
}

fn read_array<T>(
    cx: &mut Cx,
    v: &Value,
    ptr: &str,
    what: &str,
    f: impl Fn(&mut Cx, &Value, String) -> Option<T>,
) -> Vec<T> {
    let Value::Array(items) = v else {
        cx.push(
            Code::WrongType,
            ptr,
            format!("{what} must be an array, not {}", kind(v)),
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| f(cx, item, push_token(ptr, &i.to_string())))
        .collect()
}

fn read_named<T>(
    cx: &mut Cx,
    v: &Value,
    ptr: &str,
    what: &str,
    f: impl Fn(&mut Cx, &Value, String) -> Option<T>,
) -> BTreeMap<String, T> {
    let Value::Object(m) = v else {
        cx.push(
            Code::WrongType,
            ptr,
            format!("{what} must be an object, not {}", kind(v)),
        );
        return BTreeMap::new();
    };
    m.iter()
        .filter_map(|(k, item)| f(cx, item, push_token(ptr, k)).map(|t| (k.clone(), t)))
        .collect()
}

fn read_runtime_hints(cx: &mut Cx, v: &Value, ptr: &str) -> Option<RuntimeHints> {
    const ADAPTERS: &[&str] = &["langgraph", "crewai", "mastra", "microsoft_agent_framework"];
    let mut o = Obj::new(cx, v, ptr, "`runtime_hints`")?;
    let mut h = RuntimeHints {
        preferred_adapter: o.choice(cx, "preferred_adapter", ADAPTERS, Code::IgnoredValue),
        ..RuntimeHints::default()
    };
    h.compatible = o.str_list(cx, "compatible").unwrap_or_default();
    for (i, a) in h.compatible.iter().enumerate() {
        if !ADAPTERS.contains(&a.as_str()) {
            cx.push(
                Code::IgnoredValue,
                push_token(&o.at("compatible"), &i.to_string()),
                format!("`{a}` is not a known adapter; it is ignored"),
            );
        }
    }
    h.python_version = o.str(cx, "python_version");
    h.node_version = o.str(cx, "node_version");
    h.langgraph_version = o.str(cx, "langgraph_version");
    h.crewai_version = o.str(cx, "crewai_version");
    h.mastra_version = o.str(cx, "mastra_version");
    h.ms_agent_framework_version = o.str(cx, "ms_agent_framework_version");
    h.sensitive = o.str_list(cx, "sensitive").unwrap_or_default();
    for (i, p) in h.sensitive.iter().enumerate() {
        if !(p.starts_with("/input/") || p.starts_with("/state/")) {
            cx.push(
                Code::IgnoredValue,
                push_token(&o.at("sensitive"), &i.to_string()),
                format!("`{p}` is not a pointer into /input/… or /state/…; it is ignored"),
            );
        }
    }
    o.finish(cx);
    Some(h)
}

/// Wraps an embedded schema; it must be an object.
pub(super) fn read_schema(cx: &mut Cx, v: &Value, ptr: String, what: &str) -> Option<Schema> {
    let Value::Object(m) = v else {
        cx.push(
            Code::WrongType,
            &ptr,
            format!("{what} must be a JSON Schema object, not {}", kind(v)),
        );
        return None;
    };
    let shorthand = flow_abi::schema::is_shorthand(m);
    Some(Schema {
        ptr,
        json: v.clone(),
        shorthand,
    })
}

fn read_state_schema(cx: &mut Cx, v: &Value, ptr: &str) -> Option<StateSchema> {
    let schema = read_schema(cx, v, ptr.to_string(), "`state_schema`")?;
    let Value::Object(m) = v else { return None };
    if let Some(t) = m.get("type")
        && t != "object"
    {
        cx.push(
            Code::BadValue,
            push_token(ptr, "type"),
            "`state_schema` describes the state object, so its `type` must be \"object\"",
        );
    }
    let mut fields = BTreeMap::new();
    match m.get("properties") {
        None => {}
        Some(Value::Object(props)) => {
            for (name, p) in props {
                let pptr = push_token(&push_token(ptr, "properties"), name);
                let Value::Object(pm) = p else {
                    cx.push(
                        Code::WrongType,
                        &pptr,
                        format!(
                            "state field `{name}` must be a schema object, not {}",
                            kind(p)
                        ),
                    );
                    continue;
                };
                let reducer = match pm.get("reducer") {
                    None => Reducer::Replace,
                    Some(Value::String(s)) => match s.as_str() {
                        "replace" | "last_wins" => Reducer::Replace,
                        "append" => Reducer::Append,
                        "merge" => Reducer::Merge,
                        "custom" => Reducer::Custom,
                        other => {
                            cx.push(
                                Code::BadValue,
                                push_token(&pptr, "reducer"),
                                format!("reducer `{other}` is not one of `replace`, `append`, `merge`, `last_wins`, `custom`"),
                            );
                            Reducer::Replace
                        }
                    },
                    Some(other) => {
                        cx.push(
                            Code::WrongType,
                            push_token(&pptr, "reducer"),
                            format!("`reducer` must be a string, not {}", kind(other)),
                        );
                        Reducer::Replace
                    }
                };
                let reducer_fn_ref = match pm.get("reducer_fn_ref") {
                    None => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => {
                        cx.push(
                            Code::WrongType,
                            push_token(&pptr, "reducer_fn_ref"),
                            format!("`reducer_fn_ref` must be a string, not {}", kind(other)),
                        );
                        None
                    }
                };
                fields.insert(
                    name.clone(),
                    StateField {
                        ptr: pptr,
                        reducer,
                        reducer_fn_ref,
                    },
                );
            }
        }
        Some(other) => cx.push(
            Code::WrongType,
            push_token(ptr, "properties"),
            format!("`properties` must be an object, not {}", kind(other)),
        ),
    }
    let mut required = Vec::new();
    match m.get("required") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => required.push(s.clone()),
                    other => cx.push(
                        Code::WrongType,
                        push_token(&push_token(ptr, "required"), &i.to_string()),
                        format!("items of `required` must be strings, not {}", kind(other)),
                    ),
                }
            }
        }
        Some(other) => cx.push(
            Code::WrongType,
            push_token(ptr, "required"),
            format!(
                "`required` must be an array of strings, not {}",
                kind(other)
            ),
        ),
    }
    Some(StateSchema {
        schema,
        fields,
        required,
    })
}

fn read_agent(cx: &mut Cx, v: &Value, ptr: String) -> Option<Agent> {
    let mut o = Obj::new(cx, v, &ptr, "an agent")?;
    let id = req_id(cx, &mut o, "id");
    let memory_config = match o.get("memory_config") {
        None => None,
        Some(mv) => {
            let mptr = o.at("memory_config");
            Obj::new(cx, mv, &mptr, "`memory_config`").map(|mut m| {
                let mc = MemoryConfig {
                    short_term: m.bool(cx, "short_term"),
                    long_term: m.bool(cx, "long_term"),
                    entity: m.bool(cx, "entity"),
                    user: m.bool(cx, "user"),
                };
                m.finish(cx);
                mc
            })
        }
    };
    let a = Agent {
        ptr: ptr.clone(),
        id,
        name: o.str(cx, "name"),
        role: o.str(cx, "role"),
        backstory: o.str(cx, "backstory"),
        goal: o.str(cx, "goal"),
        model: o.str(cx, "model"),
        tools: o.str_list(cx, "tools").unwrap_or_default(),
        memory_config,
        max_iter: o.uint(cx, "max_iter", 1, None).unwrap_or(10),
        allow_delegation: o.bool(cx, "allow_delegation"),
    };
    o.finish(cx);
    Some(a)
}

pub(super) fn read_model_params(cx: &mut Cx, v: &Value, ptr: &str) -> Option<ModelParams> {
    // Bounds from buildaharness's schema (REQUIREMENTS GAP-FS-3).
    let mut o = Obj::new(cx, v, ptr, "`model_params`")?;
    let p = ModelParams {
        temperature: o.number(cx, "temperature", Some("0"), Some("2")),
        max_tokens: o.uint(cx, "max_tokens", 1, None),
        top_p: o.number(cx, "top_p", Some("0"), Some("1")),
        frequency_penalty: o.number(cx, "frequency_penalty", Some("-2"), Some("2")),
        presence_penalty: o.number(cx, "presence_penalty", Some("-2"), Some("2")),
        stop: o.str_list(cx, "stop"),
    };
    o.finish(cx);
    Some(p)
}

fn read_model_defaults(cx: &mut Cx, v: &Value, ptr: &str) -> Option<ModelDefaults> {
    let mut o = Obj::new(cx, v, ptr, "`model_defaults`")?;
    let mut d = ModelDefaults {
        model: o.str(cx, "model"),
        embedding_model: o.str(cx, "embedding_model"),
        model_params: None,
    };
    if let Some(mp) = o.get("model_params") {
        d.model_params = read_model_params(cx, mp, &o.at("model_params"));
    }
    o.finish(cx);
    Some(d)
}

fn read_tool(cx: &mut Cx, v: &Value, ptr: String) -> Option<ToolDef> {
    let mut o = Obj::new(cx, v, &ptr, "a tool")?;
    let source = o
        .choice(cx, "source", &["npm", "local", "mcp"], Code::BadValue)
        .map(|s| match s.as_str() {
            "npm" => ToolSource::Npm,
            "local" => ToolSource::Local,
            _ => ToolSource::Mcp,
        });
    let mut t = ToolDef {
        ptr: ptr.clone(),
        tool_ref: o.req_str(cx, "tool_ref").unwrap_or_default(),
        source,
        mcp_server_url: o.str(cx, "mcp_server_url"),
        description: o.str(cx, "description"),
        input_schema: None,
        output_schema: None,
    };
    if let Some(s) = o.get("input_schema") {
        t.input_schema = read_schema(cx, s, o.at("input_schema"), "`input_schema`");
    }
    if let Some(s) = o.get("output_schema") {
        t.output_schema = read_schema(cx, s, o.at("output_schema"), "`output_schema`");
    }
    o.finish(cx);
    Some(t)
}

fn read_store(cx: &mut Cx, v: &Value, ptr: String) -> Option<MemoryStore> {
    let mut o = Obj::new(cx, v, &ptr, "a memory store")?;
    let kind = match o.req_str(cx, "type").as_deref() {
        Some("key_value") | None => StoreKind::KeyValue,
        Some("vector") => StoreKind::Vector,
        Some("hybrid") => StoreKind::Hybrid,
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("type"),
                format!("store type `{other}` is not one of `key_value`, `vector`, `hybrid`"),
            );
            StoreKind::KeyValue
        }
    };
    let s = MemoryStore {
        ptr: ptr.clone(),
        kind,
        description: o.str(cx, "description"),
        backend: o.choice(
            cx,
            "backend",
            &[
                "in_memory",
                "postgres",
                "sqlite",
                "redis",
                "upstash",
                "qdrant",
                "pinecone",
                "azure_ai_search",
            ],
            Code::IgnoredValue,
        ),
        connection_env: o.str(cx, "connection_env"),
        embedding_model: o.str(cx, "embedding_model"),
        dimensions: o.uint(cx, "dimensions", 1, None),
        scope: o.choice(
            cx,
            "scope",
            &["thread", "resource", "global"],
            Code::BadValue,
        ),
        namespace: o.str(cx, "namespace"),
    };
    o.finish(cx);
    Some(s)
}

fn read_flow_config(cx: &mut Cx, v: &Value, ptr: &str) -> Option<FlowConfig> {
    let mut o = Obj::new(cx, v, ptr, "`flow_config`")?;
    let mut c = FlowConfig::default();
    if let Some(cv) = o.get("checkpoint") {
        let cptr = o.at("checkpoint");
        if let Some(mut k) = Obj::new(cx, cv, &cptr, "`checkpoint`") {
            c.checkpoint = Some(CheckpointConfig {
                enabled: k.bool(cx, "enabled"),
                backend: k.choice(
                    cx,
                    "backend",
                    &[
                        "in_memory",
                        "sqlite",
                        "postgres",
                        "redis",
                        "dapr",
                        "orleans",
                    ],
                    Code::IgnoredValue,
                ),
                connection_env: k.str(cx, "connection_env"),
                namespace: k.str(cx, "namespace"),
            });
            k.finish(cx);
        }
    }
    if let Some(sv) = o.get("streaming") {
        let sptr = o.at("streaming");
        if let Some(mut k) = Obj::new(cx, sv, &sptr, "`streaming`") {
            let enabled = k.bool(cx, "enabled");
            let mode = k.choice(
                cx,
                "mode",
                &["updates", "tokens", "debug"],
                Code::IgnoredValue,
            );
            if let Some(m @ ("tokens" | "debug")) = mode.as_deref() {
                // REQUIREMENTS GAP-C-6: only the fact stream is served.
                cx.push(
                    Code::IgnoredValue,
                    k.at("mode"),
                    format!("streaming mode `{m}` is served as `updates`: flowd streams accepted facts, not tokens"),
                );
            }
            c.streaming = Some(StreamingConfig { enabled, mode });
            k.finish(cx);
        }
    }
    if let Some(tv) = o.get("telemetry") {
        let tptr = o.at("telemetry");
        if let Some(mut k) = Obj::new(cx, tv, &tptr, "`telemetry`") {
            c.telemetry = Some(TelemetryConfig {
                enabled: k.bool(cx, "enabled"),
                provider: k.choice(
                    cx,
                    "provider",
                    &["langsmith", "langfuse", "otel", "azure_monitor"],
                    Code::IgnoredValue,
                ),
                project: k.str(cx, "project"),
                endpoint_env: k.str(cx, "endpoint_env"),
                trace_all_nodes: k.bool(cx, "trace_all_nodes"),
            });
            k.finish(cx);
        }
    }
    c.process_type = o.choice(
        cx,
        "process_type",
        &["sequential", "hierarchical", "consensual"],
        Code::IgnoredValue,
    );
    c.manager_agent_ref = o.str(cx, "manager_agent_ref");
    if let Some(av) = o.get("a2a_config") {
        let aptr = o.at("a2a_config");
        if let Some(mut k) = Obj::new(cx, av, &aptr, "`a2a_config`") {
            let mut a = A2aConfig {
                enabled: k.bool(cx, "enabled"),
                agent_name: k.str(cx, "agent_name"),
                agent_description: k.str(cx, "agent_description"),
                version: k.str(cx, "version"),
                capabilities: k.str_list(cx, "capabilities").unwrap_or_default(),
                authentication: k.choice(
                    cx,
                    "authentication",
                    &["api_key", "oauth2", "none"],
                    Code::IgnoredValue,
                ),
                input_schema_ref: k.str(cx, "input_schema_ref"),
                output_schema_ref: k.str(cx, "output_schema_ref"),
                skills: Vec::new(),
            };
            if let Some(sk) = k.get("skills") {
                match sk {
                    Value::Array(items) => a.skills = items.clone(),
                    other => cx.push(
                        Code::WrongType,
                        k.at("skills"),
                        format!("`skills` must be an array, not {}", kind(other)),
                    ),
                }
            }
            c.a2a_config = Some(a);
            k.finish(cx);
        }
    }
    o.finish(cx);
    Some(c)
}

fn read_harness_meta(cx: &mut Cx, v: &Value, ptr: &str) -> Option<HarnessMeta> {
    let mut o = Obj::new(cx, v, ptr, "`harness_meta`")?;
    let h = HarnessMeta {
        enabled: o.bool(cx, "enabled").unwrap_or(false),
        harness_version: o.str(cx, "harness_version"),
        phase: o.str(cx, "phase"),
        input_key: o.str(cx, "input_key"),
        process_concept_id: o.str(cx, "process_concept_id"),
        max_steps: o.uint(cx, "max_steps", 1, None),
    };
    o.finish(cx);
    Some(h)
}

#[cfg(test)]
mod tests;
