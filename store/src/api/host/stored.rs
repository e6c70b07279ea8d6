//! A host record's details as stored: written as canonical JSON, read
//! back typed only when the JSON is exactly a shape this host writes.

use super::*;

impl HostDetails {
    /// The details as stored (the caller writes them canonically).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.into(), v);
        };
        let s = |v: &str| Value::String(v.into());
        match self {
            HostDetails::ProgramDir { program_dir } => put("program_dir", s(program_dir)),
            HostDetails::Tools { tools } => {
                put("tools", Value::Array(tools.iter().map(|t| s(t)).collect()))
            }
            HostDetails::NestedRun { call, nested_run } => {
                put("call", s(call.as_str()));
                put("nested_run", s(nested_run.as_str()));
            }
            HostDetails::Halt(h) => {
                if let Some(by) = &h.by {
                    put("by", s(by));
                }
                if let Some(reason) = &h.reason {
                    put("reason", s(reason));
                }
                if let Some(force) = h.force {
                    put("force", Value::Bool(force));
                }
                if let Some((run, call)) = &h.outer {
                    let mut o = Map::new();
                    o.insert("run".into(), s(run.as_str()));
                    o.insert("call".into(), s(call.as_str()));
                    put("outer", Value::Object(o));
                }
            }
            HostDetails::Pause { open } => put(
                "open",
                Value::Array(open.iter().map(|c| s(c.as_str())).collect()),
            ),
            HostDetails::OpenCall(d) => {
                put("call", s(d.call.as_str()));
                put("decision", s(d.decision.as_str()));
                put("reason", s(&d.reason));
                if let Some(c) = d.chosen {
                    put("chosen", s(c.as_str()));
                }
            }
            HostDetails::Timeout { call, due_ms } => {
                put("call", s(call.as_str()));
                put("due_ms", Value::from(*due_ms));
            }
            HostDetails::Timing(t) => {
                put("call", s(t.call.as_str()));
                if let Some(r) = &t.route {
                    put("route", s(r));
                }
                if let Some(w) = &t.worker {
                    put("worker", s(w));
                }
                if let Some(a) = t.attempt {
                    put("attempt", Value::from(a));
                }
                if let Some(ms) = t.sent_ms {
                    put("sent_ms", Value::from(ms));
                }
                if let Some(ms) = t.replied_ms {
                    put("replied_ms", Value::from(ms));
                }
                if let Some(v) = &t.via {
                    put("via", s(v));
                }
                if let Some(b) = &t.by {
                    put("by", s(b));
                }
            }
            HostDetails::Timings(ts) => put(
                "calls",
                Value::Array(
                    ts.iter()
                        .map(|t| {
                            let mut row = vec![
                                s(t.call.as_str()),
                                s(t.route.as_deref().unwrap_or_default()),
                                Value::from(t.attempt.unwrap_or_default()),
                                Value::from(t.sent_ms.unwrap_or_default()),
                                Value::from(t.replied_ms.unwrap_or_default()),
                            ];
                            // The worker that answered, sixth when there
                            // is one (rows written before had five).
                            if let Some(w) = &t.worker {
                                row.push(s(w));
                            }
                            Value::Array(row)
                        })
                        .collect(),
                ),
            ),
            HostDetails::Stderr { call, tool, text } => {
                if let Some(c) = call {
                    put("call", s(c.as_str()));
                }
                put("tool", s(tool));
                put("text", s(text));
            }
            HostDetails::Recovered { recovery } => put("recovery", s(recovery)),
            HostDetails::Other { details, .. } => return details.clone(),
        }
        Value::Object(m)
    }

    /// Reads stored details: the typed variant when they are exactly one
    /// this host writes, [`HostDetails::Other`] otherwise.
    pub fn from_json(kind: HostRecordKind, details: Value) -> HostDetails {
        match typed(kind, &details) {
            // Only a shape that writes back as it was read is typed, so
            // nothing a record holds is lost or changed by reading it.
            Some(t) if t.to_json() == details => t,
            _ => HostDetails::Other { kind, details },
        }
    }
}

fn typed(kind: HostRecordKind, v: &Value) -> Option<HostDetails> {
    let m = v.as_object()?;
    let text = |k: &str| m.get(k).and_then(Value::as_str);
    let call = |k: &str| text(k).and_then(|c| CallId::parse(c).ok());
    Some(match kind {
        HostRecordKind::Binding if m.contains_key("program_dir") => HostDetails::ProgramDir {
            program_dir: text("program_dir")?.to_string(),
        },
        HostRecordKind::Binding if m.contains_key("tools") => HostDetails::Tools {
            tools: m
                .get("tools")?
                .as_array()?
                .iter()
                .map(|t| t.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
        },
        HostRecordKind::Binding => HostDetails::NestedRun {
            call: call("call")?,
            nested_run: RunId::parse(text("nested_run")?).ok()?,
        },
        HostRecordKind::Halt => HostDetails::Halt(Halt {
            by: text("by").map(str::to_string),
            reason: text("reason").map(str::to_string),
            force: m.get("force").and_then(Value::as_bool),
            outer: match m.get("outer") {
                None => None,
                Some(o) => {
                    let (run, call) = (o.pointer("/run")?, o.pointer("/call")?);
                    Some((
                        RunId::parse(run.as_str()?).ok()?,
                        CallId::parse(call.as_str()?).ok()?,
                    ))
                }
            },
        }),
        HostRecordKind::Pause => HostDetails::Pause {
            open: m
                .get("open")?
                .as_array()?
                .iter()
                .map(|c| CallId::parse(c.as_str()?).ok())
                .collect::<Option<_>>()?,
        },
        HostRecordKind::OpenCallDecision => HostDetails::OpenCall(OpenCallDecision {
            call: call("call")?,
            decision: Decision::parse(text("decision")?)?,
            reason: text("reason")?.to_string(),
            chosen: match text("chosen") {
                None => None,
                Some(c) => Some(Choice::parse(c)?),
            },
        }),
        HostRecordKind::Timeout => HostDetails::Timeout {
            call: call("call")?,
            due_ms: m.get("due_ms")?.as_i64()?,
        },
        HostRecordKind::Timing if m.contains_key("calls") => HostDetails::Timings(
            m.get("calls")?
                .as_array()?
                .iter()
                .map(|e| {
                    let a = e.as_array().filter(|a| a.len() == 5 || a.len() == 6)?;
                    Some(CallTiming {
                        call: CallId::parse(a[0].as_str()?).ok()?,
                        route: Some(a[1].as_str()?.to_string()),
                        worker: match a.get(5) {
                            None => None,
                            Some(w) => Some(w.as_str()?.to_string()),
                        },
                        attempt: Some(u32::try_from(a[2].as_u64()?).ok()?),
                        sent_ms: Some(a[3].as_i64()?),
                        replied_ms: Some(a[4].as_i64()?),
                        via: None,
                        by: None,
                    })
                })
                .collect::<Option<_>>()?,
        ),
        HostRecordKind::Timing => {
            let ms = |k: &str| match m.get(k) {
                None => Some(None),
                Some(v) => v.as_i64().map(Some),
            };
            HostDetails::Timing(CallTiming {
                call: call("call")?,
                route: text("route").map(str::to_string),
                worker: text("worker").map(str::to_string),
                attempt: match m.get("attempt") {
                    None => None,
                    Some(a) => Some(u32::try_from(a.as_u64()?).ok()?),
                },
                sent_ms: ms("sent_ms")?,
                replied_ms: ms("replied_ms")?,
                via: text("via").map(str::to_string),
                by: text("by").map(str::to_string),
            })
        }
        HostRecordKind::Stderr => HostDetails::Stderr {
            call: match text("call") {
                None => None,
                Some(c) => Some(CallId::parse(c).ok()?),
            },
            tool: text("tool")?.to_string(),
            text: text("text")?.to_string(),
        },
        HostRecordKind::Recovery => HostDetails::Recovered {
            recovery: text("recovery")?.to_string(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RUN: &str = "run-01hzy5k6v3w8q9r2m4n7p0s1tb";

    #[test]
    fn every_shape_this_host_writes_reads_typed_and_writes_back_the_same() {
        let cases = [
            (
                HostRecordKind::Binding,
                json!({"program_dir": "/flows/triage"}),
            ),
            (
                HostRecordKind::Binding,
                json!({"call": "c1:root#2", "nested_run": RUN}),
            ),
            (
                HostRecordKind::Binding,
                json!({"tools": ["/srv/flow.toml"]}),
            ),
            (HostRecordKind::Halt, json!({"by": "http", "force": false})),
            (
                HostRecordKind::Halt,
                json!({"reason": "interrupt", "force": true}),
            ),
            (
                HostRecordKind::Halt,
                json!({"by": "mcp", "reason": "cancelled", "force": true, "outer": {"run": RUN, "call": "c1:root/a#1"}}),
            ),
            (
                HostRecordKind::Halt,
                json!({"reason": "the outer call was closed"}),
            ),
            (
                HostRecordKind::Pause,
                json!({"open": ["c1:root#3", "c1:root#4"]}),
            ),
            (
                HostRecordKind::OpenCallDecision,
                json!({"call": "c1:root#1", "decision": "unsent", "reason": "draining"}),
            ),
            (
                HostRecordKind::OpenCallDecision,
                json!({"call": "c1:root#1", "decision": "resend", "reason": "halted", "chosen": "resend"}),
            ),
            (
                HostRecordKind::Timeout,
                json!({"call": "c1:root#1", "due_ms": 1_700_000_000_000i64}),
            ),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#1", "route": "process", "attempt": 1, "sent_ms": 1_700_000_000_000i64, "replied_ms": 1_700_000_000_040i64}),
            ),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#2", "route": "person", "sent_ms": 1_700_000_000_000i64}),
            ),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#2", "replied_ms": 1_700_000_009_000i64, "via": "person", "by": "ann"}),
            ),
            (
                HostRecordKind::Stderr,
                json!({"call": "c1:root#1", "tool": "crash", "text": "Traceback…"}),
            ),
            (
                HostRecordKind::Timing,
                json!({"calls": [["c1:root#1", "process", 1, 1_700_000_000_000i64, 1_700_000_000_004i64], ["c1:root/a#1", "mcp", 2, 5, 9]]}),
            ),
            (
                HostRecordKind::Timing,
                json!({"calls": [["c1:root#1", "worker", 1, 5, 9, "w-01hzy5k6v3w8q9r2m4n7p0s1tb"]]}),
            ),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#1", "route": "worker", "worker": "w-1", "attempt": 1, "sent_ms": 5}),
            ),
            (
                HostRecordKind::Stderr,
                json!({"tool": "boom", "text": "ImportError"}),
            ),
        ];
        for (kind, v) in cases {
            let d = HostDetails::from_json(kind, v.clone());
            assert!(!matches!(d, HostDetails::Other { .. }), "{v} read untyped");
            assert_eq!(d.kind(), kind);
            assert_eq!(d.to_json(), v);
        }
    }

    #[test]
    fn any_other_shape_is_kept_as_it_was() {
        let cases = [
            (HostRecordKind::Pause, json!({})),
            (HostRecordKind::Halt, json!({"by": "http", "note": "extra"})),
            (HostRecordKind::Binding, json!({"tool": "demo.json#tool"})),
            (
                HostRecordKind::Timeout,
                json!({"call": "c1:root#1", "due_ms": 1.5}),
            ),
            (
                HostRecordKind::OpenCallDecision,
                json!({"call": "nope", "decision": "send", "reason": "x"}),
            ),
            (HostRecordKind::Approval, json!({"who": "ann"})),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#1", "sent_ms": 1.5}),
            ),
            (
                HostRecordKind::Timing,
                json!({"call": "c1:root#1", "attempt": -1}),
            ),
            (HostRecordKind::Stderr, json!({"call": "c1:root#1"})),
            (
                HostRecordKind::Timing,
                json!({"calls": [["c1:root#1", "process", 1, 5]]}),
            ),
            (
                HostRecordKind::Timing,
                json!({"calls": [["c1:root#1", "worker", 1, 5, 9, 7]]}),
            ),
            (HostRecordKind::Halt, json!([1, 2])),
        ];
        for (kind, v) in cases {
            let d = HostDetails::from_json(kind, v.clone());
            assert_eq!(
                d,
                HostDetails::Other {
                    kind,
                    details: v.clone()
                }
            );
            assert_eq!(d.to_json(), v);
        }
    }
}
