//! Checkpoints given by change ([`Appending::Changed`]): stored as exactly
//! the bytes of the whole fact, refused (changing nothing) when the change
//! does not fit the run's latest Checkpoint, and read back whole after a
//! refusal made the writer let go of the state it kept.

use super::*;
use flow_abi::fact::{FieldChange, StateChange};

/// What changed from `old` to `new` (both objects, `new` keeping every
/// field of `old`), as the engine would give it: a list that grew is an
/// append; a field that stayed is left out, or every `resend`th one is
/// given again whole.
fn change_of(old: &Value, new: &Value, resend: usize) -> StateChange {
    let (o, m) = (old.as_object().unwrap(), new.as_object().unwrap());
    let mut fields = std::collections::BTreeMap::new();
    for (i, (k, v)) in m.iter().enumerate() {
        let c = match (o.get(k), v) {
            (Some(Value::Array(a)), Value::Array(b))
                if b.len() >= a.len() && b[..a.len()] == a[..] =>
            {
                FieldChange::Append {
                    from: a.len(),
                    items: b[a.len()..].to_vec(),
                }
            }
            (Some(x), _) if x == v && i % resend != 0 => continue,
            _ => FieldChange::Set(v.clone()),
        };
        fields.insert(k.clone(), c);
    }
    StateChange {
        fields,
        len: m.len(),
    }
}

fn changed(n: u64, change: StateChange) -> Appending {
    Appending::Changed {
        n,
        task: "root".into(),
        node: "step".into(),
        change,
    }
}

/// The states of a run whose state grows: a list appended to (some items
/// over the blob threshold), a counter, a field that comes later, a field
/// under a `$blob` name, a rewrite that is not an append, and a list
/// replaced by a longer one that starts with it.
fn states() -> Vec<Value> {
    let mut out = Vec::new();
    let mut msgs: Vec<Value> = Vec::new();
    for step in 0..80u64 {
        msgs.push(json!(format!(
            "{step}:{}",
            "m".repeat(if step % 5 == 0 { 1200 } else { 30 })
        )));
        if step % 13 == 12 {
            msgs.reverse();
        }
        let mut state = json!({"messages": msgs, "step": step, "$blob": {"k": step / 10}});
        if step >= 20 {
            state["late"] = json!([step / 4]);
        }
        out.push(state);
    }
    out
}

pub(super) fn checkpoints_by_change<B: Backend + Sync>(
    new: &mut dyn FnMut() -> B,
    _: &Path,
) -> Result<(), String> {
    let s = new();
    let states = states();
    let (whole, by_change) = (new_run_id(), new_run_id());
    for run in [&whole, &by_change] {
        let (start, sources) = start_fact(run, json!({}));
        s.create_run(start, &sources, Vec::new()).map_err(e)?;
    }
    // Refused before the run has a Checkpoint, changing nothing.
    let first = change_of(&json!({}), &states[0], 1);
    ensure!(
        s.append_all(&by_change, vec![changed(2, first)]).is_err(),
        "a change with no Checkpoint before it is refused"
    );
    // In batches of a few steps, as a drive commits them.
    for (i, chunk) in states.chunks(3).enumerate() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (j, st) in chunk.iter().enumerate() {
            let k = i * 3 + j;
            let n = k as u64 + 2;
            a.push(checkpoint_fact(n, st.clone()).into());
            b.push(match k {
                0 => checkpoint_fact(n, st.clone()).into(),
                _ => changed(n, change_of(&states[k - 1], st, 4)),
            });
        }
        s.append_all(&whole, a).map_err(e)?;
        s.append_all(&by_change, b).map_err(e)?;
    }
    let (ha, hb) = (
        s.read_history(&whole).map_err(e)?,
        s.read_history(&by_change).map_err(e)?,
    );
    ensure!(
        ha.facts.len() == hb.facts.len(),
        "{} / {} facts",
        ha.facts.len(),
        hb.facts.len()
    );
    let mut deltas = 0;
    for (fa, fb) in ha.facts.iter().zip(&hb.facts).skip(1) {
        ensure!(
            fa.body == fb.body,
            "fact {} is stored otherwise: {} / {}",
            fa.n,
            fa.body,
            fb.body
        );
        deltas += usize::from(fa.delta.is_some());
    }
    ensure!(deltas > 40, "only {deltas} of 80 Checkpoints are deltas");
    for (k, st) in states.iter().enumerate() {
        let got = s.checkpoint_state(&by_change, k as u64 + 2).map_err(e)?;
        ensure!(got == *st, "checkpoint {} reads back otherwise", k + 2);
    }

    // A change that does not fit the latest Checkpoint is refused and
    // changes nothing; the writer no longer holds that state, and the next
    // change reads it back.
    let last = states.last().unwrap().clone();
    let n = states.len() as u64 + 2;
    let head = s.read_history(&by_change).map_err(e)?.facts.len();
    let mut wrong = change_of(&last, &last, 1);
    wrong.fields.insert(
        "messages".into(),
        FieldChange::Append {
            from: 1,
            items: vec![json!("x")],
        },
    );
    let mut fields_off = change_of(&last, &last, 1);
    fields_off.len += 1;
    for bad in [wrong, fields_off] {
        ensure!(
            s.append_all(&by_change, vec![changed(n, bad)]).is_err(),
            "a change that does not fit is refused"
        );
        ensure!(
            s.read_history(&by_change).map_err(e)?.facts.len() == head,
            "a refused change changed the history"
        );
    }
    let mut next = last.clone();
    next["step"] = json!(1000);
    next["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!("after"));
    s.append_all(&by_change, vec![changed(n, change_of(&last, &next, 1))])
        .map_err(e)?;
    let got = s.checkpoint_state(&by_change, n).map_err(e)?;
    ensure!(
        got == next,
        "the change after a refusal reads back otherwise"
    );
    Ok(())
}
