//! The driver's errors, each with the CLI exit code DESIGN §6 gives it.

/// Why a command could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments or input: nothing was recorded.
    #[error("{0}")]
    Refused(String),
    /// The program does not check.
    #[error("the program does not check:\n  {}", .0.join("\n  "))]
    Check(Vec<String>),
    /// Declarations the run can reach have no fitting binding.
    #[error("the run is refused, nothing was recorded:\n  {}", .0.join("\n  "))]
    Bind(Vec<String>),
    /// No such run, call or checkpoint.
    #[error("{0}")]
    NotFound(String),
    /// The call named is not open.
    #[error("{0}")]
    Conflict(String),
    /// A history that cannot be read back as a run.
    #[error("unreadable: {0}")]
    Unreadable(String),
    /// The store could not accept or give back a fact.
    #[error("storage failure: {0}")]
    Store(#[from] flow_store::Error),
}

impl Error {
    /// The exit code (DESIGN §6): 2 refused, 5 cut short by a storage
    /// failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Store(e)
                if !matches!(
                    e,
                    flow_store::Error::InvalidArgument(_) | flow_store::Error::UnknownRun(_)
                ) =>
            {
                5
            }
            _ => 2,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
