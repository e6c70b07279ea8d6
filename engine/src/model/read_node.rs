//! Reading a node: its base fields and each node type's config.

use super::compile::{
    compile_template, fn_ref, opt_expr_path, opt_fn_ref, req_expr_path, source_map, source_path,
    target, target_map, template_field,
};
use super::read_flow::{read_model_params, read_schema, req_id};
use super::read_harness::read_harness;
use super::{
    AgentDebate, AgentRole, Assignment, Backoff, Branch, Condition, ConditionNode, FailBranch,
    FnRef, HARNESS_TYPES, Hitl, Input, JoinReducer, LlmCall, MemoryAccess, MemoryRead, MemoryWrite,
    Node, NodeKind, OnFail, OnTimeout, Output, OutputValidator, ParallelFork, ParallelJoin,
    PromptRef, RetrievalMode, Retry, Schema, SpeakerSelection, Subgraph, ToolApproval, ToolInvoke,
    Transform, TransformMode, WaitFor, WriteMode,
};
use crate::diag::{Code, push_token};
use crate::expr::{Expr, Lit};
use crate::read::{Cx, Obj, kind};
use crate::template::Template;
use serde_json::Value;
use std::collections::BTreeMap;

pub(super) fn read_node(cx: &mut Cx, v: &Value, ptr: String) -> Option<Node> {
    let mut o = Obj::new(cx, v, &ptr, "a node")?;
    let id = req_id(cx, &mut o, "id");
    let ty = o.req_str(cx, "type").unwrap_or_default();
    let label = o.str(cx, "label");
    let description = o.str(cx, "description");
    let position = o.get("position").and_then(|pv| {
        let pptr = o.at("position");
        let mut p = Obj::new(cx, pv, &pptr, "`position`")?;
        let x = p.number(cx, "x", None, None);
        let y = p.number(cx, "y", None, None);
        if !p.has("x") || !p.has("y") {
            cx.push(
                Code::MissingField,
                &pptr,
                "`position` needs both `x` and `y`",
            );
        }
        p.finish(cx);
        Some((x?, y?))
    });
    let mut runtime_support = BTreeMap::new();
    for (k, s, p) in o.str_map(cx, "runtime_support") {
        if !["full", "partial", "missing"].contains(&s.as_str()) {
            cx.push(
                Code::IgnoredValue,
                p,
                format!("`{s}` is not one of `full`, `partial`, `missing`; it is ignored"),
            );
        }
        runtime_support.insert(k, s);
    }
    let kind = match ty.as_str() {
        "input" => NodeKind::Input(Input {
            // `{}` is the canvas default for a new input node (and what
            // buildaharness's adapter tests write): it says nothing, so it
            // reads as no output_schema (the input is typed by state_schema,
            // else any object).
            output_schema: o
                .get("output_schema")
                .filter(|s| s.as_object().is_none_or(|m| !m.is_empty()))
                .and_then(|s| {
                    read_schema(cx, s, push_token(&ptr, "output_schema"), "`output_schema`")
                }),
        }),
        "output" => NodeKind::Output(Output {
            exit_code: o.str(cx, "exit_code").unwrap_or_else(|| "success".into()),
            input_schema: o.get("input_schema").and_then(|s| {
                read_schema(cx, s, push_token(&ptr, "input_schema"), "`input_schema`")
            }),
        }),
        "llm_call" => NodeKind::LlmCall(Box::new(read_llm_call(cx, &mut o))),
        "tool_invoke" => NodeKind::ToolInvoke(ToolInvoke {
            tool_id: o.req_str(cx, "tool_id").unwrap_or_default(),
            input_map: source_map(cx, &mut o, "input_map"),
            output_map: target_map(cx, &mut o, "output_map"),
            output_validator: read_validator(cx, &mut o),
        }),
        "condition" => NodeKind::Condition(read_condition_node(cx, &mut o)),
        "parallel_fork" => NodeKind::ParallelFork(read_fork(cx, &mut o)),
        "parallel_join" => NodeKind::ParallelJoin(read_join(cx, &mut o)),
        "hitl_breakpoint" => NodeKind::Hitl(read_hitl(cx, &mut o)),
        "memory_read" => NodeKind::MemoryRead(read_memory_read(cx, &mut o)),
        "memory_write" => NodeKind::MemoryWrite(MemoryWrite {
            store_id: o.req_str(cx, "store_id").unwrap_or_default(),
            key_expr: req_expr_path(cx, &mut o, "key_expr"),
            value_expr: req_expr_path(cx, &mut o, "value_expr"),
            write_mode: match o
                .choice(cx, "write_mode", &["upsert", "overwrite"], Code::BadValue)
                .as_deref()
            {
                Some("overwrite") => WriteMode::Overwrite,
                _ => WriteMode::Upsert,
            },
            // buildaharness's schema test "rejects memory_write with
            // invalid tier value": an unknown tier refuses the flow.
            tier: o.choice(
                cx,
                "tier",
                &["short", "long", "entity", "user"],
                Code::BadValue,
            ),
        }),
        "transform" => NodeKind::Transform(read_transform(cx, &mut o)),
        "subgraph" => NodeKind::Subgraph(Subgraph {
            flow_ref: o.req_str(cx, "flow_ref").unwrap_or_default(),
            input_map: source_map(cx, &mut o, "input_map"),
            output_map: target_map(cx, &mut o, "output_map"),
            fail_branch: read_fail_branch(cx, &mut o),
        }),
        "agent_role" => NodeKind::AgentRole(read_agent_role(cx, &mut o)),
        "agent_debate" => NodeKind::AgentDebate(read_agent_debate(cx, &mut o)),
        "" => NodeKind::Unknown(String::new()),
        t if HARNESS_TYPES.contains(&t) => NodeKind::Harness(read_harness(cx, &mut o, t)),
        t => NodeKind::Unknown(t.to_string()),
    };
    // Unknown fields are only worth reporting on a type we understand.
    if matches!(kind, NodeKind::Unknown(_)) {
        o.ignore_all();
    }
    o.finish(cx);
    Some(Node {
        ptr,
        id,
        label,
        description,
        position,
        runtime_support,
        kind,
    })
}

fn read_validator(cx: &mut Cx, o: &mut Obj<'_>) -> Option<OutputValidator> {
    let v = o.get("output_validator")?;
    let ptr = o.at("output_validator");
    let mut k = Obj::new(cx, v, &ptr, "`output_validator`")?;
    let f = k
        .req_str(cx, "fn_ref")
        .map(|s| fn_ref(cx, &s, k.at("fn_ref")));
    let on_fail = match k
        .choice(cx, "on_fail", &["raise", "retry", "skip"], Code::BadValue)
        .as_deref()
    {
        Some("retry") => OnFail::Retry,
        Some("skip") => OnFail::Skip,
        _ => OnFail::Raise,
    };
    let val = OutputValidator {
        fn_ref: f.unwrap_or(FnRef {
            module: String::new(),
            function: String::new(),
        }),
        on_fail,
        max_retries: k.uint(cx, "max_retries", 1, Some(5)).unwrap_or(1),
        retry_prompt: k.str(cx, "retry_prompt"),
    };
    k.finish(cx);
    Some(val)
}

fn read_llm_call(cx: &mut Cx, o: &mut Obj<'_>) -> LlmCall {
    let prompt_ref = o.get("prompt_ref").and_then(|v| {
        let ptr = o.at("prompt_ref");
        let mut k = Obj::new(cx, v, &ptr, "`prompt_ref`")?;
        let name = k.req_str(cx, "name").unwrap_or_default();
        if name.is_empty() && k.has("name") {
            cx.push(
                Code::OutOfRange,
                k.at("name"),
                "`prompt_ref.name` must not be empty",
            );
        }
        let r = PromptRef {
            name,
            version: k.uint(cx, "version", 1, None),
            label: k.str(cx, "label"),
        };
        k.finish(cx);
        Some(r)
    });
    let model_params = o
        .get("model_params")
        .and_then(|v| read_model_params(cx, v, &o.at("model_params")));
    let structured_output = read_structured_output(cx, o);
    let fail_branch = read_fail_branch(cx, o);
    LlmCall {
        model: o.str(cx, "model"),
        system_prompt: template_field(cx, o, "system_prompt"),
        prompt_template: template_field(cx, o, "prompt_template"),
        prompt_ref,
        model_params,
        structured_output,
        output_key: o.str(cx, "output_key"),
        output_validator: read_validator(cx, o),
        fail_branch,
    }
}

/// `fail_branch`: `{target, retry?: {max_attempts, backoff, delay_ms}}`.
fn read_fail_branch(cx: &mut Cx, o: &mut Obj<'_>) -> Option<FailBranch> {
    o.get("fail_branch").and_then(|v| {
        let ptr = o.at("fail_branch");
        let mut k = Obj::new(cx, v, &ptr, "`fail_branch`")?;
        let target = k.req_str(cx, "target").unwrap_or_default();
        let retry = k.get("retry").and_then(|rv| {
            let rptr = k.at("retry");
            let mut r = Obj::new(cx, rv, &rptr, "`retry`")?;
            let backoff = match r
                .choice(cx, "backoff", &["fixed", "exponential"], Code::BadValue)
                .as_deref()
            {
                Some("fixed") => Some(Backoff::Fixed),
                Some(_) => Some(Backoff::Exponential),
                None => None,
            };
            let out = Retry {
                max_attempts: r.uint(cx, "max_attempts", 1, Some(10)).unwrap_or(3),
                backoff,
                delay_ms: r.uint(cx, "delay_ms", 0, None).unwrap_or(1000),
            };
            r.finish(cx);
            Some(out)
        });
        k.finish(cx);
        Some(FailBranch { target, retry })
    })
}

fn read_structured_output(cx: &mut Cx, o: &mut Obj<'_>) -> Option<Schema> {
    let v = o.get("structured_output")?;
    let ptr = o.at("structured_output");
    let mut k = Obj::new(cx, v, &ptr, "`structured_output`")?;
    let s = k.req(cx, "schema").and_then(|s| {
        read_schema(
            cx,
            s,
            push_token(&ptr, "schema"),
            "`structured_output.schema`",
        )
    });
    k.finish(cx);
    s
}

/// `{type: "expr"|"fn_ref", expr?, fn_ref?}`.
pub(super) fn read_condition(cx: &mut Cx, v: &Value, ptr: &str) -> Condition {
    let fallback = Condition::Expr(Expr::Lit(Lit::Bool(false)));
    let Some(mut k) = Obj::new(cx, v, ptr, "a condition") else {
        return fallback;
    };
    let ty = k.req_str(cx, "type");
    let expr = k.str(cx, "expr");
    let f = k.str(cx, "fn_ref");
    let out = match ty.as_deref() {
        Some("expr") => {
            if f.is_some() {
                cx.push(
                    Code::IgnoredForMode,
                    k.at("fn_ref"),
                    "`fn_ref` is ignored when the condition type is `expr`",
                );
            }
            match expr {
                None => {
                    cx.push(
                        Code::MissingForMode,
                        ptr,
                        "a condition of type `expr` needs `expr`",
                    );
                    fallback
                }
                Some(src) => match Expr::parse(&src) {
                    Ok(e) => Condition::Expr(e),
                    Err(e) => {
                        cx.push(
                            Code::BadExpression,
                            k.at("expr"),
                            format!("bad expression `{src}`: {e}"),
                        );
                        fallback
                    }
                },
            }
        }
        Some("fn_ref") => {
            if expr.is_some() {
                cx.push(
                    Code::IgnoredForMode,
                    k.at("expr"),
                    "`expr` is ignored when the condition type is `fn_ref`",
                );
            }
            match f {
                None => {
                    cx.push(
                        Code::MissingForMode,
                        ptr,
                        "a condition of type `fn_ref` needs `fn_ref`",
                    );
                    fallback
                }
                Some(s) => Condition::FnRef(fn_ref(cx, &s, k.at("fn_ref"))),
            }
        }
        Some(other) => {
            cx.push(
                Code::BadValue,
                k.at("type"),
                format!("condition type `{other}` is not `expr` or `fn_ref`"),
            );
            fallback
        }
        None => fallback,
    };
    k.finish(cx);
    out
}

fn read_condition_node(cx: &mut Cx, o: &mut Obj<'_>) -> ConditionNode {
    let mut branches = Vec::new();
    if let Some(v) = o.req(cx, "branches") {
        let bptr = o.at("branches");
        match v {
            Value::Array(items) => {
                if items.is_empty() {
                    cx.push(
                        Code::OutOfRange,
                        &bptr,
                        "`branches` needs at least one branch",
                    );
                }
                for (i, item) in items.iter().enumerate() {
                    let ptr = push_token(&bptr, &i.to_string());
                    let Some(mut k) = Obj::new(cx, item, &ptr, "a branch") else {
                        continue;
                    };
                    let condition = match k.req(cx, "condition") {
                        Some(c) => read_condition(cx, c, &k.at("condition")),
                        None => Condition::Expr(Expr::Lit(Lit::Bool(false))),
                    };
                    let target = k.req_str(cx, "target").unwrap_or_default();
                    k.finish(cx);
                    branches.push(Branch {
                        ptr,
                        condition,
                        target,
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
    ConditionNode {
        branches,
        default_target: o.req_str(cx, "default_target").unwrap_or_default(),
    }
}

mod steps;
use steps::*;
