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
use crate::fact::{FactKind, store_fact, store_fact_without};
use crate::merkle::{NewBlob, escape_key, externalize, logical_len, unescape_key};
use flow_abi::fact::{FieldChange, RecordedChange, StateChange, Touched};
use flow_abi::json::canonical;
use serde_json::{Map, Number, Value};
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
    fn field(
        &mut self,
        k: &str,
        old: Option<&Value>,
        new: &Value,
        blobs: &mut Vec<NewBlob>,
    ) -> Result<()> {
        match (old, new) {
            (Some(Value::Array(oa)), Value::Array(na))
                if na.len() >= oa.len() && na[..oa.len()] == oa[..] =>
            {
                return self.appended(k, &na[oa.len()..], blobs);
            }
            (Some(o), _) if o == new => {}
            _ => {
                let s = externalize(new, blobs)?;
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

    /// The stored delta against checkpoint `base`; empty parts are left
    /// out: every byte here is paid per step.
    fn into_value(self, base: u64) -> Value {
        let mut d = Map::new();
        d.insert("base".into(), Value::Number(Number::from(base)));
        if !self.set.is_empty() {
            d.insert("set".into(), Value::Object(self.set));
        }
        if !self.append.is_empty() {
            d.insert("append".into(), Value::Object(self.append));
        }
        if !self.unset.is_empty() {
            d.insert("unset".into(), Value::Array(self.unset));
        }
        Value::Object(d)
    }
}

/// Whether a delta of `bytes` after `p` is stored rather than a snapshot.
fn keeps_delta(p: &CkptCache, bytes: u64) -> bool {
    p.delta_bytes + bytes < SNAPSHOT_RATIO * p.snapshot_bytes
}

/// Stores a checked logical Checkpoint fact, as a delta against `prev` when
/// that is cheaper (see the module doc), else as a snapshot.
pub(crate) fn store_checkpoint(
    mut fact: Value,
    n: u64,
    prev: Option<&CkptCache>,
    blobs: &mut Vec<NewBlob>,
) -> Result<(Value, CkptCache)> {
    if let Some(p) = prev
        && p.chain_len < MAX_DELTA_CHAIN
        && let Some(new_obj) = fact.get("state").and_then(Value::as_object)
        && let Some(old_obj) = p.state.as_object()
    {
        let mark = blobs.len();
        let mut d = Delta::default();
        for (k, v) in new_obj {
            d.field(k, old_obj.get(k), v, blobs)?;
        }
        for k in old_obj.keys() {
            if !new_obj.contains_key(k) {
                d.bytes += k.len() as u64 + 3;
                d.unset.push(Value::String(escape_key(k)));
            }
        }
        d.bytes += new_blob_bytes(&blobs[mark..]);
        if keeps_delta(p, d.bytes) {
            let state = take_state(&mut fact);
            return delta_fact(&fact, n, p, d, state, blobs);
        }
        blobs.truncate(mark);
    }
    snapshot(fact, n, blobs)
}

/// Stores Checkpoint `n` given by `change` against `prev`, the state of the
/// run's latest Checkpoint (consumed: it becomes the new state), as exactly
/// the bytes [`store_checkpoint`] stores for the whole fact. `head` is the
/// fact without its state. Refused when the change does not fit `prev`.
pub(crate) fn store_change(
    head: Value,
    n: u64,
    change: StateChange,
    mut prev: CkptCache,
    blobs: &mut Vec<NewBlob>,
) -> Result<(Value, CkptCache)> {
    let refused = |e: String| Error::InvalidFact(format!("Checkpoint {n}: {e}"));
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
                FieldChange::Set(v) => d.field(k, old, v, blobs)?,
                FieldChange::Append { items, .. } => d.appended(k, items, blobs)?,
            }
        }
        d.bytes += new_blob_bytes(&blobs[mark..]);
    }
    change.apply(&mut prev.state).map_err(refused)?;
    if prev.chain_len < MAX_DELTA_CHAIN && keeps_delta(&prev, d.bytes) {
        let state = std::mem::take(&mut prev.state);
        return delta_fact(&head, n, &prev, d, state, blobs);
    }
    blobs.truncate(mark);
    let mut fact = head;
    if let Some(m) = fact.as_object_mut() {
        m.insert("state".into(), std::mem::take(&mut prev.state));
    }
    snapshot(fact, n, blobs)
}

/// The stored delta Checkpoint `n` after `p`, its logical state `state`.
fn delta_fact(
    fact: &Value,
    n: u64,
    p: &CkptCache,
    d: Delta,
    state: Value,
    blobs: &mut Vec<NewBlob>,
) -> Result<(Value, CkptCache)> {
    let bytes = d.bytes;
    let mut m = store_fact_without(fact, FactKind::Checkpoint, "state", blobs)?;
    m.insert("delta".into(), d.into_value(p.n));
    let cache = CkptCache {
        n,
        state,
        logical_len: p.logical_len + bytes,
        chain_len: p.chain_len + 1,
        delta_bytes: p.delta_bytes + bytes,
        snapshot_bytes: p.snapshot_bytes,
    };
    Ok((Value::Object(m), cache))
}

/// Checkpoint `fact` stored whole, beginning a new delta chain.
fn snapshot(mut fact: Value, n: u64, blobs: &mut Vec<NewBlob>) -> Result<(Value, CkptCache)> {
    let mark = blobs.len();
    let stored = store_fact(&fact, FactKind::Checkpoint, blobs)?;
    let stored_state = stored.get("state").cloned().unwrap_or(Value::Null);
    let bytes = canonical(&stored_state).len() as u64 + new_blob_bytes(&blobs[mark..]);
    let logical = logical_len(&stored_state).unwrap_or(bytes);
    let state = take_state(&mut fact);
    Ok((
        stored,
        CkptCache {
            n,
            state,
            logical_len: logical,
            chain_len: 0,
            delta_bytes: 0,
            snapshot_bytes: bytes,
        },
    ))
}

fn take_state(fact: &mut Value) -> Value {
    fact.as_object_mut()
        .and_then(|m| m.remove("state"))
        .unwrap_or(Value::Null)
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

    fn ckpt(n: u64, state: &str) -> Value {
        parse(&format!(
            r#"{{"fact":"Checkpoint","n":{n},"task":"root","node":"a","state":{state}}}"#
        ))
        .unwrap()
    }

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
            let (stored, cache) =
                store_checkpoint(ckpt(step, &st), step, prev.as_ref(), &mut blobs).unwrap();
            if stored.get("delta").is_some() {
                // A delta carries one appended reference.
                assert!(
                    canonical(&stored).len() < 400,
                    "step {step}: {}",
                    canonical(&stored).len()
                );
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
