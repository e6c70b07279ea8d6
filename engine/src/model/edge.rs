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
