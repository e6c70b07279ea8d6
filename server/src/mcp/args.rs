//! The six tools' arguments, exactly as running-a-program.txt names them
//! ("The CLI and MCP surface", "Stored-run discovery"). Unknown fields are
//! refused, so a misspelt argument is never silently ignored; every range
//! is checked by the store, which refuses before it reads anything, and a
//! `limit`'s range is in the input schema too (`minimum`, `maximum`).

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// The program a `check` or `run` works on: a FlowSpec file on disk
/// (`path`, `flow mcp` only) or a submitted document (`flow`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgramArgs {
    /// A FlowSpec file to read, as `flow check FILE` / `flow run FILE`
    /// take it (relative to the directory `flow mcp` was started in). The
    /// FlowSpec files beside it are its subgraph modules; the flow.toml
    /// there binds its Tools. Only `flow mcp` reads files; the HTTP server
    /// takes `flow`.
    #[serde(default)]
    pub path: Option<String>,
    /// A FlowSpec document (a JSON object, or its text as a string), bound
    /// from the server's `--tools` configuration only.
    #[serde(default)]
    pub flow: Option<Json>,
    /// With `flow`: the other modules its subgraphs name, each a document
    /// or its text, by module name (e.g. `inner.json`).
    #[serde(default)]
    pub modules: Option<BTreeMap<String, Json>>,
    /// With `flow`: the root module's name (default `flow.json`); `--tools`
    /// flow.toml keys name modules by it.
    #[serde(default)]
    pub name: Option<String>,
}

/// `check`: the program only.
pub type CheckArgs = ProgramArgs;

/// `run`: the program and its input.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// A FlowSpec file to read, as `flow run FILE` takes it (relative to
    /// the directory `flow mcp` was started in); the flow.toml beside it
    /// binds its Tools, and `flow mcp` starts those commands only when it
    /// was started with `--allow`. Only `flow mcp` reads files.
    #[serde(default)]
    pub path: Option<String>,
    /// A FlowSpec document (a JSON object, or its text as a string), bound
    /// from the server's `--tools` configuration only.
    #[serde(default)]
    pub flow: Option<Json>,
    /// With `flow`: the other modules its subgraphs name, by module name.
    #[serde(default)]
    pub modules: Option<BTreeMap<String, Json>>,
    /// With `flow`: the root module's name (default `flow.json`).
    #[serde(default)]
    pub name: Option<String>,
    /// The run's input: a JSON object, decoded against the input node's
    /// schema.
    pub input: Json,
}

impl RunArgs {
    /// The program part.
    pub fn program(&self) -> ProgramArgs {
        ProgramArgs {
            path: self.path.clone(),
            flow: self.flow.clone(),
            modules: self.modules.clone(),
            name: self.name.clone(),
        }
    }
}

/// `resume`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeArgs {
    /// The run id, e.g. `run-01j…`.
    pub run: String,
    /// The open call to answer, e.g. `c1:root#1`. Leave out `call` and
    /// `reply` to continue a halted or crashed run, settling its open
    /// calls (as `flow resume RUN` does).
    #[serde(default)]
    pub call: Option<String>,
    /// The call's outcome, e.g. `{"Ok": {"decision": "approved"}}`.
    #[serde(default)]
    pub reply: Option<Json>,
}

/// `replay`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayArgs {
    /// The run id.
    pub run: String,
}

/// `history`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// The run id.
    pub run: String,
    /// Only facts of this kind: Start, Call, Reply, Close, Checkpoint or
    /// End. Filtering precedes paging; facts keep their recorded numbers.
    #[serde(default)]
    pub kind: Option<String>,
    /// The first selected fact to show (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many selected facts to show: 1 to 200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<i64>,
    /// A recorded source module to show (one listed in `sources`), up to
    /// 4096 code points of it from `source_offset`.
    #[serde(default)]
    pub source: Option<String>,
    /// Where the source page starts, in code points (default 0).
    #[serde(default)]
    pub source_offset: Option<u64>,
}

/// `runs`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsArgs {
    /// How many candidates to examine: 1 to 200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<i64>,
    /// Only runs whose id sorts after this one (the previous page's
    /// `nextAfter`).
    #[serde(default)]
    pub after: Option<String>,
    /// The run query's filters (issue 38 item 1), all combined; rows keep
    /// the seed's fields and id order. Only runs in these states, comma
    /// separated: running, paused, completed, faulted, halted.
    #[serde(default)]
    pub state: Option<String>,
    /// Only runs whose root flow has this FlowSpec id.
    #[serde(default)]
    pub flow: Option<String>,
    /// Only runs whose entry is this module, or `module#function`.
    #[serde(default)]
    pub entry: Option<String>,
    /// Only runs started at or after this time (unix ms).
    #[serde(default)]
    pub started_from: Option<i64>,
    /// Only runs started before this time (unix ms).
    #[serde(default)]
    pub started_to: Option<i64>,
    /// Only runs last changed at or after this time (unix ms).
    #[serde(default)]
    pub updated_from: Option<i64>,
    /// Only runs last changed before this time (unix ms).
    #[serde(default)]
    pub updated_to: Option<i64>,
    /// Only forks of this run.
    #[serde(default)]
    pub fork_of: Option<String>,
    /// Only runs nested in this run.
    #[serde(default)]
    pub nested_in: Option<String>,
    /// Only faulted runs whose fault contains this text.
    #[serde(default)]
    pub fault: Option<String>,
    /// Only paused runs waiting on a call at this node.
    #[serde(default)]
    pub waiting_node: Option<String>,
    /// Only paused runs waiting on a call to this Tool.
    #[serde(default)]
    pub waiting_tool: Option<String>,
    /// Search attributes that must be equal: name to a string, integer or
    /// boolean (`{"customer": "acme"}`), as the flow declares them in
    /// `runtime_hints.search_attributes`.
    #[serde(default)]
    pub attrs: Option<serde_json::Map<String, serde_json::Value>>,
}

impl RunsArgs {
    /// Whether any filter of the run query is given.
    pub fn filtered(&self) -> bool {
        self.state.is_some()
            || self.flow.is_some()
            || self.entry.is_some()
            || self.started_from.is_some()
            || self.started_to.is_some()
            || self.updated_from.is_some()
            || self.updated_to.is_some()
            || self.fork_of.is_some()
            || self.nested_in.is_some()
            || self.fault.is_some()
            || self.waiting_node.is_some()
            || self.waiting_tool.is_some()
            || self.attrs.is_some()
    }
}
