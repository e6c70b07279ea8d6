//! Checkpoint cost (DESIGN §3 "Checkpoints"): a checkpoint must cost
//! O(what changed since the last one), not O(state).
//!
//! Decision (written down in docs/store.md): a Checkpoint is stored either as
//! a **snapshot** (`"state": <stored value>`) or as a **delta** against the
//! run's previous Checkpoint:
//!
//! ```text
//! {"fact":"Checkpoint","n":N,"task":T,"node":NODE,
//!  "delta":{"base":B,"set":{field:value…},"append":{field:[items…]},"unset":[field…]}}
//! ```
//!
//! `append` is used when a field's new list starts with its previous list
//! (the `append` reducer), so a list that grows by one item per step adds one
//! item per step. A new snapshot is written when the bytes written as deltas
//! since the last snapshot reach [`SNAPSHOT_RATIO`] times the snapshot's own
//! size, or after [`MAX_DELTA_CHAIN`] deltas: snapshots then cost O(1)
//! amortized per step, and rebuilding any checkpoint's state reads at most
//! about three times its stored size. The logical fact (what `checkpoint_state` returns) always has
//! the whole state; the stored fact is what the chain covers.

use crate::error::{Error, Result};
use crate::fact::{FactKind, store_fact};
use crate::merkle::{
    NewBlob, Pins, escape_key, externalize, externalize_pinned, logical_len, unescape_key,
};
use flow_abi::fact::{Fact, FieldChange, RecordedChange, StateChange, Touched};
use flow_abi::json::{canonical, write_canonical, write_canonical_object, write_str};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// At most this many deltas follow a snapshot.
pub const MAX_DELTA_CHAIN: u32 = 1024;

/// A snapshot is written once the deltas since the last one add up to this
/// many times its size: snapshots then grow geometrically (×3), costing
/// about 1.5× the final snapshot over a whole run, and rebuilding a state
/// reads at most about 3× its snapshot's bytes.
pub const SNAPSHOT_RATIO: u64 = 2;

/// What the writer remembers of a run's latest Checkpoint.
#[derive(Clone, Debug)]
pub(crate) struct CkptCache {
    pub n: u64,
    pub state: Value,
    pub logical_len: u64,
    pub chain_len: u32,
    pub delta_bytes: u64,
    pub snapshot_bytes: u64,
}

/// Logical bytes of checkpoint states a writer keeps to compute deltas.
const CACHE_BUDGET: u64 = 64 << 20;

/// A writer's memory of each run's latest Checkpoint (by the run's key in
/// that backend), within [`CACHE_BUDGET`].
pub(crate) struct CkptCaches<K> {
    map: HashMap<K, CkptCache>,
    bytes: u64,
}

impl<K: Hash + Eq> CkptCaches<K> {
    pub(crate) fn new() -> CkptCaches<K> {
        CkptCaches {
            map: HashMap::new(),
            bytes: 0,
        }
    }

    pub(crate) fn get(&self, run: &K) -> Option<&CkptCache> {
        self.map.get(run)
    }

    pub(crate) fn contains(&self, run: &K) -> bool {
        self.map.contains_key(run)
    }

    /// Takes the run's entry out (a change is applied to it in place).
    pub(crate) fn take(&mut self, run: &K) -> Option<CkptCache> {
        let old = self.map.remove(run)?;
        self.bytes = self.bytes.saturating_sub(old.logical_len);
        Some(old)
    }

    /// Keeps `v` for the run (`None`: forgets it).
    pub(crate) fn set(&mut self, run: K, v: Option<CkptCache>) {
        self.take(&run);
        if let Some(v) = v {
            if self.bytes + v.logical_len > CACHE_BUDGET {
                // Simple and bounded: start over. Evicted runs snapshot next.
                self.clear();
            }
            if v.logical_len <= CACHE_BUDGET {
                self.bytes += v.logical_len;
                self.map.insert(run, v);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

impl CkptCache {
    /// Checkpoint `n`'s state read back from the store: what its chain
    /// cost is not known, so the next Checkpoint is a snapshot.
    pub(crate) fn reread(n: u64, state: Value) -> CkptCache {
        CkptCache {
            n,
            state,
            logical_len: 0,
            chain_len: MAX_DELTA_CHAIN,
            delta_bytes: 0,
            snapshot_bytes: 0,
        }
    }
}

fn new_blob_bytes(blobs: &[NewBlob]) -> u64 {
    blobs.iter().map(|b| b.body.len() as u64).sum()
}

/// The parts of a delta and the bytes it costs (the ratio rule's measure).
#[derive(Default)]
struct Delta {
    set: Map<String, Value>,
    append: Map<String, Value>,
    unset: Vec<Value>,
    bytes: u64,
}

impl Delta {
    /// Field `k` goes from `old` to `new`: unchanged, appended to (a list
    /// that starts with its previous items, checked in one pass), or set.
    /// A field with sensitive pins is set whole, never appended to (its
    /// pinned parts are blobs: docs/custody.md "Sensitive values").
    fn field(
        &mut self,
        k: &str,
        old: Option<&Value>,
        new: &Value,
        pins: &Pins,
        blobs: &mut Vec<NewBlob>,
    ) -> Result<()> {
        match (old, new) {
            (Some(Value::Array(oa)), Value::Array(na))
                if pins.is_empty() && na.len() >= oa.len() && na[..oa.len()] == oa[..] =>
            {
                return self.appended(k, &na[oa.len()..], blobs);
            }
            (Some(o), _) if o == new => {}
            _ => {
                let s = externalize_pinned(new, pins, blobs)?;
                self.bytes += s.stored_len as u64;
                self.set.insert(escape_key(k), s.value);
            }
        }
        self.bytes += k.len() as u64;
        Ok(())
    }

    /// Field `k`, a list, had `items` appended (none: unchanged).
    fn appended(&mut self, k: &str, items: &[Value], blobs: &mut Vec<NewBlob>) -> Result<()> {
        self.bytes += k.len() as u64;
        if items.is_empty() {
            return Ok(());
        }
        let mut stored = Vec::with_capacity(items.len());
        for x in items {
            let s = externalize(x, blobs)?;
            self.bytes += s.stored_len as u64 + 1;
            stored.push(s.value);
        }
        self.append.insert(escape_key(k), Value::Array(stored));
        Ok(())
    }

    /// Appends the canonical text of the stored delta against checkpoint
    /// `base`, its members in code-point order; empty parts are left out:
    /// every byte here is paid per step.
    fn write(&self, base: u64, out: &mut String) {
        out.push('{');
        if !self.append.is_empty() {
            out.push_str("\"append\":");
            write_canonical_object(&self.append, out);
            out.push(',');
        }
        out.push_str("\"base\":");
        out.push_str(&base.to_string());
        if !self.set.is_empty() {
            out.push_str(",\"set\":");
            write_canonical_object(&self.set, out);
        }
        if !self.unset.is_empty() {
            out.push_str(",\"unset\":[");
            for (i, k) in self.unset.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(k, out);
            }
            out.push(']');
        }
        out.push('}');
    }
}

/// A Checkpoint's members beside its state: what its stored text holds
/// whether it is a snapshot or a delta.
#[derive(Clone, Copy)]
pub(crate) struct CkptHead<'a> {
    pub n: u64,
    pub task: &'a str,
    pub node: &'a str,
    /// The run's sensitive state fields (docs/custody.md "Sensitive
    /// values"): stored as blobs whatever their size.
    pub pins: &'a Pins,
}

/// Whether a delta of `bytes` after `p` is stored rather than a snapshot.
fn keeps_delta(p: &CkptCache, bytes: u64) -> bool {
    p.delta_bytes + bytes < SNAPSHOT_RATIO * p.snapshot_bytes
}

/// Stores a checked logical Checkpoint (`head` and its `state`), as a
/// delta against `prev` when that is cheaper (see the module doc), else as
/// a snapshot: its stored canonical text.
pub(crate) fn store_checkpoint(
    head: CkptHead<'_>,
    state: Value,
    prev: Option<&CkptCache>,
    blobs: &mut Vec<NewBlob>,
) -> Result<(String, CkptCache)> {
    if let Some(p) = prev
        && p.chain_len < MAX_DELTA_CHAIN
        && let Some(new_obj) = state.as_object()
        && let Some(old_obj) = p.state.as_object()
    {
        let mark = blobs.len();
        let mut d = Delta::default();
        for (k, v) in new_obj {
            d.field(k, old_obj.get(k), v, &head.pins.under(k), blobs)?;
        }
        for k in old_obj.keys() {
            if !new_obj.contains_key(k) {
                d.bytes += k.len() as u64 + 3;
                d.unset.push(Value::String(escape_key(k)));
            }
        }
        d.bytes += new_blob_bytes(&blobs[mark..]);
        if keeps_delta(p, d.bytes) {
            return Ok(delta_fact(head, p, d, state));
        }
        blobs.truncate(mark);
    }
    snapshot(head, state, blobs)
}

/// Stores Checkpoint `head` given by `change` against `prev`, the state of
/// the run's latest Checkpoint (consumed: it becomes the new state), as
/// exactly the bytes [`store_checkpoint`] stores for the whole fact.
/// Refused when the change does not fit `prev`.
pub(crate) fn store_change(
    head: CkptHead<'_>,
    change: StateChange,
    mut prev: CkptCache,
    blobs: &mut Vec<NewBlob>,
) -> Result<(String, CkptCache)> {
    let refused = |e: String| Error::InvalidFact(format!("Checkpoint {}: {e}", head.n));
    let old_obj = prev
        .state
        .as_object()
        .ok_or_else(|| refused("the previous Checkpoint's state is not an object".into()))?;
    let mark = blobs.len();
    let mut d = Delta::default();
    if prev.chain_len < MAX_DELTA_CHAIN {
        // Every field of the new state counts its name once: the fields
        // left as they were here, the changed ones in `field`/`appended`.
        d.bytes = old_obj.keys().map(|k| k.len() as u64).sum();
        for (k, c) in &change.fields {
            let old = old_obj.get(k);
            if old.is_some() {
                d.bytes -= k.len() as u64;
            }
            match c {
                FieldChange::Set(v) => d.field(k, old, v, &head.pins.under(k), blobs)?,
                FieldChange::Append { items, .. } => {
                    let pins = head.pins.under(k);
                    if pins.is_empty() {
                        d.appended(k, items, blobs)?;
                    } else {
                        let mut whole = match old {
                            Some(Value::Array(a)) => a.clone(),
                            _ => Vec::new(),
                        };
                        whole.extend(items.iter().cloned());
                        d.field(k, old, &Value::Array(whole), &pins, blobs)?;
                    }
                }
            }
        }
        d.bytes += new_blob_bytes(&blobs[mark..]);
    }
    change.apply(&mut prev.state).map_err(refused)?;
    if prev.chain_len < MAX_DELTA_CHAIN && keeps_delta(&prev, d.bytes) {
        let state = std::mem::take(&mut prev.state);
        return Ok(delta_fact(head, &prev, d, state));
    }
    blobs.truncate(mark);
    snapshot(head, std::mem::take(&mut prev.state), blobs)
}

/// The stored delta Checkpoint `head` after `p`, its logical state
/// `state`: written straight from its parts in one pass (a step's write
/// path builds no tree of it), the members in code-point order as
/// canonical JSON has them. None of a Checkpoint's own keys is escaped.
fn delta_fact(head: CkptHead<'_>, p: &CkptCache, d: Delta, state: Value) -> (String, CkptCache) {
    let mut text = String::with_capacity(96);
    text.push_str("{\"delta\":");
    d.write(p.n, &mut text);
    text.push_str(",\"fact\":\"Checkpoint\",\"n\":");
    text.push_str(&head.n.to_string());
    text.push_str(",\"node\":");
    write_str(head.node, &mut text);
    text.push_str(",\"task\":");
    write_str(head.task, &mut text);
    text.push('}');
    let cache = CkptCache {
        n: head.n,
        state,
        logical_len: p.logical_len + d.bytes,
        chain_len: p.chain_len + 1,
        delta_bytes: p.delta_bytes + d.bytes,
        snapshot_bytes: p.snapshot_bytes,
    };
    (text, cache)
}

/// Checkpoint `head` with `state` stored whole, beginning a new delta
/// chain (through the fact's tree: once per snapshot, not per step).
fn snapshot(
    head: CkptHead<'_>,
    state: Value,
    blobs: &mut Vec<NewBlob>,
) -> Result<(String, CkptCache)> {
    let mut fact = Fact::Checkpoint {
        n: head.n,
        task: head.task.to_string(),
        node: head.node.to_string(),
        state,
    }
    .into_json();
    let mark = blobs.len();
    let stored = if head.pins.is_empty() {
        store_fact(&fact, FactKind::Checkpoint, blobs)?
    } else {
        // The state stored once, its sensitive fields as blobs.
        let state = fact.get_mut("state").map(std::mem::take);
        let mut stored = store_fact(&fact, FactKind::Checkpoint, blobs)?;
        let state = state.unwrap_or(Value::Null);
        stored["state"] = externalize_pinned(&state, head.pins, blobs)?.value;
        fact["state"] = state;
        stored
    };
    let stored_state = stored.get("state").cloned().unwrap_or(Value::Null);
    let bytes = canonical(&stored_state).len() as u64 + new_blob_bytes(&blobs[mark..]);
    let logical = logical_len(&stored_state).unwrap_or(bytes);
    let state = fact
        .as_object_mut()
        .and_then(|m| m.remove("state"))
        .unwrap_or(Value::Null);
    Ok((
        canonical(&stored),
        CkptCache {
            n: head.n,
            state,
            logical_len: logical,
            chain_len: 0,
            delta_bytes: 0,
            snapshot_bytes: bytes,
        },
    ))
}

/// Applies a stored delta to the logical state of its base checkpoint,
/// answering what it changed, field by field (a field both set and
/// appended to counts as set; one removed, as removed). `expand` loads a
/// stored value into its logical form.
pub(crate) fn apply_delta(
    state: &mut Value,
    delta: &Map<String, Value>,
    expand: &mut dyn FnMut(&Value) -> Result<Value>,
) -> Result<RecordedChange, String> {
    let obj = state
        .as_object_mut()
        .ok_or("a delta's base state is not an object")?;
    let mut fields = BTreeMap::new();
    if let Some(set) = delta.get("set") {
        let set = set.as_object().ok_or("delta.set is not an object")?;
        for (k, v) in set {
            let k = unescape_key(k).to_string();
            fields.insert(k.clone(), Touched::Set);
            obj.insert(k, expand(v).map_err(|e| e.to_string())?);
        }
    }
    if let Some(app) = delta.get("append") {
        let app = app.as_object().ok_or("delta.append is not an object")?;
        for (k, items) in app {
            fields
                .entry(unescape_key(k).to_string())
                .or_insert(Touched::Append);
            let items = items
                .as_array()
                .ok_or("delta.append items are not a list")?;
            let target = obj
                .get_mut(unescape_key(k))
                .and_then(Value::as_array_mut)
                .ok_or_else(|| format!("delta appends to {k:?}, which is not a list"))?;
            for it in items {
                target.push(expand(it).map_err(|e| e.to_string())?);
            }
        }
    }
    if let Some(unset) = delta.get("unset") {
        for k in unset.as_array().ok_or("delta.unset is not a list")? {
            let k = unescape_key(k.as_str().ok_or("delta.unset names are strings")?);
            obj.remove(k);
            fields.insert(k.to_string(), Touched::Unset);
        }
    }
    Ok(RecordedChange { fields })
}

/// The `base` of a stored delta Checkpoint, if it is one.
pub(crate) fn delta_of(stored: &Value) -> Option<Result<(u64, &Map<String, Value>)>> {
    let d = stored.get("delta")?;
    Some((|| {
        let m = d
            .as_object()
            .ok_or_else(|| Error::InvalidFact("delta is not an object".into()))?;
        let base = m
            .get("base")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::InvalidFact("delta.base is not a count".into()))?;
        Ok((base, m))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_abi::json::parse;
    use serde_json::json;

    static NO_PINS: Pins = Pins::NONE;
    static HEAD: CkptHead<'static> = CkptHead {
        n: 0,
        task: "root",
        node: "a",
        pins: &NO_PINS,
    };

    #[test]
    fn append_becomes_a_delta_and_applies_back() {
        let big = |i: usize| format!("\"{}{}\"", i, "x".repeat(2000));
        let mut blobs = Vec::new();
        let mut prev: Option<CkptCache> = None;
        let mut stored_facts = Vec::new();
        let mut items = Vec::new();
        let mut snapshots = 0;
        for step in 1..=20u64 {
            items.push(big(step as usize));
            let st = format!(r#"{{"count":{step},"msgs":[{}]}}"#, items.join(","));
            let head = CkptHead { n: step, ..HEAD };
            let (text, cache) =
                store_checkpoint(head, parse(&st).unwrap(), prev.as_ref(), &mut blobs).unwrap();
            // The stored text is canonical, and the fact's own members
            // are there beside the state or delta.
            let stored = parse(&text).unwrap();
            assert_eq!(canonical(&stored), text);
            let m = stored.as_object().unwrap();
            let members: Vec<&str> = m.keys().map(String::as_str).collect();
            let body = if m.contains_key("delta") {
                "delta"
            } else {
                "state"
            };
            let mut expected = vec![body, "fact", "n", "node", "task"];
            expected.sort_unstable();
            assert_eq!(members, expected, "step {step}: {text}");
            assert_eq!(
                (&m["fact"], &m["n"], &m["node"], &m["task"]),
                (
                    &json!("Checkpoint"),
                    &json!(step),
                    &json!("a"),
                    &json!("root")
                )
            );
            if body == "delta" {
                // A delta carries one appended reference.
                assert!(text.len() < 400, "step {step}: {}", text.len());
            } else {
                snapshots += 1;
            }
            stored_facts.push(stored);
            prev = Some(cache);
        }
        // Snapshots are taken when deltas add up to the snapshot's size: a
        // doubling schedule.
        assert!(snapshots <= 6, "{snapshots} snapshots");
        // Rebuild the last state from the stored facts.
        let load = |v: &Value| -> Result<Value> {
            crate::merkle::expand(v, &mut |h| {
                Ok(parse(
                    std::str::from_utf8(&blobs.iter().find(|b| b.hash == *h).unwrap().body)
                        .unwrap(),
                )
                .unwrap())
            })
        };
        let mut chain = vec![19usize];
        while let Some(Ok((base, _))) = delta_of(&stored_facts[*chain.last().unwrap()]) {
            chain.push(base as usize - 1);
        }
        let mut state = load(&stored_facts[*chain.last().unwrap()]["state"]).unwrap();
        for i in chain.iter().rev().skip(1) {
            let (_, d) = delta_of(&stored_facts[*i]).unwrap().unwrap();
            apply_delta(&mut state, d, &mut |v| load(v)).unwrap();
        }
        assert_eq!(state, prev.unwrap().state);
    }
}
