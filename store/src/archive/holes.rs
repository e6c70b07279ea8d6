//! `holes.json` of a run archive (docs/custody.md "Holes"): the blobs its
//! facts reference whose content the archive leaves out on purpose. One
//! canonical line:
//!
//! ```text
//! {"format":"flowd-holes/1","holes":["blake3:<hex>",…]}
//! ```
//!
//! Written only when the run has holes (or the export redacts some), so
//! the archive of a run without holes is byte for byte what it was.

use crate::error::{Error, Result};
use crate::hash::{hash_text, parse_hash};
use serde_json::{Value, json};
use std::path::Path;

/// The file's name in a run's archive directory.
pub const HOLES_FILE: &str = "holes.json";

const FORMAT: &str = "flowd-holes/1";

/// Most holes one archive may list (a hostile file must not exhaust memory).
const MAX_HOLES: usize = 1_000_000;

/// The file's text for `holes` (in hash order, one line).
pub(crate) fn holes_json(holes: &[[u8; 32]]) -> String {
    let list: Vec<String> = holes.iter().map(hash_text).collect();
    let mut text = flow_abi::json::canonical(&json!({"format": FORMAT, "holes": list}));
    text.push('\n');
    text
}

/// The holes `dir/holes.json` lists; none without the file. A file that
/// is not exactly that shape refuses the archive.
pub(crate) fn read_holes(dir: &Path) -> Result<Vec<[u8; 32]>> {
    let path = dir.join(HOLES_FILE);
    let Some(bytes) = super::read_import_file(&path, HOLES_FILE)? else {
        return Ok(Vec::new());
    };
    let refuse = |reason: &str| Error::ArchiveRefused {
        component: HOLES_FILE.into(),
        fact: None,
        reason: format!(
            "{reason}; it is one line {{\"format\":\"{FORMAT}\",\"holes\":[\"blake3:<hex>\",…]}}"
        ),
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| refuse("not UTF-8"))?;
    let v: Value = flow_abi::json::parse(text.trim_end_matches('\n'))
        .map_err(|e| refuse(&format!("not JSON ({e})")))?;
    let m = v.as_object().ok_or_else(|| refuse("not an object"))?;
    if m.len() != 2 || m.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(refuse("unknown format"));
    }
    let list = m
        .get("holes")
        .and_then(Value::as_array)
        .filter(|l| l.len() <= MAX_HOLES)
        .ok_or_else(|| refuse("no list of holes"))?;
    list.iter()
        .map(|h| {
            h.as_str()
                .and_then(parse_hash)
                .ok_or_else(|| refuse("a hole is not blake3:<hex>"))
        })
        .collect()
}
