//! Typed state writes (issue 11, item 2): every write to a field that
//! `state_schema` declares is decoded against the field's type before it
//! lands, so a value of another type is never written silently. A write
//! that does not fit is an error naming the state path and the expected
//! type; the caller makes it a failure of the reply that carried the value
//! (retry, `fail_branch`, else a fault) or, for a value computed in the
//! run (a transform, a join), a fault.
//!
//! A field `state_schema` does not declare stays untyped (flow check warns,
//! FS0304); `null` may be written to a field that is not `required` (it
//! clears it). The check is a pure function of the state and the value, so
//! replay reaches the same verdict.

use super::helpers::*;
use super::*;

impl Machine {
    /// Whether writing `value` at `target` in `task`'s state through
    /// `reducer` leaves the field fitting its declared type.
    pub(super) fn check_write(
        &self,
        task: &str,
        target: &Target,
        value: &Json,
        reducer: Reducer,
    ) -> Step {
        let m = self.module_ref();
        let Some((inner, optional)) = m.state_fields.get(&target.field).map(unwrap_option) else {
            return Ok(());
        };
        if *inner == Type::Json {
            return Ok(());
        }
        let types = &m.report.types;
        let decode = |v: &Json, t: &Type| {
            decode_json(v, t, types)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let fits = |v: &Json| {
            if v.is_null() && optional {
                return Ok(());
            }
            decode(v, inner)
        };
        let whole = target.below.is_empty();
        let verdict = match reducer {
            Reducer::Replace | Reducer::Custom if whole => fits(value),
            // An append adds elements: only they are new (a list field
            // grows by one element per step without being decoded again).
            Reducer::Append if whole => {
                let el = element(inner);
                match value {
                    Json::Array(items) => items.iter().try_for_each(|v| decode(v, el)),
                    v => decode(v, el),
                }
            }
            _ => {
                let mut probe = Json::Object(Map::new());
                if let Some(cur) = self.task_state(task).get(&target.field) {
                    set_member(&mut probe, &target.field, cur.clone());
                }
                apply(&mut probe, target, value.clone(), reducer);
                fits(probe.get(&target.field).unwrap_or(&Json::Null))
            }
        };
        verdict.map_err(|e| {
            let mut path = target.field.clone();
            for b in &target.below {
                path.push('.');
                path.push_str(b);
            }
            format!(
                "state field `{path}` is declared {}; the value written does not fit: {e}",
                inner.describe(types)
            )
        })
    }

    /// The type one value written to `field` has to fit, when `state_schema`
    /// declares the field: its declared type, or for an `append` field the
    /// element type (a field declared `string` with `reducer: append` holds
    /// a list of strings).
    pub(super) fn value_type(&self, field: &str) -> Option<&Type> {
        let (inner, _) = unwrap_option(self.module_ref().state_fields.get(field)?);
        Some(match self.reducer_of(field) {
            Reducer::Append => element(inner),
            _ => inner,
        })
    }

    /// The type an agent's answer for `field` is asked for and decoded
    /// against when the agent declares no `structured_output`: the field's
    /// value type, unless that is Text or json.Value (a plain answer).
    pub(super) fn answer_type(&self, field: &str) -> Option<&Type> {
        self.value_type(field)
            .filter(|t| !matches!(t.base(), Type::Text | Type::Json))
    }
}

fn unwrap_option(t: &Type) -> (&Type, bool) {
    match t {
        Type::Option(t) => (t.as_ref(), true),
        t => (t, false),
    }
}

/// The element an `append` adds to a field of type `t`: a list's (or a
/// set's) item type, else `t` itself.
fn element(t: &Type) -> &Type {
    match t.base() {
        Type::List(el) | Type::Set(el) => el,
        _ => t,
    }
}
