//! SSE subscribers in their own process: this bench's executable started
//! as `STEPS --bench-subscribers BASE RUN COUNT STAMPS`. It opens COUNT
//! streams of `GET /v1/runs/RUN/events` (from the first fact), prints
//! `connected` once every one is answered, and reads each until its End.
//! Then it prints one JSON line: how many Replies arrived, how many facts
//! a stream missed or saw twice, and the delivery latency of every Reply on
//! every stream, from the Tool's answer (its stamp in STAMPS, written by
//! the bench's Tool process, see `tool.rs`) to the Reply's arrival here,
//! and the CPU this process spent reading them (it shares the machine's
//! cores with the server it measures).
//!
//! One async thread, so the subscribers take at most one of the machine's
//! cores from the server they measure, and each stream is read as plainly
//! as it can be (its own connection, the chunked body decoded here, each
//! frame looked at only for what is reported): on this shared machine
//! what the subscribers spend is taken from the server.

use super::tool::now_ns;
use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};

/// The argument that makes this executable the subscribers' process.
pub const ROLE: &str = "--bench-subscribers";

/// What one stream saw: each Reply's call and arrival, and its gaps.
#[derive(Default)]
struct Seen {
    replies: Vec<(String, u128)>,
    missed: u64,
    repeated: u64,
    ended: bool,
}

/// A frame's fact number, kind and (a Reply's) call id.
type Frame<'a> = (u64, &'a [u8], Option<&'a [u8]>);

/// The searches a stream makes in every frame, built once.
struct Finders {
    frame_end: memchr::memmem::Finder<'static>,
    call: memchr::memmem::Finder<'static>,
}

impl Finders {
    fn new() -> Finders {
        Finders {
            frame_end: memchr::memmem::Finder::new(b"\n\n"),
            call: memchr::memmem::Finder::new(b"\"call\":\""),
        }
    }
}

/// One SSE frame's `id` and `event` (and, for a Reply, its call), read
/// straight from the bytes: the subscribers' process parses millions of
/// frames on the cores the server it measures runs on, so it looks only
/// at what it reports (the lines' starts; a Reply's `call`).
fn frame<'a>(f: &'a [u8], find: &Finders) -> Option<Frame<'a>> {
    let (mut id, mut event, mut call) = (None, &b""[..], None);
    let mut rest = f;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        if let Some(v) = line.strip_prefix(b"id: ") {
            id = std::str::from_utf8(v).ok()?.parse().ok();
        } else if let Some(v) = line.strip_prefix(b"event: ") {
            event = v;
        } else if let Some(v) = line.strip_prefix(b"data: ")
            && event == b"Reply"
        {
            let at = find.call.find(v)? + find.call.needle().len();
            let end = memchr::memchr(b'"', &v[at..])?;
            call = Some(&v[at..at + end]);
        }
    }
    Some((id?, event, call))
}

/// The body of a chunked HTTP/1.1 response, as it arrives: `feed` takes
/// what a read gave and appends the chunks' payload to `out`; `done` once
/// the last (empty) chunk came.
#[derive(Default)]
struct Chunked {
    /// Bytes of the current chunk still to come (then its CRLF).
    left: usize,
    /// The CRLF after a chunk's data is still to be skipped.
    crlf: bool,
    /// An incomplete size line kept from the last read.
    line: Vec<u8>,
    done: bool,
}

impl Chunked {
    fn feed(&mut self, mut raw: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        while !raw.is_empty() && !self.done {
            if self.left > 0 {
                let n = self.left.min(raw.len());
                out.extend_from_slice(&raw[..n]);
                (self.left, raw) = (self.left - n, &raw[n..]);
                self.crlf = self.left == 0;
                continue;
            }
            // A size line (after the last chunk's CRLF): `hex[;ext]\r\n`.
            let Some(nl) = memchr::memchr(b'\n', raw) else {
                self.line.extend_from_slice(raw);
                return Ok(());
            };
            self.line.extend_from_slice(&raw[..nl]);
            raw = &raw[nl + 1..];
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if self.crlf {
                // The empty line that ends a chunk's data.
                if !line.is_empty() {
                    return Err("no CRLF after a chunk".into());
                }
                self.crlf = false;
                continue;
            }
            let hex = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
                .ok_or_else(|| format!("a bad chunk size line {line:?}"))?;
            self.left = size;
            self.done = size == 0;
        }
        Ok(())
    }
}

/// `GET path` on a connection of its own, over plain HTTP/1.1 (a
/// `text/event-stream` answer is one chunked body that never ends early):
/// the connection and the body's first bytes once the answer's head came.
async fn get(addr: &str, path: &str) -> (tokio::net::TcpStream, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("{addr}: {e}"));
    let _ = s.set_nodelay(true);
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("the request");
    let mut head = Vec::with_capacity(4096);
    let end = loop {
        if let Some(at) = memchr::memmem::find(&head, b"\r\n\r\n") {
            break at;
        }
        let n = s.read_buf(&mut head).await.expect("the answer's head");
        assert!(n > 0 && head.len() < 64 * 1024, "{path}: no answer head");
    };
    let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{path}: {text}");
    assert!(
        text.contains("transfer-encoding: chunked"),
        "{path}: not chunked: {text}"
    );
    let rest = head[end + 4..].to_vec();
    (s, rest)
}

async fn follow(addr: String, path: String, tx: tokio::sync::mpsc::Sender<()>) -> Seen {
    use tokio::io::AsyncReadExt;
    let find = Finders::new();
    let mut seen = Seen::default();
    let (mut s, first) = get(&addr, &path).await;
    let _ = tx.send(()).await;
    drop(tx);
    let mut last = 0u64;
    let (mut chunked, mut body) = (Chunked::default(), Vec::with_capacity(64 * 1024));
    let mut raw = first;
    raw.reserve(64 * 1024);
    'read: loop {
        if raw.is_empty() {
            match s.read_buf(&mut raw).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let at = now_ns();
        chunked
            .feed(&raw, &mut body)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        raw.clear();
        let mut start = 0;
        while let Some(end) = find.frame_end.find(&body[start..]) {
            let f = &body[start..start + end];
            start += end + 2;
            let Some((n, event, call)) = frame(f, &find) else {
                continue;
            };
            if n <= last {
                seen.repeated += 1;
                continue;
            }
            seen.missed += n - last - 1;
            last = n;
            if let Some(c) = call {
                seen.replies
                    .push((String::from_utf8_lossy(c).into_owned(), at));
            }
            if event == b"End" {
                seen.ended = true;
                break 'read;
            }
        }
        body.drain(..start);
        if chunked.done {
            break;
        }
    }
    seen
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs the subscribers: `args` are what follows [`ROLE`].
pub fn serve(args: &[String]) {
    let (base, run, count, stamps) = (
        args[0].clone(),
        args[1].clone(),
        args[2].parse::<usize>().expect("COUNT"),
        args[3].clone(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let summary = rt.block_on(async move {
        let addr = base
            .strip_prefix("http://")
            .expect("an http:// base")
            .trim_end_matches('/')
            .to_string();
        let path = format!("/v1/runs/{run}/events");
        let (tx, mut rx) = tokio::sync::mpsc::channel(count.max(1));
        let tasks: Vec<_> = (0..count)
            .map(|_| tokio::spawn(follow(addr.clone(), path.clone(), tx.clone())))
            .collect();
        drop(tx);
        let mut connected = 0;
        while rx.recv().await.is_some() {
            connected += 1;
        }
        println!("connected {connected}");
        let _ = std::io::stdout().flush();
        let cpu = super::harness::cpu_ms_of(std::process::id());
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.expect("a subscriber"));
        }
        let cpu = super::harness::cpu_ms_of(std::process::id()) - cpu;
        let stamped: HashMap<String, u128> = std::fs::read_to_string(&stamps)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (c, t) = l.split_once(' ')?;
                Some((c.to_string(), t.parse().ok()?))
            })
            .collect();
        let mut lat: Vec<f64> = all
            .iter()
            .flat_map(|s| s.replies.iter())
            .filter_map(|(c, at)| Some((*at as f64 - *stamped.get(c)? as f64) / 1e3))
            .collect();
        lat.sort_by(f64::total_cmp);
        json!({
            "streams": count,
            "ended": all.iter().filter(|s| s.ended).count(),
            "replies": all.iter().map(|s| s.replies.len()).sum::<usize>(),
            "stamped": lat.len(),
            "missed": all.iter().map(|s| s.missed).sum::<u64>(),
            "repeated": all.iter().map(|s| s.repeated).sum::<u64>(),
            "p50_us": percentile(&lat, 0.5),
            "p99_us": percentile(&lat, 0.99),
            "max_us": lat.last().copied().unwrap_or(f64::NAN),
            "cpu_ms": cpu,
        })
    });
    println!("{summary}");
}

/// The subscribers' process, started from the bench: connected once
/// [`Subscribers::start`] returns.
pub struct Subscribers {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Subscribers {
    pub fn start(base: &str, run: &str, count: usize, stamps: &std::path::Path) -> Subscribers {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .arg(ROLE)
            .args([base, run, &count.to_string()])
            .arg(stamps)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the subscribers' process");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        assert!(
            line.starts_with("connected"),
            "the subscribers did not connect: {line:?}"
        );
        Subscribers { child, out }
    }

    /// Waits for every stream's End: the summary line.
    pub fn finish(mut self) -> Json {
        let mut line = String::new();
        let _ = self.out.read_line(&mut line);
        let _ = self.child.wait();
        serde_json::from_str(&line).unwrap_or(Json::Null)
    }
}

impl Drop for Subscribers {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
