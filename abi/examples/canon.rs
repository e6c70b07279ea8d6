//! Decode JSON against a JSON Schema and print its canonical text.
//!
//! ```text
//! cargo run -p flow-abi --example canon -- SCHEMA.json < value.json
//! ```
//!
//! Prints the canonical text and exits 0, or prints the refusal (with its
//! path) and exits 2. Schema diagnostics go to stderr.

use flow_abi::schema::{self, ReadContext, Severity};
use flow_abi::{TypeSet, decode};
use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: canon SCHEMA.json < VALUE.json");
        return ExitCode::from(2);
    };
    let schema_text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let schema_json = match flow_abi::json::parse(&schema_text) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut types = TypeSet::new();
    let mut ctx = ReadContext::new(&mut types, &path);
    let ty = schema::read_any(&schema_json, "root", "", &mut ctx);
    for d in &ctx.diagnostics {
        let sev = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        eprintln!("{sev}[{}] {path}#{}: {}", d.code, d.pointer, d.message);
    }
    let Some(ty) = ty else {
        return ExitCode::from(2);
    };
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("stdin: {e}");
        return ExitCode::from(2);
    }
    match decode(&input, &ty, &types) {
        Ok(v) => {
            println!("{}", v.canonical());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
