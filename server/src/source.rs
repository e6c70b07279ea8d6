//! A program's source texts: read from disk for `run`, from the history for
//! resume, replay and fork (DESIGN §4: "All of them are stored as source
//! blobs at Start; resume, replay and fork read them from the history, never
//! from the working directory").

use crate::error::{Error, Result};
use flow_abi::fact::{Fact, Source};
use flow_engine::program::Program;
use flow_store::{ReadHistory, SourceText};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The texts of a program's modules, by module path, and its root.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The program root directory when read from disk (binding looks for
    /// flow.toml from here); `None` for sources read from a history.
    pub dir: Option<PathBuf>,
    pub root: String,
    pub texts: BTreeMap<String, String>,
}

/// A diagnostic of module `m` in the wire form (GAP-DIAG-1), its module in
/// `location.module` and, as `flow check --json` has always given it, at
/// the top level.
fn wire(m: &str, d: &flow_engine::Diagnostic) -> Json {
    let mut d = d.clone();
    d.module = Some(m.to_string());
    let mut j = d.to_json();
    if let Json::Object(o) = &mut j {
        o.insert("module".into(), Json::String(m.to_string()));
    }
    j
}

/// A module that is not JSON, in the same form (code `FS0000`, the whole
/// document).
fn not_json(m: &str, why: &str) -> Json {
    let mut location = Map::new();
    location.insert("module".into(), Json::String(m.to_string()));
    location.insert("pointer".into(), Json::String(String::new()));
    let mut o = Map::new();
    o.insert("module".into(), Json::String(m.to_string()));
    o.insert("severity".into(), Json::String("error".into()));
    o.insert("code".into(), Json::String("FS0000".into()));
    o.insert("name".into(), Json::String("not-json".into()));
    o.insert("message".into(), Json::String(format!("not JSON: {why}")));
    o.insert("location".into(), Json::Object(location));
    Json::Object(o)
}

/// Whether `m` may name a module: a relative path of 1 to 256 bytes with
/// no `.`/`..`/empty segments and no backslash, and no control or
/// bidirectional-formatting character — module names are printed (by
/// `flow check`, `flow history`), and such a name could rewrite the
/// terminal or reorder what it shows.
pub fn module_name_ok(m: &str) -> bool {
    !m.is_empty()
        && m.len() <= 256
        && !m.starts_with('/')
        && !m.contains('\\')
        && !m.chars().any(|c| c.is_control() || is_bidi_format(c))
        && !m.split('/').any(|s| s == ".." || s == "." || s.is_empty())
}

/// The Unicode bidirectional formatting characters (embeddings,
/// overrides, isolates and marks).
fn is_bidi_format(c: char) -> bool {
    matches!(c, '\u{61C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

impl Sources {
    /// Reads `root_file` and the FlowSpec files beside it (subgraph
    /// `flow_ref`s name flows in the same directory). Files that are not
    /// FlowSpec documents are passed over; only the modules the program
    /// reaches are kept.
    pub fn read(root_file: &Path) -> Result<Sources> {
        let root_text = std::fs::read_to_string(root_file)
            .map_err(|e| Error::Refused(format!("{}: {e}", root_file.display())))?;
        let dir = root_file
            .parent()
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let root = root_file
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .ok_or_else(|| Error::Refused(format!("{} is not a file", root_file.display())))?;
        let mut texts = BTreeMap::new();
        texts.insert(root.clone(), root_text);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".json") && !n.starts_with('.') && *n != root)
                .collect();
            names.sort();
            for name in names {
                let Ok(text) = std::fs::read_to_string(dir.join(&name)) else {
                    continue;
                };
                let is_flow = flow_abi::json::parse(&text)
                    .ok()
                    .is_some_and(|v| v.get("spec_version").is_some() && v.get("nodes").is_some());
                if is_flow {
                    texts.insert(name, text);
                }
            }
        }
        let mut s = Sources {
            dir: Some(dir),
            root,
            texts,
        };
        // Keep only what the program reaches (others may not even check).
        if let Ok(p) = s.program_unchecked() {
            s.texts.retain(|m, _| p.modules.contains_key(m));
        } else {
            let root = s.root.clone();
            s.texts.retain(|m, _| *m == root);
        }
        if let Some(m) = s.texts.keys().find(|m| !module_name_ok(m)) {
            return Err(Error::Refused(format!(
                "{m:?} cannot be a module: a module's file name may not hold control or bidirectional-formatting characters; rename the file"
            )));
        }
        Ok(s)
    }

    /// The program's sources as recorded in a history's Start.
    pub fn from_start(store: &(impl ReadHistory + ?Sized), start: &Fact) -> Result<Sources> {
        let Fact::Start { entry, sources, .. } = start else {
            return Err(Error::Unreadable(
                "the history does not begin with Start".into(),
            ));
        };
        let mut texts = BTreeMap::new();
        for s in sources {
            let bytes = store.blob(&s.hash)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Error::Unreadable(format!("source {} is not UTF-8", s.module)))?;
            texts.insert(s.module.clone(), text);
        }
        Ok(Sources {
            dir: None,
            root: entry.module.clone(),
            texts,
        })
    }

    fn program_unchecked(&self) -> std::result::Result<Program, flow_engine::program::Refused> {
        let mut files = BTreeMap::new();
        for (m, t) in &self.texts {
            if let Ok(v) = flow_abi::json::parse(t) {
                files.insert(m.clone(), v);
            }
        }
        Program::load(&files, &self.root)
    }

    /// Parses and checks every module: the program, or every error
    /// diagnostic (wire form, naming its module).
    pub fn program(&self) -> Result<Arc<Program>> {
        let mut files = BTreeMap::new();
        let mut problems = Vec::new();
        for (m, t) in &self.texts {
            match flow_abi::json::parse(t) {
                Ok(v) => {
                    files.insert(m.clone(), v);
                }
                Err(e) => problems.push(not_json(m, &e.to_string())),
            }
        }
        if !problems.is_empty() {
            return Err(Error::Check(problems));
        }
        Program::load(&files, &self.root)
            .map(Arc::new)
            .map_err(|r| Error::Check(r.diagnostics.iter().map(|(m, d)| wire(m, d)).collect()))
    }

    /// The `flow tools` document (CLI-21) and whether the program checks
    /// (CLI-25: exit 0 when it does, 2 otherwise). A program that does not
    /// check still has its document: each module's diagnostics in
    /// `programs[].diagnostics`, a module that is not JSON as a program of
    /// its one diagnostic.
    pub fn tools_document(&self) -> (Json, bool) {
        let mut files = BTreeMap::new();
        let mut broken = Vec::new();
        for (m, t) in &self.texts {
            match flow_abi::json::parse(t) {
                Ok(v) => {
                    files.insert(m.clone(), v);
                }
                Err(e) => {
                    let mut p = Map::new();
                    p.insert("root".into(), Json::String(m.clone()));
                    p.insert(
                        "diagnostics".into(),
                        Json::Array(vec![not_json(m, &e.to_string())]),
                    );
                    p.insert("tools".into(), Json::Array(Vec::new()));
                    p.insert("types".into(), Json::Object(Map::new()));
                    broken.push(Json::Object(p));
                }
            }
        }
        let (mut doc, ok) = if files.contains_key(&self.root) {
            flow_engine::program::Program::tools_document_of(&files, &self.root)
        } else {
            let mut d = Map::new();
            d.insert("data".into(), Json::String(flow_abi::DATA_VERSION.into()));
            d.insert("programs".into(), Json::Array(Vec::new()));
            (Json::Object(d), false)
        };
        if let Some(Json::Array(programs)) = doc.get_mut("programs") {
            programs.extend(broken.iter().cloned());
        }
        (doc, ok && broken.is_empty())
    }

    /// Every module's diagnostics as JSON (each naming its module) and the
    /// number of errors. When every module checks, the program-level
    /// problems (a subgraph naming no flow) are added. `flow check` and
    /// `POST /v1/check` both report this.
    pub fn diagnostics(&self) -> (Vec<Json>, usize) {
        let mut all = Vec::new();
        let mut errors = 0;
        for (m, text) in &self.texts {
            let doc = match flow_abi::json::parse(text) {
                Ok(d) => d,
                Err(e) => {
                    errors += 1;
                    all.push(not_json(m, &e.to_string()));
                    continue;
                }
            };
            let report = flow_engine::check::check_module(&doc, m);
            for d in &report.diagnostics {
                if d.is_error() {
                    errors += 1;
                }
                all.push(wire(m, d));
            }
        }
        if errors == 0
            && let Err(Error::Check(problems)) = self.program()
        {
            errors += problems.len();
            all.extend(problems);
        }
        (all, errors)
    }

    /// The sources' size in bytes: what checking them costs grows with it.
    pub fn size(&self) -> usize {
        self.texts.values().map(String::len).sum()
    }

    /// The texts as the store takes them.
    pub fn source_texts(&self) -> Vec<SourceText> {
        self.texts
            .iter()
            .map(|(m, t)| SourceText {
                module: m.clone(),
                text: t.clone(),
            })
            .collect()
    }

    /// The Start `sources` list: `{module, hash, length}` per module.
    pub fn start_entries(&self) -> Vec<Source> {
        self.texts
            .iter()
            .map(|(m, t)| {
                let (hash, length) = flow_store::source_ref(t);
                Source {
                    module: m.clone(),
                    hash,
                    length,
                }
            })
            .collect()
    }

    /// The program's identity in Start: `sha256:` of the canonical sources
    /// list, so the same files make the same program.
    pub fn program_hash(&self) -> String {
        let entries = self.start_entries().iter().map(Source::to_json).collect();
        let text = flow_abi::json::canonical(&Json::Array(entries));
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
    }
}
