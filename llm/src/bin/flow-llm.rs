//! `flow-llm`: a Tool process serving `std/llm#chat`.
//!
//! ```text
//! flow-llm --backend offline
//! FLOW_LLM_BASE_URL=http://127.0.0.1:8080/v1 FLOW_LLM_API_KEY=... flow-llm --backend openai
//! ```
//!
//! Bound like any implementation (DESIGN §5):
//! `[tools."std/llm"] command = "flow-llm --backend offline"`. It answers
//! describe with `flow_abi::builtin::llm_chat`, the one declaration the
//! engine records, so the fingerprints agree by construction.

use flow_llm::{Backend, OpenAi, chat};
use flow_toolkit::Toolkit;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: flow-llm --backend openai|offline";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--backend", "offline"] | ["--backend=offline"] => Backend::Offline,
        ["--backend", "openai"] | ["--backend=openai"] => match OpenAi::from_env() {
            Ok(o) => Backend::OpenAi(o),
            Err(e) => {
                eprintln!("flow-llm: {e}");
                return ExitCode::FAILURE;
            }
        },
        ["--help"] | ["-h"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut types = flow_abi::TypeSet::new();
    let decl = flow_abi::builtin::llm_chat(&mut types);
    let backend = Arc::new(backend);
    let toolkit = Toolkit::from_decls(&[decl], &types).and_then(|t| {
        t.handle("std/llm#chat", move |call| {
            let backend = backend.clone();
            async move { chat(&backend, call).await }
        })
    });
    match toolkit {
        Ok(t) => match t.serve_stdio().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("flow-llm: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("flow-llm: {e}");
            ExitCode::FAILURE
        }
    }
}
