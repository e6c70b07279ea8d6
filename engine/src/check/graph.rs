//! Rules on edges and the graph: endpoints, routing, reachability and
//! fork/join pairing.

use super::Checker;
use crate::diag::{Code, push_token};
use crate::model::{self, EdgeKind, NodeKind, WaitFor};
use crate::read::Cx;
use std::collections::{BTreeSet, VecDeque};

impl<'f> Checker<'f> {
    pub(super) fn edges(&self, cx: &mut Cx) {
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
    pub(super) fn routes(&self, cx: &mut Cx) -> Vec<Vec<usize>> {
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
            // A direct edge to the node's fail_branch target drawn beside
            // its route is that failure route, not a second route.
            let routes = model::route_edges(n, out_edges[i].iter().copied());
            match routes.as_slice() {
                [] => {
                    if !matches!(n.kind, NodeKind::Unknown(_)) {
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
            if let Some(fb) = n.kind.fail_branch()
                && let Some(t) = idx(&fb.target)
            {
                succ[i].push(t);
            }
        }
        succ
    }

    pub(super) fn reachability(&self, cx: &mut Cx, succ: &[Vec<usize>]) {
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
    pub(super) fn forks(&self, cx: &mut Cx, succ: &[Vec<usize>]) {
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
