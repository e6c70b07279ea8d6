//! Starting the child, answering describe (or the MCP handshake), checking
//! the declarations, and ending the child.

use super::actor::{Actor, Live};
use super::pipes::{Dialect, Event, Write, Writes, mcp_exchange, reader};
use super::{Key, ProcessError};
use crate::child;
use crate::mcp;
use flow_abi::protocol::{self, DescribeResult, Id, Message, Outcome};
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

const ENDED_BEFORE_DESCRIBE: &str = "the process ended before answering describe";

/// `message`, then what the process last wrote to stderr, if anything.
fn with_stderr(message: String, tail: Option<String>) -> String {
    match tail {
        Some(t) => format!("{message}; the end of its stderr:\n{t}"),
        None => format!("{message} (it wrote nothing to stderr)"),
    }
}

impl Actor {
    /// Starts the process and checks its describe against the declarations.
    pub(super) async fn begin(&mut self) -> Result<(), ProcessError> {
        let mut tasks = JoinSet::new();
        let process = self.label.to_string();
        let started = child::start(
            &self.binding.launch,
            &self.binding.dir,
            &self.label,
            &mut tasks,
        )
        .map_err(|e| ProcessError::Start {
            process: process.clone(),
            message: e.to_string(),
        })?;
        let (ev_tx, events) = mpsc::channel(1024);
        tasks.spawn(reader(started.stdout, ev_tx, self.dialect));
        let (writes, writer) = Writes::open(started.stdin).map_err(|e| ProcessError::Start {
            process: process.clone(),
            message: e.to_string(),
        })?;
        let writer = tokio::spawn(writer);
        let mut live = Live {
            stderr: started.stderr,
            child: started.child,
            writes: Some(writes),
            writer,
            events,
            tasks,
        };
        let result = match self.dialect {
            Dialect::Flow => self.describe(&mut live, process).await,
            Dialect::Mcp => self.mcp_handshake(&mut live, process).await,
        };
        match result {
            Ok(()) => {
                tracing::info!(tool.process = %self.label, tool.pid = ?live.child.id(), "process described");
                self.live = Some(live);
                Ok(())
            }
            Err(e) => {
                // Dropping `live` kills the child (kill_on_drop).
                live.tasks.abort_all();
                tracing::warn!(tool.process = %self.label, "binding refused: {e}");
                Err(e)
            }
        }
    }

    /// The Tool process protocol's describe, checked.
    pub(super) async fn describe(
        &mut self,
        live: &mut Live,
        process: String,
    ) -> Result<(), ProcessError> {
        self.next_id += 1;
        let id = Id::from(self.next_id);
        if let Some(w) = &live.writes {
            w.send(Write {
                line: protocol::write_describe(&id),
                written: None,
            });
        }
        let answer = tokio::time::timeout(self.options.describe_timeout, async {
            loop {
                match live.events.recv().await {
                    None | Some(Event::Closed) => {
                        break Err(Ok(ENDED_BEFORE_DESCRIBE.to_string()));
                    }
                    Some(Event::Message(Message::Described { id: got, result })) if got == id => {
                        break Ok(result);
                    }
                    Some(Event::VersionRefused { theirs, ours }) => {
                        break Err(Err((theirs, ours)));
                    }
                    Some(Event::BadResponse(why)) => break Err(Ok(why)),
                    Some(_) => {
                        tracing::warn!(tool.process = %self.label, "ignored a line before the describe response");
                    }
                }
            }
        })
        .await;
        match answer {
            Err(_) => Err(ProcessError::Describe {
                process,
                message: with_stderr(
                    format!(
                        "no describe response within {} ms",
                        self.options.describe_timeout.as_millis()
                    ),
                    live.stderr.text(),
                ),
            }),
            Ok(Err(Ok(message))) if message == ENDED_BEFORE_DESCRIBE => {
                let tail = live.stderr.ended(self.options.stop_grace).await;
                Err(ProcessError::Describe {
                    process,
                    message: with_stderr(message, tail),
                })
            }
            Ok(Err(Err((theirs, ours)))) => Err(ProcessError::Version {
                process,
                theirs,
                ours,
            }),
            Ok(Err(Ok(message))) => Err(ProcessError::Describe { process, message }),
            Ok(Ok(Err(rpc))) => Err(ProcessError::Describe {
                process,
                message: format!("error {}: {}", rpc.code, rpc.message),
            }),
            Ok(Ok(Ok(described))) => {
                self.check(&described);
                Ok(())
            }
        }
    }

    /// MCP: initialize, initialized, then every page of tools/list. A
    /// declaration with no tool of its name is unbound.
    pub(super) async fn mcp_handshake(
        &mut self,
        live: &mut Live,
        process: String,
    ) -> Result<(), ProcessError> {
        let timeout = self.options.describe_timeout;
        let fail = |message: String| ProcessError::Describe {
            process: process.clone(),
            message,
        };
        let label = self.label.clone();
        self.next_id += 1;
        let n = self.next_id;
        let names = tokio::time::timeout(timeout, async {
            let init_id = format!("flowd-initialize-{n}");
            mcp_exchange(live, &label, mcp::initialize_request(&init_id), &init_id).await?;
            if let Some(w) = &live.writes {
                w.send(Write {
                    line: mcp::initialized_notification(),
                    written: None,
                });
            }
            let mut names = Vec::new();
            let mut cursor: Option<String> = None;
            for page in 0..1000 {
                let id = format!("flowd-tools-list-{n}-{page}");
                let result = mcp_exchange(
                    live,
                    &label,
                    mcp::list_tools_request(&id, cursor.as_deref()),
                    &id,
                )
                .await?;
                let (more, next) = mcp::read_tool_list(&result)?;
                names.extend(more);
                match next {
                    Some(c) if !c.is_empty() => cursor = Some(c),
                    _ => break,
                }
            }
            Ok::<_, String>(names)
        })
        .await
        .map_err(|_| {
            fail(format!(
                "no MCP handshake within {} ms",
                timeout.as_millis()
            ))
        })?
        .map_err(fail)?;
        self.unfit = mcp::unbound(&self.decls, &names)
            .into_iter()
            .map(|(k, reason)| (k, (None, reason)))
            .collect();
        Ok(())
    }

    /// Records which declarations the described process does not fit.
    fn check(&mut self, described: &DescribeResult) {
        self.unfit.clear();
        for (tool, (_, expected)) in &self.decls.decls {
            let served = described.tools.iter().find(|t| &t.tool == tool);
            match served {
                Some(t) if &t.fingerprint == expected => {}
                Some(t) => {
                    self.unfit.insert(
                        tool.clone(),
                        (
                            Some(t.fingerprint.clone()),
                            format!(
                                "{} no longer fits {tool}: it serves fingerprint {}, the declaration's is {expected} (if the flow changed, regenerate the document the Tool serves from, in the flow's directory: `flow --json tools {} > tools.json`)",
                                self.label,
                                t.fingerprint,
                                super::module_of(tool)
                            ),
                        ),
                    );
                }
                None => {
                    self.unfit.insert(
                        tool.clone(),
                        (None, format!("{} no longer serves {tool}", self.label)),
                    );
                }
            }
        }
    }

    /// After the child exited, its last lines may still be in the pipe:
    /// read them for a short while (a grandchild may hold stdout open).
    pub(super) async fn drain_after_exit(&mut self) {
        let grace = self.options.stop_grace;
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let Some(live) = self.live.as_mut() else {
                return;
            };
            match tokio::time::timeout_at(deadline, live.events.recv()).await {
                Ok(Some(Event::Closed)) | Ok(None) | Err(_) => return,
                Ok(Some(ev)) => self.event(ev),
            }
        }
    }

    /// The process ended: settle every open call by whether it reached it.
    pub(super) async fn ended(&mut self, reason: &str) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let _ = live.child.start_kill();
        // Stop feeding the writer and wait until it gives up: a write to a
        // dead child fails, so afterwards every flag is final.
        live.writes = None;
        let _ = tokio::time::timeout(self.options.stop_grace, &mut live.writer).await;
        live.writer.abort();
        let status = match tokio::time::timeout(self.options.stop_grace, live.child.wait()).await {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "did not exit".to_string(),
        };
        live.tasks.abort_all();
        self.mcp_ids.clear();
        let open = self.pending.len();
        // Kept before the calls are answered, so whoever gets an answer
        // finds the process's last words (issue 38 §4).
        let tail = if open > 0 {
            live.stderr.ended(self.options.stop_grace).await
        } else {
            None
        };
        if let Some(t) = &tail {
            let mut c = self.crashed.lock().unwrap_or_else(|p| p.into_inner());
            for key in self.pending.keys() {
                if c.len() >= super::CRASHED_MAX {
                    c.pop_front();
                }
                c.push_back((key.clone(), t.clone()));
            }
        }
        for (_, p) in self.pending.drain() {
            let outcome = if p.written.load(Ordering::Acquire) {
                Outcome::Unknown(format!("{reason} after the call was sent to it"))
            } else {
                Outcome::NotRun(format!("{reason} before the call was sent to it"))
            };
            let _ = p.tx.send(outcome);
        }
        if open > 0 {
            let stderr = tail.unwrap_or_default();
            tracing::warn!(tool.process = %self.label, open.calls = open, tool.stderr = %stderr, "process ended: {status}");
        } else {
            tracing::debug!(tool.process = %self.label, "process ended: {status}");
        }
    }

    /// Stops on shutdown: cancels open calls, closes stdin, waits a grace
    /// period, then kills.
    pub(super) async fn stop(&mut self, reason: &str) {
        let keys: Vec<Key> = self.pending.keys().cloned().collect();
        for key in &keys {
            self.write_cancel(key);
        }
        // Take the child out while draining, so settling can borrow self.
        if let Some(mut live) = self.live.take() {
            live.writes = None;
            let grace = self.options.stop_grace;
            let _ = tokio::time::timeout(grace, async {
                // Replies to cancelled calls may still come.
                while !self.pending.is_empty() {
                    match live.events.recv().await {
                        None | Some(Event::Closed) => break,
                        Some(Event::Message(Message::Reply(r))) => {
                            self.settle((r.run, r.call), r.outcome);
                        }
                        Some(
                            ev @ (Event::Response { .. }
                            | Event::BadReply { .. }
                            | Event::BadResponseTo { .. }),
                        ) => self.event(ev),
                        Some(_) => {}
                    }
                }
            })
            .await;
            // With stdin closed, a well-behaved process exits by itself;
            // give it the grace period before `ended` kills it.
            // (The writer task owns stdin and ends once `writes` is gone,
            // with the actor's own handle on it;
            // `ended` awaits it, so it is not polled here.)
            let _ = tokio::time::timeout(grace, live.child.wait()).await;
            self.live = Some(live);
        }
        self.ended(reason).await;
    }
}
