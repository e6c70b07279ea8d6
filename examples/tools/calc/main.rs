//! `calc`: a Tool process written with the Rust toolkit.
//!
//! Usage: `flow-example-calc [TOOLS.json]` (default: `tools.json` beside the
//! working directory), where TOOLS.json is the `flow tools` document listing
//! `calc.json#add` and `calc.json#div`. Bind it in flow.toml:
//!
//! ```toml
//! [tools."calc.json"]
//! command = "flow-example-calc tools.json"
//! ```

use flow_toolkit::{ToolError, Toolkit, Value};
use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tools.json".into());
    match serve(&path).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calc: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let doc = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Toolkit::from_document_text(&doc)?
        // add(a: Int, b: Int) -> Int: exact big integers, no overflow.
        .handle("calc.json#add", |call| async move {
            match (call.arg("a"), call.arg("b")) {
                (Some(Value::Int(a)), Some(Value::Int(b))) => Ok(Value::Int(a + b)),
                _ => Err(ToolError::Other("add takes two Ints".into())),
            }
        })?
        // div(a: Decimal, b: Decimal) -> Decimal, failing with the declared
        // ToolError on division by zero.
        .handle("calc.json#div", |call| async move {
            match (call.arg("a"), call.arg("b")) {
                (Some(Value::Decimal(_)), Some(zero @ Value::Decimal(_)))
                    if zero.canonical() == "0" =>
                {
                    Err(failed("division by zero"))
                }
                (Some(Value::Decimal(a)), Some(Value::Decimal(b))) => Ok(Value::decimal(a / b)),
                _ => Err(ToolError::Other("div takes two Decimals".into())),
            }
        })?
        .serve_stdio()
        .await?;
    Ok(())
}

/// The declared error value, `ToolError {message}`.
fn failed(message: &str) -> ToolError {
    let mut m = std::collections::BTreeMap::new();
    m.insert("message".to_string(), Value::Text(message.to_string()));
    ToolError::Failed(Value::Record(m))
}
