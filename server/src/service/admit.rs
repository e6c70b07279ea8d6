//! A resume's reply, admitted: the call is open, the reply is an outcome,
//! and its value fits the call's declared type (DESIGN §4). A refusal says
//! what a reply looks like and which calls are open (issue 41 §8).

use crate::error::{Error, Result};
use flow_abi::fact::CallId;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Machine, OpenCall};
use flow_engine::program::Program;
use flow_store::RunId;
use serde_json::Value as Json;

/// A reply supplied to a resume (or a what-if fork): the call it answers
/// and its outcome as the client sent it (`{"Ok": v}`, `{"Failed": e}`,
/// `{"NotRun": why}`, `{"Unknown": why}`). It is read as an [`Outcome`]
/// once, by [`admit`], where a refusal can name the run's open calls.
#[derive(Clone, Debug)]
pub struct Reply {
    pub call: String,
    pub outcome: Json,
}

impl Reply {
    /// A reply whose outcome is JSON text (`flow resume --reply`).
    pub fn parse(call: String, text: &str) -> Result<Reply> {
        let outcome = flow_abi::json::parse(text)
            .map_err(|e| Error::Refused(format!("reply is not valid JSON: {e}")))?;
        Ok(Reply { call, outcome })
    }
}

/// The open call `reply.call` of `run` names, and the outcome a resume
/// admits for it: the call is open, the reply is an outcome, and its value
/// fits the call's declared type.
pub(super) fn admit(
    run: &RunId,
    program: &Program,
    machine: &Machine,
    reply: &Reply,
) -> Result<(CallId, Outcome)> {
    let (call, outcome_json) = (&reply.call, &reply.outcome);
    let open = machine.open_calls();
    let Some(c) = open.iter().find(|c| &c.call == call) else {
        return Err(Error::Conflict(format!(
            "call {call} of {run} is not open; {}",
            open_list(&open)
        )));
    };
    let outcome = Outcome::from_wire(outcome_json).map_err(|e| {
        // Say the shape a reply has, with this value wrapped in it when
        // it looks like the value itself (issue 41 §8).
        let wrapped = match outcome_json {
            Json::Object(o) if o.len() == 1 && o.contains_key("Ok") => None,
            v => Some(flow_abi::json::canonical(&serde_json::json!({ "Ok": v }))),
        };
        let example = wrapped
            .map(|w| format!(" — for this value, {w}"))
            .unwrap_or_default();
        Error::Refused(format!(
            "reply: {e}. A reply is an outcome wrapping the value: {{\"Ok\": value}} (or {{\"Failed\": …}}){example}; {}",
            open_list(&open)
        ))
    })?;
    Ok((c.call.clone(), check_reply(program, machine, c, outcome)?))
}

/// The open calls, with their ids, for a refusal naming the wrong one.
fn open_list(open: &[OpenCall]) -> String {
    if open.is_empty() {
        return "the run has no open call".into();
    }
    let calls: Vec<String> = open
        .iter()
        .map(|c| format!("{} ({} at node {})", c.call, c.tool, c.node))
        .collect();
    format!("its open calls: {}", calls.join(", "))
}

/// Decodes a resume reply's value against the call's declared type: the
/// hitl node's `resume_schema` for `std/human#input` (DESIGN §4: "A resume
/// reply that does not decode against the call's declared type is refused
/// ... and nothing is recorded"), then against where the node writes it: a
/// reply the machine would fail at once (it does not fit the state field
/// the node writes it to, or the node's schema) is refused too, naming the
/// field and its type, so the call stays open for a reply that fits
/// (RES-10, GAP-RES-1: BadReply is only for implementations' replies).
fn check_reply(
    program: &Program,
    machine: &Machine,
    c: &OpenCall,
    outcome: Outcome,
) -> Result<Outcome> {
    let outcome = decode_reply(program, machine, c, outcome)?;
    match machine.misfit(c.call.as_str(), &outcome) {
        Some(why) => Err(Error::Refused(format!(
            "the reply does not fit call {} of node {}: {why}",
            c.call, c.node
        ))),
        None => Ok(outcome),
    }
}

/// An Ok reply's value decoded against the call's declared type.
fn decode_reply(
    program: &Program,
    machine: &Machine,
    c: &OpenCall,
    outcome: Outcome,
) -> Result<Outcome> {
    let Outcome::Ok(v) = &outcome else {
        return Ok(outcome);
    };
    let Some(m) = program.module(machine.module()) else {
        return Ok(outcome);
    };
    let Some(ty) = reply_type(m, &c.node, &c.tool) else {
        return Ok(outcome);
    };
    let decoded = flow_abi::decode_json(v, &ty, &m.report.types)
        .map_err(|e| Error::Refused(format!("the reply does not fit call {}: {e}", c.call)))?;
    Ok(Outcome::Ok(decoded.to_json()))
}

/// The type an Ok reply to `c` decodes against: the hitl node's
/// `resume_schema`, else the declaration's success type.
pub(super) fn reply_type(
    m: &flow_engine::program::Module,
    node: &str,
    tool: &str,
) -> Option<flow_abi::Type> {
    let node = m.report.flow.nodes.iter().find(|n| n.id == node);
    let resume = match node.map(|n| &n.kind) {
        Some(flow_engine::model::NodeKind::Hitl(h)) => h
            .resume_schema
            .as_ref()
            .and_then(|s| m.report.schema_types.get(&s.ptr)),
        _ => None,
    };
    resume
        .cloned()
        .or_else(|| m.decls.get(tool).map(|d| d.ok.clone()))
}
