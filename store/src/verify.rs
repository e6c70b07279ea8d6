//! Checks shared by every reader of stored facts (database rows, archive
//! lines).

use crate::fact::{FactKind, read_logical, read_stored};
use flow_abi::fact::Fact;
use serde_json::Value;

/// A stored fact that checked out. Moved once per fact and never
/// collected, so the typed fact is not boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Checked {
    /// Its stored text is its logical text: no value is a reference, no
    /// key is escaped, it is not a delta (and not Start, whose sources the
    /// reader verifies from the stored form). Read once, as the fact.
    Logical(Fact),
    /// In stored form.
    Stored(Value),
}

impl Checked {
    /// The fact in stored form.
    pub(crate) fn into_stored(self) -> Value {
        match self {
            Checked::Logical(f) => f.into_json(),
            Checked::Stored(v) => v,
        }
    }
}

/// Parses one stored fact text strictly and checks it is canonical, has a
/// valid envelope, carries number `n`, and that Start (with this run's id)
/// is exactly fact 1. The error is the reason; callers name the fact.
pub(crate) fn check_stored_fact(
    run: &str,
    n: u64,
    body: &str,
) -> Result<(Value, FactKind), String> {
    check_stored(run, n, body).map(|(c, kind)| (c.into_stored(), kind))
}

/// [`check_stored_fact`], keeping the fact as read when its stored form is
/// its logical one.
pub(crate) fn check_stored(run: &str, n: u64, body: &str) -> Result<(Checked, FactKind), String> {
    let (fact, canonical) =
        flow_abi::json::parse_checking_canonical(body).map_err(|e| format!("not JSON: {e}"))?;
    if !canonical {
        return Err("not in canonical form".into());
    }
    // A reference is an object with the key `$blob` and an escaped user
    // key ends in `$blob`; in canonical text either shows as `$blob"`. A
    // text without it has no reference to load and no key to unescape.
    let plain = !body.contains("$blob\"") && !body.contains("\"delta\":");
    let (checked, kind, fact_n) = if plain {
        let f = read_logical(fact).map_err(|e| e.to_string())?;
        let (kind, n) = (f.kind(), f.n());
        let checked = match kind {
            FactKind::Start => Checked::Stored(f.into_json()),
            _ => Checked::Logical(f),
        };
        (checked, kind, n)
    } else {
        let (v, kind, n) = read_stored(fact).map_err(|e| e.to_string())?;
        (Checked::Stored(v), kind, n)
    };
    if fact_n != n {
        return Err(format!("numbered {fact_n}"));
    }
    if (kind == FactKind::Start) != (n == 1) {
        return Err("Start must be exactly fact 1".into());
    }
    if let Checked::Stored(fact) = &checked
        && kind == FactKind::Start
        && fact.get("run").and_then(Value::as_str) != Some(run)
    {
        return Err(format!("Start names another run than {run}"));
    }
    Ok((checked, kind))
}
