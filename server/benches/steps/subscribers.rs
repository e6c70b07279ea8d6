//! SSE subscribers in their own process: this bench's executable started
//! as `STEPS --bench-subscribers BASE RUN COUNT STAMPS`. It opens COUNT
//! streams of `GET /v1/runs/RUN/events` (from the first fact), prints
//! `connected` once every one is answered, and reads each until its End.
//! Then it prints one JSON line: how many Replies arrived, how many facts
//! a stream missed or saw twice, and the delivery latency of every Reply on
//! every stream, from the Tool's answer (its stamp in STAMPS, written by
//! the bench's Tool process, see `tool.rs`) to the Reply's arrival here.
//!
//! One async thread, so the subscribers take at most one of the machine's
//! cores from the server they measure.

use super::tool::now_ns;
use futures_util::StreamExt;
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

/// One SSE frame's `id` and `event` (and, for a Reply, its call), read
/// straight from the bytes: the subscribers' process parses millions of
/// frames and must not be what the figures measure.
fn frame(f: &[u8]) -> Option<Frame<'_>> {
    let (mut id, mut event, mut call) = (None, &b""[..], None);
    for line in f.split(|b| *b == b'\n') {
        if let Some(v) = line.strip_prefix(b"id: ") {
            id = std::str::from_utf8(v).ok()?.parse().ok();
        } else if let Some(v) = line.strip_prefix(b"event: ") {
            event = v;
        } else if let Some(v) = line.strip_prefix(b"data: ")
            && event == b"Reply"
        {
            let key = b"\"call\":\"";
            let at = v.windows(key.len()).position(|w| w == key)? + key.len();
            let end = v[at..].iter().position(|b| *b == b'"')?;
            call = Some(&v[at..at + end]);
        }
    }
    Some((id?, event, call))
}

async fn follow(client: reqwest::Client, url: String, tx: tokio::sync::mpsc::Sender<()>) -> Seen {
    let mut seen = Seen::default();
    let r = match client.get(&url).send().await {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => panic!("{url}: {}", r.status()),
        Err(e) => panic!("{url}: {e}"),
    };
    let _ = tx.send(()).await;
    drop(tx);
    let mut last = 0u64;
    let mut buf: Vec<u8> = Vec::new();
    let mut body = r.bytes_stream();
    'read: while let Some(Ok(chunk)) = body.next().await {
        let at = now_ns();
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let f = &buf[start..start + end];
            start += end + 2;
            let Some((n, event, call)) = frame(f) else {
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
        buf.drain(..start);
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
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let url = format!("{base}/v1/runs/{run}/events");
        let (tx, mut rx) = tokio::sync::mpsc::channel(count.max(1));
        let tasks: Vec<_> = (0..count)
            .map(|_| tokio::spawn(follow(client.clone(), url.clone(), tx.clone())))
            .collect();
        drop(tx);
        let mut connected = 0;
        while rx.recv().await.is_some() {
            connected += 1;
        }
        println!("connected {connected}");
        let _ = std::io::stdout().flush();
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.expect("a subscriber"));
        }
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
