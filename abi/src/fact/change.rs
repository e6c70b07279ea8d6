//! A Checkpoint's state given by what changed since the run's previous
//! Checkpoint, so that a step of a run whose state grows costs what the
//! step changed, not the whole state (DESIGN §3 "Checkpoints").
//!
//! The engine tracks the fields its writes touched since its previous
//! Checkpoint of the same task; the store applies the change to the state
//! of the run's latest Checkpoint, which it keeps, and stores the same
//! bytes it would have stored for the whole state. The logical fact is
//! always the whole state: a `StateChange` is only a way of handing it on.

use serde_json::Value as Json;
use std::collections::BTreeMap;

/// What changed in a state (a JSON object) since a base state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateChange {
    /// Each top-level field that changed, by name.
    pub fields: BTreeMap<String, FieldChange>,
    /// How many top-level fields the state has after the change: a check
    /// that the change is applied to the base it was taken against.
    pub len: usize,
}

/// How one top-level field changed.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldChange {
    /// The field's whole new value (which may equal the old one).
    Set(Json),
    /// Items appended to the list the field held, which had `from` items.
    Append { from: usize, items: Vec<Json> },
}

impl StateChange {
    /// Applies the change to `base`, refusing (and leaving `base` as it
    /// was) when `base` is not the state it was taken against, as far as
    /// its shape tells: an appended list of another length, or another
    /// number of fields after.
    pub fn apply(self, base: &mut Json) -> Result<(), String> {
        let obj = base
            .as_object_mut()
            .ok_or("a changed state's base is not an object")?;
        let mut len = obj.len();
        for (k, c) in &self.fields {
            match (obj.get(k), c) {
                (None, _) => len += 1,
                (Some(Json::Array(a)), FieldChange::Append { from, .. }) if a.len() == *from => {}
                (_, FieldChange::Append { from, .. }) => {
                    return Err(format!(
                        "the change appends to field {k:?} as a list of {from} items, which the base does not hold"
                    ));
                }
                (Some(_), FieldChange::Set(_)) => {}
            }
        }
        if len != self.len {
            return Err(format!(
                "the change leaves {} fields, but applied to this base it leaves {len}",
                self.len
            ));
        }
        for (k, c) in self.fields {
            match c {
                FieldChange::Set(v) => {
                    obj.insert(k, v);
                }
                FieldChange::Append { items, .. } => {
                    if let Some(Json::Array(a)) = obj.get_mut(&k) {
                        a.extend(items);
                    }
                }
            }
        }
        Ok(())
    }
}

/// How a recorded Checkpoint's state differs from the recorded Checkpoint
/// just before it, field by field, as its stored delta says (a reader
/// knows it without comparing the two states): what lets a replay compare
/// the Checkpoint at the cost of what changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordedChange {
    /// Each top-level field the delta names, by name.
    pub fields: BTreeMap<String, Touched>,
}

/// What a delta did to one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touched {
    /// Set to a whole new value.
    Set,
    /// Only appended to (it was a list and still is, holding the same
    /// first items).
    Append,
    /// Removed.
    Unset,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(fields: Vec<(&str, FieldChange)>, len: usize) -> StateChange {
        StateChange {
            fields: fields
                .into_iter()
                .map(|(k, c)| (k.to_string(), c))
                .collect(),
            len,
        }
    }

    #[test]
    fn applies_sets_and_appends() {
        let mut s = json!({"count": 1, "log": [1, 2]});
        change(
            vec![
                ("count", FieldChange::Set(json!(2))),
                (
                    "log",
                    FieldChange::Append {
                        from: 2,
                        items: vec![json!(3)],
                    },
                ),
                ("new", FieldChange::Set(json!("x"))),
            ],
            3,
        )
        .apply(&mut s)
        .unwrap();
        assert_eq!(s, json!({"count": 2, "log": [1, 2, 3], "new": "x"}));
    }

    #[test]
    fn refuses_another_base_and_leaves_it() {
        let before = json!({"count": 1, "log": [1]});
        let mut s = before.clone();
        let appends = FieldChange::Append {
            from: 2,
            items: vec![json!(3)],
        };
        let e = change(vec![("log", appends)], 2).apply(&mut s).unwrap_err();
        assert!(e.contains("\"log\""), "{e}");
        let e = change(vec![("count", FieldChange::Set(json!(2)))], 3)
            .apply(&mut s)
            .unwrap_err();
        assert!(e.contains("3 fields"), "{e}");
        assert!(change(vec![], 0).apply(&mut json!([])).is_err());
        assert_eq!(s, before);
    }
}
