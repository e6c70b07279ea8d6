//! The configs of the step kinds: parallel fork and join, human input,
//! memory reads, transforms and the agent role and debate nodes.

use super::*;

pub(super) fn read_fork(cx: &mut Cx, o: &mut Obj<'_>) -> ParallelFork {
    let targets = if o.has("targets") {
        o.str_list(cx, "targets").unwrap_or_default()
    } else {
        o.req(cx, "targets");
        Vec::new()
    };
    let mut input_map = BTreeMap::new();
    if let Some(v) = o.get("input_map") {
        let iptr = o.at("input_map");
        match v {
            Value::Object(m) => {
                for (branch, inner) in m {
                    let bptr = push_token(&iptr, branch);
                    let Value::Object(im) = inner else {
                        cx.push(
                            Code::WrongType,
                            &bptr,
                            format!(
                                "`input_map.{branch}` must be an object of paths, not {}",
                                kind(inner)
                            ),
                        );
                        continue;
                    };
                    let mut paths = BTreeMap::new();
                    for (key, src) in im {
                        let kptr = push_token(&bptr, key);
                        match src {
                            Value::String(s) => {
                                paths.insert(key.clone(), source_path(cx, s, kptr));
                            }
                            other => cx.push(
                                Code::WrongType,
                                kptr,
                                format!(
                                    "input_map values must be path strings, not {}",
                                    kind(other)
                                ),
                            ),
                        }
                    }
                    input_map.insert(branch.clone(), paths);
                }
            }
            other => cx.push(
                Code::WrongType,
                iptr,
                format!("`input_map` must be an object, not {}", kind(other)),
            ),
        }
    }
    ParallelFork { targets, input_map }
}

pub(super) fn read_join(cx: &mut Cx, o: &mut Obj<'_>) -> ParallelJoin {
    let wait_for = match o.get("wait_for") {
        None => WaitFor::All,
        Some(Value::String(s)) if s == "all" => WaitFor::All,
        Some(Value::String(s)) if s == "any" => WaitFor::Any,
        Some(v @ Value::Number(_)) => match crate::read::int_value(v) {
            Some(n) if n >= 1 => WaitFor::Count(n),
            _ => {
                cx.push(
                    Code::OutOfRange,
                    o.at("wait_for"),
                    "`wait_for` as a number must be a whole number of at least 1",
                );
                WaitFor::All
            }
        },
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("wait_for"),
                format!(
                    "`wait_for` must be \"all\", \"any\" or a whole number, not {}",
                    match other {
                        Value::String(s) => format!("`{s}`"),
                        v => kind(v).to_string(),
                    }
                ),
            );
            WaitFor::All
        }
    };
    let join_reducer = match o
        .choice(
            cx,
            "join_reducer",
            &["merge", "append", "fn_ref"],
            Code::BadValue,
        )
        .as_deref()
    {
        Some("append") => JoinReducer::Append,
        Some("fn_ref") => JoinReducer::FnRef,
        _ => JoinReducer::Merge,
    };
    ParallelJoin {
        wait_for,
        join_reducer,
        join_fn_ref: opt_fn_ref(cx, o, "join_fn_ref"),
        output_key: o.str(cx, "output_key"),
    }
}

pub(super) fn read_hitl(cx: &mut Cx, o: &mut Obj<'_>) -> Hitl {
    let timeout_seconds = match o.get("timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match crate::read::int_value(v) {
            Some(n) => Some(n),
            None if v.is_number() => {
                cx.push(
                    Code::OutOfRange,
                    o.at("timeout_seconds"),
                    "`timeout_seconds` must be a whole number of seconds, at least 0",
                );
                None
            }
            None => {
                cx.push(
                    Code::WrongType,
                    o.at("timeout_seconds"),
                    format!(
                        "`timeout_seconds` must be a whole number or null, not {}",
                        kind(v)
                    ),
                );
                None
            }
        },
    };
    Hitl {
        prompt: template_field(cx, o, "prompt"),
        resume_schema: o
            .get("resume_schema")
            .and_then(|s| read_schema(cx, s, o.at("resume_schema"), "`resume_schema`")),
        output_key: o.str(cx, "output_key"),
        timeout_seconds,
        on_timeout: match o
            .choice(cx, "on_timeout", &["raise", "skip"], Code::BadValue)
            .as_deref()
        {
            Some("skip") => OnTimeout::Skip,
            _ => OnTimeout::Raise,
        },
    }
}

pub(super) fn read_memory_read(cx: &mut Cx, o: &mut Obj<'_>) -> MemoryRead {
    MemoryRead {
        store_id: o.req_str(cx, "store_id").unwrap_or_default(),
        retrieval_mode: match o
            .choice(
                cx,
                "retrieval_mode",
                &["key_value", "semantic"],
                Code::BadValue,
            )
            .as_deref()
        {
            Some("semantic") => RetrievalMode::Semantic,
            _ => RetrievalMode::KeyValue,
        },
        key_expr: opt_expr_path(cx, o, "key_expr"),
        query_expr: opt_expr_path(cx, o, "query_expr"),
        top_k: o.uint(cx, "top_k", 1, None),
        min_score: o.number(cx, "min_score", Some("0"), Some("1")),
        output_key: o.req_str(cx, "output_key").unwrap_or_default(),
    }
}

pub(super) fn read_transform(cx: &mut Cx, o: &mut Obj<'_>) -> Transform {
    let mode = match o.req_str(cx, "mode").as_deref() {
        Some("fn_ref") => TransformMode::FnRef,
        Some("mapping") | None => TransformMode::Mapping,
        Some(other) => {
            cx.push(
                Code::BadValue,
                o.at("mode"),
                format!("transform mode `{other}` is not `mapping` or `fn_ref`"),
            );
            TransformMode::Mapping
        }
    };
    let mut assignments = Vec::new();
    if let Some(v) = o.get("mapping") {
        let mptr = o.at("mapping");
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let ptr = push_token(&mptr, &i.to_string());
                    let Some(mut k) = Obj::new(cx, item, &ptr, "a mapping entry") else {
                        continue;
                    };
                    let from = k
                        .req_str(cx, "from")
                        .map(|s| source_path(cx, &s, k.at("from")));
                    let to = k.req_str(cx, "to").map(|s| target(cx, &s, k.at("to")));
                    k.finish(cx);
                    if let (Some(from), Some(to)) = (from, to) {
                        let (from_ptr, to_ptr) = (push_token(&ptr, "from"), push_token(&ptr, "to"));
                        assignments.push(Assignment {
                            ptr,
                            from_ptr,
                            to_ptr,
                            from,
                            to,
                        });
                    }
                }
            }
            other => cx.push(
                Code::WrongType,
                mptr,
                format!("`mapping` must be an array, not {}", kind(other)),
            ),
        }
    }
    for (to, from, ptr) in o.str_map(cx, "output_map") {
        let to_ptr = ptr.clone();
        let from = source_path(cx, &from, ptr.clone());
        let to = target(cx, &to, to_ptr);
        assignments.push(Assignment {
            from_ptr: ptr.clone(),
            to_ptr: ptr.clone(),
            ptr,
            from,
            to,
        });
    }
    Transform {
        mode,
        assignments,
        fn_ref: opt_fn_ref(cx, o, "fn_ref"),
    }
}

pub(super) fn read_agent_role(cx: &mut Cx, o: &mut Obj<'_>) -> AgentRole {
    let empty = AgentRole {
        agent_ref: String::new(),
        task_description: Template { parts: Vec::new() },
        expected_output: None,
        async_execution: None,
        output_field: None,
        structured_output: None,
        memory_access: MemoryAccess::Isolated,
        memory_store_id: None,
        tool_approval: ToolApproval::Auto,
    };
    let Some(v) = o.req(cx, "config") else {
        return empty;
    };
    let ptr = o.at("config");
    let Some(mut k) = Obj::new(cx, v, &ptr, "`config`") else {
        return empty;
    };
    let task = k.req_str(cx, "task_description");
    let r = AgentRole {
        agent_ref: k.req_str(cx, "agent_ref").unwrap_or_default(),
        task_description: task
            .map(|s| compile_template(cx, &s, k.at("task_description")))
            .unwrap_or(Template { parts: Vec::new() }),
        expected_output: k.str(cx, "expected_output"),
        async_execution: k.bool(cx, "async_execution"),
        output_field: k.str(cx, "output_field"),
        structured_output: read_structured_output(cx, &mut k),
        memory_access: match k
            .choice(cx, "memory_access", &["isolated", "shared"], Code::BadValue)
            .as_deref()
        {
            Some("shared") => MemoryAccess::Shared,
            _ => MemoryAccess::Isolated,
        },
        memory_store_id: k.str(cx, "memory_store_id"),
        tool_approval: match k
            .choice(cx, "tool_approval", &["auto", "human"], Code::BadValue)
            .as_deref()
        {
            Some("human") => ToolApproval::Human,
            _ => ToolApproval::Auto,
        },
    };
    k.finish(cx);
    r
}

pub(super) fn read_agent_debate(cx: &mut Cx, o: &mut Obj<'_>) -> AgentDebate {
    let empty = AgentDebate {
        agents: Vec::new(),
        max_rounds: 10,
        termination_condition: None,
        speaker_selection: None,
        speaker_selection_fn_ref: None,
        allow_repeat_speaker: true,
        output_field: None,
    };
    let Some(v) = o.req(cx, "config") else {
        return empty;
    };
    let ptr = o.at("config");
    let Some(mut k) = Obj::new(cx, v, &ptr, "`config`") else {
        return empty;
    };
    let agents = if k.has("agents") {
        k.str_list(cx, "agents").unwrap_or_default()
    } else {
        k.req(cx, "agents");
        Vec::new()
    };
    let d = AgentDebate {
        agents,
        max_rounds: k.uint(cx, "max_rounds", 1, None).unwrap_or(10),
        termination_condition: k
            .get("termination_condition")
            .map(|c| read_condition(cx, c, &k.at("termination_condition"))),
        speaker_selection: k
            .choice(
                cx,
                "speaker_selection",
                &["auto", "round_robin", "custom"],
                Code::BadValue,
            )
            .map(|s| match s.as_str() {
                "round_robin" => SpeakerSelection::RoundRobin,
                "custom" => SpeakerSelection::Custom,
                _ => SpeakerSelection::Auto,
            }),
        speaker_selection_fn_ref: opt_fn_ref(cx, &mut k, "speaker_selection_fn_ref"),
        allow_repeat_speaker: k.bool(cx, "allow_repeat_speaker").unwrap_or(true),
        output_field: k.str(cx, "output_field"),
    };
    k.finish(cx);
    d
}
