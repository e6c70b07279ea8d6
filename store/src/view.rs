//! Paged history views (seed, MCP `history`): "Filtering precedes paging;
//! fact numbers retain their original positions ... Fact text is bounded to
//! 1024 code points; saysTruncated reports shortening. Fact values exceeding
//! 4096 bytes of JSON are omitted as a whole, with valuesOmitted true;
//! availability and hashes remain visible. ... Invalid filters, offsets,
//! limits or source names are refused."

use crate::api::*;
use crate::error::{Error, Result};
use crate::fact::{FactKind, summary};
use crate::merkle::logical_len;
use flow_abi::fact::Fact;
use serde_json::Value;
use std::collections::HashSet;

/// Fact text bound, in code points.
pub const TEXT_BOUND: usize = 1024;
/// Value bound, in bytes of canonical JSON.
pub const VALUE_BOUND: u64 = 4096;

pub(crate) struct CheckedHistoryQuery {
    kind: Option<FactKind>,
    pub(crate) fact: Option<u64>,
    search: Option<String>,
    offset: u64,
    limit: u32,
}

/// Refuses invalid filters and limits before anything is read.
pub(crate) fn check_query(q: &HistoryQuery) -> Result<CheckedHistoryQuery> {
    let kind = match q.kind.as_deref() {
        None => None,
        Some(k) => Some(
            FactKind::parse(k)
                .ok_or_else(|| Error::InvalidArgument(format!("unknown fact kind {k:?}")))?,
        ),
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit must be from 1 to 200, not {limit}"
        )));
    }
    if q.search.as_deref() == Some("") {
        return Err(Error::InvalidArgument("search text is empty".into()));
    }
    Ok(CheckedHistoryQuery {
        kind,
        fact: None,
        search: q.search.clone(),
        offset: q.offset.unwrap_or(0),
        limit,
    })
}

/// Builds one page from a verified history.
pub(crate) fn page(
    info: &RunInfo,
    history: &History,
    q: &CheckedHistoryQuery,
    holes: &HashSet<[u8; 32]>,
    expand: &mut dyn FnMut(&Value) -> Result<Value>,
) -> Result<HistoryPage> {
    let selected: Vec<(&StoredFact, String)> = history
        .facts
        .iter()
        .filter(|f| q.kind.is_none_or(|k| k == f.kind()))
        .filter(|f| q.fact.is_none_or(|n| n == f.n))
        .map(|f| (f, summary(&f.fact)))
        .filter(|(_, s)| q.search.as_deref().is_none_or(|needle| s.contains(needle)))
        .collect();
    let total = selected.len() as u64;
    if q.offset > total {
        return Err(Error::InvalidArgument(format!(
            "offset {} is past the {total} selected facts",
            q.offset
        )));
    }
    let mut facts = Vec::new();
    for (f, text) in selected
        .iter()
        .skip(q.offset as usize)
        .take(q.limit as usize)
    {
        facts.push(view_fact(info.run.as_str(), f, text, holes, expand)?);
    }
    let end = q.offset + facts.len() as u64;
    // read_history verified every source blob, so each listed one is available.
    let sources = recorded_sources(history.facts.first())
        .iter()
        .map(|s| SourceInfo {
            module: s.module.clone(),
            commit: None,
            hash: s.hash.clone(),
            length: s.length,
            available: true,
        })
        .collect();
    Ok(HistoryPage {
        run: info.run.to_string(),
        state: info.state,
        truncated: false,
        sources,
        facts,
        page: PageInfo {
            total,
            facts_total: history.facts.len() as u64,
            offset: q.offset,
            limit: q.limit,
            next_offset: (end < total).then_some(end),
        },
    })
}

fn view_fact(
    run: &str,
    f: &StoredFact,
    text: &str,
    holes: &HashSet<[u8; 32]>,
    expand: &mut dyn FnMut(&Value) -> Result<Value>,
) -> Result<FactView> {
    let says_truncated = text.chars().count() > TEXT_BOUND;
    let text: String = text.chars().take(TEXT_BOUND).collect();
    let mut fact = f.stored_json();
    let mut values_omitted = false;
    let mut paths: Vec<&[&str]> = crate::fact::value_paths(f.kind()).to_vec();
    if f.kind() == FactKind::Checkpoint {
        paths.push(&["delta"]);
    }
    for path in paths {
        let Some(slot) = path.iter().try_fold(&mut fact, |v, k| v.get_mut(*k)) else {
            continue;
        };
        let len = logical_len(slot).map_err(|e| Error::corrupt(run, f.n, e))?;
        if len > VALUE_BOUND {
            // Left in stored form: references keep hash and length
            // visible, and a hole shows as one (its blob, perhaps still
            // stored for another run, is not this run's to load).
            values_omitted = true;
            *slot = crate::merkle::mark_holes(std::mem::take(slot), holes);
        } else {
            *slot = expand(slot)?;
        }
    }
    Ok(FactView {
        n: f.n,
        kind: f.kind(),
        hash: f.hash.clone(),
        call: f.fact.call().map(ToString::to_string),
        text,
        says_truncated,
        fact,
        values_omitted,
    })
}

/// The hashes of a run's holes, as [`page`] takes them.
pub(crate) fn hole_set(holes: &[String]) -> HashSet<[u8; 32]> {
    holes
        .iter()
        .filter_map(|h| crate::hash::parse_hash(h))
        .collect()
}

/// The sources a Start lists (none for any other fact).
fn recorded_sources(start: Option<&StoredFact>) -> &[flow_abi::fact::Source] {
    match start.map(|f| &f.fact) {
        Some(Fact::Start { sources, .. }) => sources,
        _ => &[],
    }
}

/// Code points of source text per page.
pub const SOURCE_PAGE: usize = 4096;

/// One page of a recorded source, read from the verified Start and its
/// verified source blob.
pub(crate) fn source_page<S: ReadHistory + ?Sized>(
    store: &S,
    run: &crate::RunId,
    module: &str,
    offset: u64,
) -> Result<SourcePage> {
    let start = store.read_after(run, 0, 1)?;
    let hash = start
        .first()
        .and_then(|f| f.fact.source(module))
        .ok_or_else(|| {
            Error::InvalidArgument(format!("run {run} recorded no source module {module:?}"))
        })?
        .hash
        .clone();
    let bytes = store.blob(&hash)?;
    let text = String::from_utf8(bytes).map_err(|_| Error::CorruptBlob {
        hash: hash.clone(),
        reason: "source is not UTF-8".into(),
    })?;
    let length = text.chars().count() as u64;
    if offset > length {
        return Err(Error::InvalidArgument(format!(
            "source offset {offset} is past its {length} code points"
        )));
    }
    let page: String = text
        .chars()
        .skip(offset as usize)
        .take(SOURCE_PAGE)
        .collect();
    let end = offset + page.chars().count() as u64;
    Ok(SourcePage {
        module: module.to_string(),
        hash,
        offset,
        text: page,
        next_offset: (end < length).then_some(end),
    })
}
