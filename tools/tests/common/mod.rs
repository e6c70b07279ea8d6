//! Shared test helpers: declarations, their `flow tools` document, bindings
//! that start the fixture processes.
#![allow(dead_code)]

use flow_abi::fact::{CallId, RunId};
use flow_abi::signature::{ToolDecl, tool_error};
use flow_abi::types::{Field, Type, TypeSet};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::{CallOutcome, CallRequest, Declarations};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `t.json#echo(text: Text) -> Result<Text, ToolError>` and a second tool
/// `t.json#other` of the same shape.
pub fn echo_decls() -> (Arc<TypeSet>, Vec<ToolDecl>) {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let decl = |id: &str| ToolDecl {
        identity: id.to_string(),
        doc: None,
        params: vec![Field {
            name: "text".into(),
            ty: Type::Text,
            doc: None,
        }],
        ok: Type::Text,
        err: err.clone(),
    };
    let decls = vec![decl("t.json#echo"), decl("t.json#other")];
    (Arc::new(types), decls)
}

pub fn declarations() -> Declarations {
    let (types, decls) = echo_decls();
    Declarations::new(types, decls)
}

/// Writes the `flow tools` document of the echo declarations into `dir`.
pub fn write_doc(dir: &Path) -> PathBuf {
    let (types, decls) = echo_decls();
    let doc = flow_toolkit::document::document("t", &decls, &types);
    let path = dir.join("tools.json");
    std::fs::write(&path, flow_abi::json::canonical(&doc)).unwrap();
    path
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A binding that runs `misbehave.py DOC extra...` in `dir`.
pub fn misbehave(dir: &Path, extra: &[&str]) -> Binding {
    let doc = write_doc(dir);
    let mut argv = vec![
        "python3".to_string(),
        fixture("misbehave.py").display().to_string(),
        doc.display().to_string(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    Binding {
        launch: Launch::Command(argv),
        dir: dir.to_path_buf(),
        resend: false,
    }
}

/// The run every test call belongs to.
pub const RUN: &str = "run-00000000000000000000000001";

pub fn req(call: &str, tool: &str, text: &str) -> CallRequest {
    let mut args = serde_json::Map::new();
    args.insert("text".into(), serde_json::Value::String(text.into()));
    CallRequest {
        run: RunId::parse(RUN).unwrap(),
        call: CallId::parse(call).unwrap(),
        tool: tool.into(),
        args,
    }
}

pub fn ok_text(o: &CallOutcome) -> Option<String> {
    match o {
        CallOutcome::Ok(flow_abi::Value::Text(t)) => Some(t.clone()),
        _ => None,
    }
}

fn field(name: &str, ty: Type) -> Field {
    Field {
        name: name.into(),
        ty,
        doc: None,
    }
}

/// examples/tools/calc: `calc.json#add(a: Int, b: Int) -> Int` and
/// `calc.json#div(a: Decimal, b: Decimal) -> Decimal`, failing with ToolError.
pub fn calc_decls() -> (Arc<TypeSet>, Vec<ToolDecl>) {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let decls = vec![
        ToolDecl {
            identity: "calc.json#add".into(),
            doc: Some("The sum of two integers.".into()),
            params: vec![field("a", Type::Int), field("b", Type::Int)],
            ok: Type::Int,
            err: err.clone(),
        },
        ToolDecl {
            identity: "calc.json#div".into(),
            doc: Some("The quotient of two decimals.".into()),
            params: vec![field("a", Type::Decimal), field("b", Type::Decimal)],
            ok: Type::Decimal,
            err,
        },
    ];
    (Arc::new(types), decls)
}

/// examples/tools/kv: `kv.json#put(key: Text, value: Text) -> Unit` and
/// `kv.json#get(key: Text) -> Text`, failing with ToolError.
pub fn kv_decls() -> (Arc<TypeSet>, Vec<ToolDecl>) {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let decls = vec![
        ToolDecl {
            identity: "kv.json#get".into(),
            doc: Some("The value stored under a key.".into()),
            params: vec![field("key", Type::Text)],
            ok: Type::Text,
            err: err.clone(),
        },
        ToolDecl {
            identity: "kv.json#put".into(),
            doc: Some("Stores a value under a key.".into()),
            params: vec![field("key", Type::Text), field("value", Type::Text)],
            ok: Type::Unit,
            err,
        },
    ];
    (Arc::new(types), decls)
}

/// The repository's examples/ folder.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tools")
}

pub fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    // Numbers read strictly, so they are canonical.
    match flow_abi::json::parse(&v.to_string()).unwrap() {
        serde_json::Value::Object(m) => m,
        _ => panic!("args must be an object"),
    }
}
