//! Exporting a run: its verified history, host records and every blob it
//! uses, written to an archive directory.

use super::*;
use crate::merkle::collect_refs;
use flow_abi::fact::Fact;
use flow_abi::json::write_str;
use serde_json::Number;
use std::collections::BTreeSet;
use std::io::Write;

/// Writes `bytes` to `path` through a temporary file and a rename, synced.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// Exports a run to `dir` (created if needed). The history and every blob
/// are read verified before anything is written; exporting again writes
/// the same bytes. The run's holes stay holes (`holes.json`).
pub fn export_run<S: ReadHistory + HostRecords + Redact + ?Sized>(
    store: &S,
    run: &RunId,
    dir: &Path,
) -> Result<ExportSummary> {
    export_run_redacted(store, run, dir, &[])
}

/// [`export_run`] with the values `redact` reaches made holes of the
/// archive (`flow export --redact`): their blobs are left out and listed
/// in `holes.json`, so the archive still verifies on import; the store
/// keeps them.
pub fn export_run_redacted<S: ReadHistory + HostRecords + Redact + ?Sized>(
    store: &S,
    run: &RunId,
    dir: &Path,
    redact: &[crate::redact::ValuePath],
) -> Result<ExportSummary> {
    let history = store.read_history(run)?;
    let host = store.host_records(run)?;
    let mut holes: BTreeSet<[u8; 32]> = store
        .holes(run)?
        .iter()
        .filter_map(|h| parse_hash(h))
        .collect();
    if !redact.is_empty() {
        holes.extend(store.reached(run, redact)?);
    }
    // Gather every blob, innermost ones included.
    let mut blobs: BTreeMap<[u8; 32], Vec<u8>> = BTreeMap::new();
    let mut todo: Vec<[u8; 32]> = Vec::new();
    let mut sources: BTreeSet<[u8; 32]> = BTreeSet::new();
    for f in &history.facts {
        let mut refs = Vec::new();
        for v in f
            .fact
            .value()
            .into_iter()
            .chain(f.delta.iter().flat_map(|d| d.values()))
        {
            collect_refs(v, &mut refs).map_err(|e| Error::corrupt(run.as_str(), f.n, e))?;
        }
        todo.extend(refs.into_iter().map(|(h, _)| h));
        if let Fact::Start { sources: list, .. } = &f.fact {
            sources.extend(list.iter().filter_map(|s| parse_hash(&s.hash)));
        }
    }
    for h in sources {
        let bytes = store.blob(&hash_text(&h))?;
        blobs.insert(h, bytes);
    }
    let mut seen_values: BTreeSet<[u8; 32]> = BTreeSet::new();
    while let Some(h) = todo.pop() {
        if holes.contains(&h) || !seen_values.insert(h) {
            continue;
        }
        let bytes = store.blob(&hash_text(&h))?;
        let text = String::from_utf8(bytes.clone()).map_err(|_| Error::CorruptBlob {
            hash: hash_text(&h),
            reason: "not UTF-8".into(),
        })?;
        let v = flow_abi::json::parse(&text).map_err(|e| Error::CorruptBlob {
            hash: hash_text(&h),
            reason: e.to_string(),
        })?;
        let mut refs = Vec::new();
        collect_refs(&v, &mut refs).map_err(|reason| Error::CorruptBlob {
            hash: hash_text(&h),
            reason,
        })?;
        todo.extend(refs.into_iter().map(|(h, _)| h));
        blobs.insert(h, bytes);
    }
    let mut lines = String::new();
    for f in &history.facts {
        // `{"fact":…,"hash":…}` in canonical form: the stored text is.
        lines.push_str("{\"fact\":");
        lines.push_str(&f.body);
        lines.push_str(",\"hash\":");
        write_str(&f.hash, &mut lines);
        lines.push_str("}\n");
    }
    let host_lines = super::host_jsonl(&host);
    let blob_dir = dir.join("blobs");
    fs::create_dir_all(&blob_dir).map_err(io(&blob_dir))?;
    for (h, bytes) in &blobs {
        let p = blob_dir.join(hex::encode(h));
        if fs::read(&p).ok().as_deref() != Some(bytes.as_slice()) {
            write_atomic(&p, bytes)?;
        }
    }
    // A hole's blob left by an earlier export to this directory would
    // fill the hole again on import: it goes, and so does a `holes.json`
    // an export with holes left.
    let holes_path = dir.join(super::holes::HOLES_FILE);
    for h in &holes {
        remove_if_there(&blob_dir.join(hex::encode(h)))?;
    }
    if holes.is_empty() {
        remove_if_there(&holes_path)?;
    } else {
        let list: Vec<[u8; 32]> = holes.iter().copied().collect();
        write_atomic(&holes_path, super::holes::holes_json(&list).as_bytes())?;
    }
    write_atomic(&dir.join("host.jsonl"), host_lines.as_bytes())?;
    write_atomic(&dir.join("history.jsonl"), lines.as_bytes())?;
    Ok(ExportSummary {
        facts: history.facts.len() as u64,
        blobs: blobs.len() as u64,
    })
}

fn remove_if_there(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

pub(super) fn host_line(r: &HostRecordRow) -> Value {
    let mut head = Map::new();
    head.insert("n".into(), Value::Number(Number::from(r.head.n)));
    head.insert("hash".into(), Value::String(r.head.hash.clone()));
    let mut m = Map::new();
    m.insert("seq".into(), Value::Number(Number::from(r.seq)));
    m.insert("kind".into(), Value::String(r.kind().as_str().into()));
    m.insert("at".into(), Value::Number(Number::from(r.at_ms)));
    m.insert("head".into(), Value::Object(head));
    m.insert("details".into(), r.details.to_json());
    Value::Object(m)
}
