//! The bench's Rust Tool process: this bench's own executable started by
//! `flow serve` as `STEPS --bench-tool TOOLS.json [STAMPS]`, serving
//! `inc.json#inc` (`{i} -> {i: i + 1}`) and `inc.json#tally` (`{i} -> {i:
//! i + 1, v: i + 1}`) through the Rust toolkit, as the Python `inc.py`
//! serves them for `count.json`.
//!
//! With STAMPS, each answer's call id and the wall clock (ns since the Unix
//! epoch) just before the toolkit writes it out are appended to that file,
//! one line each: the SSE rows measure delivery from there (the Reply is
//! durable only after this moment, so the figure is an upper bound that
//! includes the commit and its fsync).

use flow_toolkit::{Call, ToolError, Toolkit, Value};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// The argument that makes this executable the Tool process.
pub const ROLE: &str = "--bench-tool";

/// Wall clock, ns since the Unix epoch: comparable across processes.
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

type Stamps = Option<Arc<Mutex<std::fs::File>>>;

fn next(call: &Call, stamps: &Stamps, tally: bool, pad: bool) -> Result<Value, ToolError> {
    let Some(Value::Int(i)) = call.arg("i") else {
        return Err(ToolError::Other("takes i, an Int".into()));
    };
    let text = format!("{i:>12}").repeat(100);
    let i = Value::Int(i + 1u8);
    let out = if pad {
        Value::Record(
            [("i".to_string(), i), ("pad".to_string(), Value::Text(text))]
                .into_iter()
                .collect(),
        )
    } else if tally {
        Value::Record(
            [("i".to_string(), i.clone()), ("v".to_string(), i)]
                .into_iter()
                .collect(),
        )
    } else {
        Value::Record([("i".to_string(), i)].into_iter().collect())
    };
    if let Some(f) = stamps
        && let Ok(mut f) = f.lock()
    {
        let _ = writeln!(f, "{} {}", call.call, now_ns());
    }
    Ok(out)
}

/// Serves until stdin closes: `args` are what follows [`ROLE`].
pub fn serve(args: &[String]) {
    let doc = std::fs::read_to_string(&args[0]).expect("the Tool document");
    let stamps: Stamps = args.get(1).map(|p| {
        Arc::new(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("the stamps file"),
        ))
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut kit = Toolkit::from_document_text(&doc).map_err(std::io::Error::other)?;
        // The document lists what its program calls: `inc`, `tally` or both.
        let listed: Vec<String> = kit.declarations().map(|d| d.identity.clone()).collect();
        for (name, tally, pad) in [
            ("inc.json#inc", false, false),
            ("inc.json#tally", true, false),
            ("inc.json#pad", false, true),
        ] {
            if listed.iter().any(|l| l == name) {
                let stamps = stamps.clone();
                kit = kit
                    .handle(name, move |call| {
                        let r = next(&call, &stamps, tally, pad);
                        async move { r }
                    })
                    .map_err(std::io::Error::other)?;
            }
        }
        kit.serve_stdio().await
    })
    .expect("the Tool process");
}
