//! State writes whose type is known before the run (issue 11 item 2,
//! issue 41 item 2): an llm_call's text answer (no `structured_output`) or
//! structured answer, a hitl reply with a `resume_schema`, a tool's
//! declared output, a transform copying one declared state field to
//! another. When such a value can never fit the state field it is written
//! to (no JSON value of the one type is a value of the other: a text answer
//! into an `integer` field, a structured object into an `array` field), the
//! program is refused with FS0901; when only some of its values fit (a
//! `number` into an `integer`, an object missing a required field), FS0902
//! warns. Both sit at the write's pointer and name, as `related`, the
//! declaration of the value (the node's schema, the tool's output field)
//! and of the state field. Values whose type is not known (json.Value, a
//! hitl reply without `resume_schema`, a subgraph's output, an agent's
//! answer) are decoded at the write (the machine's `typed.rs`).

use super::fit::{always_fits, never_fits, strip};
use crate::diag::{Code, Diagnostic, Related, push_token};
use crate::model::{Flow, NodeKind, Reducer, Schema};
use crate::path::{Root, Seg, Target};
use crate::read::Cx;
use flow_abi::{Type, TypeSet};
use std::collections::BTreeMap;

/// The fields of a record type, by name.
fn fields(t: &Type, types: &TypeSet) -> Vec<(String, Type)> {
    crate::program::record_fields(t, types)
        .into_iter()
        .map(|f| (f.name, f.ty))
        .collect()
}

/// The pointer of field `f`'s declaration in `schema`: its `properties`
/// entry (or the shorthand's key), else the schema itself.
fn field_ptr(schema: &Schema, f: &str) -> String {
    if schema.shorthand {
        return push_token(&schema.ptr, f);
    }
    match schema.json.get("properties").and_then(|p| p.get(f)) {
        Some(_) => push_token(&push_token(&schema.ptr, "properties"), f),
        None => schema.ptr.clone(),
    }
}

/// A value written: what it is, its type and where that type is declared.
struct Value<'t> {
    what: String,
    ty: &'t Type,
    declared: Option<String>,
}

struct Writes<'a> {
    state: BTreeMap<String, Type>,
    reducers: BTreeMap<String, Reducer>,
    /// Each declared state field's pointer.
    decls: BTreeMap<String, String>,
    types: &'a TypeSet,
}

impl Writes<'_> {
    /// Judges a write of `v` to `target` at `ptr`: FS0901 when it can
    /// never fit the field, FS0902 when it may not (an append adds
    /// elements to a list). A value of unknown type (json.Value) is left to
    /// the write.
    fn write(&self, cx: &mut Cx, target: &Target, v: Value<'_>, ptr: String) {
        if !target.below.is_empty() || *strip(v.ty) == Type::Json {
            return;
        }
        let Some(dst) = self.state.get(&target.field) else {
            return;
        };
        // An append adds elements (a list value adds each of its items) to
        // a list field, or to a field declared as its element type.
        let element = |t| match strip(t) {
            Type::List(e) | Type::Set(e) => e.as_ref(),
            _ => t,
        };
        let (src, dst) = if self.reducers.get(&target.field) == Some(&Reducer::Append) {
            (element(v.ty), element(dst))
        } else {
            (v.ty, dst)
        };
        let (code, verdict) = if never_fits(src, dst, self.types) {
            (Code::StateType, "it can never fit")
        } else if !always_fits(src, dst, self.types) {
            (
                Code::StateTypeMayNotFit,
                "some of its values do not fit, and one that does not fails the reply at the write",
            )
        } else {
            return;
        };
        let message = format!(
            "{} ({}) is written to state field `{}`, declared {}: {verdict}",
            v.what,
            strip(src).describe(self.types),
            target.field,
            strip(dst).describe(self.types),
        );
        let mut related = Vec::new();
        if let Some(p) = v.declared {
            related.push(Related {
                pointer: p,
                message: format!("{} is declared here", v.what),
            });
        }
        if let Some(p) = self.decls.get(&target.field) {
            related.push(Related {
                pointer: p.clone(),
                message: format!("state field `{}` is declared here", target.field),
            });
        }
        cx.diags
            .push(Diagnostic::new(code, ptr, message).with_related(related));
    }

    /// Each top-level field of a record value, written key by key to the
    /// same-named state key.
    fn each_key(&self, cx: &mut Cx, ty: &Type, schema: &Schema, what: &str, ptr: &str) {
        for (f, ft) in &fields(ty, self.types) {
            let v = Value {
                what: format!("{what} field `{f}`"),
                ty: ft,
                declared: Some(field_ptr(schema, f)),
            };
            self.write(cx, &key(f), v, ptr.to_string());
        }
    }
}

fn key(k: &str) -> Target {
    Target {
        field: k.to_string(),
        below: Vec::new(),
    }
}

/// Checks every write whose value's type is known against the state
/// field's declared type.
pub(super) fn check_writes(
    cx: &mut Cx,
    flow: &Flow,
    types: &TypeSet,
    schema_types: &BTreeMap<String, Type>,
) {
    let Some(ss) = &flow.state_schema else {
        return;
    };
    let Some(state_ty) = schema_types.get(&ss.schema.ptr) else {
        return;
    };
    let w = Writes {
        state: fields(state_ty, types).into_iter().collect(),
        reducers: ss
            .fields
            .iter()
            .map(|(k, f)| (k.clone(), f.reducer))
            .collect(),
        decls: ss
            .fields
            .iter()
            .map(|(k, f)| (k.clone(), f.ptr.clone()))
            .collect(),
        types,
    };
    let ty = |s: &Schema| schema_types.get(&s.ptr);
    for n in &flow.nodes {
        let at = |k: &str| push_token(&n.ptr, k);
        match &n.kind {
            NodeKind::LlmCall(l) => match (&l.structured_output, &l.output_key) {
                (None, Some(k)) => {
                    let v = Value {
                        what: "the model's text answer".into(),
                        ty: &Type::Text,
                        declared: None,
                    };
                    w.write(cx, &key(k), v, at("output_key"));
                }
                (Some(s), Some(k)) => {
                    if let Some(t) = ty(s) {
                        let v = Value {
                            what: "the model's structured answer".into(),
                            ty: t,
                            declared: Some(s.ptr.clone()),
                        };
                        w.write(cx, &key(k), v, at("output_key"));
                    }
                }
                // Without output_key, each top-level key goes to the
                // same-named state key (GAP-LLM-4).
                (Some(s), None) => {
                    if let Some(t) = ty(s) {
                        let what = "the model's structured answer";
                        w.each_key(cx, t, s, what, &at("structured_output"));
                    }
                }
                (None, None) => {}
            },
            NodeKind::Hitl(h) => {
                if let (Some(s), Some(k)) = (&h.resume_schema, &h.output_key)
                    && let Some(t) = ty(s)
                {
                    let v = Value {
                        what: "the person's reply".into(),
                        ty: t,
                        declared: Some(s.ptr.clone()),
                    };
                    w.write(cx, &key(k), v, at("output_key"));
                }
            }
            NodeKind::ToolInvoke(t) => {
                let Some((s, out)) = flow
                    .tools
                    .get(&t.tool_id)
                    .and_then(|d| d.output_schema.as_ref())
                    .and_then(|s| Some((s, ty(s)?)))
                else {
                    continue;
                };
                let what = format!("tool `{}`'s reply", t.tool_id);
                if t.output_map.is_empty() {
                    w.each_key(cx, out, s, &what, &at("tool_id"));
                }
                let reply: BTreeMap<String, Type> = fields(out, types).into_iter().collect();
                for (f, target) in &t.output_map {
                    if let Some(ft) = reply.get(f) {
                        let v = Value {
                            what: format!("{what} field `{f}`"),
                            ty: ft,
                            declared: Some(field_ptr(s, f)),
                        };
                        w.write(cx, target, v, push_token(&at("output_map"), f));
                    }
                }
            }
            NodeKind::Transform(t) => {
                for a in &t.assignments {
                    let from = match (a.from.root, a.from.segs.as_slice()) {
                        (Root::State, [Seg::Name(f)]) => f,
                        _ => continue,
                    };
                    if let Some(src) = w.state.get(from) {
                        let v = Value {
                            what: format!("state field `{from}`"),
                            ty: src,
                            declared: w.decls.get(from).cloned(),
                        };
                        w.write(cx, &a.to, v, a.to_ptr.clone());
                    }
                }
            }
            _ => {}
        }
    }
}
