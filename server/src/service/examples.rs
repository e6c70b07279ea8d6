//! Example replies: for an open call, the smallest Ok reply the resume
//! would admit (an example of the type `check_reply` decodes it against),
//! printed in the CLI's resume commands and given as `exampleReply` in the
//! run view's pending calls.

use super::RunService;
use super::admit::reply_type;
use super::prepare::start_sources;
use flow_engine::machine::OpenCall;
use flow_engine::program::Program;
use flow_store::RunId;
use serde_json::{Value as Json, json};
use std::sync::Arc;

/// One run's recorded program, read once, answering for each of its calls.
pub struct ReplyExamples {
    program: Arc<Program>,
    root: String,
}

impl ReplyExamples {
    /// An Ok reply that fits the call of `tool` at `node`; `None` when
    /// none can be built.
    pub fn reply(&self, node: &str, tool: &str) -> Option<Json> {
        let m = self.program.module(&self.root)?;
        let ty = reply_type(m, node, tool)?;
        let v = flow_abi::example::example(&ty, &m.report.types)?.to_json();
        // Only a reply the resume would admit is offered.
        flow_abi::decode_json(&v, &ty, &m.report.types).ok()?;
        Some(json!({ "Ok": v }))
    }
}

impl RunService {
    /// The example replies of `run`'s calls (its recorded sources read and
    /// its program compiled, or taken from the cache, once).
    pub fn reply_examples(&self, run: &RunId) -> Option<ReplyExamples> {
        let sources = start_sources(&*self.inner.store, run).ok()?;
        let program = self.program(&sources).ok()?;
        Some(ReplyExamples {
            program,
            root: sources.root,
        })
    }

    /// The example reply to the open call `c` of `run`.
    pub fn example_reply(&self, run: &RunId, c: &OpenCall) -> Option<Json> {
        self.reply_examples(run)?.reply(&c.node, &c.tool)
    }
}
