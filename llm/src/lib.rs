//! flow-llm: the Tool process serving `std/llm#chat` (DESIGN §5), built
//! with the Rust toolkit. The `flow-llm` binary serves it over stdio; the
//! offline model is also used in process by `flow test` ([`offline_answer`]).
//!
//! Two backends, chosen with `flow-llm --backend openai|offline`:
//!
//! * `openai`: any OpenAI-compatible `POST {FLOW_LLM_BASE_URL}/chat/completions`
//!   (default base `https://api.openai.com/v1`), with `FLOW_LLM_API_KEY` as
//!   the bearer token when set. A `schema` argument becomes
//!   `response_format: {"type": "json_schema", ...}` and the answer's JSON is
//!   the reply. flow.toml "carries no credential": the key comes from the
//!   environment only, and never appears in a call, a reply or a log.
//! * `offline`: a deterministic model with no network, for demos and tests.
//!   Without a schema it answers `{"text": <the prompt>}`; with a schema it
//!   answers a value that fits the schema, chosen deterministically from
//!   the SHA-256 of (model, system, prompt) (see [`offline_answer`]).
//!
//! Outcomes of the `openai` backend, mapped as honestly as HTTP allows
//! (host-boundary.txt: NotRun "the call definitely did not happen", Unknown
//! "the call may or may not have happened"):
//!
//! | what happened | outcome |
//! |---|---|
//! | the connection could not be made (nothing was sent) | NotRun |
//! | HTTP 2xx with a readable answer | Ok |
//! | HTTP 2xx whose answer is not JSON under a `schema`, or has no content | Failed |
//! | HTTP 4xx (the endpoint refused the request: bad key, bad model, rate limit) | Failed |
//! | HTTP 5xx, a timeout, a connection lost after sending, an unreadable body | Unknown |

use flow_toolkit::{Call, ToolError, Value};
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The longest `minLength` the offline model pads a string to.
const MAX_MIN_LENGTH: u64 = 4096;

/// Which model answers.
#[derive(Debug, Clone)]
pub enum Backend {
    Offline,
    OpenAi(OpenAi),
}

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAi {
    /// Up to and including `/v1`, without a trailing slash.
    pub base_url: String,
    pub api_key: Option<String>,
    pub client: reqwest::Client,
}

impl OpenAi {
    /// From `FLOW_LLM_BASE_URL` and `FLOW_LLM_API_KEY`.
    pub fn from_env() -> Result<OpenAi, String> {
        let base_url = std::env::var("FLOW_LLM_BASE_URL")
            .unwrap_or_else(|_| "https://api.openai.com/v1".into())
            .trim_end_matches('/')
            .to_string();
        let api_key = std::env::var("FLOW_LLM_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(OpenAi {
            base_url,
            api_key,
            client,
        })
    }
}

/// The declared error value, `ToolError {message}`.
fn failed(message: impl Into<String>) -> ToolError {
    let mut m = std::collections::BTreeMap::new();
    m.insert("message".to_string(), Value::Text(message.into()));
    ToolError::Failed(Value::Record(m))
}

/// The arguments of `std/llm#chat` as JSON (json.Value arguments stay
/// JSON; Texts are strings).
struct Args {
    model: String,
    system: Option<String>,
    prompt: String,
    params: Option<Json>,
    schema: Option<Json>,
    context: Vec<Json>,
    messages: Vec<Json>,
    tools: Vec<Json>,
}

fn args(call: &Call) -> Args {
    let json = |name: &str| call.arg(name).map(Value::to_json);
    let list = |name: &str| match json(name) {
        Some(Json::Array(a)) => a,
        _ => Vec::new(),
    };
    Args {
        model: call.text("model").unwrap_or_default().to_string(),
        system: call.text("system").map(str::to_string),
        prompt: call.text("prompt").unwrap_or_default().to_string(),
        params: json("params"),
        schema: json("schema"),
        context: list("context"),
        messages: list("messages"),
        tools: list("tools"),
    }
}

/// Answers one `std/llm#chat` call.
pub async fn chat(backend: &Backend, call: Call) -> Result<Value, ToolError> {
    let a = args(&call);
    let answer = match backend {
        Backend::Offline => Ok(offline_answer(
            &a.model,
            a.system.as_deref(),
            &a.prompt,
            a.schema.as_ref(),
        )),
        Backend::OpenAi(o) => openai_answer(o, &a).await,
    }?;
    // A json.Value reply: numbers must be canonical, as the strict reader
    // makes them.
    flow_abi::json::parse(&flow_abi::json::canonical(&answer))
        .map(Value::Json)
        .map_err(|e| ToolError::Other(format!("the answer is not valid JSON: {e}")))
}

// ------------------------------------------------------------------ offline

/// The offline model: `{"text": prompt}` without a schema; with one, a value
/// fitting it, chosen by the SHA-256 of (model, system, prompt).
pub fn offline_answer(
    model: &str,
    system: Option<&str>,
    prompt: &str,
    schema: Option<&Json>,
) -> Json {
    match schema {
        None => json!({ "text": prompt }),
        Some(s) => {
            let mut h = Sha256::new();
            for part in [model, system.unwrap_or(""), prompt] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            let seed: [u8; 32] = h.finalize().into();
            Fit {
                root: s,
                seed,
                prompt,
                budget: std::cell::Cell::new(10_000),
            }
            .value(s, "", 0)
        }
    }
}

struct Fit<'a> {
    root: &'a Json,
    seed: [u8; 32],
    prompt: &'a str,
    /// Values still to be made: a schema cannot make the answer explode
    /// (nested arrays multiply).
    budget: std::cell::Cell<usize>,
}

impl Fit<'_> {
    /// A number derived from the seed and the path, so sibling fields differ
    /// but every run agrees.
    fn pick(&self, path: &str, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let mut h = Sha256::new();
        h.update(self.seed);
        h.update(path.as_bytes());
        let d = h.finalize();
        let x = u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]);
        (x % n as u64) as usize
    }

    fn resolve<'s>(&'s self, s: &'s Json) -> &'s Json {
        let mut cur = s;
        for _ in 0..32 {
            let Some(r) = cur.get("$ref").and_then(Json::as_str) else {
                return cur;
            };
            let Some(pointer) = r.strip_prefix('#') else {
                return cur;
            };
            match self.root.pointer(&unescape_fragment(pointer)) {
                Some(t) => cur = t,
                None => return cur,
            }
        }
        cur
    }

    fn value(&self, s: &Json, path: &str, depth: usize) -> Json {
        let s = self.resolve(s);
        if depth > 16 || self.budget.get() == 0 {
            return Json::Null;
        }
        self.budget.set(self.budget.get() - 1);
        if let Some(c) = s.get("const") {
            return c.clone();
        }
        if let Some(Json::Array(vals)) = s.get("enum")
            && !vals.is_empty()
        {
            return vals[self.pick(path, vals.len())].clone();
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(Json::Array(branches)) = s.get(key)
                && !branches.is_empty()
            {
                let b = &branches[self.pick(path, branches.len())];
                return self.value(b, &format!("{path}/{key}"), depth + 1);
            }
        }
        if let Some(Json::Array(all)) = s.get("allOf")
            && let Some(first) = all.first()
        {
            return self.value(first, path, depth + 1);
        }
        let ty = match s.get("type") {
            Some(Json::String(t)) => t.as_str(),
            Some(Json::Array(ts)) => ts
                .iter()
                .filter_map(Json::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ if s.get("properties").is_some() => "object",
            _ if s.get("items").is_some() || s.get("prefixItems").is_some() => "array",
            _ => "any",
        };
        match ty {
            "object" => {
                let mut m = Map::new();
                if let Some(Json::Object(props)) = s.get("properties") {
                    for (k, sub) in props {
                        m.insert(
                            k.clone(),
                            self.value(sub, &format!("{path}/{k}"), depth + 1),
                        );
                    }
                }
                Json::Object(m)
            }
            "array" => {
                if let Some(Json::Array(prefix)) = s.get("prefixItems") {
                    return Json::Array(
                        prefix
                            .iter()
                            .enumerate()
                            .map(|(i, p)| self.value(p, &format!("{path}/{i}"), depth + 1))
                            .collect(),
                    );
                }
                let min = s.get("minItems").and_then(Json::as_u64).unwrap_or(1);
                let max = s.get("maxItems").and_then(Json::as_u64).unwrap_or(3);
                let n = min.max(1).min(max).min(8);
                let items = s.get("items").cloned().unwrap_or(Json::Null);
                let unique = s.get("uniqueItems") == Some(&Json::Bool(true));
                let mut out: Vec<Json> = Vec::new();
                for i in 0..n {
                    let v = self.value(&items, &format!("{path}/{i}"), depth + 1);
                    if unique && out.contains(&v) {
                        continue;
                    }
                    out.push(v);
                }
                Json::Array(out)
            }
            "string" => self.string(s, path),
            "integer" => self.number(s, path, true),
            "number" => self.number(s, path, false),
            // Always true: the offline model gives the same answer to the same
            // prompt, so a flow that loops until a model says `valid: true`
            // (as real ones do) would otherwise never leave its loop.
            "boolean" => Json::Bool(true),
            "null" => Json::Null,
            _ => Json::String(self.prompt.to_string()),
        }
    }

    fn string(&self, s: &Json, path: &str) -> Json {
        match s.get("format").and_then(Json::as_str) {
            Some("date-time") => return json!("2026-01-01T00:00:00Z"),
            Some("duration") => return json!("PT1S"),
            _ => {}
        }
        if s.get("contentEncoding").and_then(Json::as_str) == Some("base64") {
            return json!("");
        }
        // Capped as `minItems` is (issue 17): a schema asking for more
        // gets a shorter answer, which its decode then refuses (BadReply),
        // instead of a model that never answers.
        let min = s
            .get("minLength")
            .and_then(Json::as_u64)
            .unwrap_or(0)
            .min(MAX_MIN_LENGTH) as usize;
        let max = s
            .get("maxLength")
            .and_then(Json::as_u64)
            .map(|m| m as usize);
        // Words of the prompt, starting at a seeded place.
        let words: Vec<&str> = self.prompt.split_whitespace().collect();
        let mut text = if words.is_empty() {
            "offline".to_string()
        } else {
            let start = self.pick(path, words.len());
            words[start..]
                .iter()
                .take(6)
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        };
        if let Some(max) = max {
            text = text.chars().take(max).collect();
        }
        let have = text.chars().count();
        if have < min {
            text.extend(std::iter::repeat_n('x', min - have));
        }
        Json::String(text)
    }

    fn number(&self, s: &Json, path: &str, integer: bool) -> Json {
        let bound = |k: &str| {
            s.get(k)
                .and_then(Json::as_number)
                .and_then(|n| n.as_str().parse::<f64>().ok())
                .filter(|f| f.is_finite() && f.abs() < 1e15)
        };
        let lo = bound("minimum").map_or(0, |f| f.ceil() as i64);
        let hi = bound("maximum").map_or(lo.saturating_add(9), |f| f.floor() as i64);
        let v = if hi < lo {
            lo
        } else {
            let span = (hi - lo).min(1_000_000) as usize + 1;
            lo + self.pick(path, span) as i64
        };
        let _ = integer; // whole numbers fit both integer and number
        Json::Number(v.into())
    }
}

/// A JSON Pointer from a URI fragment: percent-decoding of `%XX`.
fn unescape_fragment(p: &str) -> String {
    let bytes = p.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(p.get(i + 1..i + 3).unwrap_or(""), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ------------------------------------------------------------------- openai

/// A tool id made into an OpenAI function name (`^[a-zA-Z0-9_-]{1,64}$`).
fn function_name(i: usize, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(56)
        .collect();
    format!("t{i}_{clean}")
}

fn request_body(a: &Args) -> Json {
    let mut messages = Vec::new();
    if let Some(s) = &a.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for c in &a.context {
        let text = match c {
            Json::String(s) => s.clone(),
            other => flow_abi::json::canonical(other),
        };
        messages.push(json!({"role": "user", "content": format!("Context:\n{text}")}));
    }
    for m in &a.messages {
        let speaker = m.get("speaker").and_then(Json::as_str).unwrap_or("user");
        let role = if speaker == "assistant" || speaker == "model" {
            "assistant"
        } else {
            "user"
        };
        let text = m.get("text").and_then(Json::as_str).unwrap_or("");
        messages.push(json!({"role": role, "content": text}));
    }
    messages.push(json!({"role": "user", "content": a.prompt}));
    let mut body = Map::new();
    if let Some(Json::Object(p)) = &a.params {
        for (k, v) in p {
            body.insert(k.clone(), v.clone());
        }
    }
    body.insert("model".into(), Json::String(a.model.clone()));
    body.insert("messages".into(), Json::Array(messages));
    if let Some(schema) = &a.schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": true}}),
        );
    }
    if !a.tools.is_empty() {
        let tools: Vec<Json> = a
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let id = t.get("tool").and_then(Json::as_str).unwrap_or("tool");
                json!({"type": "function", "function": {
                    "name": function_name(i, id),
                    "description": t.get("description").cloned().unwrap_or(Json::String(String::new())),
                    "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                }})
            })
            .collect();
        body.insert("tools".into(), Json::Array(tools));
    }
    Json::Object(body)
}

async fn openai_answer(o: &OpenAi, a: &Args) -> Result<Json, ToolError> {
    let url = format!("{}/chat/completions", o.base_url);
    let body = flow_abi::json::canonical(&request_body(a));
    let mut req = o
        .client
        .post(&url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(key) = &o.api_key {
        req = req.bearer_auth(key);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() || e.is_builder() => {
            return Err(ToolError::NotRun(format!(
                "could not reach the model endpoint: {}",
                without_url(&e)
            )));
        }
        Err(e) => {
            return Err(ToolError::Other(format!(
                "the request to the model endpoint broke off: {}",
                without_url(&e)
            )));
        }
    };
    let status = resp.status();
    let text = resp.text().await.map_err(|e| {
        ToolError::Other(format!(
            "the model's answer could not be read: {}",
            without_url(&e)
        ))
    })?;
    if status.is_client_error() {
        return Err(failed(format!(
            "the model endpoint refused the request: HTTP {status}: {}",
            error_message(&text)
        )));
    }
    if !status.is_success() {
        return Err(ToolError::Other(format!(
            "the model endpoint answered HTTP {status}: {}",
            error_message(&text)
        )));
    }
    let v = flow_abi::json::parse(&text)
        .map_err(|e| ToolError::Other(format!("the model endpoint's answer is not JSON: {e}")))?;
    let message = &v["choices"][0]["message"];
    let content = message.get("content").and_then(Json::as_str);
    let tool_calls: Vec<Json> = message
        .get("tool_calls")
        .and_then(Json::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    let name = c["function"]["name"].as_str()?;
                    let i = a.tools.iter().enumerate().position(|(i, t)| {
                        function_name(i, t.get("tool").and_then(Json::as_str).unwrap_or("tool"))
                            == name
                    })?;
                    let tool = a.tools[i].get("tool")?.clone();
                    let args = c["function"]["arguments"]
                        .as_str()
                        .and_then(|s| flow_abi::json::parse(s).ok())
                        .unwrap_or(json!({}));
                    Some(json!({"tool": tool, "args": args}))
                })
                .collect()
        })
        .unwrap_or_default();
    if a.schema.is_some() {
        let Some(content) = content else {
            return Err(failed("the model gave no answer to fit the schema"));
        };
        return flow_abi::json::parse(content)
            .map_err(|e| failed(format!("the model's structured answer is not JSON: {e}")));
    }
    if content.is_none() && tool_calls.is_empty() {
        return Err(failed("the model's answer has no content"));
    }
    let mut out = Map::new();
    out.insert(
        "text".into(),
        Json::String(content.unwrap_or("").to_string()),
    );
    if !tool_calls.is_empty() {
        out.insert("tool_calls".into(), Json::Array(tool_calls));
    }
    Ok(Json::Object(out))
}

/// An HTTP error body's message, short, for the reply.
fn error_message(body: &str) -> String {
    let from_json = flow_abi::json::parse(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .and_then(Json::as_str)
            .map(str::to_string)
    });
    let msg = from_json.unwrap_or_else(|| body.to_string());
    msg.chars().take(500).collect()
}

/// reqwest errors print the URL; ours holds no secret, but keep replies
/// short and stable.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<endpoint>");
    }
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests;
