//! The last lines a Tool process wrote to its stderr.
//!
//! A child's stderr is drained into tracing line by line
//! ([`crate::child::start`]); the last [`TAIL_BYTES`] of it are also kept
//! here, so that when the process ends before answering describe (a Python
//! traceback at import, a missing module, a bad flag) the refusal can say
//! what the process said instead of only that it ended.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How much of the end of stderr is kept.
pub const TAIL_BYTES: usize = 8 * 1024;

/// The tail of one process's stderr; cheap to clone (shared).
#[derive(Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<Lines>>,
    closed: watch::Receiver<bool>,
}

/// The writing end, held by the task that drains stderr; dropping it (at
/// stderr's end) marks the tail complete.
pub struct TailWriter {
    lines: Arc<Mutex<Lines>>,
    closed: watch::Sender<bool>,
}

#[derive(Default)]
struct Lines {
    lines: VecDeque<String>,
    bytes: usize,
    dropped: bool,
}

/// A new tail and the writer that fills it.
pub fn tail() -> (TailWriter, StderrTail) {
    let lines = Arc::new(Mutex::new(Lines::default()));
    let (tx, rx) = watch::channel(false);
    (
        TailWriter {
            lines: lines.clone(),
            closed: tx,
        },
        StderrTail { lines, closed: rx },
    )
}

impl TailWriter {
    /// Keeps `line`, forgetting the oldest lines beyond [`TAIL_BYTES`] (a
    /// line longer than that keeps its end).
    pub fn push(&self, line: &str) {
        let line = if line.len() > TAIL_BYTES {
            let mut cut = line.len() - TAIL_BYTES;
            while !line.is_char_boundary(cut) {
                cut += 1;
            }
            &line[cut..]
        } else {
            line
        };
        let mut l = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        l.bytes += line.len() + 1;
        l.lines.push_back(line.to_string());
        while l.bytes > TAIL_BYTES {
            let Some(old) = l.lines.pop_front() else {
                break;
            };
            l.bytes -= old.len() + 1;
            l.dropped = true;
        }
    }
}

impl Drop for TailWriter {
    fn drop(&mut self) {
        let _ = self.closed.send(true);
    }
}

impl StderrTail {
    /// The tail once stderr has ended (waiting at most `within` for the
    /// drain to reach its end), or `None` when the process wrote nothing.
    pub async fn ended(&self, within: Duration) -> Option<String> {
        let mut closed = self.closed.clone();
        let _ = tokio::time::timeout(within, closed.wait_for(|c| *c)).await;
        self.text()
    }

    /// The lines kept so far, `…` first when older ones were dropped.
    pub fn text(&self) -> Option<String> {
        let l = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if l.lines.is_empty() {
            return None;
        }
        let mut out = String::new();
        if l.dropped {
            out.push_str("…\n");
        }
        for (i, line) in l.lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(line);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_last_lines_within_the_bound() {
        let (w, t) = tail();
        assert_eq!(t.text(), None);
        for i in 0..2000 {
            w.push(&format!("line {i}"));
        }
        drop(w);
        let text = t.ended(Duration::from_secs(1)).await.unwrap();
        assert!(text.len() <= TAIL_BYTES + 4, "{}", text.len());
        assert!(text.starts_with("…\n"));
        assert!(text.ends_with("line 1999"));
        assert!(!text.contains("line 1000\n"));
    }

    #[tokio::test]
    async fn a_long_line_keeps_its_end() {
        let (w, t) = tail();
        w.push(&"é".repeat(TAIL_BYTES));
        w.push("Error: the end");
        drop(w);
        let text = t.ended(Duration::from_secs(1)).await.unwrap();
        assert!(text.ends_with("\nError: the end"), "{text}");
        assert!(text.len() <= TAIL_BYTES + 4);
    }
}
