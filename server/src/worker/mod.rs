//! `flow worker --server URL --tools flow.toml`: serves the Tools a
//! flow.toml names to a flowd cluster from another host (docs/deploy.md
//! "Workers").
//!
//! It starts the Tool processes (or MCP servers) as a host starts them
//! ([`tools::Served`]), registers what they serve by identity and
//! fingerprint, and then long-polls the server for calls: each call goes
//! to its implementation at once (at most `--concurrency` out), and each
//! outcome is sent back as soon as it comes, batched with whatever else is
//! ready. The server takes each reply once; a reply it drops (the call was
//! settled meanwhile) is only logged.
//!
//! * The server unreachable: registration, polls and replies are tried
//!   again after jittered waits that double up to 1 s
//!   ([`crate::client::backoff`]); the Tools keep running. A worker the server judged lost
//!   (404) registers again, under a new id; replies of calls it got
//!   before go back under the old one, and are admitted if the server has
//!   not settled those calls yet.
//! * SIGINT or SIGTERM drains the worker: it takes no more calls (its
//!   polls ask for none, and keep it heard from), the calls it holds get
//!   `--drain-seconds` to finish and their replies are sent; a call still
//!   out when the grace ends is handed back — abandoned without a reply,
//!   never answered Unknown — and the worker leaves (`DELETE`), so the
//!   server settles it at once as a lost worker's call: queued again for
//!   another worker with `resend = true`, else Unknown. Only then are the
//!   Tools stopped: they run under a token of their own, so the signal
//!   does not cancel the calls they are serving. A second signal ends the
//!   grace at once.
//!
//! Exit codes: 0 after a signal; 2 refused (no `--server`, a flow.toml
//! that does not read or bind, a server that refuses the worker's token).

mod exchange;
#[cfg(test)]
mod tests;
mod tools;

use crate::client::{self, Client};
use crate::error::{Error, Result};
use crate::http::workers::{CallKey, PollAnswer, ReplyItem, WorkCall};
use backon::{ExponentialBuilder, Retryable};
use exchange::{Failure, Session};
use flow_abi::fact::CallId;
use flow_store::{RunId, ServedTool};
use flow_tools::manifest::Manifest;
use flow_tools::outcome::CallRequest;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tools::Served;

/// `flow worker`'s own flags (`--server` and `--token` are the global
/// ones).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The flow.toml whose Tools this worker serves; its tables name the
    /// FlowSpec files (beside it) that declare them.
    #[arg(long = "tools", value_name = "FLOW.toml")]
    pub tools: PathBuf,
    /// How the servers name this worker (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Calls served at once, at most.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// On SIGTERM or SIGINT, how long the calls out may take to finish
    /// before those still out are handed back to the server.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_seconds: u64,
}

/// Replies sent in one request, at most.
const BATCH: usize = 256;
/// How long a stopping worker waits for its last replies to be sent, and
/// for the server to hear that it leaves.
const SEND_GRACE: Duration = Duration::from_secs(10);
/// The longest wait before trying an unreachable server again: short
/// beside the server's `--worker-timeout` (5 s by default), because a
/// worker silent that long is judged lost and its calls settled. A server
/// restarted in a rolling restart hears its workers again within a second
/// of being back (with 5 s, a worker could wait out its judgement after a
/// restart of 4 s: `tests/rolling.rs` saw a run faulted so).
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The waits between tries of registration and polls: 125–250 ms at
/// first, doubling to 0.5–1 s.
fn reconnect() -> ExponentialBuilder {
    client::backoff::policy(Duration::from_millis(250), BACKOFF_MAX)
}

/// The waits between tries of a batch of replies: 50–100 ms at first,
/// doubling to 0.5–1 s.
fn redeliver() -> ExponentialBuilder {
    client::backoff::policy(Duration::from_millis(100), BACKOFF_MAX)
}

/// An outcome to send back, under the worker id the call came to.
struct Reply {
    worker: String,
    run: String,
    call: String,
    outcome: Json,
}

/// Runs the worker until SIGINT or SIGTERM.
pub async fn run(server: Option<String>, token: Option<String>, args: WorkerArgs) -> Result<u8> {
    let server = server.ok_or_else(|| {
        Error::Refused(
            "flow worker needs --server URL (or FLOW_SERVER): the flowd server whose runs it serves"
                .into(),
        )
    })?;
    if !server.starts_with("http://") {
        return Err(Error::Refused(format!(
            "--server {}: a worker speaks plain http:// (put TLS in a proxy in front of the servers)",
            server.trim_end_matches('/')
        )));
    }
    // Proxies come from the environment (`HTTP_PROXY`, `NO_PROXY`), as
    // for any HTTP client; each request has its own deadline.
    let options = client::Options {
        timeout: Duration::from_secs(30),
        env_proxy: true,
    };
    let client = Client::new(&server, token, options)?;
    let manifest = Manifest::read(&args.tools).map_err(|e| Error::Refused(e.to_string()))?;
    // The first signal drains; a second ends the grace at once.
    let (shutdown, hurry) = (CancellationToken::new(), CancellationToken::new());
    let (first, second) = (shutdown.clone(), hurry.clone());
    tokio::spawn(async move {
        crate::http::cli::wait_for_signal().await;
        tracing::info!("draining: no more calls taken; the calls out get their grace");
        first.cancel();
        crate::http::cli::wait_for_signal().await;
        tracing::info!("a second signal: the calls still out are handed back now");
        second.cancel();
    });
    // The Tools' own token: cancelled only once the drain is over, so the
    // signal does not reach the calls they serve.
    let tools = CancellationToken::new();
    let served = Served::bind(&manifest, &tools).await;
    let _stop_tools = tools.clone().drop_guard();
    let served = Arc::new(served?);
    let name = args.name.clone().unwrap_or_else(host_name);
    let worker = Worker {
        client,
        served,
        name,
        concurrency: args.concurrency,
        drain: Duration::from_secs(args.drain_seconds),
        shutdown,
        hurry,
    };
    let Some(session) = worker.register().await? else {
        worker.served.shutdown().await;
        return Ok(0);
    };
    {
        // The first line says the worker is serving; tests and scripts wait
        // for it. A closed stdout must not stop the worker.
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "flow worker {} serving {} declarations for {}",
            session.worker,
            worker.served.tools.len(),
            worker.client.base()
        );
        let _ = out.flush();
    }
    worker.serve(session).await
}

struct Worker {
    client: Client,
    served: Arc<Served>,
    name: String,
    concurrency: u32,
    /// `--drain-seconds`.
    drain: Duration,
    /// The first signal: take no more calls.
    shutdown: CancellationToken,
    /// A second signal: hand back what is still out now.
    hurry: CancellationToken,
}

impl Worker {
    /// [`register`] this worker's Tools.
    async fn register(&self) -> Result<Option<Session>> {
        register(&self.client, &self.name, &self.served.tools, &self.shutdown).await
    }

    async fn serve(&self, mut session: Session) -> Result<u8> {
        let (tx, rx) = mpsc::unbounded_channel::<Reply>();
        let sender = tokio::spawn(send_replies(self.client.clone(), rx, session.reply_limit));
        let mut calls: JoinSet<(RunId, CallId)> = JoinSet::new();
        let mut out: HashMap<(RunId, CallId), AbortHandle> = HashMap::new();
        let mut failure = None;
        while !self.shutdown.is_cancelled() {
            while let Some(done) = calls.try_join_next() {
                if let Ok(key) = done {
                    out.remove(&key);
                }
            }
            let free = self.concurrency.saturating_sub(calls.len() as u32);
            if free == 0 {
                tokio::select! {
                    Some(Ok(key)) = calls.join_next() => { out.remove(&key); }
                    _ = self.shutdown.cancelled() => {}
                }
                continue;
            }
            let polled = tokio::select! {
                r = poll(&self.client, &session, free.min(256)) => r,
                _ = self.shutdown.cancelled() => break,
            };
            let answer = match polled {
                Ok(a) => a,
                Err(Failure::Gone) => {
                    tracing::warn!(worker = %session.worker, "the server judged this worker lost; registering again");
                    match self.register().await {
                        Ok(Some(s)) => session = s,
                        Ok(None) => break,
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                    continue;
                }
                Err(e) => {
                    failure = Some(Error::Refused(e.to_string()));
                    break;
                }
            };
            for key in answer.cancels.iter().filter_map(ids) {
                if let Some(h) = out.remove(&key) {
                    tracing::info!(run.id = %key.0, call.id = %key.1, "cancelled by the server");
                    h.abort();
                }
            }
            for c in answer.calls {
                let Some(req) = request(c) else {
                    tracing::warn!("a call whose ids or args do not parse was passed over");
                    continue;
                };
                let key = (req.run.clone(), req.call.clone());
                if out.contains_key(&key) {
                    // Out here already (sent again): its reply will come.
                    continue;
                }
                let (served, tx, worker) =
                    (self.served.clone(), tx.clone(), session.worker.clone());
                let k = key.clone();
                let h = calls.spawn(async move {
                    if let Some(o) = served.call(req).await {
                        let _ = tx.send(Reply {
                            worker,
                            run: k.0.to_string(),
                            call: k.1.to_string(),
                            outcome: o.into_outcome().to_json(),
                        });
                    }
                    k
                });
                out.insert(key, h);
            }
        }
        if failure.is_none() {
            self.drain(&session, &mut calls, &mut out).await;
        }
        // Handed back: abandoned without a reply (the Tool is told to
        // cancel); the server settles each as a lost worker's call once
        // this worker has left.
        if !calls.is_empty() {
            tracing::warn!(
                calls = calls.len(),
                "handing back the calls still out: the server sends them again (resend = true) or settles them"
            );
        }
        calls.abort_all();
        while calls.join_next().await.is_some() {}
        drop(tx);
        let _ = tokio::time::timeout(SEND_GRACE, sender).await;
        if let Err(e) = self.client.delete_worker(&session.worker).await {
            tracing::warn!(
                "could not tell the server this worker leaves ({e}); it will judge it lost in its time"
            );
        }
        self.served.shutdown().await;
        match failure {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }
}

impl Worker {
    /// The drain: the calls out get `--drain-seconds` (or until a second
    /// signal) to finish, their replies going out as they come. Meanwhile
    /// the worker polls for no calls (`max: 0`): it stays heard from, so
    /// the server does not judge it lost while it finishes them, and it
    /// still hears of cancels.
    async fn drain(
        &self,
        session: &Session,
        calls: &mut JoinSet<(RunId, CallId)>,
        out: &mut HashMap<(RunId, CallId), AbortHandle>,
    ) {
        let until = tokio::time::Instant::now() + self.drain;
        if !calls.is_empty() {
            tracing::info!(
                calls = calls.len(),
                grace_s = self.drain.as_secs(),
                "draining the calls out"
            );
        }
        // One heartbeat at a time, kept across the calls that finish
        // meanwhile; tried again after any failure (a lost worker is
        // settled by the server anyway once this one leaves).
        let beat = || {
            (|| exchange::poll(&self.client, session, 0))
                .retry(reconnect())
                .notify(|e, _| tracing::warn!("poll while draining: {e}"))
        };
        let mut heartbeat = Box::pin(beat());
        while !calls.is_empty() {
            tokio::select! {
                done = calls.join_next() => {
                    if let Some(Ok(key)) = done {
                        out.remove(&key);
                    }
                }
                answer = &mut heartbeat => {
                    heartbeat = Box::pin(beat());
                    let cancels = answer.map(|a| a.cancels).unwrap_or_default();
                    for key in cancels.iter().filter_map(ids) {
                        if let Some(h) = out.remove(&key) {
                            tracing::info!(run.id = %key.0, call.id = %key.1, "cancelled by the server");
                            h.abort();
                        }
                    }
                }
                _ = tokio::time::sleep_until(until) => return,
                _ = self.hurry.cancelled() => return,
            }
        }
    }
}

/// Registers `tools` under `name`, trying again while the server cannot
/// be reached (or is busy, or lost this worker meanwhile), with the
/// [`reconnect`] waits; `None` when `stop` comes first. A refusal (a bad
/// token, not a flowd server) is not tried again.
async fn register(
    client: &Client,
    name: &str,
    tools: &[ServedTool],
    stop: &CancellationToken,
) -> Result<Option<Session>> {
    let tries = (|| exchange::register(client, name, tools))
        .retry(reconnect())
        .when(|f| !matches!(f, Failure::Refused(_)))
        .notify(|e, wait| tracing::warn!("cannot register: {e}; trying again in {wait:.1?}"));
    tokio::select! {
        r = tries => match r {
            Ok(s) => {
                tracing::info!(worker = %s.worker, "registered");
                Ok(Some(s))
            }
            Err(e) => Err(Error::Refused(e.to_string())),
        },
        _ = stop.cancelled() => Ok(None),
    }
}

/// The ids a cancel names; `None` for text that is not a run and call id.
fn ids(k: &CallKey) -> Option<(RunId, CallId)> {
    Some((RunId::parse(&k.run).ok()?, CallId::parse(&k.call).ok()?))
}

/// A call from a poll answer; `None` for one whose ids or args do not
/// parse.
fn request(c: WorkCall) -> Option<CallRequest> {
    let Json::Object(args) = c.args else {
        return None;
    };
    Some(CallRequest {
        run: RunId::parse(&c.run).ok()?,
        call: CallId::parse(&c.call).ok()?,
        tool: c.tool,
        args,
    })
}

/// Sends outcomes as they come: whatever is ready goes in one request (at
/// most [`BATCH`], within the server's body limit), tried again while the
/// server cannot be reached. Ends when the channel closes and is drained.
async fn send_replies(client: Client, mut rx: mpsc::UnboundedReceiver<Reply>, limit: usize) {
    // A reply's JSON may take this much of a request body.
    let room = limit.saturating_sub(1024).max(1024);
    while let Some(first) = rx.recv().await {
        let mut ready = vec![first];
        while ready.len() < BATCH {
            match rx.try_recv() {
                Ok(r) => ready.push(r),
                Err(_) => break,
            }
        }
        let mut by_worker: BTreeMap<String, Vec<ReplyItem>> = BTreeMap::new();
        for r in ready {
            let mut item = ReplyItem {
                run: r.run,
                call: r.call,
                outcome: r.outcome,
            };
            if size_of(&item) > room {
                item.outcome = json!({"BadReply": format!("the reply is larger than the server takes ({room} bytes)")});
            }
            by_worker.entry(r.worker).or_default().push(item);
        }
        for (worker, items) in by_worker {
            for chunk in chunks(items, room) {
                deliver(&client, &worker, chunk).await;
            }
        }
    }
}

/// Splits replies into requests whose bodies stay within `room`.
fn chunks(items: Vec<ReplyItem>, room: usize) -> Vec<Vec<ReplyItem>> {
    let mut out: Vec<Vec<ReplyItem>> = Vec::new();
    let mut size = 0;
    for i in items {
        let n = size_of(&i) + 1;
        if out.is_empty() || size + n > room {
            out.push(Vec::new());
            size = 0;
        }
        size += n;
        if let Some(last) = out.last_mut() {
            last.push(i);
        }
    }
    out
}

/// The bytes a reply takes in a request body.
fn size_of(item: &ReplyItem) -> usize {
    serde_json::to_string(item).map_or(usize::MAX, |s| s.len())
}

/// Polls for at most `max` calls, tried again while the server cannot be
/// reached (or is busy), with the [`reconnect`] waits; each poll starts
/// them over.
async fn poll(
    client: &Client,
    session: &Session,
    max: u32,
) -> std::result::Result<PollAnswer, Failure> {
    (|| exchange::poll(client, session, max))
        .retry(reconnect())
        .when(|f| matches!(f, Failure::Transient(_)))
        .notify(|e, wait| tracing::warn!("poll: {e}; trying again in {wait:.1?}"))
        .await
}

/// Sends one batch of replies under `worker`, tried again while the
/// server cannot be reached (or is busy).
async fn deliver(client: &Client, worker: &str, items: Vec<ReplyItem>) {
    let sent = (|| exchange::reply(client, worker, items.clone()))
        .retry(redeliver())
        .when(|f| matches!(f, Failure::Transient(_)))
        .notify(|e, wait| tracing::warn!("replies: {e}; trying again in {wait:.1?}"))
        .await;
    match sent {
        Ok(answer) => {
            for r in answer.replies.iter().filter(|r| !r.admitted) {
                tracing::info!(run.id = %r.run, call.id = %r.call, "reply dropped by the server: the call was answered or settled already");
            }
        }
        Err(e) => tracing::warn!(worker = %worker, "replies not taken: {e}"),
    }
}

/// This host's name, for `--name`'s default.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "flow-worker".into())
}
