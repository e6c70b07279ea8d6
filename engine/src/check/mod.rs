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
//!
//! Layout: `schemas` reads the embedded schemas into Flow types; the
//! checker's rules are split by what they judge: `registry` (ids, counts,
//! `state_schema`, tools, stores, `flow_config`), `state` (state keys read
//! and written), `nodes` (each node type's config) and `graph` (edges,
//! routing, reachability, forks).

mod fit;
mod graph;
mod nodes;
mod registry;
mod schemas;
mod state;
mod suggest;
mod writes;

use crate::diag::{self, Code, Diagnostic};
use crate::model::{self, Flow};
use crate::read::Cx;
use flow_abi::{Type, TypeSet};
use schemas::read_schemas;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

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
    Checker::new(&flow, module).run(&mut cx, graph);
    let mut types = TypeSet::new();
    let schema_types = read_schemas(&mut cx, &flow, &mut types, module);
    writes::check_writes(&mut cx, &flow, &types, &schema_types);
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

pub(super) struct Checker<'f> {
    flow: &'f Flow,
    /// The module the document is (`support.json`), for messages that
    /// name a declaration.
    module: &'f str,
    /// Node id → index of its first occurrence.
    index: BTreeMap<&'f str, usize>,
    agents: BTreeSet<&'f str>,
    /// State keys `state_schema` declares, when it declares any.
    declared: Option<BTreeSet<&'f str>>,
    /// Keys that something writes (declared, input fields, node outputs).
    written: BTreeSet<String>,
}

impl<'f> Checker<'f> {
    fn new(flow: &'f Flow, module: &'f str) -> Checker<'f> {
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
            module,
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
            format!(
                "{what} `{id}` is not a node of this flow{}",
                suggest::did_you_mean(id, self.index.keys().copied())
            ),
        );
        false
    }
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
