//! State writes whose type is known before the run (issue 11, item 2): an
//! llm_call's text answer (no `structured_output`), a tool's declared
//! output, a transform copying one declared state field to another. When
//! such a value can never fit the state field it is written to (no JSON
//! value of the one type is a value of the other: a text answer into an
//! `integer` field, a tool's list into a `string` field), the program is
//! refused with FS0901 at the write's pointer. Values that are only known
//! at the write — json.Value, a structured answer, a hitl reply, a
//! subgraph's output, an agent's answer — are decoded there instead (the
//! machine's `typed.rs`), as a reply that does not fit its schema is.

use crate::diag::{Code, push_token};
use crate::model::{Flow, NodeKind, Reducer};
use crate::path::{Root, Seg, Target};
use crate::read::Cx;
use flow_abi::{Body, Type, TypeSet};
use std::collections::BTreeMap;

const STRING: u8 = 1;
const NUMBER: u8 = 2;
const BOOL: u8 = 4;
const NULL: u8 = 8;
const ARRAY: u8 = 16;
const OBJECT: u8 = 32;

/// The JSON kinds a value of `t` can be written as.
fn kinds(t: &Type, types: &TypeSet) -> u8 {
    match t {
        Type::Json => STRING | NUMBER | BOOL | NULL | ARRAY | OBJECT,
        Type::Unit => NULL,
        Type::Bool => BOOL,
        Type::Int | Type::Decimal => NUMBER,
        Type::Text | Type::Bytes | Type::Instant | Type::Duration => STRING,
        Type::Never => 0,
        Type::List(_) | Type::Set(_) | Type::Tuple(_) => ARRAY,
        Type::Option(t) | Type::Refined(t, _) => kinds(t, types),
        Type::Dict(k, _) if *k.base() == Type::Text => OBJECT,
        Type::Dict(..) => ARRAY,
        Type::Named(id) => match &types.get(*id).body {
            Body::Record(_) => OBJECT,
            Body::Enum(ctors) if ctors.iter().all(|c| c.payload.is_none()) => STRING,
            Body::Enum(_) => STRING | OBJECT,
        },
    }
}

fn strip(t: &Type) -> &Type {
    match t {
        Type::Option(t) | Type::Refined(t, _) => strip(t),
        t => t,
    }
}

/// True when no value of `src` is a value of `dst`.
fn never_fits(src: &Type, dst: &Type, types: &TypeSet) -> bool {
    match (strip(src), strip(dst)) {
        (Type::List(a) | Type::Set(a), Type::List(b) | Type::Set(b)) => never_fits(a, b, types),
        (s, d) => kinds(s, types) & kinds(d, types) == 0,
    }
}

/// The fields of a record type, by name.
fn fields(t: &Type, types: &TypeSet) -> Vec<(String, Type)> {
    crate::program::record_fields(t, types)
        .into_iter()
        .map(|f| (f.name, f.ty))
        .collect()
}

struct Writes<'a> {
    state: BTreeMap<String, Type>,
    reducers: BTreeMap<String, Reducer>,
    types: &'a TypeSet,
}

impl Writes<'_> {
    /// Refuses a write of a `src` value (`what`) to `target` at `ptr` when
    /// it can never fit the field (an append adds elements to a list).
    fn write<'t>(&'t self, cx: &mut Cx, target: &Target, src: &'t Type, what: &str, ptr: String) {
        if !target.below.is_empty() {
            return;
        }
        let Some(dst) = self.state.get(&target.field) else {
            return;
        };
        // An append adds elements (a list value adds each of its items) to
        // a list field, or to a field declared as its element type.
        let element = |t: &'t Type| match strip(t) {
            Type::List(e) | Type::Set(e) => e.as_ref(),
            _ => t,
        };
        let (src, dst) = if self.reducers.get(&target.field) == Some(&Reducer::Append) {
            (element(src), element(dst))
        } else {
            (src, dst)
        };
        if never_fits(src, dst, self.types) {
            cx.push(
                Code::StateType,
                ptr,
                format!(
                    "{what} ({}) is written to state field `{}`, declared {}: it can never fit",
                    strip(src).describe(self.types),
                    target.field,
                    strip(dst).describe(self.types),
                ),
            );
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
        types,
    };
    let ty = |ptr: &str| schema_types.get(ptr);
    for n in &flow.nodes {
        let at = |k: &str| push_token(&n.ptr, k);
        match &n.kind {
            // A structured answer is decoded at the write (it is only as
            // good as the model's answer); a text answer is Text.
            NodeKind::LlmCall(l) if l.structured_output.is_none() => {
                if let Some(k) = &l.output_key {
                    w.write(
                        cx,
                        &key(k),
                        &Type::Text,
                        "the model's text answer",
                        at("output_key"),
                    );
                }
            }
            NodeKind::ToolInvoke(t) => {
                let Some(out) = flow
                    .tools
                    .get(&t.tool_id)
                    .and_then(|d| d.output_schema.as_ref())
                    .and_then(|s| ty(&s.ptr))
                else {
                    continue;
                };
                let reply: BTreeMap<String, Type> = fields(out, types).into_iter().collect();
                if t.output_map.is_empty() {
                    for (f, ft) in &reply {
                        let what = format!("tool `{}`'s reply field `{f}`", t.tool_id);
                        w.write(cx, &key(f), ft, &what, at("tool_id"));
                    }
                }
                for (f, target) in &t.output_map {
                    if let Some(ft) = reply.get(f) {
                        let what = format!("tool `{}`'s reply field `{f}`", t.tool_id);
                        w.write(cx, target, ft, &what, push_token(&at("output_map"), f));
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
                        let what = format!("state field `{from}`");
                        w.write(cx, &a.to, src, &what, a.to_ptr.clone());
                    }
                }
            }
            _ => {}
        }
    }
}
