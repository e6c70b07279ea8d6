//! The run service's errors, each with the CLI exit code DESIGN §6 gives it.

/// Why a command could not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Bad arguments or input: nothing was recorded.
    #[error("{0}")]
    Refused(String),
    /// The program does not check: its error diagnostics in the wire form
    /// (`{severity, code, name, message, location: {module, pointer}}`,
    /// GAP-DIAG-1), so every surface can hand them on structured.
    #[error("the program does not check:\n  {}", check_lines(.0))]
    Check(Vec<serde_json::Value>),
    /// Declarations the run can reach have no fitting binding.
    #[error("the run is refused, nothing was recorded:\n  {}", .0.join("\n  "))]
    Bind(Vec<String>),
    /// No such run, call or checkpoint.
    #[error("{0}")]
    NotFound(String),
    /// The call named is not open.
    #[error("{0}")]
    Conflict(String),
    /// Another server of the cluster drives the run now (it holds the
    /// run's lease: docs/deploy.md).
    #[error(
        "{run} is being driven by {holder} now (its lease runs {expires_in_ms} ms more); send the request there, or again once the run pauses"
    )]
    Leased {
        run: String,
        holder: String,
        expires_in_ms: i64,
    },
    /// A history that cannot be read back as a run.
    #[error("unreadable: {0}")]
    Unreadable(String),
    /// The run's drive was stopped (a halt, an interrupt, a shutdown)
    /// before it ended or paused.
    #[error("{0} was halted")]
    Halted(String),
    /// The service is shutting down and takes no new work.
    #[error("{0}")]
    Unavailable(String),
    /// Too much of some work is under way now: send again shortly
    /// (a large program's check: `service::checks`).
    #[error("{0}")]
    Busy(String),
    /// The store could not accept or give back a fact.
    #[error("{}", store_text(.0))]
    Store(std::sync::Arc<flow_store::Error>),
}

/// A store error as said: `storage failure: …`, once (the store's own
/// corruption errors already begin so).
fn store_text(e: &flow_store::Error) -> String {
    let text = e.to_string();
    if text.starts_with("storage failure") {
        text
    } else {
        format!("storage failure: {text}")
    }
}

/// The diagnostics one per line, as the engine prints one
/// (`support.json: error FS0205 [unknown-node] at /edges/0/to: …`).
fn check_lines(ds: &[serde_json::Value]) -> String {
    ds.iter()
        .map(|d| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let module = text(&d["location"]["module"]);
            let pointer = match text(&d["location"]["pointer"]) {
                p if p.is_empty() => "/".to_string(),
                p => p,
            };
            let head = if module.is_empty() {
                String::new()
            } else {
                format!("{module}: ")
            };
            match d["code"].as_str() {
                Some(code) => format!(
                    "{head}{} {code} [{}] at {pointer}: {}",
                    text(&d["severity"]),
                    d["subcode"].as_str().unwrap_or(&text(&d["name"])),
                    text(&d["message"])
                ),
                None => format!("{head}{}", text(&d["message"])),
            }
        })
        .collect::<Vec<_>>()
        .join("\n  ")
}

impl Error {
    /// The structured diagnostics a refusal carries (`--json`, problem+json
    /// `diagnostics`, MCP): a check's own, or one `{severity, message}` per
    /// unbound declaration.
    pub fn diagnostics(&self) -> Option<Vec<serde_json::Value>> {
        match self {
            Error::Check(ds) => Some(ds.clone()),
            Error::Bind(ms) => Some(
                ms.iter()
                    .map(|m| serde_json::json!({"severity": "error", "message": m}))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The exit code (DESIGN §6): 2 refused, 5 cut short by a storage
    /// failure.
    /// The stored history cannot be read back: damaged, not just out of
    /// reach.
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Unreadable(_) => true,
            Error::Store(e) => e.is_corruption(),
            _ => false,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Store(_) => 5,
            Error::Halted(_) => 130,
            _ => 2,
        }
    }
}

impl From<flow_store::Error> for Error {
    /// Only a store that cannot keep or give back facts is a storage
    /// failure; a refused argument, archive or append is a refusal.
    fn from(e: flow_store::Error) -> Error {
        use flow_store::Error as S;
        match e {
            S::UnknownRun(r) => Error::NotFound(format!("no run {r}")),
            S::UnknownBlob(b) => Error::NotFound(format!("no blob {b}")),
            e @ (S::Active { .. } | S::Redaction(_) | S::Hole { .. }) => {
                Error::Conflict(e.to_string())
            }
            e @ (S::InvalidArgument(_)
            | S::ArchiveRefused { .. }
            | S::RunExists(_)
            | S::Conflict(_)
            | S::Ended { .. }
            | S::WrongNumber { .. }
            | S::InvalidFact(_)) => Error::Refused(e.to_string()),
            e => Error::Store(std::sync::Arc::new(e)),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
