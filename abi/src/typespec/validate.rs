//! Validating a read description graph: references resolve, Params have
//! their owners and indices, arities agree, every declaration is reachable
//! and recursion stays finite.

use super::graph::{SpecTerm, TOOL_OWNER};
use super::read::Graph;
use super::shape::{Sink, ptr};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------
// Validation: references, owners, arity, reachability, recursion.
// ---------------------------------------------------------------------------

/// Which Params a term may hold.
#[derive(Clone, Copy)]
pub(super) enum Scope<'a> {
    /// A TypeSpec's Tool roots, with the Tool's generic count.
    Tool(usize),
    /// A TypeSpec root whose Tool generic list did not read: owners are still
    /// checked, indices cannot be.
    Unknown,
    /// A call view's roots and bindings: no Param at all.
    Concrete,
    /// Inside the template with this local id and generic count.
    Template(&'a str, usize),
}

fn check_term(t: &SpecTerm, at: &str, scope: Scope<'_>, g: &Graph, sink: &mut Sink) {
    match t {
        SpecTerm::Prim(_) => {}
        SpecTerm::List(x) => check_term(x, &ptr(at, "List"), scope, g, sink),
        SpecTerm::Set(x) => check_term(x, &ptr(at, "Set"), scope, g, sink),
        SpecTerm::Option(x) => check_term(x, &ptr(at, "Option"), scope, g, sink),
        SpecTerm::Task(x) => check_term(x, &ptr(at, "Task"), scope, g, sink),
        SpecTerm::Dict(k, v) => {
            check_term(k, &format!("{at}/Dict/0"), scope, g, sink);
            check_term(v, &format!("{at}/Dict/1"), scope, g, sink);
        }
        SpecTerm::Tuple(ts) => {
            for (i, x) in ts.iter().enumerate() {
                check_term(x, &format!("{at}/Tuple/{i}"), scope, g, sink);
            }
        }
        SpecTerm::Function { params, result } => {
            for (i, x) in params.iter().enumerate() {
                check_term(x, &format!("{at}/Function/params/{i}"), scope, g, sink);
            }
            check_term(result, &format!("{at}/Function/result"), scope, g, sink);
        }
        SpecTerm::Named { declaration, args } => {
            if !g.keys.contains(declaration) {
                sink.err(
                    &format!("{at}/Named/declaration"),
                    format!("unresolved declaration \"{declaration}\""),
                );
            } else if let Some(tpl) = g.templates.get(declaration)
                && tpl.generic.len() != args.len()
            {
                sink.err(
                    &format!("{at}/Named/args"),
                    format!(
                        "declaration \"{declaration}\" ({}) takes {} argument(s), given {}",
                        tpl.identity,
                        tpl.generic.len(),
                        args.len()
                    ),
                );
            }
            for (i, x) in args.iter().enumerate() {
                check_term(x, &format!("{at}/Named/args/{i}"), scope, g, sink);
            }
        }
        SpecTerm::Param { owner, index } => {
            let (expected, count) = match scope {
                Scope::Concrete => {
                    sink.err(
                        &ptr(at, "Param"),
                        format!("a concrete term has no free Param, found owner \"{owner}\" index {index}"),
                    );
                    return;
                }
                Scope::Tool(n) => (TOOL_OWNER, Some(n)),
                Scope::Unknown => (TOOL_OWNER, None),
                Scope::Template(id, n) => (id, Some(n)),
            };
            if owner != expected {
                sink.err(
                    &format!("{at}/Param/owner"),
                    format!(
                        "Param owner \"{owner}\" is not \"{expected}\", the owner in scope here"
                    ),
                );
            } else if let Some(n) = count
                && usize::try_from(*index).map_or(true, |i| i >= n)
            {
                sink.err(
                    &format!("{at}/Param/index"),
                    format!("Param index {index} is out of range: \"{owner}\" declares {n} type parameter(s)"),
                );
            }
        }
    }
}

pub(super) fn check_graph(
    roots: &[(String, &SpecTerm)],
    scope: Scope<'_>,
    g: &Graph,
    sink: &mut Sink,
) {
    for (at, t) in roots {
        check_term(t, at, scope, g, sink);
    }
    let mut identities: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, tpl) in &g.templates {
        let at = ptr("/declarations", id);
        let inner = Scope::Template(id, tpl.generic.len());
        for (rel, t) in tpl.member_terms() {
            check_term(t, &format!("{at}{rel}"), inner, g, sink);
        }
        if let Some(first) = identities.insert(&tpl.identity, id) {
            sink.err(
                &ptr(&at, "identity"),
                format!(
                    "conflicting templates: identity \"{}\" is also declared by \"{first}\"",
                    tpl.identity
                ),
            );
        }
    }
    if g.complete {
        let reached = reachable(roots.iter().map(|(_, t)| *t), g);
        for id in &g.keys {
            if !reached.contains(id.as_str()) {
                sink.err(
                    &ptr("/declarations", id),
                    "disconnected declaration: not reachable from the roots",
                );
            }
        }
    }
    check_recursion(g, sink);
}

/// The local ids reachable from `roots` through Named declarations and
/// arguments, Function parameters and results, Task items and template
/// members.
fn reachable<'a>(roots: impl Iterator<Item = &'a SpecTerm>, g: &'a Graph) -> BTreeSet<&'a str> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&SpecTerm> = roots.collect();
    while let Some(t) = stack.pop() {
        t.visit(&mut |s| {
            if let SpecTerm::Named { declaration, .. } = s
                && let Some((id, tpl)) = g.templates.get_key_value(declaration)
                && seen.insert(id.as_str())
            {
                stack.extend(tpl.member_terms().into_iter().map(|(_, m)| m));
            }
        });
    }
    seen
}

/// Refuses non-regular recursion: a template that reaches itself through a
/// chain of references in which one of its parameters flows into a strictly
/// larger argument, which would make the set of instantiations infinite.
///
/// Nodes are (template, parameter index). A reference `Y<..., a_j, ...>`
/// inside template `X` adds, for each `Param(X, i)` in `a_j`, an edge
/// `(X, i) → (Y, j)`; the edge is expansive unless `a_j` is exactly that
/// Param. The graph is infinite-instantiation-free iff no strongly connected
/// component contains an expansive edge.
fn check_recursion(g: &Graph, sink: &mut Sink) {
    let mut node: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    for (id, tpl) in &g.templates {
        for i in 0..tpl.generic.len() {
            let n = node.len();
            node.insert((id.as_str(), i), n);
        }
    }
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); node.len()];
    let mut expansive: Vec<(usize, usize, &str, &str)> = Vec::new();
    for (id, tpl) in &g.templates {
        for (_, member) in tpl.member_terms() {
            member.visit(&mut |t| {
                let SpecTerm::Named { declaration, args } = t else {
                    return;
                };
                for (j, a) in args.iter().enumerate() {
                    let Some(&target) = node.get(&(declaration.as_str(), j)) else {
                        continue;
                    };
                    let direct = matches!(a, SpecTerm::Param { owner, .. } if owner == id);
                    a.visit(&mut |p| {
                        if let SpecTerm::Param { owner, index } = p
                            && owner == id
                            && let Ok(i) = usize::try_from(*index)
                            && let Some(&source) = node.get(&(id.as_str(), i))
                        {
                            adj[source].push(target);
                            if !direct {
                                expansive.push((source, target, id.as_str(), declaration.as_str()));
                            }
                        }
                    });
                }
            });
        }
    }
    if expansive.is_empty() {
        return;
    }
    let comp = strongly_connected(&adj);
    let mut reported: BTreeSet<&str> = BTreeSet::new();
    for (u, v, origin, target) in expansive {
        if comp.get(u) == comp.get(v) && reported.insert(origin) {
            sink.err(
                &ptr("/declarations", origin),
                format!(
                    "invalid recursive substitution: \"{origin}\" reaches itself through \"{target}\" with a growing type argument, so its instantiations are not finite"
                ),
            );
        }
    }
}

/// Kosaraju's algorithm with explicit stacks: the component number of every
/// node.
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<usize> {
    let n = adj.len();
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for s in 0..n {
        if visited[s] {
            continue;
        }
        visited[s] = true;
        let mut stack: Vec<(usize, usize)> = vec![(s, 0)];
        while let Some(top) = stack.last_mut() {
            let (u, i) = *top;
            if let Some(&w) = adj[u].get(i) {
                top.1 += 1;
                if !visited[w] {
                    visited[w] = true;
                    stack.push((w, 0));
                }
            } else {
                order.push(u);
                stack.pop();
            }
        }
    }
    let mut radj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (u, ws) in adj.iter().enumerate() {
        for &w in ws {
            radj[w].push(u);
        }
    }
    let mut comp = vec![usize::MAX; n];
    let mut c = 0;
    for &s in order.iter().rev() {
        if comp[s] != usize::MAX {
            continue;
        }
        comp[s] = c;
        let mut stack = vec![s];
        while let Some(u) = stack.pop() {
            for &w in &radj[u] {
                if comp[w] == usize::MAX {
                    comp[w] = c;
                    stack.push(w);
                }
            }
        }
        c += 1;
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typespec::test_support::*;
    use serde_json::json;

    // --- invalid: references, owners, arity ---

    #[test]
    fn named_references_resolve() {
        bad_term(
            named("nope", json!([])),
            "/Named/declaration",
            "unresolved declaration \"nope\"",
        );
    }

    #[test]
    fn named_arity_agrees() {
        bad_term(
            named("box", json!([])),
            "/Named/args",
            "takes 1 argument(s), given 0",
        );
        bad_term(
            named("box", json!(["Int", "Int"])),
            "/Named/args",
            "takes 1 argument(s), given 2",
        );
    }

    #[test]
    fn root_params_are_owned_by_tool() {
        bad_term(param("box", 0), "/Param/owner", "is not \"tool\"");
        bad_term(
            param("tool", 1),
            "/Param/index",
            "out of range: \"tool\" declares 1",
        );
        // A non-generic Tool has no Params at all.
        let v = with(simple(), "/ok", param("tool", 0));
        refused(v, "/ok/Param/index", "declares 0");
    }

    #[test]
    fn template_params_are_owned_by_the_template() {
        let at = "/declarations/box/fields/0/type";
        refused(
            with(generic(), at, param("tool", 0)),
            &format!("{at}/Param/owner"),
            "is not \"box\"",
        );
        refused(
            with(generic(), at, param("box", 1)),
            &format!("{at}/Param/index"),
            "\"box\" declares 1",
        );
    }

    #[test]
    fn disconnected_declarations_are_invalid() {
        let v = with(
            simple(),
            "/declarations/extra",
            record("Extra", json!([]), json!([])),
        );
        refused(v, "/declarations/extra", "disconnected");
        // Reached only through another template's member is connected.
        let v = with(
            simple(),
            "/declarations/e/fields/0/type",
            named("inner", json!([])),
        );
        let v = with(
            v,
            "/declarations/inner",
            record("Inner", json!([]), json!([])),
        );
        accepted(v);
        // Reached through Function and Task terms is connected too.
        let v = with(
            simple(),
            "/ok",
            json!({"Function": {"params": [{"Task": named("inner", json!([]))}], "result": "Int"}}),
        );
        let v = with(
            v,
            "/declarations/inner",
            record("Inner", json!([]), json!([])),
        );
        accepted(v);
    }

    #[test]
    fn conflicting_templates_are_invalid() {
        let v = with(simple(), "/params/0/type", named("e2", json!([])));
        let v = with(v, "/declarations/e2", record("Err", json!([]), json!([])));
        refused(v, "/declarations/e2/identity", "conflicting templates");
    }

    #[test]
    fn growing_recursion_is_invalid() {
        // Nest<T> { inner: Option<Nest<List<T>>> } has infinitely many
        // instantiations.
        let nest = record(
            "Nest",
            json!(["T"]),
            json!([{"name": "inner", "type": {"Option": named("nest", json!([{"List": param("nest", 0)}]))}, "doc": null}]),
        );
        let v = json!({"generic": [], "params": [], "ok": named("nest", json!(["Int"])), "err": "Text",
            "declarations": {"nest": nest}});
        refused(v, "/declarations/nest", "invalid recursive substitution");
        // The same through a second template.
        let a = record(
            "A",
            json!(["T"]),
            json!([{"name": "b", "type": named("b", json!([{"Option": param("a", 0)}])), "doc": null}]),
        );
        let b = record(
            "B",
            json!(["U"]),
            json!([{"name": "a", "type": {"List": named("a", json!([param("b", 0)]))}, "doc": null}]),
        );
        let v = json!({"generic": [], "params": [], "ok": named("a", json!(["Int"])), "err": "Text",
            "declarations": {"a": a, "b": b}});
        refused(v, "/declarations/a", "invalid recursive substitution");
        // A growing argument to a non-recursive template is fine.
        let pair = record(
            "Pair",
            json!(["T"]),
            json!([{"name": "x", "type": named("box", json!([{"List": param("pair", 0)}])), "doc": null}]),
        );
        let v = with(generic(), "/declarations/pair", pair);
        let v = with(v, "/err", named("pair", json!(["Text"])));
        accepted(v);
    }

    #[test]
    fn empty_local_id_is_invalid() {
        let v = with(
            simple(),
            "/declarations/",
            record("X", json!([]), json!([])),
        );
        refused(v, "/declarations/", "must not be empty");
    }

    #[test]
    fn every_problem_is_reported() {
        let v = json!({
            "generic": ["T", "T"],
            "params": [{"name": "a", "type": "Float"}],
            "ok": named("missing", json!([])),
            "err": param("tool", 7),
            "declarations": {"e": record("E", json!([]), json!([]))},
            "extra": true
        });
        let errs = spec_errors(v);
        let at: BTreeSet<&str> = errs.iter().map(|e| e.pointer.as_str()).collect();
        for p in [
            "/generic/1",
            "/params/0/type",
            "/ok/Named/declaration",
            "/extra",
        ] {
            assert!(at.contains(p), "{p} missing from {errs:#?}");
        }
        assert!(errs.iter().all(|e| !e.to_string().is_empty()));
    }
}
