//! The question a permanent command (`flow delete`, `flow redact`) asks
//! before it changes anything: `--yes`, or `y` typed on a terminal. Without
//! a terminal it refuses, saying to pass `--yes`.

use super::Global;
use crate::error::{Error, Result};
use std::io::{BufRead, IsTerminal, Write};

/// What a permanent command asks.
pub(super) struct Question {
    /// `--yes` was given: nothing is asked.
    pub yes: bool,
    /// Without a terminal: "deleting is permanent: pass --yes to …".
    pub gerund: &'static str,
    /// What it would do, after "pass --yes to " and in the question.
    pub what: String,
    /// Before the place: "from" (delete … from the store) or "in".
    pub preposition: &'static str,
    /// After the place in the question, before " [y/N]".
    pub detail: &'static str,
    /// Answered with anything but yes: "nothing was …".
    pub declined: &'static str,
}

/// Where the command acts: the server, or the store under `--data`.
fn place(g: &Global) -> String {
    match &g.server {
        Some(url) => format!("the server at {url}"),
        None => format!("the store at {}", g.data.display()),
    }
}

/// Confirms the question (module documentation).
pub(super) fn confirmed(g: &Global, q: Question) -> Result<()> {
    if q.yes {
        return Ok(());
    }
    let place = place(g);
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::Refused(format!(
            "{} is permanent: pass --yes to {} {} {place}",
            q.gerund, q.what, q.preposition
        )));
    }
    eprint!("{} {} {place}{}? [y/N] ", q.what, q.preposition, q.detail);
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::Refused(format!("standard input: {e}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Error::Refused(format!("nothing was {}", q.declined)))
    }
}
