//! Reading protocol lines with a hard size limit, and skimming a line's
//! envelope.
//!
//! host-boundary.txt, "Decoding": a reply "larger than the host's size limit"
//! is BadReply, "a value the program can handle, never a fault". So an
//! oversized line must still be tied to its call, without ever holding it in
//! memory. The reader keeps a line up to the limit; past it, it stops
//! buffering and skims the rest of the line through a small JSON scanner
//! that keeps only short member values (`id`, `method`, and the members of
//! `params` such as `run` and `call`), so the call can be answered BadReply.
//! Memory stays bounded by the limit whatever the peer sends.
//!
//! The same skim reads the envelope of a line within the limit that the
//! strict reader refuses (a number such as `1e5000` past its limits, a
//! duplicate key, a lone surrogate, nesting too deep): the envelope says
//! which call the line answers before its values are judged (PRO-13). The
//! skim is lenient about everything but the members it keeps: a kept member
//! that occurs twice at its place keeps nothing, so an ambiguous line is
//! tied to no call.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The most bytes of one skimmed member value that are kept.
const KEEP: usize = 4096;

/// One line read from a peer.
#[derive(Debug)]
pub enum Line {
    /// A line within the limit, without its line ending.
    Text(String),
    /// A line within the limit that is not UTF-8.
    NotUtf8,
    /// A line past the limit: its length and what the skim kept of it.
    Oversized { len: usize, skim: Skim },
}

/// Reads the next line; `Ok(None)` at end of input. A final line without a
/// newline counts as a line.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    limit: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Line>> {
    buf.clear();
    let mut skim: Option<Skim> = None;
    let mut len = 0usize;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            if len == 0 {
                return Ok(None);
            }
            break;
        }
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        len = len.saturating_add(part.len());
        match &mut skim {
            Some(s) => s.feed(part),
            None if len > limit => {
                let mut s = Skim::default();
                s.feed(buf);
                s.feed(part);
                buf.clear();
                buf.shrink_to(64 * 1024);
                skim = Some(s);
            }
            None => buf.extend_from_slice(part),
        }
        let consumed = done.unwrap_or(chunk.len());
        r.consume(consumed);
        if done.is_some() {
            break;
        }
    }
    if let Some(skim) = skim {
        return Ok(Some(Line::Oversized { len, skim }));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    match std::str::from_utf8(buf) {
        Ok(s) => Ok(Some(Line::Text(s.to_string()))),
        Err(_) => Ok(Some(Line::NotUtf8)),
    }
}

/// A streaming scan of one JSON object that keeps the raw text of short
/// members at the top level and inside `params`.
#[derive(Debug, Default)]
pub struct Skim {
    /// Members seen: (`id` | `method` | `params.run` ...) → raw JSON text,
    /// or `None` when it was too long to keep.
    kept: Vec<(String, Option<Vec<u8>>)>,
    /// Nesting depth outside strings.
    depth: usize,
    /// Whether each of the first three levels is an object.
    is_obj: [bool; 3],
    in_str: bool,
    esc: bool,
    /// In an object at depth 1 or 2: reading a key, then its value.
    expect_key: bool,
    key: Vec<u8>,
    reading_key: bool,
    /// The member of the top-level object whose value we are in.
    top_key: Option<String>,
    /// The member being kept, its depth, its text, and whether it overflowed.
    capture: Option<(String, usize, Vec<u8>, bool)>,
}

impl Skim {
    /// Skims one whole line.
    pub fn of(line: &[u8]) -> Skim {
        let mut s = Skim::default();
        s.feed(line);
        s
    }

    /// The kept raw text of a member (`"id"`, `"method"`, `"params.call"`),
    /// if it occurs once and was short enough to keep whole.
    pub fn member(&self, path: &str) -> Option<&str> {
        let mut found = self.kept.iter().filter(|(k, _)| k == path);
        match (found.next(), found.next()) {
            (Some((_, Some(v))), None) => std::str::from_utf8(v).ok(),
            _ => None,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if let Some((_, _, text, over)) = &mut self.capture {
            if text.len() < KEEP {
                text.push(b);
            } else {
                *over = true;
            }
        }
        if self.in_str {
            if self.reading_key && !self.esc && b != b'"' && self.key.len() < 256 {
                self.key.push(b);
            }
            if self.esc {
                self.esc = false;
            } else if b == b'\\' {
                self.esc = true;
            } else if b == b'"' {
                self.in_str = false;
                if self.reading_key {
                    self.reading_key = false;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_str = true;
                if self.expect_key && self.in_tracked_object() {
                    self.reading_key = true;
                    self.key.clear();
                    self.expect_key = false;
                }
            }
            b':' if self.in_tracked_object() && !self.key.is_empty() => {
                // A member's value starts after this byte.
                let key = String::from_utf8_lossy(&self.key).into_owned();
                self.key.clear();
                let path = match (self.depth, &self.top_key) {
                    (1, _) => Some(key.clone()),
                    (2, Some(top)) if top == "params" => Some(format!("params.{key}")),
                    _ => None,
                };
                if self.depth == 1 {
                    self.top_key = Some(key);
                }
                if let Some(p) = path {
                    self.capture = Some((p, self.depth, Vec::new(), false));
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if let Some(slot) = self.is_obj.get_mut(self.depth - 1) {
                    *slot = b == b'{';
                }
                self.expect_key = b == b'{';
            }
            b'}' | b']' => {
                self.end_member();
                self.depth = self.depth.saturating_sub(1);
                self.expect_key = false;
            }
            b',' => {
                self.end_member();
                self.expect_key = self.in_tracked_object();
            }
            _ => {}
        }
    }

    /// At depth 1 or 2 in an object.
    fn in_tracked_object(&self) -> bool {
        (self.depth == 1 || self.depth == 2) && self.is_obj.get(self.depth - 1) == Some(&true)
    }

    /// A `,` or closing bracket at the capture's own depth ends its value.
    fn end_member(&mut self) {
        let ends = matches!(&self.capture, Some((_, d, _, _)) if *d == self.depth);
        if ends && let Some((path, _, mut text, over)) = self.capture.take() {
            text.pop(); // the delimiter itself
            let kept = (!over).then(|| text.trim_ascii().to_vec());
            self.kept.push((path, kept));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let mut r = tokio::io::BufReader::with_capacity(7, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(l) = read_line(&mut r, limit, &mut buf).await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn short_lines_and_oversized_skim() {
        let big = "x".repeat(100);
        let text = format!(
            "{{\"a\":1}}\r\n{{\"jsonrpc\":\"2.0\",\"method\":\"reply\",\"params\":{{\"call\":\"c-1\",\"outcome\":{{\"Ok\":[\"{big}\",{{\"run\":\"nope\"}}]}},\"run\":\"r\\\"1\"}}}}\nlast"
        );
        let out = lines(text.as_bytes(), 50).await;
        assert_eq!(out.len(), 3);
        assert!(matches!(&out[0], Line::Text(t) if t == "{\"a\":1}"));
        match &out[1] {
            Line::Oversized { len, skim } => {
                assert!(*len > 100);
                assert_eq!(skim.member("method"), Some("\"reply\""));
                assert_eq!(skim.member("params.call"), Some("\"c-1\""));
                assert_eq!(skim.member("params.run"), Some("\"r\\\"1\""));
                assert_eq!(skim.member("run"), None);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&out[2], Line::Text(t) if t == "last"));
    }

    /// A member kept twice at its place is ambiguous and keeps nothing; one
    /// too long to keep still counts as an occurrence.
    #[test]
    fn duplicate_members_keep_nothing() {
        let s = Skim::of(br#"{"method":"reply","params":{"call":"a","run":"r","call":"b"}}"#);
        assert_eq!(s.member("params.call"), None);
        assert_eq!(s.member("params.run"), Some("\"r\""));
        let long = "y".repeat(KEEP + 10);
        let line = format!(r#"{{"params":{{"call":"{long}","call":"b"}}}}"#);
        assert_eq!(Skim::of(line.as_bytes()).member("params.call"), None);
        // Values past the strict reader's limits do not disturb the skim.
        let s = Skim::of(br#"{"jsonrpc":"2.0","method":"reply","params":{"run":"r","call":"c","outcome":{"Ok":{"y":1e5000,"y":[[[[]]]]}}}}"#);
        assert_eq!(s.member("params.call"), Some("\"c\""));
        assert_eq!(s.member("method"), Some("\"reply\""));
    }
}
