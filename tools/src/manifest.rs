//! flow.toml: how to run each file's implementations.
//!
//! host-boundary.txt, "flow.toml": "Each table is keyed by a file path
//! relative to the manifest directory and names exactly one of command or
//! mcp. An unknown key, or a table naming none or several of them, is a
//! configuration error that refuses the run." It "carries no credential,
//! isolation, approval or authority setting".
//!
//! DESIGN §5 adds two key forms and one option:
//! `[tools."support.json#web-search"]` binds one tool and wins over the file
//! key `[tools."support.json"]`; `[tools."std/llm"]` binds a built-in
//! module; `resend = true` asks the host to send a call open at a crash
//! again instead of settling it `Unknown("host restarted")`.
//!
//! Command strings are split into words as a POSIX shell would, but no shell
//! runs them (REQUIREMENTS GAP-BIND-3).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The manifest's file name.
pub const FILE_NAME: &str = "flow.toml";

/// What a binding starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Launch {
    /// A process speaking the Tool process protocol: program and arguments.
    Command(Vec<String>),
    /// An MCP server over stdio, behind the MCP adapter.
    Mcp(Vec<String>),
}

impl Launch {
    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        match self {
            Launch::Command(a) | Launch::Mcp(a) => a,
        }
    }
}

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, argv) = match self {
            Launch::Command(a) => ("command", a),
            Launch::Mcp(a) => ("mcp", a),
        };
        write!(f, "{kind} `{}`", shell_words::join(argv))
    }
}

/// One binding: what to start, where, and the crash policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Binding {
    pub launch: Launch,
    /// Working directory: "commands run in that directory" (the manifest's).
    pub dir: PathBuf,
    /// DESIGN §5: a call open at a host crash is sent again rather than
    /// settled `Unknown("host restarted")`.
    pub resend: bool,
}

impl Binding {
    /// Two bindings that start the same thing in the same place share one
    /// process (REQUIREMENTS GAP-PRO-2).
    pub fn process_key(&self) -> (Launch, PathBuf) {
        (self.launch.clone(), self.dir.clone())
    }
}

/// A configuration error. Each names the file and, where there is one, the
/// key, so the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: unknown key `{key}`")]
    UnknownKey { path: PathBuf, key: String },
    #[error("{path}: `{key}` must be {expected}")]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
    },
    #[error(
        "{path}: [tools.\"{table}\"] names neither `command` nor `mcp`; it must name exactly one"
    )]
    NoneNamed { path: PathBuf, table: String },
    #[error("{path}: [tools.\"{table}\"] names both `command` and `mcp`; it must name exactly one")]
    BothNamed { path: PathBuf, table: String },
    #[error("{path}: `{key}`: {message}")]
    BadCommand {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{path}: table key `{table}` {message}")]
    BadTableKey {
        path: PathBuf,
        table: String,
        message: &'static str,
    },
}

/// One parsed flow.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The file itself.
    pub path: PathBuf,
    /// Its directory: table keys are relative to it and commands run in it.
    pub dir: PathBuf,
    /// Table key (`support.json`, `support.json#web-search`, `std/llm`) to
    /// binding.
    pub tables: BTreeMap<String, Binding>,
}

impl Manifest {
    /// Reads and checks the manifest at `path`.
    pub fn read(path: &Path) -> Result<Manifest, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Manifest::parse(&text, path)
    }

    /// Parses manifest text as if it were the file at `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Manifest, ConfigError> {
        let path = path.to_path_buf();
        // A bare file name (`flow serve --tools flow.toml`) has the parent
        // "", in which no command can start: its directory is ".".
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let root: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.clone(),
            message: e.message().to_string(),
        })?;
        let mut tables = BTreeMap::new();
        for (key, value) in &root {
            if key != "tools" {
                return Err(ConfigError::UnknownKey {
                    path,
                    key: key.clone(),
                });
            }
            let toml::Value::Table(tools) = value else {
                return Err(ConfigError::WrongType {
                    path,
                    key: key.clone(),
                    expected: "a table of tables",
                });
            };
            for (table, body) in tools {
                let binding = read_table(&path, &dir, table, body)?;
                tables.insert(table.clone(), binding);
            }
        }
        Ok(Manifest { path, dir, tables })
    }

    /// The nearest manifest in `dir` or an ancestor. host-boundary.txt,
    /// "Binding": "The nearest manifest is the boundary: an absent table
    /// does not cause a search in more distant manifests."
    pub fn find(dir: &Path) -> Result<Option<Manifest>, ConfigError> {
        for d in dir.ancestors() {
            let candidate = d.join(FILE_NAME);
            if candidate.is_file() {
                return Manifest::read(&candidate).map(Some);
            }
        }
        Ok(None)
    }

    /// The binding of tool `tool_id` declared in the file with table key
    /// `file_key`: the tool's own table wins over the file's (DESIGN §5).
    pub fn lookup(&self, file_key: &str, tool_id: &str) -> Option<&Binding> {
        self.tables
            .get(&format!("{file_key}#{tool_id}"))
            .or_else(|| self.tables.get(file_key))
    }
}

fn read_table(
    path: &Path,
    dir: &Path,
    table: &str,
    body: &toml::Value,
) -> Result<Binding, ConfigError> {
    let key = |k: &str| format!("tools.\"{table}\".{k}");
    if table.is_empty() {
        return Err(ConfigError::BadTableKey {
            path: path.to_path_buf(),
            table: table.to_string(),
            message: "is empty",
        });
    }
    if table.starts_with('/') || table.split(['/', '#']).any(|seg| seg == "..") {
        return Err(ConfigError::BadTableKey {
            path: path.to_path_buf(),
            table: table.to_string(),
            message: "must be a path relative to the manifest's directory, inside it",
        });
    }
    let toml::Value::Table(body) = body else {
        return Err(ConfigError::WrongType {
            path: path.to_path_buf(),
            key: format!("tools.\"{table}\""),
            expected: "a table",
        });
    };
    let mut command = None;
    let mut mcp = None;
    let mut resend = false;
    for (k, v) in body {
        match (k.as_str(), v) {
            ("command", toml::Value::String(s)) => command = Some(split(path, &key(k), s)?),
            ("mcp", toml::Value::String(s)) => mcp = Some(split(path, &key(k), s)?),
            ("resend", toml::Value::Boolean(b)) => resend = *b,
            ("command" | "mcp", _) => {
                return Err(ConfigError::WrongType {
                    path: path.to_path_buf(),
                    key: key(k),
                    expected: "a string",
                });
            }
            ("resend", _) => {
                return Err(ConfigError::WrongType {
                    path: path.to_path_buf(),
                    key: key(k),
                    expected: "true or false",
                });
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    path: path.to_path_buf(),
                    key: key(k),
                });
            }
        }
    }
    let launch = match (command, mcp) {
        (Some(c), None) => Launch::Command(c),
        (None, Some(m)) => Launch::Mcp(m),
        (None, None) => {
            return Err(ConfigError::NoneNamed {
                path: path.to_path_buf(),
                table: table.to_string(),
            });
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::BothNamed {
                path: path.to_path_buf(),
                table: table.to_string(),
            });
        }
    };
    Ok(Binding {
        launch,
        dir: dir.to_path_buf(),
        resend,
    })
}

fn split(path: &Path, key: &str, s: &str) -> Result<Vec<String>, ConfigError> {
    let words = shell_words::split(s).map_err(|e| ConfigError::BadCommand {
        path: path.to_path_buf(),
        key: key.to_string(),
        message: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(ConfigError::BadCommand {
            path: path.to_path_buf(),
            key: key.to_string(),
            message: "is empty".into(),
        });
    }
    Ok(words)
}

/// Where a declaration comes from, as binding needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A program read from disk: `program_dir` is the program root, and the
    /// declaration's identity is `<module>#<tool-id>` with `module` relative
    /// to it (DESIGN §2). `std/...` modules are built-ins, keyed as is in the
    /// manifest nearest the program root.
    Local { program_dir: PathBuf },
    /// host-boundary.txt, "Binding": "Submitted source has no inferred
    /// filesystem binding. Without physical source paths supplied by the
    /// host, declarations need explicit host bindings."
    Submitted,
}

/// The rule for choosing a declaration's binding. host-boundary.txt,
/// "Binding": "Which binding wins, in order: the host's override, then the
/// declaration's flow.toml ... A declaration covered by neither is unbound."
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// "The host can override any binding, keyed by the declaration's
    /// identity."
    overrides: BTreeMap<String, Binding>,
    /// Manifests already read, by the directory searched from.
    cache: BTreeMap<PathBuf, Option<Manifest>>,
}

/// How a declaration came to be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Override,
    Manifest { path: PathBuf, table: String },
}

impl Resolver {
    pub fn new() -> Resolver {
        Resolver::default()
    }

    /// Binds `identity` to `binding` whatever any manifest says.
    pub fn override_binding(&mut self, identity: &str, binding: Binding) {
        self.overrides.insert(identity.to_string(), binding);
    }

    /// The binding of the declaration `identity` (`<module>#<tool-id>`), or
    /// `None` when it is unbound.
    pub fn resolve(
        &mut self,
        identity: &str,
        source: &Source,
    ) -> Result<Option<(Binding, Origin)>, ConfigError> {
        if let Some(b) = self.overrides.get(identity) {
            return Ok(Some((b.clone(), Origin::Override)));
        }
        let Source::Local { program_dir } = source else {
            return Ok(None);
        };
        let Some((module, tool_id)) = identity.rsplit_once('#') else {
            return Ok(None);
        };
        // A built-in module has no file: the manifest nearest the program
        // root binds it, under its module name.
        let builtin = module.starts_with("std/");
        let file = program_dir.join(module);
        let search_from = if builtin {
            program_dir.clone()
        } else {
            file.parent()
                .map_or_else(|| program_dir.clone(), Path::to_path_buf)
        };
        let manifest = match self.cache.get(&search_from) {
            Some(m) => m.clone(),
            None => {
                let m = Manifest::find(&search_from)?;
                self.cache.insert(search_from.clone(), m.clone());
                m
            }
        };
        let Some(manifest) = manifest else {
            return Ok(None);
        };
        let file_key = if builtin {
            module.to_string()
        } else {
            match relative_key(&manifest.dir, &file) {
                Some(k) => k,
                None => return Ok(None),
            }
        };
        let found = manifest.lookup(&file_key, tool_id).cloned();
        Ok(found.map(|b| {
            let table = if manifest
                .tables
                .contains_key(&format!("{file_key}#{tool_id}"))
            {
                format!("{file_key}#{tool_id}")
            } else {
                file_key.clone()
            };
            (
                b,
                Origin::Manifest {
                    path: manifest.path.clone(),
                    table,
                },
            )
        }))
    }
}

/// `file` relative to `dir`, with `/` separators, or `None` when it is not
/// inside `dir`.
fn relative_key(dir: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(dir).ok()?;
    let parts: Option<Vec<&str>> = rel
        .components()
        .map(|c| match c {
            std::path::Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let parts = parts?;
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("/"))
    }
}
