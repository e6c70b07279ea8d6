//! The built-in Tool declarations every FlowSpec program can reach
//! (DESIGN §2 and §4): `std/llm#chat`, `std/human#input`,
//! `std/memory#read|write|search`, `std/clock#sleep`, `std/prompts#get`,
//! `std/harness#<node type>`, and the shape of every
//! `fn/<module>#<function>` declaration behind a FlowSpec `fn_ref`.
//!
//! They live here, beside the signature rules, because both sides of the
//! boundary need the same declaration: the engine records its fingerprint
//! in each Call, and an implementation such as `flow-llm` answers `describe`
//! with it. One definition, so the fingerprints cannot drift apart.

use crate::signature::{ToolDecl, tool_error};
use crate::types::{Field, Type, TypeSet};

fn field(name: &str, ty: Type, doc: &str) -> Field {
    Field {
        name: name.to_string(),
        ty,
        doc: Some(doc.to_string()),
    }
}

fn opt(t: Type) -> Type {
    Type::Option(Box::new(t))
}

fn list(t: Type) -> Type {
    Type::List(Box::new(t))
}

/// `std/llm#chat`: one model turn.
///
/// The reply is a `json.Value`: `{"text": …}` for a plain answer (with
/// `"tool_calls": [{"tool": id, "args": {…}}]` when the model asks to use
/// one of the offered `tools`), or, when `schema` is given, the structured
/// value itself, which the engine decodes against that schema's type.
pub fn llm_chat(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/llm#chat".into(),
        doc: Some("One turn of a language model.".into()),
        params: vec![
            field(
                "context",
                opt(list(Type::Json)),
                "Outputs of earlier nodes passed as context, in order.",
            ),
            field(
                "messages",
                opt(list(Type::Json)),
                "Earlier turns of a conversation: {speaker, text} objects.",
            ),
            field("model", Type::Text, "The model to use."),
            field(
                "params",
                opt(Type::Json),
                "Sampling parameters (temperature, max_tokens, ...).",
            ),
            field("prompt", Type::Text, "The user prompt, already templated."),
            field(
                "schema",
                opt(Type::Json),
                "JSON Schema the answer must fit (structured output).",
            ),
            field("system", opt(Type::Text), "The system prompt."),
            field(
                "tools",
                opt(list(Type::Json)),
                "Tools the model may ask to call: {tool, description, input_schema}.",
            ),
        ],
        ok: Type::Json,
        err: tool_error(types),
    }
}

/// `std/human#input`: a question for a person. It has no implementation:
/// the call stays open and the run pauses until a client resumes it.
pub fn human_input(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/human#input".into(),
        doc: Some("Ask a person; the run pauses until a reply is admitted.".into()),
        params: vec![
            field("prompt", opt(Type::Text), "What the person is asked."),
            field(
                "schema",
                opt(Type::Json),
                "JSON Schema of the expected reply.",
            ),
        ],
        ok: Type::Json,
        err: tool_error(types),
    }
}

/// `std/memory#read`: the value stored under a key, or null.
pub fn memory_read(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/memory#read".into(),
        doc: Some("Read one key of a memory store.".into()),
        params: vec![
            field("key", Type::Json, "The key."),
            field("store", Type::Text, "The memory store id."),
        ],
        ok: Type::Json,
        err: tool_error(types),
    }
}

/// `std/memory#write`: store a value under a key.
pub fn memory_write(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/memory#write".into(),
        doc: Some("Write one key of a memory store.".into()),
        params: vec![
            field("key", Type::Json, "The key."),
            field("mode", Type::Text, "upsert or overwrite."),
            field("store", Type::Text, "The memory store id."),
            field("value", Type::Json, "The value."),
        ],
        ok: Type::Unit,
        err: tool_error(types),
    }
}

/// `std/memory#search`: semantic retrieval, best first.
pub fn memory_search(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/memory#search".into(),
        doc: Some("Search a memory store by meaning.".into()),
        params: vec![
            field(
                "min_score",
                opt(Type::Decimal),
                "Lowest similarity kept, 0 to 1.",
            ),
            field("query", Type::Json, "What to look for."),
            field("store", Type::Text, "The memory store id."),
            field("top_k", Type::Int, "How many results at most."),
        ],
        ok: list(Type::Json),
        err: tool_error(types),
    }
}

/// `std/clock#sleep`: a recorded wait (retry backoff, DESIGN §4).
pub fn clock_sleep(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/clock#sleep".into(),
        doc: Some("Wait before going on.".into()),
        params: vec![field("ms", Type::Int, "Milliseconds to wait.")],
        ok: Type::Unit,
        err: tool_error(types),
    }
}

/// `std/prompts#get`: the text of a managed prompt (an llm_call's
/// `prompt_ref`, FS-LLM-5 and GAP-LLM-2), which the engine then renders as
/// the call's prompt template. Recorded like any reply, so a replay needs
/// no prompt service.
pub fn prompts_get(types: &mut TypeSet) -> ToolDecl {
    ToolDecl {
        identity: "std/prompts#get".into(),
        doc: Some("Fetch a managed prompt's template text.".into()),
        params: vec![
            field(
                "label",
                opt(Type::Text),
                "The label to resolve (e.g. production).",
            ),
            field("name", Type::Text, "The prompt's name."),
            field(
                "version",
                opt(Type::Int),
                "A pinned version; the latest when absent.",
            ),
        ],
        ok: Type::Text,
        err: tool_error(types),
    }
}

/// `std/harness#<node_type>`: one harness node (world_model,
/// verification_gate, …) run by a harness implementation. It is sent the
/// node's id, its `harness_config` and the run state, and answers a
/// `json.Value` whose optional `state` member is a patch of state fields.
pub fn harness(types: &mut TypeSet, node_type: &str) -> ToolDecl {
    ToolDecl {
        identity: format!("std/harness#{node_type}"),
        doc: Some(format!("The harness's {node_type} node.")),
        params: vec![
            field(
                "harness_config",
                Type::Json,
                "The node's harness_config ({} when absent).",
            ),
            field("node", Type::Text, "The node's id."),
            field("state", Type::Json, "The run state."),
        ],
        ok: Type::Json,
        err: tool_error(types),
    }
}

/// `fn/<module>#<function>`: custom code behind a FlowSpec `fn_ref`
/// (transform, condition, output_validator, reducers, join, speaker
/// selection). It takes one `input` object whose members depend on the use
/// and answers a `json.Value`.
pub fn fn_ref(types: &mut TypeSet, module: &str, function: &str) -> ToolDecl {
    ToolDecl {
        identity: format!("fn/{module}#{function}"),
        doc: None,
        params: vec![field("input", Type::Json, "What the function works on.")],
        ok: Type::Json,
        err: tool_error(types),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_stable_distinct_fingerprints() {
        let mut types = TypeSet::new();
        let decls = [
            llm_chat(&mut types),
            human_input(&mut types),
            memory_read(&mut types),
            memory_write(&mut types),
            memory_search(&mut types),
            clock_sleep(&mut types),
            prompts_get(&mut types),
            harness(&mut types, "world_model"),
            fn_ref(&mut types, "m", "f"),
        ];
        let fps: std::collections::BTreeSet<String> =
            decls.iter().map(|d| d.fingerprint(&types)).collect();
        // memory_read and fn_ref differ in params; all differ.
        assert_eq!(fps.len(), decls.len());
        // Built twice, the same fingerprint.
        let mut other = TypeSet::new();
        assert_eq!(
            llm_chat(&mut other).fingerprint(&other),
            decls[0].fingerprint(&types)
        );
    }
}
