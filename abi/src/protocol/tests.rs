use super::*;
use serde_json::json;

const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn parse(v: Json) -> Result<Message, Error> {
    parse_line(&v.to_string())
}

#[track_caller]
fn shape_err(v: Json, pointer: &str, needle: &str) {
    match parse(v) {
        Err(Error::Shape {
            pointer: p,
            message,
        }) => {
            assert_eq!(p, pointer, "{message}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
}

#[track_caller]
fn bad_outcome(v: Json, needle: &str) {
    match parse(v) {
        Err(Error::BadOutcome { run, call, reason }) => {
            assert_eq!((run.as_str(), call.as_str()), ("run-1", "c1:root#1"));
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
        }
        other => panic!("expected BadOutcome, got {other:?}"),
    }
}

/// Writes `m`, checks the line is one line of canonical JSON, reads it
/// back and compares.
#[track_caller]
fn round_trip(m: Message) -> String {
    let line = m.to_line().unwrap();
    assert!(line.ends_with('\n'));
    let body = &line[..line.len() - 1];
    assert!(!body.contains('\n'));
    assert_eq!(body, json::canonical(&json::parse(body).unwrap()));
    assert_eq!(parse_line(&line).unwrap(), m);
    line
}

fn signature() -> Json {
    json!({"params": [["query", {"type": "string", "description": "what to look for"}]],
        "ok": {"type": "array", "items": {"type": "string"}}, "err": {"$ref": "#/$defs/x"}, "generic": []})
}

fn described(data: &str) -> Json {
    json!({"jsonrpc": "2.0", "id": 1, "result": {"data": data, "tools": [
        {"tool": "support.json#web-search", "fingerprint": FP, "signature": signature()}]}})
}

fn reply(outcome: Json) -> Json {
    json!({"jsonrpc": "2.0", "method": "reply", "params": {"run": "run-1", "call": "c1:root#1", "outcome": outcome}})
}

fn call() -> Json {
    json!({"jsonrpc": "2.0", "method": "call", "params": {"run": "run-1", "call": "c1:root#1",
        "tool": "support.json#web-search", "args": {"query": "rust"}}})
}

// --- describe ---

#[test]
fn describe_request() {
    let line = round_trip(Message::Describe { id: Id::from(7) });
    assert_eq!(
        line,
        "{\"id\":7,\"jsonrpc\":\"2.0\",\"method\":\"describe\"}\n"
    );
    assert_eq!(write_describe(&Id::from(7)), line);
    round_trip(Message::Describe {
        id: Id::Text("d-1".into()),
    });
    // Empty params are allowed; anything else is not.
    let m = parse(json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {}})).unwrap();
    assert_eq!(m, Message::Describe { id: Id::from(1) });
    shape_err(
        json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {"x": 1}}),
        "/params",
        "no params",
    );
    // describe is a request: it needs an id, and not a null one.
    shape_err(
        json!({"jsonrpc": "2.0", "method": "describe"}),
        "",
        "missing member \"id\"",
    );
    shape_err(
        json!({"jsonrpc": "2.0", "id": null, "method": "describe"}),
        "/id",
        "string or a number",
    );
}

#[test]
fn describe_response() {
    let m = parse(described("1.0")).unwrap();
    let Message::Described { id, result: Ok(r) } = &m else {
        panic!("{m:?}")
    };
    assert_eq!(*id, Id::from(1));
    assert_eq!(r.data, "1.0");
    assert_eq!(r.tools[0].tool, "support.json#web-search");
    assert_eq!(r.tools[0].signature.params[0].0, "query");
    round_trip(m.clone());
    let Message::Described { id, result } = m else {
        unreachable!()
    };
    assert_eq!(write_described(&id, &result), m_line(&described("1.0")));
}

fn m_line(v: &Json) -> String {
    format!("{}\n", json::canonical(v))
}

#[test]
fn describe_error_response() {
    let m = parse(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom", "data": {"x": 1}}})).unwrap();
    assert_eq!(
        m,
        Message::Described {
            id: Id::from(1),
            result: Err(RpcError {
                code: -32603,
                message: "boom".into(),
                data: Some(json!({"x": 1}))
            })
        }
    );
    round_trip(m);
    // An error response may carry a null id.
    let m = parse(
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}),
    )
    .unwrap();
    round_trip(m);
    shape_err(
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1.5, "message": "x"}}),
        "/error/code",
        "integer",
    );
    shape_err(
        json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}),
        "",
        "not both",
    );
    shape_err(json!({"jsonrpc": "2.0", "id": 1}), "", "a method");
    let mut no_id = described("1.0");
    no_id.as_object_mut().unwrap().remove("id");
    shape_err(no_id, "", "missing member \"id\"");
}

#[test]
fn describe_version_refused_is_distinct() {
    for data in ["2.0", "0.9", "10.0"] {
        match parse(described(data)) {
            Err(Error::VersionRefused { theirs, ours }) => {
                assert_eq!(theirs, data);
                assert_eq!(ours, crate::DATA_VERSION);
            }
            other => panic!("{data}: {other:?}"),
        }
    }
    // Refused by version even when the rest would be a shape error.
    let v = json!({"jsonrpc": "2.0", "id": 1, "result": {"data": "2.0", "tools": "whatever", "more": 1}});
    assert!(matches!(parse(v), Err(Error::VersionRefused { .. })));
    let e = parse(described("2.0")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "data version 2.0 refused: this host speaks 1.0"
    );
    // Not a version at all is a shape error.
    for data in ["1", "v1.0", "1.0.0", "01.0", ""] {
        assert!(
            matches!(parse(described(data)), Err(Error::Shape { .. })),
            "{data}"
        );
    }
}

#[test]
fn describe_newer_minor_may_add_members() {
    let mut v = described("1.7");
    v["result"]["extensions"] = json!({"x": 1});
    v["result"]["tools"][0]["title"] = json!("Search");
    let Message::Described { result: Ok(r), .. } = parse(v).unwrap() else {
        panic!()
    };
    assert_eq!(r.data, "1.7");
    // At our own minor, an unknown member is refused.
    let mut v = described("1.0");
    v["result"]["extensions"] = json!({"x": 1});
    shape_err(v, "/result/extensions", "unknown member");
    let mut v = described("1.0");
    v["result"]["tools"][0]["title"] = json!("Search");
    shape_err(v, "/result/tools/0/title", "unknown member");
}

#[test]
fn describe_entries_are_checked() {
    let mut v = described("1.0");
    v["result"]["tools"][0]["fingerprint"] = json!("sha256:ABC");
    shape_err(v, "/result/tools/0/fingerprint", "64 lowercase hex");
    let mut v = described("1.0");
    let entry = v["result"]["tools"][0].clone();
    v["result"]["tools"] = json!([entry.clone(), entry]);
    shape_err(v, "/result/tools/1/tool", "listed twice");
    let mut v = described("1.0");
    v["result"]["tools"][0]["signature"]["params"] = json!([["query"]]);
    shape_err(v, "/result/tools/0/signature/params/0", "[name, schema]");
    let mut v = described("1.0");
    v["result"]["tools"][0]["signature"]["params"] = json!([["q", {}], ["q", {}]]);
    shape_err(v, "/result/tools/0/signature/params/1/0", "repeated");
    let mut v = described("1.0");
    v["result"]["tools"][0]["signature"]["ok"] = json!("string");
    shape_err(v, "/result/tools/0/signature/ok", "a schema");
    let mut v = described("1.0");
    v["result"]["tools"][0]["signature"]
        .as_object_mut()
        .unwrap()
        .remove("generic");
    shape_err(v, "/result/tools/0/signature", "missing member \"generic\"");
    let mut v = described("1.0");
    v["result"]["tools"][0]["signature"]["generic"] = json!(["T", "T"]);
    shape_err(v, "/result/tools/0/signature/generic/1", "unique");
    let mut v = described("1.0");
    v["result"]["tools"] = json!({});
    shape_err(v, "/result/tools", "an array");
}

#[test]
fn describe_reads_what_signature_generates() {
    let mut types = crate::TypeSet::new();
    let err = crate::signature::tool_error(&mut types);
    let decl = crate::signature::ToolDecl {
        identity: "support.json#web-search".into(),
        doc: None,
        params: vec![crate::Field {
            name: "query".into(),
            ty: crate::Type::Text,
            doc: Some("what to look for".into()),
        }],
        ok: crate::Type::List(Box::new(crate::Type::Text)),
        err,
    };
    let result = DescribeResult {
        data: crate::DATA_VERSION.into(),
        tools: vec![DescribedTool {
            tool: decl.identity.clone(),
            fingerprint: decl.fingerprint(&types),
            signature: match read_signature(&decl.signature(&types, true), "") {
                Ok(s) => s,
                Err(e) => panic!("{e}"),
            },
        }],
    };
    let line = write_described(&Id::from(1), &Ok(result.clone()));
    assert_eq!(
        parse_line(&line).unwrap(),
        Message::Described {
            id: Id::from(1),
            result: Ok(result)
        }
    );
}

// --- call ---

#[test]
fn call_round_trip() {
    let m = parse(call()).unwrap();
    let Message::Call(c) = &m else { panic!() };
    assert_eq!(c.run, "run-1");
    assert_eq!(c.call, "c1:root#1");
    assert_eq!(c.args["query"], json!("rust"));
    assert!(c.generic.is_none());
    let line = round_trip(m.clone());
    assert_eq!(write_call(c), line);
}

#[test]
fn generic_call_carries_both_views() {
    let mut v = call();
    v["params"]["schema"] = json!({"type": "integer"});
    v["params"]["types"] =
        json!({"bindings": [], "params": [], "ok": "Int", "err": "Text", "declarations": {}});
    let m = parse(v.clone()).unwrap();
    let Message::Call(c) = &m else { panic!() };
    assert_eq!(
        c.generic.as_ref().unwrap().schema,
        json!({"type": "integer"})
    );
    round_trip(m);
    // Neither may be missing or null.
    let mut one = v.clone();
    one["params"].as_object_mut().unwrap().remove("types");
    shape_err(one, "/params", "both schema and types");
    let mut one = v.clone();
    one["params"].as_object_mut().unwrap().remove("schema");
    shape_err(one, "/params", "both schema and types");
    let mut null = v;
    null["params"]["types"] = Json::Null;
    shape_err(null, "/params/types", "may not be null");
}

#[test]
fn call_refusals() {
    for key in ["run", "call", "tool", "args"] {
        let mut v = call();
        v["params"].as_object_mut().unwrap().remove(key);
        shape_err(v, "/params", &format!("missing member \"{key}\""));
    }
    let mut v = call();
    v["params"]["run"] = json!(3);
    shape_err(v, "/params/run", "a string");
    let mut v = call();
    v["params"]["call"] = json!("");
    shape_err(v, "/params/call", "must not be empty");
    let mut v = call();
    v["params"]["args"] = json!(["rust"]);
    shape_err(v, "/params/args", "keyed by parameter name");
    let mut v = call();
    v["params"]["retry"] = json!(1);
    shape_err(v, "/params/retry", "unknown member");
    // A notification carries no id.
    let mut v = call();
    v["id"] = json!(1);
    shape_err(v, "/id", "notification");
    let mut v = call();
    v["params"] = json!([1]);
    shape_err(v, "/params", "an object");
}

// --- reply and outcomes ---

#[test]
fn reply_round_trip_each_outcome() {
    for outcome in [
        Outcome::Ok(json!({"hits": [1, 2]})),
        Outcome::Ok(Json::Null),
        Outcome::Failed(json!({"message": "rate limited"})),
        Outcome::NotRun("no such tool".into()),
        Outcome::Unknown("connection reset".into()),
    ] {
        let r = Reply {
            run: "run-1".into(),
            call: "c1:root#1".into(),
            outcome,
        };
        let line = round_trip(Message::Reply(r.clone()));
        assert_eq!(write_reply(&r).unwrap(), line);
    }
}

#[test]
fn bad_reply_is_never_sent_or_read() {
    let r = Reply {
        run: "run-1".into(),
        call: "c1:root#1".into(),
        outcome: Outcome::BadReply("x".into()),
    };
    assert_eq!(write_reply(&r), Err(Error::BadReplyNotSent));
    assert_eq!(Message::Reply(r).to_line(), Err(Error::BadReplyNotSent));
    bad_outcome(reply(json!({"BadReply": "x"})), "never sent");
}

#[test]
fn malformed_outcomes_are_attributed() {
    bad_outcome(
        reply(json!({"Ok": 1, "Failed": 2})),
        "found 2 member(s) [Failed, Ok]",
    );
    bad_outcome(reply(json!({})), "found 0 member(s)");
    bad_outcome(reply(json!("Ok")), "an object");
    bad_outcome(reply(json!({"Success": 1})), "unknown outcome \"Success\"");
    bad_outcome(
        reply(json!({"NotRun": {"why": "x"}})),
        "NotRun holds a reason",
    );
    bad_outcome(reply(json!({"Unknown": null})), "Unknown holds a reason");
    let mut v = reply(json!({"Ok": 1}));
    v["params"]["extra"] = json!(1);
    bad_outcome(v, "unknown member \"extra\"");
    let mut v = reply(json!({"Ok": 1}));
    v["params"].as_object_mut().unwrap().remove("outcome");
    bad_outcome(v, "missing member \"outcome\"");
}

/// PRO-13: a reply whose envelope names its call is that call's reply,
/// whatever else is wrong with the message.
#[test]
fn envelope_problems_of_a_named_reply_are_attributed() {
    let mut v = reply(json!({"Ok": 1}));
    v["extra"] = json!(1);
    bad_outcome(v, "unknown member \"extra\"");
    let mut v = reply(json!({"Ok": 1}));
    v["id"] = json!(3);
    bad_outcome(v, "carries no id");
    let mut v = reply(json!({"Ok": 1}));
    v["jsonrpc"] = json!("1.0");
    bad_outcome(v, "jsonrpc must be");
}

#[test]
fn reply_without_correlation_is_a_shape_error() {
    for key in ["run", "call"] {
        let mut v = reply(json!({"Ok": 1}));
        v["params"].as_object_mut().unwrap().remove(key);
        shape_err(v, "/params", &format!("missing member \"{key}\""));
    }
}

#[test]
fn oversized_reply_value_is_bad_outcome() {
    let big = "x".repeat(limits::MAX_REPLY_BYTES);
    bad_outcome(reply(json!({"Ok": big})), "larger than the limit");
    // Exactly at the limit is admitted (the string's quotes count).
    let fits = "x".repeat(limits::MAX_REPLY_BYTES - 2);
    assert!(matches!(
        parse(reply(json!({"Failed": fits}))),
        Ok(Message::Reply(_))
    ));
}

#[test]
fn line_too_long_is_refused_before_parsing() {
    let line = " ".repeat(MAX_LINE_BYTES + 1);
    assert_eq!(
        parse_line(&line),
        Err(Error::LineTooLong {
            len: MAX_LINE_BYTES + 1,
            max: MAX_LINE_BYTES
        })
    );
}

#[test]
fn outcome_records_and_wire() {
    let all = [
        Outcome::Ok(json!(1)),
        Outcome::Failed(json!("e")),
        Outcome::NotRun("n".into()),
        Outcome::Unknown("u".into()),
        Outcome::BadReply("b".into()),
    ];
    for o in &all {
        assert_eq!(Outcome::from_record(&o.to_json()).unwrap(), *o);
        let wire = Outcome::from_wire(&o.to_json());
        if matches!(o, Outcome::BadReply(_)) {
            assert!(matches!(wire, Err(Error::Shape { .. })));
        } else {
            assert_eq!(wire.unwrap(), *o);
        }
    }
    assert_eq!(all[4].to_string(), "{\"BadReply\":\"b\"}");
    // A resume reply is read with the same reader.
    let v = json::parse(r#"{"Ok": "Safari 17.4"}"#).unwrap();
    assert_eq!(
        Outcome::from_wire(&v).unwrap(),
        Outcome::Ok(json!("Safari 17.4"))
    );
}

// --- cancel ---

#[test]
fn cancel_round_trip_and_refusals() {
    let c = Cancel {
        run: "run-1".into(),
        call: "c1:root/branch-a#2".into(),
    };
    let line = round_trip(Message::Cancel(c.clone()));
    assert_eq!(write_cancel(&c), line);
    assert_eq!(
        line,
        "{\"jsonrpc\":\"2.0\",\"method\":\"cancel\",\"params\":{\"call\":\"c1:root/branch-a#2\",\"run\":\"run-1\"}}\n"
    );
    shape_err(
        json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "run-1"}}),
        "/params",
        "missing member \"call\"",
    );
    shape_err(
        json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r", "call": "c", "reason": "x"}}),
        "/params/reason",
        "unknown member",
    );
}

// --- envelopes ---

#[test]
fn envelope_refusals() {
    let mut v = call();
    v["jsonrpc"] = json!("1.0");
    shape_err(v, "/jsonrpc", "must be \"2.0\"");
    let mut v = call();
    v.as_object_mut().unwrap().remove("jsonrpc");
    shape_err(v, "", "missing member \"jsonrpc\"");
    let mut v = call();
    v["method"] = json!("invoke");
    shape_err(v, "/method", "unknown method \"invoke\"");
    let mut v = call();
    v["method"] = json!(1);
    shape_err(v, "/method", "a string");
    let mut v = call();
    v["extra"] = json!(1);
    shape_err(v, "/extra", "unknown member");
    shape_err(json!([1]), "", "a JSON object");
    assert!(matches!(parse_line("{not json"), Err(Error::Json(_))));
    assert!(matches!(parse_line(""), Err(Error::Json(_))));
    // Strict reading: duplicate keys are refused.
    let dup =
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"cancel","params":{"run":"r","call":"c"}}"#;
    assert!(matches!(parse_line(dup), Err(Error::Json(_))));
    // Two messages on one line are refused.
    let two = format!("{}{}", call(), call());
    assert!(matches!(parse_line(&two), Err(Error::Json(_))));
}

#[test]
fn line_endings_and_numbers() {
    let line = format!("{}\r\n", call());
    assert!(matches!(parse_line(&line), Ok(Message::Call(_))));
    // Values keep exact numbers, read by value.
    let v = r#"{"jsonrpc":"2.0","method":"reply","params":{"run":"r","call":"c","outcome":{"Ok":1.50e1}}}"#;
    let Ok(Message::Reply(r)) = parse_line(v) else {
        panic!()
    };
    assert_eq!(json::canonical(&r.outcome.to_json()), "{\"Ok\":15}");
    let big = r#"{"jsonrpc":"2.0","method":"reply","params":{"run":"r","call":"c","outcome":{"Ok":123456789012345678901234567890}}}"#;
    let Ok(Message::Reply(r)) = parse_line(big) else {
        panic!()
    };
    assert_eq!(
        r.outcome.to_string(),
        "{\"Ok\":123456789012345678901234567890}"
    );
}

#[test]
fn error_messages_name_the_place() {
    let e = parse(json!({"jsonrpc": "2.0", "method": "cancel", "params": {"run": 1, "call": "c"}}))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/params/run: run must be a string, found a number"
    );
    let e = parse(reply(json!({"Ok": 1, "Failed": 2}))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("reply to run run-1 call c1:root#1 is malformed: ")
    );
}
