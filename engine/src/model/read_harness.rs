//! Reading a harness node's `harness_config` (FS-HN-3..16).
//!
//! Each type's fields are checked as buildaharness's `spec/schema.ts`
//! (1.0.0, "Phase 10: full harness_config shapes") checks them: booleans,
//! counts that are whole numbers of at least 1, fixed sets of names, and
//! `gather_evidence`'s required `source_tool` and `evidence_type`. Zod drops
//! keys a shape does not list, so an unknown key is a warning here, not an
//! error. `process_concept` (buildaharness's canvas schema tests: "rejects
//! process_concept node with missing harness_config", "... with empty
//! concept_id") needs a config with a non-empty `concept_id`.

use super::{EvidenceSource, Harness};
use crate::diag::{Code, push_token};
use crate::read::{Cx, Obj, kind};
use serde_json::{Map, Value};

/// How one config field is checked.
#[derive(Clone, Copy)]
enum Field {
    Bool,
    /// A whole number of at least 1 (`max_*_shown`).
    Count,
    /// One of the names.
    OneOf(&'static [&'static str]),
    /// One of the names, or null.
    OneOfOrNull(&'static [&'static str]),
    /// A list of the names.
    ListOf(&'static [&'static str]),
    /// A string of at least one character.
    Text,
}

const RELIABILITY: &[&str] = &["HIGH", "MEDIUM", "LOW"];

/// FS-HN-15: the 9 verification layers.
const VERIFICATION_LAYERS: &[&str] = &[
    "syntax",
    "unit",
    "integration",
    "consistency",
    "requirements",
    "assumptions",
    "goal_correctness",
    "evidence_sufficiency",
    "output_contract_partial",
];

/// FS-HN-16 with GAP-C-8: the 10 documented recovery strategies (schema.ts
/// lists the first 6).
const RECOVERY_STRATEGIES: &[&str] = &[
    "DIRECT_EDIT",
    "TRACE_EXEC",
    "BROADER_SEARCH",
    "REIMPLEMENT",
    "MINIMAL_FIX",
    "ESCALATE",
    "REGROUND_TO_AGREEMENT",
    "REFRAME_QUESTION",
    "HOLD_SPACE",
    "COMPRESS_STAGE",
];

/// Each type's fields: (name, check, required).
fn fields(node_type: &str) -> &'static [(&'static str, Field, bool)] {
    use Field::*;
    match node_type {
        "world_model" => &[
            ("display_mode", OneOf(&["summary", "expanded"]), false),
            ("show_observations", Bool, false),
            ("show_contradictions", Bool, false),
            ("max_beliefs_shown", Count, false),
        ],
        "hypothesis_set" => &[
            ("show_eliminated", Bool, false),
            ("max_hypotheses_shown", Count, false),
        ],
        "gather_evidence" => &[
            ("source_tool", Text, true),
            (
                "evidence_type",
                OneOf(&["OBSERVATION", "INFERENCE", "SYSTEM_ERROR"]),
                true,
            ),
            ("reliability_override", OneOfOrNull(RELIABILITY), false),
        ],
        "apply_tool_reliability" => &[("apply_to", OneOf(&["inferences_only", "all"]), false)],
        "update_world_model" => &[
            (
                "integration_mode",
                OneOf(&["observations_only", "infer_beliefs"]),
                false,
            ),
            ("reliability_threshold", OneOf(RELIABILITY), false),
        ],
        "control_state" => &[
            ("show_block_mask", Bool, false),
            ("show_notes", Bool, false),
        ],
        "task_graph_node" => &[
            ("show_write_domains", Bool, false),
            ("show_abstraction_level", Bool, false),
            ("max_tasks_shown", Count, false),
        ],
        "verification_gate" => &[
            ("enabled_layers", ListOf(VERIFICATION_LAYERS), false),
            ("require_adversarial_on_high_risk", Bool, false),
        ],
        "recovery_node" => &[
            (
                "strategy_order_override",
                ListOf(RECOVERY_STRATEGIES),
                false,
            ),
            ("show_pattern_confidence", Bool, false),
        ],
        "evidence_store_node" => &[
            ("show_envelopes", Bool, false),
            ("show_manifest", Bool, false),
            ("max_evidence_shown", Count, false),
        ],
        "experience_store_node" => &[
            ("show_weights_heatmap", Bool, false),
            ("show_run_count", Bool, false),
        ],
        "reviewer_pass" => &[
            ("show_adversarial_prior", Bool, false),
            ("show_findings_detail", Bool, false),
            ("show_reopened_tasks", Bool, false),
        ],
        "process_concept" => &[("concept_id", Text, true)],
        _ => &[],
    }
}

/// Reads the `harness_config` of a node of harness type `node_type`.
pub(super) fn read_harness(cx: &mut Cx, o: &mut Obj<'_>, node_type: &str) -> Harness {
    let mut h = Harness {
        node_type: node_type.to_string(),
        config: Value::Object(Map::new()),
        evidence: None,
    };
    let Some(v) = o.get("harness_config") else {
        if node_type == "process_concept" {
            o.req(cx, "harness_config");
        }
        return h;
    };
    let ptr = o.at("harness_config");
    let Some(mut k) = Obj::new(cx, v, &ptr, "`harness_config`") else {
        return h;
    };
    let mut ok = true;
    for &(name, field, required) in fields(node_type) {
        if !k.has(name) {
            if required {
                k.req(cx, name);
                ok = false;
            }
            continue;
        }
        ok &= check_field(cx, &mut k, name, field);
    }
    k.finish(cx);
    h.config = v.clone();
    if node_type == "gather_evidence" && ok {
        let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        if let (Some(source_tool), Some(evidence_type)) =
            (text("source_tool"), text("evidence_type"))
        {
            h.evidence = Some(EvidenceSource {
                source_tool,
                evidence_type,
                reliability_override: text("reliability_override"),
            });
        }
    }
    h
}

/// Checks one present field; false when it was refused.
fn check_field(cx: &mut Cx, k: &mut Obj<'_>, name: &'static str, field: Field) -> bool {
    match field {
        Field::Bool => k.bool(cx, name).is_some(),
        Field::Count => k.uint(cx, name, 1, None).is_some(),
        Field::OneOf(names) => k.choice(cx, name, names, Code::BadValue).is_some(),
        Field::OneOfOrNull(names) => {
            k.get(name) == Some(&Value::Null) || k.choice(cx, name, names, Code::BadValue).is_some()
        }
        Field::Text => match k.str(cx, name) {
            Some(s) if s.is_empty() => {
                cx.push(
                    Code::OutOfRange,
                    k.at(name),
                    format!("`{name}` must not be empty"),
                );
                false
            }
            Some(_) => true,
            None => false,
        },
        Field::ListOf(names) => {
            let Some(Value::Array(items)) = k.get(name) else {
                if let Some(other) = k.get(name) {
                    cx.push(
                        Code::WrongType,
                        k.at(name),
                        format!("`{name}` must be an array of names, not {}", kind(other)),
                    );
                }
                return false;
            };
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let at = push_token(&k.at(name), &i.to_string());
                match item {
                    Value::String(s) if names.contains(&s.as_str()) => {}
                    Value::String(s) => {
                        ok = false;
                        cx.push(
                            Code::BadValue,
                            at,
                            format!(
                                "`{s}` is not one of {}",
                                names
                                    .iter()
                                    .map(|n| format!("`{n}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        );
                    }
                    other => {
                        ok = false;
                        cx.push(
                            Code::WrongType,
                            at,
                            format!("items of `{name}` must be strings, not {}", kind(other)),
                        );
                    }
                }
            }
            ok
        }
    }
}
