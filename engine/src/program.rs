//! A program: the root FlowSpec file plus every FlowSpec its `subgraph`
//! nodes reach, checked, with the Tool declarations each can call.
//!
//! DESIGN §4: "Program: a root FlowSpec file plus every FlowSpec its
//! `subgraph` nodes reach (`flow_ref` = the `id` of a FlowSpec file in the
//! same directory)." DESIGN §2: "Declaration identity: `<module>#<tool-id>`,
//! where module is the flow file's path relative to the program root
//! (e.g. `support.json#web-search`); built-ins live in module `std/<name>`."

use crate::check::{Report, check_module};
use crate::diag::{Code, Diagnostic};
use crate::model::{
    Condition, FnRef, JoinReducer, NodeKind, SpeakerSelection, ToolApproval, TransformMode,
};
use flow_abi::signature::{ToolDecl, tool_error, types_document};
use flow_abi::{Body, Field, Type, TypeSet, builtin};
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet};

/// The entry function name of every FlowSpec program (DESIGN §4).
pub const ENTRY: &str = "main";

/// One checked FlowSpec file of a program.
#[derive(Debug, Clone)]
pub struct Module {
    /// Path relative to the program root, e.g. `support.json`.
    pub path: String,
    /// The checked flow, its types and the type of each embedded schema.
    pub report: Report,
    /// Every declaration this module's nodes can call, by identity.
    pub decls: BTreeMap<String, ToolDecl>,
    /// `flow_ref` of each subgraph node → the module it runs.
    pub subflows: BTreeMap<String, String>,
    /// Node id → its index in `report.flow.nodes` (the first node of an
    /// id; the checker refuses duplicates).
    pub node_index: BTreeMap<String, usize>,
    /// Node id → the indices of the edges leaving it, in document order
    /// (ids of no node included: the checker reports such edges).
    pub edges_from: BTreeMap<String, Vec<usize>>,
    /// By node index (as `report.flow.nodes`): the indices of the edges
    /// leaving that node, in document order.
    pub out_by_node: Vec<Vec<usize>>,
    /// Node id → the indices of the direct edges entering it, in document
    /// order.
    pub edges_to: BTreeMap<String, Vec<usize>>,
    /// Declaration identity → its fingerprint, computed once at load.
    pub fingerprints: BTreeMap<String, String>,
    /// The type of each field `state_schema` declares (an optional field's
    /// is an `Option`): every write to one is decoded against it.
    pub state_fields: BTreeMap<String, Type>,
}

impl Module {
    /// A module with its lookup indexes; `decls` and `fingerprints` are
    /// filled by [`Module::declare`].
    pub fn new(path: String, report: Report, subflows: BTreeMap<String, String>) -> Module {
        let mut node_index = BTreeMap::new();
        for (i, n) in report.flow.nodes.iter().enumerate() {
            node_index.entry(n.id.clone()).or_insert(i);
        }
        let mut edges_from: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut edges_to: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, e) in report.flow.edges.iter().enumerate() {
            edges_from.entry(e.from.clone()).or_default().push(i);
            if let crate::model::EdgeKind::Direct { to, .. } = &e.kind {
                edges_to.entry(to.clone()).or_default().push(i);
            }
        }
        let out_by_node = report
            .flow
            .nodes
            .iter()
            .map(|n| edges_from.get(&n.id).cloned().unwrap_or_default())
            .collect();
        let state_fields = report
            .flow
            .state_schema
            .as_ref()
            .and_then(|ss| report.schema_types.get(&ss.schema.ptr))
            .map(|t| {
                record_fields(t, &report.types)
                    .into_iter()
                    .map(|f| (f.name, f.ty))
                    .collect()
            })
            .unwrap_or_default();
        Module {
            path,
            report,
            decls: BTreeMap::new(),
            subflows,
            node_index,
            edges_from,
            out_by_node,
            edges_to,
            fingerprints: BTreeMap::new(),
            state_fields,
        }
    }

    /// Computes the declarations this module's nodes can call and their
    /// fingerprints.
    pub fn declare(&mut self) {
        self.decls = declarations(self);
        self.fingerprints = self
            .decls
            .iter()
            .map(|(id, d)| (id.clone(), d.fingerprint(&self.report.types)))
            .collect();
    }

    /// The node with id `id`.
    pub fn node(&self, id: &str) -> Option<&crate::model::Node> {
        self.node_index
            .get(id)
            .and_then(|&i| self.report.flow.nodes.get(i))
    }

    /// The node with id `id` and the edges leaving it, in document order,
    /// with one lookup.
    pub fn node_and_out_edges(
        &self,
        id: &str,
    ) -> Option<(
        &crate::model::Node,
        impl Iterator<Item = &crate::model::Edge>,
    )> {
        let &i = self.node_index.get(id)?;
        let node = self.report.flow.nodes.get(i)?;
        let edges = self
            .out_by_node
            .get(i)
            .into_iter()
            .flatten()
            .filter_map(|&e| self.report.flow.edges.get(e));
        Some((node, edges))
    }

    /// The edges leaving `id`, in document order.
    pub fn out_edges(&self, id: &str) -> impl Iterator<Item = &crate::model::Edge> {
        self.edges_from
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.report.flow.edges.get(i))
    }

    /// The direct edges entering `id`, in document order.
    pub fn in_edges(&self, id: &str) -> impl Iterator<Item = &crate::model::Edge> {
        self.edges_to
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.report.flow.edges.get(i))
    }

    /// The fingerprint of declaration `identity`.
    pub fn fingerprint(&self, identity: &str) -> Option<String> {
        match self.fingerprints.get(identity) {
            Some(f) => Some(f.clone()),
            None => self
                .decls
                .get(identity)
                .map(|d| d.fingerprint(&self.report.types)),
        }
    }
}

/// A checked program.
#[derive(Debug, Clone)]
pub struct Program {
    pub root: String,
    pub modules: BTreeMap<String, Module>,
}

/// Why a program could not be formed: diagnostics per module path.
#[derive(Debug, Clone)]
pub struct Refused {
    pub diagnostics: Vec<(String, Diagnostic)>,
}

impl Program {
    /// Checks `root` and every module its subgraphs reach among `files`
    /// (module path → parsed document). Every module's diagnostics are
    /// reported at once; warnings of a program that loads are in each
    /// module's report.
    pub fn load(files: &BTreeMap<String, Json>, root: &str) -> Result<Program, Refused> {
        let (mut modules, links) = gather(files, root);
        let mut diagnostics = Vec::new();
        for (path, m) in &modules {
            for d in m.report.diagnostics.iter().filter(|d| d.is_error()) {
                diagnostics.push((path.clone(), d.clone()));
            }
            diagnostics.extend(links.iter().filter(|(p, _)| p == path).cloned());
        }
        diagnostics.extend(links.into_iter().filter(|(p, _)| !modules.contains_key(p)));
        if !diagnostics.is_empty() {
            return Err(Refused { diagnostics });
        }
        for m in modules.values_mut() {
            m.declare();
        }
        Ok(Program {
            root: root.to_string(),
            modules,
        })
    }

    /// The `flow tools` document of `root` whether or not it checks
    /// (CLI-21, CLI-25): each module reached, with every diagnostic in its
    /// `diagnostics` and the declarations that could be read; a file the
    /// program names but does not have is a program of diagnostics only.
    /// The flag says whether the program checks (no error anywhere).
    pub fn tools_document_of(files: &BTreeMap<String, Json>, root: &str) -> (Json, bool) {
        if let Ok(p) = Program::load(files, root) {
            return (p.tools_document(), true);
        }
        let (mut modules, links) = gather(files, root);
        let missing: Vec<&(String, Diagnostic)> = links
            .iter()
            .filter(|(p, _)| !modules.contains_key(p))
            .collect();
        for m in modules.values_mut() {
            m.declare();
            m.report.diagnostics.extend(
                links
                    .iter()
                    .filter(|(p, _)| *p == m.path)
                    .map(|(_, d)| d.clone()),
            );
        }
        let mut doc = Program {
            root: root.to_string(),
            modules,
        }
        .tools_document();
        if let Some(Json::Array(programs)) = doc.get_mut("programs") {
            for (path, d) in missing {
                let mut p = Map::new();
                p.insert("root".into(), Json::String(path.clone()));
                p.insert("diagnostics".into(), Json::Array(vec![d.to_json()]));
                p.insert("tools".into(), Json::Array(Vec::new()));
                p.insert("types".into(), Json::Object(Map::new()));
                programs.push(Json::Object(p));
            }
        }
        (doc, false)
    }

    pub fn module(&self, path: &str) -> Option<&Module> {
        self.modules.get(path)
    }

    /// The module a call to `tool` runs as a nested run (`inner.json` for
    /// `inner.json#main`), when `tool` is a module's entry.
    pub fn nested_module<'t>(&self, tool: &'t str) -> Option<&'t str> {
        tool.strip_suffix(ENTRY)
            .and_then(|m| m.strip_suffix('#'))
            .filter(|m| self.modules.contains_key(*m))
    }

    pub fn root_module(&self) -> Option<&Module> {
        self.modules.get(&self.root)
    }

    /// Every declaration a run of the root can reach, nested runs included
    /// (they use the outer run's bindings: host-boundary.txt, "Binding"),
    /// as (module, identity) pairs in a stable order. Subgraph entries are
    /// not Tools and are left out.
    pub fn reachable(&self) -> Vec<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, m) in &self.modules {
            for id in m.decls.keys() {
                if !is_subflow_entry(id) {
                    out.insert((path.clone(), id.clone()));
                }
            }
        }
        out.into_iter().collect()
    }

    /// The declaration `identity` as module `module` sees it, with the types
    /// its terms refer to.
    pub fn decl(&self, module: &str, identity: &str) -> Option<(&ToolDecl, &TypeSet)> {
        let m = self.modules.get(module)?;
        Some((m.decls.get(identity)?, &m.report.types))
    }

    /// The `flow tools` JSON document (running-a-program.txt): each module's
    /// declarations by identity and fingerprint, and the types they reach.
    pub fn tools_document(&self) -> Json {
        let mut programs = Vec::new();
        for (path, m) in &self.modules {
            let decls: Vec<&ToolDecl> = m
                .decls
                .iter()
                .filter(|(id, _)| !is_subflow_entry(id))
                .map(|(_, d)| d)
                .collect();
            let roots: Vec<&Type> = decls.iter().flat_map(|d| d.roots()).collect();
            let mut p = Map::new();
            p.insert("root".into(), Json::String(path.clone()));
            p.insert(
                "diagnostics".into(),
                Json::Array(m.report.diagnostics.iter().map(|d| d.to_json()).collect()),
            );
            p.insert(
                "tools".into(),
                Json::Array(
                    decls
                        .iter()
                        .map(|d| d.tools_entry(&m.report.types))
                        .collect(),
                ),
            );
            p.insert("types".into(), types_document(&roots, &m.report.types));
            programs.push(Json::Object(p));
        }
        let mut doc = Map::new();
        doc.insert("data".into(), Json::String(flow_abi::DATA_VERSION.into()));
        doc.insert("programs".into(), Json::Array(programs));
        Json::Object(doc)
    }
}

/// Checks `root` and every module its subgraphs reach among `files`: the
/// modules (checked, not yet declared) and the problems of the program as
/// a whole, by module path — a module the program names but `files` does
/// not hold, a subgraph `flow_ref` naming no module.
fn gather(
    files: &BTreeMap<String, Json>,
    root: &str,
) -> (BTreeMap<String, Module>, Vec<(String, Diagnostic)>) {
    let mut modules = BTreeMap::new();
    let mut links = Vec::new();
    let mut todo = vec![root.to_string()];
    while let Some(path) = todo.pop() {
        if modules.contains_key(&path) {
            continue;
        }
        let Some(doc) = files.get(&path) else {
            links.push((
                path.clone(),
                Diagnostic::new(
                    Code::MissingField,
                    "",
                    format!("no file {path} in the program"),
                ),
            ));
            continue;
        };
        let report = check_module(doc, &path);
        let mut subflows = BTreeMap::new();
        for node in &report.flow.nodes {
            if let NodeKind::Subgraph(s) = &node.kind {
                match find_flow(files, &path, &s.flow_ref) {
                    Some(m) => {
                        subflows.insert(s.flow_ref.clone(), m.clone());
                        todo.push(m);
                    }
                    None => links.push((
                        path.clone(),
                        Diagnostic::new(
                            Code::UnknownNode,
                            format!("{}/flow_ref", node.ptr),
                            format!(
                                "subgraph flow_ref {:?} names no FlowSpec file with that id in the same directory",
                                s.flow_ref
                            ),
                        ),
                    )),
                }
            }
        }
        modules.insert(path.clone(), Module::new(path, report, subflows));
    }
    (modules, links)
}

fn is_subflow_entry(identity: &str) -> bool {
    identity.ends_with(&format!("#{ENTRY}"))
}

/// The identity of the nested-run entry of a module, e.g. `inner.json#main`.
pub fn subflow_entry(module: &str) -> String {
    format!("{module}#{ENTRY}")
}

/// The module of `flow_ref`: a FlowSpec file in the directory of `from`
/// whose `id` is `flow_ref`.
fn find_flow(files: &BTreeMap<String, Json>, from: &str, flow_ref: &str) -> Option<String> {
    let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
    files
        .iter()
        .filter(|(p, _)| p.rsplit_once('/').map_or("", |(d, _)| d) == dir)
        .find(|(_, doc)| doc.get("id").and_then(Json::as_str) == Some(flow_ref))
        .map(|(p, _)| p.clone())
}

/// The declarations a module's nodes can call: its tools registry entries
/// that nodes, agents or gather_evidence nodes use (in a flow with no
/// registry, each tool named), the built-ins its node types use, its
/// `fn_ref`s, and the entries of the modules its subgraphs run.
fn declarations(m: &mut Module) -> BTreeMap<String, ToolDecl> {
    let flow = m.report.flow.clone();
    let types = &mut m.report.types;
    let mut out: BTreeMap<String, ToolDecl> = BTreeMap::new();
    let mut add = |d: ToolDecl| {
        out.entry(d.identity.clone()).or_insert(d);
    };
    let mut tool_ids: BTreeSet<String> = BTreeSet::new();
    let mut fns: BTreeSet<FnRef> = BTreeSet::new();
    let note_cond = |c: &Condition, fns: &mut BTreeSet<FnRef>| {
        if let Condition::FnRef(f) = c {
            fns.insert(f.clone());
        }
    };
    for node in &flow.nodes {
        if node
            .kind
            .fail_branch()
            .and_then(|f| f.retry.as_ref())
            .is_some()
        {
            add(builtin::clock_sleep(types));
        }
        match &node.kind {
            NodeKind::ToolInvoke(t) => {
                tool_ids.insert(t.tool_id.clone());
                if let Some(v) = &t.output_validator {
                    fns.insert(v.fn_ref.clone());
                }
            }
            NodeKind::LlmCall(l) => {
                add(builtin::llm_chat(types));
                if l.prompt_ref.is_some() {
                    add(builtin::prompts_get(types));
                }
                if let Some(v) = &l.output_validator {
                    fns.insert(v.fn_ref.clone());
                }
            }
            NodeKind::Hitl(_) => add(builtin::human_input(types)),
            NodeKind::MemoryRead(r) => match r.retrieval_mode {
                crate::model::RetrievalMode::KeyValue => add(builtin::memory_read(types)),
                crate::model::RetrievalMode::Semantic => add(builtin::memory_search(types)),
            },
            NodeKind::MemoryWrite(_) => add(builtin::memory_write(types)),
            NodeKind::Transform(t) => {
                if t.mode == TransformMode::FnRef
                    && let Some(f) = &t.fn_ref
                {
                    fns.insert(f.clone());
                }
            }
            NodeKind::Condition(c) => {
                for b in &c.branches {
                    note_cond(&b.condition, &mut fns);
                }
            }
            NodeKind::ParallelJoin(j) => {
                if j.join_reducer == JoinReducer::FnRef
                    && let Some(f) = &j.join_fn_ref
                {
                    fns.insert(f.clone());
                }
            }
            NodeKind::AgentRole(a) => {
                add(builtin::llm_chat(types));
                if a.tool_approval == ToolApproval::Human {
                    add(builtin::human_input(types));
                }
                if let Some(agent) = flow.agents.iter().find(|x| x.id == a.agent_ref) {
                    tool_ids.extend(agent.tools.iter().cloned());
                }
            }
            NodeKind::AgentDebate(d) => {
                add(builtin::llm_chat(types));
                if let Some(c) = &d.termination_condition {
                    note_cond(c, &mut fns);
                }
                if d.speaker_selection == Some(SpeakerSelection::Custom)
                    && let Some(f) = &d.speaker_selection_fn_ref
                {
                    fns.insert(f.clone());
                }
            }
            NodeKind::Harness(h) => match &h.evidence {
                Some(e) => {
                    tool_ids.insert(e.source_tool.clone());
                }
                None => add(builtin::harness(types, &h.node_type)),
            },
            NodeKind::Subgraph(s) => {
                if let Some(sub) = m.subflows.get(&s.flow_ref) {
                    let err = tool_error(types);
                    add(ToolDecl {
                        identity: subflow_entry(sub),
                        doc: Some(format!("A nested run of {sub}.")),
                        params: vec![Field {
                            name: "input".into(),
                            ty: Type::Json,
                            doc: None,
                        }],
                        ok: Type::Json,
                        err,
                    });
                }
            }
            _ => {}
        }
        let out = m.edges_from.get(&node.id).into_iter().flatten();
        for e in out.filter_map(|&i| flow.edges.get(i)) {
            if let crate::model::EdgeKind::Conditional { branches, .. } = &e.kind {
                for b in branches {
                    note_cond(&b.condition, &mut fns);
                }
            }
        }
    }
    for f in fns {
        add(builtin::fn_ref(types, &f.module, &f.function));
    }
    for id in tool_ids {
        let Some(def) = flow.tools.get(&id) else {
            // A flow with no `tools` at all names its tools by id alone
            // (FS0308): `<module>#<id>`, with no declared schema.
            if !flow.declares_tools && !id.is_empty() {
                let err = tool_error(types);
                add(ToolDecl {
                    identity: format!("{}#{id}", m.path),
                    doc: None,
                    params: Vec::new(),
                    ok: Type::Json,
                    err,
                });
            }
            continue;
        };
        let params = def
            .input_schema
            .as_ref()
            .and_then(|s| m.report.schema_types.get(&s.ptr))
            .map(|t| record_fields(t, types))
            .unwrap_or_default();
        let ok = def
            .output_schema
            .as_ref()
            .and_then(|s| m.report.schema_types.get(&s.ptr))
            .cloned()
            .unwrap_or(Type::Json);
        let err = tool_error(types);
        add(ToolDecl {
            identity: format!("{}#{id}", m.path),
            doc: def.description.clone(),
            params,
            ok,
            err,
        });
    }
    out
}

/// The fields of a record type (a tool's params), or none.
pub fn record_fields(t: &Type, types: &TypeSet) -> Vec<Field> {
    match t.base() {
        Type::Named(id) => match &types.get(*id).body {
            Body::Record(fields) => fields.clone(),
            Body::Enum(_) => Vec::new(),
        },
        _ => Vec::new(),
    }
}
