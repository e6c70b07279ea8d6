//! The MCP adapter against a server built with rmcp (the official Rust
//! SDK, `=3.11.0`). This test binary is both: run with
//! `FLOW_TEST_RMCP_SERVER=1` it serves MCP on stdio; otherwise it starts
//! itself that way through the adapter and calls it.
//! REQUIREMENTS MCPA-1, MCPA-4, MCPA-8, MCPA-9.

use flow_abi::fact::{CallId, RunId};
use flow_abi::signature::{ToolDecl, tool_error};
use flow_abi::types::{Body, Decl, Field, Type, TypeSet};
use flow_tools::manifest::{Binding, Launch};
use flow_tools::process::ProcessOptions;
use flow_tools::{CallOutcome, CallRequest, Declarations, ProcessHandle};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::{Json, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Serialize, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Sum {
    sum: i64,
}

#[derive(Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct TextArgs {
    text: String,
}

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

#[tool_router(router = tool_router)]
impl Server {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    /// structuredContent.
    #[tool(name = "add", description = "Adds two integers")]
    async fn add(
        &self,
        Parameters(AddArgs { a, b }): Parameters<AddArgs>,
    ) -> Result<Json<Sum>, String> {
        Ok(Json(Sum { sum: a + b }))
    }

    /// One text block holding JSON.
    #[tool(name = "shout", description = "Upper-cases a text")]
    async fn shout(&self, Parameters(TextArgs { text }): Parameters<TextArgs>) -> String {
        serde_json::Value::String(text.to_uppercase()).to_string()
    }

    /// isError, with the declared error as JSON in its text block.
    #[tool(name = "refuse", description = "Always fails")]
    async fn refuse(
        &self,
        Parameters(TextArgs { text }): Parameters<TextArgs>,
    ) -> Result<String, String> {
        Err(serde_json::json!({ "message": text }).to_string())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {}

const RUN: &str = "run-00000000000000000000000001";

fn decls() -> Declarations {
    let mut types = TypeSet::new();
    let err = tool_error(&mut types);
    let sum = types
        .add(Decl {
            identity: "m.json.Sum".into(),
            name: "Sum".into(),
            doc: None,
            body: Body::Record(vec![Field {
                name: "sum".into(),
                ty: Type::Int,
                doc: None,
            }]),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let text = |name: &str| ToolDecl {
        identity: format!("m.json#{name}"),
        doc: None,
        params: vec![Field {
            name: "text".into(),
            ty: Type::Text,
            doc: None,
        }],
        ok: Type::Text,
        err: err.clone(),
    };
    let add = ToolDecl {
        identity: "m.json#add".into(),
        doc: None,
        params: vec![
            Field {
                name: "a".into(),
                ty: Type::Int,
                doc: None,
            },
            Field {
                name: "b".into(),
                ty: Type::Int,
                doc: None,
            },
        ],
        ok: Type::Named(sum),
        err: err.clone(),
    };
    Declarations::new(Arc::new(types), vec![add, text("shout"), text("refuse")])
}

fn req(call: &str, tool: &str, args: serde_json::Value) -> CallRequest {
    let args = match flow_abi::json::parse(&args.to_string()) {
        Ok(serde_json::Value::Object(m)) => m,
        other => panic!("{other:?}"),
    };
    CallRequest {
        run: RunId::parse(RUN).unwrap(),
        call: CallId::parse(call).unwrap(),
        tool: format!("m.json#{tool}"),
        args,
    }
}

async fn client() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binding = Binding {
        launch: Launch::Mcp(vec![
            "env".into(),
            "FLOW_TEST_RMCP_SERVER=1".into(),
            exe.display().to_string(),
        ]),
        dir: std::env::temp_dir(),
        resend: false,
    };
    let p = ProcessHandle::start(
        &binding,
        decls(),
        ProcessOptions::default(),
        CancellationToken::new(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let checks = [
        (
            req("c1:root#1", "add", serde_json::json!({"a": 2, "b": 40})),
            r#"{"Ok":{"sum":42}}"#,
        ),
        (
            req("c1:root#2", "shout", serde_json::json!({"text": "hi"})),
            r#"{"Ok":"HI"}"#,
        ),
        (
            req("c1:root#3", "refuse", serde_json::json!({"text": "no"})),
            r#"{"Failed":{"message":"no"}}"#,
        ),
    ];
    for (r, want) in checks {
        let out: CallOutcome = p.call(r).await;
        let got = flow_abi::json::canonical(&out.into_outcome().to_json());
        if got != want {
            return Err(format!("want {want}, got {got}"));
        }
    }
    p.shutdown().await;
    Ok(())
}

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    if std::env::var_os("FLOW_TEST_RMCP_SERVER").is_some() {
        rt.block_on(async {
            if let Ok(running) = Server::new().serve(rmcp::transport::stdio()).await {
                let _ = running.waiting().await;
            }
        });
        return;
    }
    match rt.block_on(client()) {
        Ok(()) => println!(
            "test rmcp_server_through_the_adapter ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored"
        ),
        Err(e) => {
            println!(
                "test rmcp_server_through_the_adapter ... FAILED: {e}\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored"
            );
            std::process::exit(1);
        }
    }
}
