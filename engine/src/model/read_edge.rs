//! Reading an edge: direct or conditional.

use super::read_node::read_condition;
use super::{Condition, Edge, EdgeBranch, EdgeKind};
use crate::diag::{Code, push_token};
use crate::expr::{Expr, Lit};
use crate::read::{Cx, Obj, kind};
use serde_json::Value;

pub(super) fn read_edge(cx: &mut Cx, v: &Value, ptr: String) -> Option<Edge> {
    let mut o = Obj::new(cx, v, &ptr, "an edge")?;
    let ty = o.str(cx, "type");
    let id = o.str(cx, "id");
    let from = o.req_str(cx, "from").unwrap_or_default();
    let kind = match ty.as_deref() {
        // DESIGN §4: "edges without `type` (direct)".
        None | Some("direct") => EdgeKind::Direct {
            to: o.req_str(cx, "to").unwrap_or_default(),
            label: o.str(cx, "label"),
            context_from: o.str_list(cx, "context_from").unwrap_or_default(),
        },
        Some("conditional") => {
            let mut branches = Vec::new();
            if let Some(bv) = o.req(cx, "branches") {
                let bptr = o.at("branches");
                match bv {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let iptr = push_token(&bptr, &i.to_string());
                            let Some(mut k) = Obj::new(cx, item, &iptr, "a branch") else {
                                continue;
                            };
                            let condition = match k.req(cx, "condition") {
                                Some(c) => read_condition(cx, c, &k.at("condition")),
                                None => Condition::Expr(Expr::Lit(Lit::Bool(false))),
                            };
                            let to = k.req_str(cx, "to").unwrap_or_default();
                            let label = k.str(cx, "label");
                            k.finish(cx);
                            branches.push(EdgeBranch {
                                ptr: iptr,
                                condition,
                                to,
                                label,
                            });
                        }
                    }
                    other => cx.push(
                        Code::WrongType,
                        bptr,
                        format!("`branches` must be an array, not {}", kind(other)),
                    ),
                }
            }
            EdgeKind::Conditional {
                branches,
                default_target: o.req_str(cx, "default_target").unwrap_or_default(),
            }
        }
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("type"),
                format!("edge type `{other}` is not `direct` or `conditional`"),
            );
            o.ignore_all();
            o.finish(cx);
            return None;
        }
    };
    o.finish(cx);
    Some(Edge {
        ptr,
        id,
        from,
        kind,
    })
}
