//! Reading a flow's embedded schemas into Flow types, each with the shape
//! its place asks for.

use crate::diag::{Code, Diagnostic};
use crate::model::{Flow, NodeKind, Schema};
use crate::read::Cx;
use flow_abi::{Type, TypeSet};
use serde_json::Value;
use std::collections::BTreeMap;

/// How a schema is read: any type, or an object whose properties are fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Any,
    Fields,
}

/// Every schema embedded in the flow, with the root name its declarations
/// are named under.
fn schemas(flow: &Flow) -> Vec<(&Schema, String, Shape)> {
    let mut out = Vec::new();
    if let Some(s) = &flow.state_schema {
        out.push((&s.schema, "state".to_string(), Shape::Fields));
    }
    for n in &flow.nodes {
        let root = |what: &str| format!("nodes.{}.{what}", n.id);
        match &n.kind {
            NodeKind::Input(i) => out.extend(
                i.output_schema
                    .as_ref()
                    .map(|s| (s, root("input"), Shape::Fields)),
            ),
            NodeKind::Output(o) => out.extend(
                o.input_schema
                    .as_ref()
                    .map(|s| (s, root("output"), Shape::Fields)),
            ),
            NodeKind::Hitl(h) => out.extend(
                h.resume_schema
                    .as_ref()
                    .map(|s| (s, root("resume"), Shape::Any)),
            ),
            NodeKind::LlmCall(l) => out.extend(
                l.structured_output
                    .as_ref()
                    .map(|s| (s, root("structured"), Shape::Any)),
            ),
            NodeKind::AgentRole(a) => out.extend(
                a.structured_output
                    .as_ref()
                    .map(|s| (s, root("structured"), Shape::Any)),
            ),
            _ => {}
        }
    }
    for (key, t) in &flow.tools {
        out.extend(
            t.input_schema
                .as_ref()
                .map(|s| (s, format!("tools.{key}.input"), Shape::Fields)),
        );
        out.extend(
            t.output_schema
                .as_ref()
                .map(|s| (s, format!("tools.{key}.output"), Shape::Any)),
        );
    }
    out
}

/// Reads every embedded schema into Flow types through flow-abi (DESIGN §2)
/// and maps its diagnostics into ours (FS0601 errors, FS0602 warnings; the
/// flow-abi code is kept as the subcode). Pointers are already absolute:
/// each schema is read at its own pointer in the FlowSpec file.
pub(super) fn read_schemas(
    cx: &mut Cx,
    flow: &Flow,
    types: &mut TypeSet,
    module: &str,
) -> BTreeMap<String, Type> {
    use flow_abi::schema::{self as abi_schema, ReadContext, Severity as AbiSeverity};
    let mut out = BTreeMap::new();
    let mut ctx = ReadContext::new(types, module);
    for (schema, root, shape) in schemas(flow) {
        // FS-ST-9: `reducer` and `reducer_fn_ref` are FlowSpec keywords, not
        // JSON Schema; `reducer` is an annotation to flow-abi, the other is
        // removed here.
        let json = if root == "state" {
            strip_reducer_refs(&schema.json)
        } else {
            schema.json.clone()
        };
        let ty = abi_schema::read_any(&json, &root, &schema.ptr, &mut ctx);
        if shape == Shape::Fields
            && let Some(t) = &ty
            && !is_object_type(t, ctx.types)
        {
            cx.push(
                Code::BadSchema,
                &schema.ptr,
                format!(
                    "this schema must describe a JSON object (`properties`, or the shorthand map of field name to schema), not {}",
                    t.describe(ctx.types)
                ),
            );
            continue;
        }
        if let Some(ty) = ty {
            out.insert(schema.ptr.clone(), ty);
        }
    }
    for d in ctx.diagnostics {
        let code = match d.severity {
            AbiSeverity::Error => Code::BadSchema,
            AbiSeverity::Warning => Code::SchemaNote,
        };
        let mut diag = Diagnostic::new(code, d.pointer, d.message);
        diag.subcode = Some(d.code);
        cx.diags.push(diag);
    }
    out
}

/// Whether `ty` is carried as a JSON object: a record, or a dict keyed by
/// text (`{"type":"object"}` with no `properties`).
fn is_object_type(ty: &Type, types: &TypeSet) -> bool {
    match ty.base() {
        Type::Named(id) => matches!(types.get(*id).body, flow_abi::Body::Record(_)),
        Type::Dict(k, _) => matches!(**k, Type::Text),
        _ => false,
    }
}

fn strip_reducer_refs(json: &Value) -> Value {
    let mut json = json.clone();
    if let Some(Value::Object(props)) = json.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(m) = p {
                m.remove("reducer_fn_ref");
            }
        }
    }
    json
}
