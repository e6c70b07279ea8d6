//! The model of an edge: direct or conditional.

use super::Condition;

/// An edge.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub ptr: String,
    pub id: Option<String>,
    pub from: String,
    pub kind: EdgeKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EdgeKind {
    /// "Fixed transition". An edge without `type` is direct (DESIGN §4).
    Direct {
        to: String,
        label: Option<String>,
        context_from: Vec<String>,
    },
    /// "Routes to different nodes based on runtime state."
    Conditional {
        branches: Vec<EdgeBranch>,
        default_target: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct EdgeBranch {
    pub ptr: String,
    pub condition: Condition,
    pub to: String,
    pub label: Option<String>,
}

/// The edges that route out of `node`, from all the edges leaving it in
/// document order: a direct edge to the node's own `fail_branch` target is
/// the canvas drawing that failure route (buildaharness renders it "as a
/// red dashed edge", and its schema test "accepts fail_branch with all
/// retry config fields" draws it beside the node's route), so it is left
/// out when the node has another edge. The checker's routing rules and the
/// interpreter both read routes through this.
pub fn route_edges<'e>(
    node: &super::Node,
    edges: impl IntoIterator<Item = &'e Edge>,
) -> Vec<&'e Edge> {
    let all: Vec<&Edge> = edges.into_iter().collect();
    let fail = match &node.kind {
        super::NodeKind::LlmCall(l) => l.fail_branch.as_ref().map(|f| f.target.as_str()),
        _ => None,
    };
    let Some(fail) = fail else { return all };
    let drawn = |e: &Edge| matches!(&e.kind, EdgeKind::Direct { to, .. } if to == fail);
    if all.iter().all(|e| drawn(e)) {
        return all;
    }
    all.into_iter().filter(|e| !drawn(e)).collect()
}
