//! Rules on ids and counts, `state_schema`, the tools and memory-store
//! registries and `flow_config`.

use super::{Checker, is_flow_id, is_node_id};
use crate::diag::{Code, push_token};
use crate::model::{NodeKind, Reducer, ToolSource};
use crate::read::Cx;
use std::collections::BTreeMap;

impl<'f> Checker<'f> {
    pub(super) fn ids(&self, cx: &mut Cx) {
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

    pub(super) fn state_schema(&self, cx: &mut Cx) {
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

    pub(super) fn registry(&self, cx: &mut Cx) {
        let f = self.flow;
        for a in &f.agents {
            for (i, t) in a.tools.iter().enumerate() {
                self.tool(
                    cx,
                    t,
                    push_token(&push_token(&a.ptr, "tools"), &i.to_string()),
                );
            }
        }
        for (key, t) in &f.tools {
            // buildaharness's schema: `mcp_server_url: z.string().url()`
            // ("rejects a tool with an invalid mcp_server_url"), read with
            // GAP-C-3: an environment reference is accepted too.
            if let Some(url) = &t.mcp_server_url
                && !is_env_ref(url)
                && !is_url(url)
            {
                cx.push(
                    Code::BadValue,
                    push_token(&t.ptr, "mcp_server_url"),
                    format!("`mcp_server_url` of tool `{key}` is `{url}`, neither a URL (`https://host/path`) nor an environment reference (`${{MCP_URL}}`, `env:MCP_URL`)"),
                );
                continue;
            }
            match (&t.source, &t.mcp_server_url) {
                (Some(ToolSource::Mcp), None) => cx.push(
                    Code::MissingForMode,
                    &t.ptr,
                    format!("tool `{key}` has source `mcp` and needs `mcp_server_url`"),
                ),
                // FS-TOOL-3: "Must reference an environment variable — never hardcode."
                (Some(ToolSource::Mcp), Some(url)) if is_url(url) && !url.contains("${") => cx.push(
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

    pub(super) fn flow_config(&self, cx: &mut Cx) {
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
}

/// `${NAME}` or `env:NAME`, NAME an environment variable name.
fn is_env_ref(s: &str) -> bool {
    let name = s
        .strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .or_else(|| s.strip_prefix("env:"));
    name.is_some_and(|n| {
        n.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `scheme://rest`: a scheme (a letter, then letters, digits, `+`, `-`,
/// `.`) and a non-empty rest with no whitespace, where environment
/// references may stand for parts (`https://${MCP_HOST}/sse`).
fn is_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !rest.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_url_forms() {
        for ok in ["${MCP_URL}", "env:MCP_URL", "env:_x1"] {
            assert!(is_env_ref(ok), "{ok}");
        }
        for ok in [
            "https://mcp.example.com/sse",
            "http://localhost:8888",
            "https://${HOST}/sse",
        ] {
            assert!(is_url(ok), "{ok}");
        }
        for bad in [
            "not-a-url",
            "${}",
            "env:",
            "env:1x",
            "$MCP_URL",
            "http://",
            "://x",
            "http://a b",
        ] {
            assert!(!is_env_ref(bad) && !is_url(bad), "{bad}");
        }
    }
}
