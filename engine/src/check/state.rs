//! Rules on state keys: what nodes write should be declared, and what
//! paths and templates read must be written somewhere.

use super::Checker;
use crate::diag::{Code, push_token};
use crate::expr::Expr;
use crate::model::{Condition, NodeKind};
use crate::path::{Path, Root};
use crate::read::Cx;
use crate::template::Template;
use serde_json::Value;
use std::collections::BTreeSet;

impl<'f> Checker<'f> {
    pub(super) fn collect_written(&mut self) {
        let mut w = BTreeSet::new();
        if let Some(d) = &self.declared {
            w.extend(d.iter().map(|s| s.to_string()));
        }
        for n in &self.flow.nodes {
            match &n.kind {
                NodeKind::Input(i) => {
                    if let Some(Value::Object(m)) = i.output_schema.as_ref().map(|s| &s.json) {
                        let props = if i.output_schema.as_ref().is_some_and(|s| s.shorthand) {
                            Some(m)
                        } else {
                            m.get("properties").and_then(Value::as_object)
                        };
                        w.extend(props.into_iter().flat_map(|p| p.keys().cloned()));
                    }
                }
                NodeKind::LlmCall(l) => w.extend(l.output_key.clone()),
                NodeKind::Hitl(h) => w.extend(h.output_key.clone()),
                NodeKind::ParallelJoin(j) => w.extend(j.output_key.clone()),
                NodeKind::MemoryRead(m) => {
                    w.insert(m.output_key.clone());
                }
                NodeKind::AgentRole(a) => w.extend(a.output_field.clone()),
                NodeKind::AgentDebate(d) => w.extend(d.output_field.clone()),
                NodeKind::ToolInvoke(t) => w.extend(t.output_map.values().map(|t| t.field.clone())),
                NodeKind::Subgraph(s) => w.extend(s.output_map.values().map(|t| t.field.clone())),
                NodeKind::Transform(t) => {
                    w.extend(t.assignments.iter().map(|a| a.to.field.clone()))
                }
                NodeKind::Harness(h) if h.evidence.is_some() => {
                    w.insert(crate::model::EVIDENCE_KEY.to_string());
                }
                _ => {}
            }
        }
        self.written = w;
    }

    /// A state key a node writes should be declared when `state_schema`
    /// declares fields (warning: the write still happens, untyped).
    pub(super) fn writes(&self, cx: &mut Cx, key: &str, ptr: String) {
        if let Some(d) = &self.declared
            && !key.is_empty()
            && !d.contains(key)
        {
            cx.push(
                Code::UndeclaredStateKey,
                ptr,
                format!("writes state key `{key}`, which state_schema does not declare; its value is untyped"),
            );
        }
    }

    /// Checks a path's root is allowed here and that a state key it reads is
    /// written somewhere.
    pub(super) fn reads(&self, cx: &mut Cx, p: &Path, ptr: &str, last_message_ok: bool) {
        match p.root {
            Root::LastMessage if !last_message_ok => cx.push(
                Code::BadRoot,
                ptr,
                format!("`{p}` is only defined in an agent_debate termination_condition"),
            ),
            Root::State => {
                if let (Some(_), Some(k)) = (&self.declared, p.first_key())
                    && !self.written.contains(k)
                {
                    cx.push(
                        Code::UndeclaredStateKey,
                        ptr,
                        format!("reads `{p}`, but state key `{k}` is neither declared in state_schema nor written by any node"),
                    );
                }
            }
            _ => {}
        }
    }

    pub(super) fn template(&self, cx: &mut Cx, t: &Template, ptr: String) {
        for p in t.paths() {
            self.reads(cx, p, &ptr, false);
        }
    }

    pub(super) fn condition(&self, cx: &mut Cx, c: &Condition, ptr: String, last_message_ok: bool) {
        if let Condition::Expr(e) = c {
            let eptr = push_token(&ptr, "expr");
            for p in Expr::paths(e) {
                self.reads(cx, p, &eptr, last_message_ok);
            }
        }
    }
}
