//! `prompt_ref` (FS-LLM-5, GAP-LLM-2): an llm_call whose prompt is managed
//! elsewhere first calls `std/prompts#get {name, version?, label?}`; the
//! Text it answers is the node's prompt template, rendered like
//! `prompt_template` for the model call. The reply is recorded like any
//! other, so replay needs no prompt service. The template is fetched once
//! per node entry: a retry (fail_branch, output_validator) reuses it, unless
//! the fetch itself failed.

use super::helpers::*;
use super::*;

/// The built-in that answers a prompt_ref.
const PROMPTS_GET: &str = "std/prompts#get";

impl Machine {
    /// Whether `node` is an llm_call with a prompt_ref whose template this
    /// task has not fetched yet.
    pub(super) fn needs_prompt(&self, task: &str, node: &Node) -> bool {
        matches!(&node.kind, NodeKind::LlmCall(l) if l.prompt_ref.is_some())
            && self.tasks.get(task).is_some_and(|t| t.prompt.is_none())
    }

    /// The `std/prompts#get` call; it counts as an attempt of the node, so
    /// a fetch that keeps failing ends with the retries.
    pub(super) fn fetch_prompt(&mut self, task: &str, node: &Node) -> Step {
        let NodeKind::LlmCall(l) = &node.kind else {
            return Err(format!("node {}: no prompt_ref", node.id));
        };
        let r = l
            .prompt_ref
            .as_ref()
            .ok_or_else(|| format!("node {}: no prompt_ref", node.id))?;
        let mut args = Map::new();
        args.insert("name".into(), Json::String(r.name.clone()));
        if let Some(v) = r.version {
            args.insert("version".into(), Json::Number(v.into()));
        }
        if let Some(l) = &r.label {
            args.insert("label".into(), Json::String(l.clone()));
        }
        if let Some(t) = self.tasks.get_mut(task) {
            t.attempts += 1;
        }
        self.call(
            task,
            &node.id,
            PROMPTS_GET,
            Json::Object(args),
            Purpose::Prompt,
        )
    }

    /// The fetched template: kept for the node, then the model call. A
    /// reply that is not a template is a failure of the node's call
    /// (fail_branch, else a fault), as any other misfit reply is.
    pub(super) fn prompt_reply(
        &mut self,
        task: &str,
        node: &Node,
        call: &str,
        outcome: &Outcome,
    ) -> Step {
        let failure = match outcome {
            Outcome::Ok(Json::String(text)) => match crate::template::Template::parse(text) {
                Ok(t) => {
                    if let Some(tk) = self.tasks.get_mut(task) {
                        tk.prompt = Some(t);
                    }
                    let (tool, args, purpose) = self.node_args(task, node)?;
                    return self.call(task, &node.id, &tool, args, purpose);
                }
                Err(e) => Outcome::BadReply(format!("the prompt is not a template: {e}")),
            },
            Outcome::Ok(other) => Outcome::BadReply(format!(
                "the prompt is {}, not Text",
                flow_abi::json::canonical(other)
            )),
            failed => failed.clone(),
        };
        match &node.kind {
            NodeKind::LlmCall(l) if l.fail_branch.is_some() => {
                self.node_failed(task, node, call, &failure)
            }
            _ => Err(failed_msg(&node.id, call, PROMPTS_GET, &failure)),
        }
    }
}
