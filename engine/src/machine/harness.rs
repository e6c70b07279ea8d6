//! Harness nodes (FS-HN, GAP-HARN-1): what they do belongs to a harness, so
//! each is one Call, like every other outside influence.
//!
//! - `std/harness#<type> {harness_config, node, state}` answers a
//!   `json.Value`; its `state` member, when present, is an object of state
//!   fields written through their reducers (a transform fn_ref's patch, by
//!   the same rule). Anything else in the reply stays in the history only.
//! - `gather_evidence` with a `source_tool` calls that registry tool instead
//!   (its parameters taken from the same-named state keys, as a
//!   tool_invoke without input_map), since a Tool process cannot call back
//!   into the run. The reply is appended to the state field `evidence` as
//!   `{node, source_tool, evidence_type, reliability, value}`.
//!
//! A failed call faults the run: harness nodes have no fail_branch.

use super::helpers::*;
use super::*;
use crate::model::{EVIDENCE_KEY, Harness};

impl Machine {
    pub(super) fn harness_call(&mut self, task: &str, node: &Node, h: &Harness) -> Step {
        if let Some(e) = &h.evidence {
            let args = self.args_from_state(task, &node.id, &e.source_tool)?;
            let tool = format!("{}#{}", self.module, e.source_tool);
            return self.call(task, &node.id, &tool, Json::Object(args), Purpose::Evidence);
        }
        let mut args = Map::new();
        args.insert("harness_config".into(), h.config.clone());
        args.insert("node".into(), Json::String(node.id.clone()));
        args.insert("state".into(), self.task_state(task).clone());
        let tool = format!("std/harness#{}", h.node_type);
        self.call(task, &node.id, &tool, Json::Object(args), Purpose::Harness)
    }

    pub(super) fn harness_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        tool: &str,
        outcome: &Outcome,
    ) -> Step {
        let reply = match outcome {
            Outcome::Ok(v) => v,
            failed => return Err(failed_msg(&node.id, call, tool, failed)),
        };
        let patch = match reply {
            Json::Object(m) => match m.get("state") {
                None => None,
                Some(Json::Object(p)) => Some(p),
                Some(other) => {
                    return Err(format!(
                        "node {}: the harness answered `state` {}, not an object of state fields",
                        node.id,
                        flow_abi::json::canonical(other)
                    ));
                }
            },
            other => {
                return Err(format!(
                    "node {}: the harness answered {}, not an object such as {{\"state\": {{…}}}}",
                    node.id,
                    flow_abi::json::canonical(other)
                ));
            }
        };
        for (k, v) in patch.into_iter().flatten() {
            self.write_key(task, k, v.clone())?;
        }
        self.route(task);
        Ok(())
    }

    pub(super) fn evidence_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        tool: &str,
        outcome: &Outcome,
    ) -> Step {
        let value = match outcome {
            Outcome::Ok(v) => v.clone(),
            failed => return Err(failed_msg(&node.id, call, tool, failed)),
        };
        let NodeKind::Harness(Harness {
            evidence: Some(e), ..
        }) = &node.kind
        else {
            return Err(format!("node {}: no evidence source", node.id));
        };
        let mut entry = Map::new();
        entry.insert("node".into(), Json::String(node.id.clone()));
        entry.insert("source_tool".into(), Json::String(e.source_tool.clone()));
        entry.insert(
            "evidence_type".into(),
            Json::String(e.evidence_type.clone()),
        );
        entry.insert(
            "reliability".into(),
            e.reliability_override
                .clone()
                .map_or(Json::Null, Json::String),
        );
        entry.insert("value".into(), value);
        let entry = Json::Object(entry);
        // An `append` field takes the new entry; any other is given the
        // whole list, so either way the field ends with the entry.
        let append = self
            .flow()
            .state_schema
            .as_ref()
            .and_then(|s| s.fields.get(EVIDENCE_KEY))
            .is_some_and(|f| f.reducer == Reducer::Append);
        let value = if append {
            Json::Array(vec![entry])
        } else {
            let mut list = match self.task_state(task).get(EVIDENCE_KEY) {
                Some(Json::Array(a)) => a.clone(),
                _ => Vec::new(),
            };
            list.push(entry);
            Json::Array(list)
        };
        self.write_key(task, EVIDENCE_KEY, value)?;
        self.route(task);
        Ok(())
    }
}
