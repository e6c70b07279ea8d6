//! The store's typed errors (STYLE rule 2: `store::Error`).

use std::path::PathBuf;

/// Everything a store operation can refuse or fail with.
///
/// Refusals (`UnknownRun`, `Ended`, `WrongNumber`, `InvalidFact`,
/// `InvalidArgument`, `RunExists`, `Conflict`, `ArchiveRefused`) change
/// nothing. `Corrupt` is a storage failure: DESIGN §3 "a mismatch is a storage
/// failure naming the fact, never a silent repair".
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown run {0}")]
    UnknownRun(String),
    #[error("run {0} already exists")]
    RunExists(String),
    #[error("run {run} has ended; fact {n} cannot follow End")]
    Ended { run: String, n: u64 },
    #[error("run {run}: the next fact is {expected}, not {got}")]
    WrongNumber {
        run: String,
        expected: u64,
        got: String,
    },
    #[error("invalid fact: {0}")]
    InvalidFact(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("storage failure in run {run} at fact {n}: {reason}")]
    Corrupt { run: String, n: u64, reason: String },
    #[error("storage failure in blob {hash}: {reason}")]
    CorruptBlob { hash: String, reason: String },
    /// Encryption at rest (docs/custody.md): a store that needs a key
    /// not given, or a sealed row that does not open — never garbage.
    #[error("storage failure (encryption at rest): {0}")]
    Sealed(String),
    #[error("unknown blob {0}")]
    UnknownBlob(String),
    #[error("archive refused ({component}{}): {reason}", fact.map(|n| format!(", fact {n}")).unwrap_or_default())]
    ArchiveRefused {
        component: String,
        fact: Option<u64>,
        reason: String,
    },
    #[error("run {0} already exists with a different history")]
    Conflict(String),
    #[error("schema: {0}")]
    Schema(String),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A Postgres query failed (the text carries the server's message).
    #[error("postgres: {0}")]
    Postgres(String),
    /// The database cannot be reached; the text says where and why.
    #[error("{0}")]
    Unavailable(String),
    #[error("commit failed, nothing was stored: {0}")]
    CommitFailed(String),
    /// The connection was lost while COMMIT was in flight: the batch may or
    /// may not be stored. Reading the run's head tells which.
    #[error("commit outcome unknown (the connection to the database was lost during COMMIT): {0}")]
    CommitUnknown(String),
    #[error("the store's writer has stopped")]
    WriterGone,
    /// A read that needs a value met a hole: the value was redacted
    /// (docs/custody.md "Holes"). Not a storage failure: the chain still
    /// verifies, the content is gone on purpose.
    #[error(
        "run {run} at fact {n} needs value {hash}, which was redacted (a hole): its content is gone; a replay stops there (incomplete: hole), and no resume or fork can continue from state that holds it: fork from an earlier checkpoint, or supply the field with `flow fork --set`"
    )]
    Hole { run: String, n: u64, hash: String },
    /// A redaction refused because the run is still driven, or asked for
    /// nothing it can do (docs/custody.md "Holes").
    #[error("{0}")]
    Redaction(String),
    /// A deletion refused because the run is still driven (docs/custody.md).
    #[error(
        "run {run} is {why}: deleting it would pull its history from under its driver; halt it first (`flow halt {run}`), or delete with force"
    )]
    Active { run: String, why: String },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(run: &str, n: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            run: run.to_string(),
            n,
            reason: reason.into(),
        }
    }

    /// Whether this is a storage failure (a verified read found a mismatch).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. } | Error::CorruptBlob { .. } | Error::Sealed(_)
        )
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for Error {
    /// tokio-postgres's own text is only the error's kind ("db error"); the
    /// server's message is in its source.
    fn from(e: tokio_postgres::Error) -> Error {
        Error::Postgres(match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        })
    }
}

/// A malformed run id given as an argument.
impl From<flow_abi::fact::IdError> for Error {
    fn from(e: flow_abi::fact::IdError) -> Error {
        Error::InvalidArgument(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
