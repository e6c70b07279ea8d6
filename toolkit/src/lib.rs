//! flow-toolkit: the Rust toolkit, so a Tool process is a few lines.
//!
//! ```no_run
//! # async fn main_() -> std::io::Result<()> {
//! use flow_toolkit::{Toolkit, ToolError, Value};
//! let doc = std::fs::read_to_string("tools.json")?; // what `flow tools` printed
//! Toolkit::from_document_text(&doc)
//!     .map_err(std::io::Error::other)?
//!     .handle("calc.json#add", |call| async move {
//!         match (call.arg("a"), call.arg("b")) {
//!             (Some(Value::Int(a)), Some(Value::Int(b))) => Ok(Value::Int(a + b)),
//!             _ => Err(ToolError::Other("unexpected arguments".into())),
//!         }
//!     })
//!     .map_err(std::io::Error::other)?
//!     .serve_stdio()
//!     .await
//! # }
//! ```
//!
//! host-boundary.txt, "Toolkits", whose rules this crate keeps:
//! * "A toolkit answers describe from the declarations it was generated
//!   from, so its fingerprints are the declarations' own. It generates from
//!   what flow tools lists, not from Flow source." ([`document`])
//! * "Int maps to the language's exact big integer" and "Decimal maps to an
//!   exact decimal type, never to binary floating point": arguments reach the
//!   handler as [`flow_abi::Value`]s (`num-bigint`, `bigdecimal`).
//! * "A call whose args do not decode at the declared types is answered
//!   NotRun, since the author's code never ran, and a call that names no
//!   declaration the toolkit serves likewise."
//! * "An author's code that stops with an error other than the declared one
//!   is answered Unknown, since what it did before it stopped is not known."
//!   A panic is such a stop. "Invalid result or declared-error encoding
//!   after the author ran is Unknown, not a retroactive NotRun."
//!
//! A cancel aborts the handler's task and answers Unknown: the handler may
//! have done part of its work. Handlers run concurrently, one task per call,
//! so replies go out in completion order; (run, call) correlates them.
//! Logs go to stderr; stdout carries protocol lines only.

pub mod document;

pub use flow_abi::Value;
use flow_abi::protocol::{
    self, DescribeResult, DescribedTool, Id, Message, Outcome, Reply, Signature,
};
use flow_abi::signature::ToolDecl;
use flow_abi::types::{Body, Decl, Type, TypeSet};
use futures_util::{FutureExt, StreamExt};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// How a handler stops without a success value.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// The declared error value: answered `Failed` (if it is not of the
    /// declared error type, `Unknown`).
    Failed(Value),
    /// Anything else: answered `Unknown`, since what the handler did before
    /// it stopped is not known.
    Other(String),
    /// The handler knows the call definitely did not happen (for example, a
    /// connection that was refused before anything was sent): answered
    /// `NotRun`.
    NotRun(String),
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(e: E) -> ToolError {
        ToolError::Other(e.to_string())
    }
}

/// One call as the handler sees it: arguments already decoded.
#[derive(Debug, Clone)]
pub struct Call {
    pub run: String,
    pub call: String,
    pub tool: String,
    /// By parameter name. An `Option` parameter holding None is absent;
    /// one holding Some(v) holds v (the record-field rule).
    pub args: BTreeMap<String, Value>,
    types: Arc<TypeSet>,
}

impl Call {
    pub fn arg(&self, name: &str) -> Option<&Value> {
        self.args.get(name)
    }

    /// A Text argument.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.args.get(name) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// The types the declaration's terms use.
    pub fn types(&self) -> &TypeSet {
        &self.types
    }
}

/// What a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;
type Handler = Arc<dyn Fn(Call) -> HandlerFuture + Send + Sync>;

/// Why a toolkit could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolkitError {
    #[error(transparent)]
    Document(#[from] document::DocumentError),
    #[error("the document does not list {0}")]
    NotListed(String),
    #[error("{0}")]
    Types(String),
}

struct Served {
    listed: document::Listed,
    /// A record of the parameters, to decode `args` by the record rules.
    args_ty: Type,
    handler: Option<Handler>,
}

/// A Tool process being assembled: declarations from a `flow tools`
/// document, handlers by identity.
pub struct Toolkit {
    tools: BTreeMap<String, Served>,
    types: Arc<TypeSet>,
}

impl Toolkit {
    /// From the text of a `flow tools` document, read strictly.
    pub fn from_document_text(text: &str) -> Result<Toolkit, ToolkitError> {
        let doc = flow_abi::json::parse(text).map_err(|e| {
            ToolkitError::Document(document::DocumentError {
                pointer: e.path(),
                message: e.message().to_string(),
            })
        })?;
        Toolkit::from_document(&doc)
    }

    /// From a parsed `flow tools` document.
    pub fn from_document(doc: &Json) -> Result<Toolkit, ToolkitError> {
        let (listed, mut types) = document::read(doc)?;
        let mut tools = BTreeMap::new();
        for l in listed {
            let args_ty = args_type(&l.decl, &mut types)?;
            tools.insert(
                l.decl.identity.clone(),
                Served {
                    listed: l,
                    args_ty,
                    handler: None,
                },
            );
        }
        Ok(Toolkit {
            tools,
            types: Arc::new(types),
        })
    }

    /// From declarations built in Rust: the same as reading the document
    /// `flow tools` would print for them.
    pub fn from_decls(decls: &[ToolDecl], types: &TypeSet) -> Result<Toolkit, ToolkitError> {
        Toolkit::from_document(&document::document("toolkit", decls, types))
    }

    /// Registers the handler of `tool`. Only tools with a handler are
    /// described and served.
    pub fn handle<F, Fut>(mut self, tool: &str, f: F) -> Result<Toolkit, ToolkitError>
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let served = self
            .tools
            .get_mut(tool)
            .ok_or_else(|| ToolkitError::NotListed(tool.to_string()))?;
        served.handler = Some(Arc::new(move |call| Box::pin(f(call))));
        Ok(self)
    }

    /// The declarations listed, by identity.
    pub fn declarations(&self) -> impl Iterator<Item = &ToolDecl> {
        self.tools.values().map(|s| &s.listed.decl)
    }

    pub fn types(&self) -> &TypeSet {
        &self.types
    }

    /// The describe result: every handled tool, as listed.
    pub fn describe(&self) -> DescribeResult {
        let tools = self
            .tools
            .values()
            .filter(|s| s.handler.is_some())
            .map(|s| DescribedTool {
                tool: s.listed.decl.identity.clone(),
                fingerprint: s.listed.fingerprint.clone(),
                signature: signature(&s.listed.signature),
            })
            .collect();
        DescribeResult {
            data: flow_abi::DATA_VERSION.to_string(),
            tools,
        }
    }

    /// Serves the protocol on this process's stdin and stdout until stdin
    /// ends. When both are pipes (as a host starts a Tool process) they are
    /// read and written on the runtime itself; tokio's stdin and stdout
    /// pass every read and write through a blocking thread, a hand-off per
    /// line each way.
    pub async fn serve_stdio(self) -> std::io::Result<()> {
        #[cfg(unix)]
        if let Some((input, output)) = stdio_pipes() {
            return self.serve(input, output).await;
        }
        self.serve(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves the protocol over `input` and `output` until `input` ends;
    /// calls still running then are left to finish and their replies
    /// written before returning.
    pub async fn serve<R, W>(self, input: R, output: W) -> std::io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let this = Arc::new(self);
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(async move {
            let mut w = tokio::io::BufWriter::with_capacity(64 * 1024, output);
            while let Some(first) = out_rx.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = out_rx.try_recv() {
                    batch.push(more);
                    if batch.len() >= 256 {
                        break;
                    }
                }
                for line in batch {
                    w.write_all(line.as_bytes()).await?;
                }
                w.flush().await?;
            }
            Ok::<(), std::io::Error>(())
        });
        let running: Arc<Mutex<HashMap<(String, String), tokio::task::AbortHandle>>> =
            Arc::default();
        let mut tasks = tokio::task::JoinSet::new();
        let mut lines = FramedRead::new(
            input,
            LinesCodec::new_with_max_length(protocol::MAX_LINE_BYTES),
        );
        while let Some(line) = lines.next().await {
            let line = match line {
                Ok(l) => l,
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    eprintln!(
                        "flow-toolkit: dropped a line longer than {} bytes",
                        protocol::MAX_LINE_BYTES
                    );
                    continue;
                }
                Err(LinesCodecError::Io(e)) => return Err(e),
            };
            if line.trim().is_empty() {
                continue;
            }
            match protocol::parse_line(&line) {
                Ok(Message::Describe { id }) => {
                    let _ = out_tx.send(protocol::write_described(&id, &Ok(this.describe())));
                }
                Ok(Message::Call(c)) => {
                    let key = (c.run.clone(), c.call.clone());
                    let this2 = this.clone();
                    let out = out_tx.clone();
                    let running2 = running.clone();
                    let k2 = key.clone();
                    // The map stays locked from spawn to insert, so a call
                    // that finishes at once still finds its entry.
                    let Ok(mut map) = running.lock() else {
                        eprintln!("flow-toolkit: call table poisoned; ignored a call");
                        continue;
                    };
                    if map.contains_key(&key) {
                        eprintln!(
                            "flow-toolkit: call {} of run {} is already running; ignored",
                            key.1, key.0
                        );
                        continue;
                    }
                    let handle = tasks.spawn(async move {
                        let outcome = this2
                            .run_call(c.run.clone(), c.call.clone(), c.tool, c.args)
                            .await;
                        // Only the one who removes the entry answers: either
                        // this task, or a cancel that aborted it.
                        let removed = running2
                            .lock()
                            .map(|mut m| m.remove(&k2).is_some())
                            .unwrap_or(true);
                        if removed {
                            send_reply(&out, c.run, c.call, outcome);
                        }
                    });
                    map.insert(key, handle);
                }
                Ok(Message::Cancel(c)) => {
                    let key = (c.run.clone(), c.call.clone());
                    let aborted = running.lock().ok().and_then(|mut m| m.remove(&key));
                    if let Some(h) = aborted {
                        h.abort();
                        send_reply(
                            &out_tx,
                            c.run,
                            c.call,
                            Outcome::Unknown("cancelled while running".into()),
                        );
                    }
                }
                Ok(_) => eprintln!("flow-toolkit: ignored a message a host does not send"),
                Err(protocol::Error::Shape { .. } | protocol::Error::Json(_))
                    if line.contains("\"describe\"") =>
                {
                    // A describe we cannot read still gets an answer.
                    let err = protocol::RpcError {
                        code: -32600,
                        message: "invalid describe request".into(),
                        data: None,
                    };
                    let _ = out_tx.send(protocol::write_described(&Id::Null, &Err(err)));
                }
                Err(e) => eprintln!("flow-toolkit: ignored a line: {e}"),
            }
            // Reap finished tasks as we go so the set stays small.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        drop(out_tx);
        writer.await.map_err(std::io::Error::other)?
    }

    /// One call, from decoding its args to the outcome to send.
    async fn run_call(
        &self,
        run: String,
        call: String,
        tool: String,
        args: serde_json::Map<String, Json>,
    ) -> Outcome {
        let Some(served) = self.tools.get(&tool) else {
            return Outcome::NotRun(format!("this process serves no declaration {tool}"));
        };
        let Some(handler) = served.handler.clone() else {
            return Outcome::NotRun(format!("this process serves no declaration {tool}"));
        };
        let text = flow_abi::json::canonical(&Json::Object(args));
        let args = match flow_abi::decode(&text, &served.args_ty, &self.types) {
            Ok(Value::Record(m)) => m,
            Ok(_) => return Outcome::NotRun("args are not an object".into()),
            Err(e) => return Outcome::NotRun(format!("args do not decode: {e}")),
        };
        let decl = &served.listed.decl;
        let c = Call {
            run,
            call,
            tool,
            args,
            types: self.types.clone(),
        };
        // A panic ends the handler, not the process (nor the other calls).
        let result = std::panic::AssertUnwindSafe(handler(c))
            .catch_unwind()
            .await;
        let check = |v: &Value, ty: &Type| flow_abi::decode(&v.canonical(), ty, &self.types);
        match result {
            Ok(Ok(v)) => match check(&v, &decl.ok) {
                Ok(v) => Outcome::Ok(v.to_json()),
                Err(e) => Outcome::Unknown(format!(
                    "the handler's result is not of the declared success type: {e}"
                )),
            },
            Ok(Err(ToolError::Failed(v))) => match check(&v, &decl.err) {
                Ok(v) => Outcome::Failed(v.to_json()),
                Err(e) => Outcome::Unknown(format!(
                    "the handler stopped with an error that is not the declared one: {e}"
                )),
            },
            Ok(Err(ToolError::NotRun(msg))) => Outcome::NotRun(msg),
            Ok(Err(ToolError::Other(msg))) => Outcome::Unknown(format!(
                "the handler stopped with an undeclared error: {msg}"
            )),
            Err(_) => Outcome::Unknown("the handler panicked".into()),
        }
    }
}

fn send_reply(out: &mpsc::UnboundedSender<String>, run: String, call: String, outcome: Outcome) {
    match protocol::write_reply(&Reply { run, call, outcome }) {
        Ok(line) => {
            let _ = out.send(line);
        }
        Err(e) => eprintln!("flow-toolkit: cannot write a reply: {e}"),
    }
}

/// The record of a declaration's parameters, added to `types`.
fn args_type(decl: &ToolDecl, types: &mut TypeSet) -> Result<Type, ToolkitError> {
    let id = types
        .add(Decl {
            identity: format!("{}(args)", decl.identity),
            name: "args".into(),
            doc: None,
            body: Body::Record(decl.params.clone()),
        })
        .map_err(ToolkitError::Types)?;
    Ok(Type::Named(id))
}

/// The listed signature as the protocol's struct (the document was checked
/// to hold an object; members are taken as listed).
fn signature(v: &Json) -> Signature {
    let params = v
        .get("params")
        .and_then(Json::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    let a = p.as_array()?;
                    Some((a.first()?.as_str()?.to_string(), a.get(1)?.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    Signature {
        params,
        ok: v.get("ok").cloned().unwrap_or(Json::Null),
        err: v.get("err").cloned().unwrap_or(Json::Null),
        generic: v
            .get("generic")
            .and_then(Json::as_array)
            .map(|g| {
                g.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Stdin and stdout as the runtime's own pipe ends (duplicated
/// descriptors), or None when either is not a pipe (a terminal, a file).
#[cfg(unix)]
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    Some((
        tokio::net::unix::pipe::Receiver::from_owned_fd(input).ok()?,
        tokio::net::unix::pipe::Sender::from_owned_fd(output).ok()?,
    ))
}
