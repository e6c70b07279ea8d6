//! OpenTelemetry traces (issue 38 §5): with `flow serve --otlp-endpoint
//! URL`, one trace per run and one span per call, sent over OTLP/HTTP
//! (protobuf) by the official exporter (`opentelemetry-otlp`).
//!
//! A drive notes what each commit made durable ([`Spans`]) and hands it to
//! the [`Tracer`] only once the commit returned, so no span reports a call
//! the history does not hold. The hand-off is a `try_send` into a bounded
//! queue: a slow or absent collector never slows or blocks a drive; what
//! does not fit is dropped and counted (`flowd_otlp_dropped_spans_total`).
//! A task of its own batches the queue and exports, one request at a time.

mod spans;

use super::store::StoreRef;
use crate::error::{Error, Result};
use flow_store::RunId;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanExporter as _;
use spans::Noted;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

pub(super) use spans::{Spans, Stop};

/// Spans waiting for export at most; past it new ones are dropped (the
/// OpenTelemetry SDK's batch processor's default is 2,048).
const QUEUE: usize = 4096;
/// Spans in one export request at most (the SDK's default).
const BATCH: usize = 512;
/// How often the queue is taken (with [`QUEUE`]: up to 20,000 spans a
/// second go out without a drop).
const TICK: Duration = Duration::from_millis(200);
/// One export request's time limit (retries included).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Spans exported and dropped since the server started (`/metrics`).
#[derive(Debug, Default)]
pub struct OtlpCounts {
    pub exported: AtomicU64,
    pub dropped: AtomicU64,
}

/// What the queue carries.
enum Item {
    Span(Noted),
    /// Sends what is queued now, then answers.
    Flush(oneshot::Sender<()>),
}

/// The handle drives hand their spans to: a cheap clone over the queue's
/// sending end and the counts.
#[derive(Clone, Debug)]
pub struct Tracer {
    tx: mpsc::Sender<Item>,
    counts: Arc<OtlpCounts>,
}

/// Checks an `--otlp-endpoint` value: an `http://` URL with a host. A URL
/// with no path gets the OTLP/HTTP traces path (`/v1/traces`, as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` does); one with a path is used as it is.
pub fn endpoint(s: &str) -> std::result::Result<String, String> {
    let url = reqwest::Url::parse(s).map_err(|e| {
        format!("{s:?} is not a URL ({e}); give the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318")
    })?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(format!(
                "{s:?}: this build sends OTLP over plain HTTP only (it has no TLS stack); point it at a collector on this host or network, e.g. http://127.0.0.1:4318"
            ));
        }
        other => {
            return Err(format!(
                "{s:?}: scheme {other:?} is not OTLP/HTTP; give an http:// URL, e.g. http://127.0.0.1:4318 (gRPC, port 4317, is not supported)"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "{s:?} has no host; give the collector's address, e.g. http://127.0.0.1:4318"
        ));
    }
    Ok(match url.path() {
        "" | "/" => format!("{}/v1/traces", s.trim_end_matches('/')),
        _ => s.to_string(),
    })
}

impl Tracer {
    /// Builds the exporter for `url` (checked by [`endpoint`]) and starts
    /// the export task on the current runtime; `store` gives an ended run's
    /// times for its span.
    pub fn start(url: &str, store: StoreRef) -> Result<Tracer> {
        let url = endpoint(url).map_err(|e| Error::Refused(format!("--otlp-endpoint {e}")))?;
        let mut exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(TIMEOUT)
            .build()
            .map_err(|e| Error::Refused(format!("--otlp-endpoint {url}: {e}")))?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_service_name("flowd")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        );
        let (tx, rx) = mpsc::channel(QUEUE);
        let counts = Arc::new(OtlpCounts::default());
        tokio::spawn(export(rx, exporter, store, counts.clone()));
        tracing::info!(endpoint = %url, "exporting traces over OTLP/HTTP");
        Ok(Tracer { tx, counts })
    }

    pub fn counts(&self) -> &OtlpCounts {
        &self.counts
    }

    /// What a drive of `run`, whose last durable fact is `head`, notes its
    /// commits with.
    pub(super) fn spans(&self, run: &RunId, head: u64) -> Spans {
        Spans::new(self.clone(), run.clone(), head)
    }

    /// Queues spans without waiting: what does not fit is dropped.
    fn send(&self, noted: Vec<Noted>) {
        for n in noted {
            if self.tx.try_send(Item::Span(n)).is_err() {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends what is queued now and waits for it, at most `grace` (a
    /// server stopping).
    pub async fn flush(&self, grace: Duration) {
        let (tx, rx) = oneshot::channel();
        let _ = tokio::time::timeout(grace, async {
            if self.tx.send(Item::Flush(tx)).await.is_ok() {
                let _ = rx.await;
            }
        })
        .await;
    }
}

/// The export task: every [`TICK`] it takes what is queued, in requests
/// of at most [`BATCH`] spans, one request at a time, so a slow collector
/// fills the queue (and spans are dropped) instead of piling up requests.
/// It never waits on the queue itself: a drive's `try_send` then wakes no
/// task (a wake-up per step cost a W1 step about a quarter of its CPU).
async fn export(
    mut rx: mpsc::Receiver<Item>,
    exporter: SpanExporter,
    store: StoreRef,
    counts: Arc<OtlpCounts>,
) {
    let mut failing = false;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        loop {
            let (mut noted, mut flushed, mut closed) = (Vec::new(), Vec::new(), false);
            while noted.len() < BATCH {
                match rx.try_recv() {
                    Ok(Item::Span(n)) => noted.push(n),
                    Ok(Item::Flush(done)) => flushed.push(done),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            let full = noted.len() == BATCH;
            if !noted.is_empty() {
                let n = noted.len() as u64;
                let batch = spans::build(noted, &store).await;
                match exporter.export(batch).await {
                    Ok(()) => {
                        counts.exported.fetch_add(n, Ordering::Relaxed);
                        if std::mem::replace(&mut failing, false) {
                            tracing::info!("OTLP export works again");
                        }
                    }
                    Err(e) => {
                        counts.dropped.fetch_add(n, Ordering::Relaxed);
                        // Said once per outage, not per batch.
                        if !std::mem::replace(&mut failing, true) {
                            tracing::warn!(
                                "OTLP export failed, spans are dropped until it works: {e}"
                            );
                        }
                    }
                }
            }
            for done in flushed {
                let _ = done.send(());
            }
            if closed {
                return;
            }
            if !full {
                break;
            }
        }
    }
}
