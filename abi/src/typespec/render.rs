//! Rendering terms in Flow's own notation, for messages.

use super::graph::{SpecTerm, Template};
use std::collections::BTreeMap;

/// A term in Flow's own notation for messages: `List<Int>`, `(Int, Text)`,
/// `fn(Int) -> Text`, a declaration by identity with its arguments.
pub fn render(t: &SpecTerm, decls: &BTreeMap<String, Template>) -> String {
    render_with(t, &mut |t, out| match t {
        SpecTerm::Named { declaration, .. } => {
            render_named(declaration, decls, out);
            false
        }
        SpecTerm::Param { owner, index } => {
            let name = decls.get(owner).and_then(|tpl| {
                usize::try_from(*index)
                    .ok()
                    .and_then(|i| tpl.generic.get(i))
            });
            match name {
                Some(n) => {
                    out.push_str(n);
                    true
                }
                None => false,
            }
        }
        _ => false,
    })
}

/// Writes a Named term's head; its arguments are written by the caller.
pub(super) fn render_named(
    declaration: &str,
    decls: &BTreeMap<String, Template>,
    out: &mut String,
) {
    match decls.get(declaration) {
        Some(tpl) => out.push_str(&tpl.identity),
        None => {
            out.push('#');
            out.push_str(declaration);
        }
    }
}

/// Renders `t`; `hook` may write a whole node itself (returning true) or
/// write a Named head (returning false, having pushed the head).
pub(super) fn render_with(
    t: &SpecTerm,
    hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
) -> String {
    let mut out = String::new();
    render_into(t, hook, &mut out);
    out
}

fn render_into(
    t: &SpecTerm,
    hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
    out: &mut String,
) {
    let before = out.len();
    if hook(t, out) {
        return;
    }
    let wrote_head = out.len() > before;
    let list = |ts: &[SpecTerm],
                hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
                out: &mut String| {
        for (i, x) in ts.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            render_into(x, hook, out);
        }
    };
    let wrap = |name: &str,
                x: &SpecTerm,
                hook: &mut dyn FnMut(&SpecTerm, &mut String) -> bool,
                out: &mut String| {
        out.push_str(name);
        out.push('<');
        render_into(x, hook, out);
        out.push('>');
    };
    match t {
        SpecTerm::Prim(p) => out.push_str(p.name()),
        SpecTerm::List(x) => wrap("List", x, hook, out),
        SpecTerm::Set(x) => wrap("Set", x, hook, out),
        SpecTerm::Option(x) => wrap("Option", x, hook, out),
        SpecTerm::Task(x) => wrap("Task", x, hook, out),
        SpecTerm::Dict(k, v) => {
            out.push_str("Dict<");
            render_into(k, hook, out);
            out.push_str(", ");
            render_into(v, hook, out);
            out.push('>');
        }
        SpecTerm::Tuple(ts) => {
            out.push('(');
            list(ts, hook, out);
            out.push(')');
        }
        SpecTerm::Function { params, result } => {
            out.push_str("fn(");
            list(params, hook, out);
            out.push_str(") -> ");
            render_into(result, hook, out);
        }
        SpecTerm::Named { declaration, args } => {
            if !wrote_head {
                out.push('#');
                out.push_str(declaration);
            }
            if !args.is_empty() {
                out.push('<');
                list(args, hook, out);
                out.push('>');
            }
        }
        SpecTerm::Param { owner, index } => {
            out.push_str(owner);
            out.push('#');
            out.push_str(&index.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typespec::test_support::*;
    use crate::typespec::*;
    use serde_json::json;

    #[test]
    fn render_terms() {
        let s = TypeSpec::from_json(&generic()).unwrap();
        let t = SpecTerm::from_json(&json!({"Function": {"params": [{"Tuple": ["Int", "Text"]}],
            "result": named("box", json!([{"Dict": ["Text", {"Set": "Int"}]}]))}}))
        .unwrap();
        assert_eq!(
            render(&t, &s.declarations),
            "fn((Int, Text)) -> acme@1.0/lib.flow.Box<Dict<Text, Set<Int>>>"
        );
    }
}
