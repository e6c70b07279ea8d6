//! Checks shared by every reader of stored facts (database rows, archive
//! lines).

use crate::fact::{FactKind, ReadStored, read_stored};
use flow_abi::fact::Fact;
use serde_json::Value;

/// A stored fact that checked out. Moved once per fact and never
/// collected, so the typed fact is not boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Checked {
    /// Its stored text is its logical text: no value is a reference, no
    /// key is escaped, it is not a delta. Read once, as the fact.
    Logical(Fact),
    /// In stored form: values may be references (to load and check), keys
    /// may be escaped, or it is a delta Checkpoint.
    Stored(ReadStored),
}

impl Checked {
    /// The fact as read (in stored form, its values may be references).
    pub(crate) fn fact(&self) -> &Fact {
        match self {
            Checked::Logical(f) | Checked::Stored(ReadStored { fact: f, .. }) => f,
        }
    }

    /// The fact in stored form.
    pub(crate) fn into_stored(self) -> Value {
        match self {
            Checked::Logical(f) => f.into_json(),
            Checked::Stored(r) => r.into_json(),
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

/// [`check_stored_fact`], keeping the fact as read.
pub(crate) fn check_stored(run: &str, n: u64, body: &str) -> Result<(Checked, FactKind), String> {
    let (fact, canonical) = flow_abi::json::parse_object_checking_canonical(body)
        .map_err(|e| format!("not JSON: {e}"))?;
    if !canonical {
        return Err("not in canonical form".into());
    }
    // A reference is an object with the key `$blob` and an escaped user
    // key ends in `$blob`; in canonical text either shows as `$blob"`. A
    // text without it has no reference to load and no key to unescape.
    let plain = !body.contains("$blob\"") && !body.contains("\"delta\":");
    let checked = if plain {
        Checked::Logical(Fact::from_members(fact).map_err(|e| e.to_string())?)
    } else {
        Checked::Stored(read_stored(fact).map_err(|e| e.to_string())?)
    };
    let f = checked.fact();
    let (kind, fact_n) = (f.kind(), f.n());
    if fact_n != n {
        return Err(format!("numbered {fact_n}"));
    }
    if (kind == FactKind::Start) != (n == 1) {
        return Err("Start must be exactly fact 1".into());
    }
    if let Fact::Start { run: named, .. } = f
        && named.as_str() != run
    {
        return Err(format!("Start names another run than {run}"));
    }
    Ok((checked, kind))
}
