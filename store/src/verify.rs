//! Checks shared by every reader of stored facts (database rows, archive
//! lines).

use crate::fact::{FactKind, read_stored};
use flow_abi::json::canonical;
use serde_json::Value;

/// Parses one stored fact text strictly and checks it is canonical, has a
/// valid envelope, carries number `n`, and that Start (with this run's id)
/// is exactly fact 1. The error is the reason; callers name the fact.
pub(crate) fn check_stored_fact(
    run: &str,
    n: u64,
    body: &str,
) -> Result<(Value, FactKind), String> {
    let fact = flow_abi::json::parse(body).map_err(|e| format!("not JSON: {e}"))?;
    if canonical(&fact) != body {
        return Err("not in canonical form".into());
    }
    let (fact, kind, fact_n) = read_stored(fact).map_err(|e| e.to_string())?;
    if fact_n != n {
        return Err(format!("numbered {fact_n}"));
    }
    if (kind == FactKind::Start) != (n == 1) {
        return Err("Start must be exactly fact 1".into());
    }
    if kind == FactKind::Start && fact.get("run").and_then(Value::as_str) != Some(run) {
        return Err(format!("Start names another run than {run}"));
    }
    Ok((fact, kind))
}
