//! What a drive's commits make durable, as spans: each Reply is a call's
//! span (its Call's fact number and node kept from the commit that made
//! the Call durable, its times from the drive's timings), and End closes
//! the run's span.
//!
//! A run span is exported once, at End: a span is sent when it ends, and
//! a second export with the same id would show twice in a collector. A
//! drive that stops with the run not ended (paused for a person or an
//! absent worker, drained by a halt or a shutdown, or dropped by a forced
//! halt or a fence) exports a **segment** span instead: a child of the run
//! span (whose id is known from the run id before it is exported), from
//! the drive's start to its stop, saying how it stopped, its first and
//! last facts and the calls a pause waits on. So a paused or halted run
//! shows in a trace viewer as what it did so far, and the run span that
//! comes at End (on whichever server drives it then) is the parent of
//! every segment and call.
//!
//! Ids are derived from the run id (trace and run span) and the call id
//! (call span), not drawn at random: every server that exports spans of
//! one run (a run resumed on another server, a cluster) puts them in the
//! same trace under the same parent, and a call's span has one id however
//! often it was sent.

use super::super::deadlines::now_ms;
use super::super::store::{StoreRef, blocking};
use super::super::times::Answered;
use super::Tracer;
use flow_abi::fact::{CallId, Ending, Fact};
use flow_store::{Appending, RunId};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// A fault's text kept on the run's span at most (bytes).
const FAULT_TEXT: usize = 4096;

/// A durable Call this drive's commits made, until its Reply.
struct Called {
    n: u64,
    node: String,
    tool: String,
}

/// A drive's notes: the Calls it made durable and not answered yet, and
/// where the drive began, for its segment span.
pub(in crate::service) struct Spans {
    tracer: Tracer,
    run: RunId,
    calls: HashMap<CallId, Called>,
    /// The run's last durable fact when the drive began.
    from: u64,
    began_ms: i64,
    /// The run's End or the drive's segment was noted: nothing more to
    /// send when this drops.
    closed: bool,
}

/// How a drive stopped with its run not ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::service) enum Stop {
    /// Every live task waits on a call no live implementation answers.
    Paused,
    /// Drained: a halt or a shutdown let the calls out finish.
    Drained,
    /// Dropped mid-drive: a forced halt, a fence, a storage failure.
    Dropped,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Paused => "paused",
            Stop::Drained => "drained",
            Stop::Dropped => "dropped",
        }
    }
}

/// One span to export, as the drive noted it.
pub(in crate::service) enum Noted {
    Call(CallSpan),
    Ended {
        run: RunId,
        ending: &'static str,
        /// The exit (completed) or the fault's text (faulted).
        detail: String,
    },
    /// A drive that stopped with its run not ended.
    Segment(Segment),
}

/// A drive's stretch of a run that did not end in it.
pub(in crate::service) struct Segment {
    run: RunId,
    stop: Stop,
    from: u64,
    began_ms: i64,
    ended_ms: i64,
    /// The calls a pause waits on.
    waiting: Vec<CallId>,
}

/// An answered call. Fields are absent when this server did not see
/// them: the Call made durable, or the call sent, before this drive (a
/// run resumed after a restart or on another server).
pub(in crate::service) struct CallSpan {
    run: RunId,
    call: CallId,
    call_fact: Option<u64>,
    reply_fact: u64,
    tool: Option<String>,
    node: Option<String>,
    outcome: &'static str,
    route: Option<&'static str>,
    worker: Option<String>,
    attempt: Option<u32>,
    sent_ms: Option<i64>,
    replied_ms: i64,
}

impl Spans {
    pub(super) fn new(tracer: Tracer, run: RunId, from: u64) -> Spans {
        Spans {
            tracer,
            run,
            calls: HashMap::new(),
            from,
            began_ms: now_ms(),
            closed: false,
        }
    }

    /// The drive stops with the run not ended: its segment goes out (the
    /// pause or drain it reports is durable already).
    pub(in crate::service) fn stopped(&mut self, stop: Stop, waiting: Vec<CallId>) {
        self.closed = true;
        self.tracer.send(vec![Noted::Segment(Segment {
            run: self.run.clone(),
            stop,
            from: self.from,
            began_ms: self.began_ms,
            ended_ms: now_ms(),
            waiting,
        })]);
    }

    /// Before a commit of `facts` (numbered from `base + 1`): the spans it
    /// completes, handed to [`Spans::durable`] once it returned. The
    /// timings of the calls answered are among `answered`.
    pub(in crate::service) fn note(
        &mut self,
        base: u64,
        facts: &[Appending],
        answered: &[Answered],
    ) -> Vec<Noted> {
        let mut out = Vec::new();
        for (i, f) in facts.iter().enumerate() {
            let Appending::Fact(f) = f else { continue };
            let n = base + i as u64 + 1;
            match f {
                Fact::Call {
                    call, node, tool, ..
                } => {
                    self.calls.insert(
                        call.clone(),
                        Called {
                            n,
                            node: node.clone(),
                            tool: tool.clone(),
                        },
                    );
                }
                Fact::Close { call, .. } => {
                    self.calls.remove(call);
                }
                Fact::Reply { call, outcome, .. } => {
                    let called = self.calls.remove(call);
                    let timed = answered.iter().rev().find(|a| a.call == *call);
                    out.push(Noted::Call(CallSpan {
                        run: self.run.clone(),
                        call: call.clone(),
                        call_fact: called.as_ref().map(|c| c.n),
                        reply_fact: n,
                        tool: timed
                            .map(|a| a.tool.clone())
                            .or_else(|| called.as_ref().map(|c| c.tool.clone())),
                        node: called.map(|c| c.node),
                        outcome: outcome.tag(),
                        route: timed.map(|a| a.route),
                        worker: timed.and_then(|a| a.worker.clone()),
                        attempt: timed.map(|a| a.attempt),
                        sent_ms: timed.map(|a| a.sent_ms),
                        replied_ms: timed.map_or_else(now_ms, |a| a.replied_ms),
                    }));
                }
                Fact::End { ending, .. } => {
                    self.closed = true;
                    let (ending, detail) = match ending {
                        Ending::Completed { exit, .. } => ("Completed", exit.clone()),
                        Ending::Faulted(why) => ("Faulted", clip(why)),
                    };
                    out.push(Noted::Ended {
                        run: self.run.clone(),
                        ending,
                        detail,
                    });
                }
                Fact::Start { .. } | Fact::Checkpoint { .. } => {}
            }
        }
        out
    }

    /// The commit `noted` came from is durable: its spans go out.
    pub(in crate::service) fn durable(&self, noted: Vec<Noted>) {
        if !noted.is_empty() {
            self.tracer.send(noted);
        }
    }
}

/// A drive dropped before its run ended or its stop was noted (a forced
/// halt, a fence, a failure) still reports its segment.
impl Drop for Spans {
    fn drop(&mut self) {
        if !self.closed {
            self.stopped(Stop::Dropped, Vec::new());
        }
    }
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(FAULT_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The 32 bytes ids are cut from.
fn digest(run: &RunId, call: Option<&str>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"flowd otlp\0");
    h.update(run.as_str().as_bytes());
    if let Some(c) = call {
        h.update(b"\0");
        h.update(c.as_bytes());
    }
    h.finalize().into()
}

/// A run's trace id and its run span's id.
fn run_ids(run: &RunId) -> (TraceId, SpanId) {
    let d = digest(run, None);
    let mut t = [0; 16];
    t.copy_from_slice(&d[..16]);
    let mut s = [0; 8];
    s.copy_from_slice(&d[16..24]);
    (
        TraceId::from_bytes(nonzero(t)),
        SpanId::from_bytes(nonzero(s)),
    )
}

/// A segment's span id: the run's, the drive's first fact and when it
/// began (one drive at a time drives a run, from its head; two that began
/// at one head, the first having recorded nothing, differ by their time).
fn segment_span(run: &RunId, from: u64, began_ms: i64) -> SpanId {
    let d = digest(run, Some(&format!("segment {from} {began_ms}")));
    let mut s = [0; 8];
    s.copy_from_slice(&d[..8]);
    SpanId::from_bytes(nonzero(s))
}

/// A call's span id.
fn call_span(run: &RunId, call: &str) -> SpanId {
    let d = digest(run, Some(call));
    let mut s = [0; 8];
    s.copy_from_slice(&d[..8]);
    SpanId::from_bytes(nonzero(s))
}

/// All-zero ids are invalid in OpenTelemetry.
fn nonzero<const N: usize>(mut b: [u8; N]) -> [u8; N] {
    if b.iter().all(|x| *x == 0) {
        b[N - 1] = 1;
    }
    b
}

fn at(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("flowd")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

fn context(trace: TraceId, span: SpanId) -> SpanContext {
    SpanContext::new(trace, span, TraceFlags::SAMPLED, false, TraceState::NONE)
}

/// The spans of a batch; an ended run's times are read from its row (its
/// start may be another server's).
pub(super) async fn build(noted: Vec<Noted>, store: &StoreRef) -> Vec<SpanData> {
    let scope = scope();
    let mut out = Vec::with_capacity(noted.len());
    for n in noted {
        out.push(match n {
            Noted::Call(mut c) => {
                if c.call_fact.is_none() {
                    recorded_call(&mut c, store).await;
                }
                call_data(c, scope.clone())
            }
            Noted::Ended {
                run,
                ending,
                detail,
            } => run_data(run, ending, detail, store, scope.clone()).await,
            Noted::Segment(g) => segment_data(g, store, scope.clone()).await,
        });
    }
    out
}

/// A call recorded before the drive that admitted its Reply (a person's
/// answer to a paused run, a call sent again after a restart): its Call
/// fact, node and Tool read back from the run's history, a window at a
/// time backwards from the Reply, here on the export task, never on the
/// drive's path. Left as it is when the history cannot be read.
async fn recorded_call(c: &mut CallSpan, store: &StoreRef) {
    let (run, call, reply) = (c.run.clone(), c.call.clone(), c.reply_fact);
    let found = blocking(store, move |s| {
        let (mut end, mut window) = (reply.saturating_sub(1), 64u64);
        while end > 0 {
            let from = end.saturating_sub(window);
            let facts = s.read_after(&run, from, (end - from) as u32)?;
            let hit = facts.iter().rev().find_map(|f| match &f.fact {
                Fact::Call {
                    call: id,
                    node,
                    tool,
                    ..
                } if *id == call => Some((f.n, node.clone(), tool.clone())),
                _ => None,
            });
            if hit.is_some() {
                return Ok(hit);
            }
            (end, window) = (from, window * 2);
        }
        Ok(None)
    })
    .await;
    if let Ok(Some((n, node, tool))) = found {
        c.call_fact = Some(n);
        c.node = Some(node);
        c.tool.get_or_insert(tool);
    }
}

fn call_data(c: CallSpan, scope: InstrumentationScope) -> SpanData {
    let (trace, parent) = run_ids(&c.run);
    let span = call_span(&c.run, c.call.as_str());
    let mut attributes = vec![
        KeyValue::new("flow.run", c.run.as_str().to_string()),
        KeyValue::new("flow.call", c.call.to_string()),
        KeyValue::new("flow.fact.reply", c.reply_fact as i64),
        KeyValue::new("flow.outcome", c.outcome),
    ];
    let optional = [
        c.call_fact
            .map(|n| KeyValue::new("flow.fact.call", n as i64)),
        c.tool.clone().map(|t| KeyValue::new("flow.tool", t)),
        c.node.map(|n| KeyValue::new("flow.node", n)),
        c.route.map(|r| KeyValue::new("flow.route", r)),
        c.worker.map(|w| KeyValue::new("flow.worker", w)),
        c.attempt
            .map(|a| KeyValue::new("flow.attempt", i64::from(a))),
    ];
    attributes.extend(optional.into_iter().flatten());
    let status = match c.outcome {
        "Ok" => Status::Unset,
        other => Status::error(other),
    };
    SpanData {
        span_context: context(trace, span),
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: Cow::Owned(match &c.tool {
            Some(t) => format!("call {t}"),
            None => "call".to_string(),
        }),
        start_time: at(c.sent_ms.unwrap_or(c.replied_ms)),
        end_time: at(c.replied_ms),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope,
    }
}

async fn run_data(
    run: RunId,
    ending: &'static str,
    detail: String,
    store: &StoreRef,
    scope: InstrumentationScope,
) -> SpanData {
    let (trace, span) = run_ids(&run);
    let r = run.clone();
    let info = blocking(store, move |s| Ok(s.run_info(&r)?)).await.ok();
    let now = now_ms();
    let mut attributes = vec![
        KeyValue::new("flow.run", run.as_str().to_string()),
        KeyValue::new("flow.outcome", ending),
    ];
    let mut links = SpanLinks::default();
    let name = match &info {
        Some(i) => {
            attributes.push(KeyValue::new("flow.state", i.state.as_str()));
            attributes.push(KeyValue::new("flow.fact.end", i.last_fact.n as i64));
            // A nested run's trace points at the outer call's span.
            if let Some((o, call)) = &i.outer {
                attributes.push(KeyValue::new("flow.outer.run", o.to_string()));
                attributes.push(KeyValue::new("flow.outer.call", call.to_string()));
                let (t, _) = run_ids(o);
                links.links.push(opentelemetry::trace::Link::new(
                    context(t, call_span(o, call.as_str())),
                    Vec::new(),
                    0,
                ));
            }
            format!("run {}.{}", i.entry.module, i.entry.function)
        }
        None => "run".to_string(),
    };
    let status = match ending {
        "Faulted" => {
            attributes.push(KeyValue::new("flow.fault", detail.clone()));
            Status::error(detail)
        }
        _ => {
            attributes.push(KeyValue::new("flow.exit", detail));
            Status::Ok
        }
    };
    SpanData {
        span_context: context(trace, span),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time: at(info.as_ref().map_or(now, |i| i.created_ms)),
        end_time: at(info.as_ref().map_or(now, |i| i.state_ms)),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links,
        status,
        instrumentation_scope: scope,
    }
}

/// A segment's span: the run's state and last fact as its row says when it
/// is exported.
async fn segment_data(g: Segment, store: &StoreRef, scope: InstrumentationScope) -> SpanData {
    let (trace, parent) = run_ids(&g.run);
    let r = g.run.clone();
    let info = blocking(store, move |s| Ok(s.run_info(&r)?)).await.ok();
    let mut attributes = vec![
        KeyValue::new("flow.run", g.run.as_str().to_string()),
        KeyValue::new("flow.stop", g.stop.as_str()),
        KeyValue::new("flow.fact.from", g.from as i64),
    ];
    if let Some(i) = &info {
        attributes.push(KeyValue::new("flow.state", i.state.as_str()));
        attributes.push(KeyValue::new("flow.fact.to", i.last_fact.n as i64));
    }
    if !g.waiting.is_empty() {
        let waiting: Vec<&str> = g.waiting.iter().map(|c| c.as_str()).collect();
        attributes.push(KeyValue::new("flow.waiting", clip(&waiting.join(","))));
    }
    let name = match &info {
        Some(i) => format!(
            "run {}.{} {}",
            i.entry.module,
            i.entry.function,
            g.stop.as_str()
        ),
        None => format!("run {}", g.stop.as_str()),
    };
    SpanData {
        span_context: context(trace, segment_span(&g.run, g.from, g.began_ms)),
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time: at(g.began_ms),
        end_time: at(g.ended_ms),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: scope,
    }
}
