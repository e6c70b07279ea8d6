//! Typed response bodies of the `/v1` handlers (issue 17): the
//! handlers build these and serialize them, so the OpenAPI document's
//! schemas are what is sent, and schemathesis checks the answers against
//! them.

use super::listing::{EntryView, FactRefView, StateName};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

/// `POST /v1/check`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckAnswer {
    /// Every module's diagnostics (each names its module).
    #[schema(value_type = Vec<Object>)]
    pub diagnostics: Vec<Json>,
    /// How many of them are errors.
    pub errors: u64,
    /// No errors.
    pub ok: bool,
}

/// `POST /v1/runs/{run}/halt`: the halt host record.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HaltAnswer {
    pub run: String,
    /// Always `halted`.
    pub state: StateName,
    /// The last fact when the run was halted.
    pub head: FactRefView,
    pub at_ms: i64,
}

/// A replay's verdict.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictName {
    Matched,
    Incomplete,
    Diverged,
}

/// `POST /v1/runs/{run}/replay`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayAnswer {
    pub run: String,
    pub verdict: VerdictName,
    /// Where it diverged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fact: Option<u64>,
    /// Why it diverged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/archives`. For an archive of several runs, `run`, `facts`
/// and `truncated` describe its first run (in id order: the run its
/// lineage was exported from) and `runs` lists them all.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportAnswer {
    pub run: String,
    /// `false`: the same history (every run's) was already stored;
    /// nothing changed.
    pub imported: bool,
    /// The facts written (only when imported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts: Option<u64>,
    /// Only when the archive's history ended in a torn last fact: that
    /// fact was left out and the facts before it kept (CRASH-7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<TornAnswer>,
    /// Every run of an archive of several runs, in id order (absent for
    /// an archive of one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<RunImportAnswer>>,
    /// Who signed the archive (absent when it is not signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureAnswer>,
}

/// One run of an archive of several.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunImportAnswer {
    pub run: String,
    pub imported: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<TornAnswer>,
}

/// The signature an imported archive carried, verified.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignatureAnswer {
    /// The signer's name as the archive gives it.
    pub signer: String,
    /// The public key, `ed25519:<base64>`.
    pub key: String,
    /// `SHA256:<base64>` of the key.
    pub fingerprint: String,
    /// The key is in the server's trusted keys (`--trusted-keys`); with
    /// none configured a signed archive is verified and `trusted` is false.
    pub trusted: bool,
    /// The name the trusted keys list the key with.
    #[serde(rename = "trustedAs", default, skip_serializing_if = "Option::is_none")]
    pub trusted_as: Option<String>,
}

impl From<&crate::signing::import::Imported> for ImportAnswer {
    fn from(i: &crate::signing::import::Imported) -> ImportAnswer {
        let runs: Vec<RunImportAnswer> = i
            .runs
            .iter()
            .map(|r| RunImportAnswer {
                run: r.run.to_string(),
                imported: r.imported,
                facts: r.facts,
                truncated: r.torn.as_ref().map(|t| TornAnswer {
                    fact: t.fact,
                    reason: t.reason.clone(),
                }),
            })
            .collect();
        let first = runs.first().cloned().unwrap_or(RunImportAnswer {
            run: String::new(),
            imported: false,
            facts: None,
            truncated: None,
        });
        let signature = i.signed.as_ref().map(|s| SignatureAnswer {
            signer: s.signer.clone(),
            key: s.key.clone(),
            fingerprint: s.fingerprint.clone(),
            trusted: s.trusted_as.is_some(),
            trusted_as: s.trusted_as.clone(),
        });
        ImportAnswer {
            run: first.run,
            imported: i.any_written(),
            facts: first.facts,
            truncated: first.truncated,
            runs: (runs.len() > 1).then_some(runs),
            signature,
        }
    }
}

/// The torn last fact an import left out.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TornAnswer {
    /// The number the torn fact would have had.
    pub fact: u64,
    /// Why its line is torn (no newline, not JSON, the chain broken).
    pub reason: String,
}

/// A fork's parent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ParentRef {
    pub run: String,
    pub checkpoint: u64,
    /// The parent has been deleted (docs/custody.md): this run still holds
    /// every fact and blob it reads; the parent's id is lineage only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The bulk recovery that made this fork (`rec-…`: `GET
    /// /v1/recoveries/{id}`), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

/// A nested run's outer run.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OuterRef {
    pub run: String,
    pub call: String,
}

/// A later run made from this one.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChildRef {
    pub run: String,
    /// `fork` or `nested`.
    pub kind: String,
    /// A fork's checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    /// A nested run's call in this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndingName {
    Completed,
    Faulted,
}

/// `GET /v1/runs/{run}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub run: String,
    pub state: StateName,
    /// The server drives it now.
    pub driving: bool,
    pub entry: EntryView,
    /// `sha256:` of the recorded sources.
    pub program: String,
    pub ending: Option<EndingName>,
    /// A completed run's exit (its End's `exit`).
    #[schema(value_type = Option<Value>)]
    pub exit: Json,
    /// A completed run's output.
    #[schema(value_type = Option<Value>)]
    pub output: Json,
    /// A faulted run's fault.
    #[schema(value_type = Option<Value>)]
    pub fault: Json,
    /// The calls to answer to continue the run: its calls with no Reply or
    /// Close yet, one that drives a nested run replaced by that run's
    /// (each names its `run`).
    pub pending: Vec<WaitingCall>,
    /// The run's own Tool calls that were sent and have no Reply: in
    /// flight while the run is driven; after a forced halt or a crash, the
    /// calls a continue decides (`POST …/resume {"open": "resend" |
    /// "unknown"}`). Calls recorded and never sent (a drain, a halt that
    /// waited) are not among them: a continue sends those.
    pub calls_out: Vec<String>,
    pub last_fact: FactRefView,
    pub parent: Option<ParentRef>,
    pub outer: Option<OuterRef>,
    /// Forks and nested runs of this run (at most 2,000 later runs are
    /// looked at).
    pub children: Vec<ChildRef>,
    pub children_truncated: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// The run's holes (`blake3:<hex>`): blobs its facts reference whose
    /// values were redacted (docs/custody.md "Holes"); left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<String>,
}

/// What start, resume and fork answer: the run and where it is. With
/// `wait`, the ending (`exit` and `output`, or `fault`) or the pending
/// calls; `error` when the drive stopped on an error before that.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAnswer {
    pub run: String,
    pub state: StateName,
    /// A completed run's exit code (`success` or the output node's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// A completed run's output.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub output: Option<Json>,
    /// A faulted run's fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// A paused run's open calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingCall>>,
    /// The problem (problem+json members) that stopped the drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub error: Option<Json>,
    /// A fork's parent run and checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
}

/// A call the run view lists as waiting for its reply.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingCall {
    /// The run whose call it is: this run, or a nested run it drives
    /// (answer it by either run id).
    pub run: String,
    /// The call id to resume, e.g. `c1:root#1`.
    pub call: String,
    pub task: String,
    pub node: String,
    pub tool: String,
    /// The Call's fact number.
    pub fact: u64,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub args: Json,
    /// A hitl call's prompt (`args.prompt`), or null.
    #[schema(value_type = Option<Value>)]
    pub prompt: Json,
    /// The JSON Schema a hitl reply's `Ok` value fits (`args.schema`), or
    /// null.
    #[schema(value_type = Option<Object>)]
    pub schema: Json,
    /// A reply the resume would admit (the CLI prints it in the resume
    /// command), or null.
    #[schema(value_type = Option<Value>)]
    pub example_reply: Option<Json>,
}

impl WaitingCall {
    /// The view of each of `calls` (each run's program read once, for its
    /// example replies).
    pub fn all(
        service: &crate::service::RunService,
        calls: &[crate::service::PendingCall],
    ) -> Vec<WaitingCall> {
        let mut examples = std::collections::BTreeMap::new();
        calls
            .iter()
            .map(|p| {
                let c = &p.open;
                let example = examples
                    .entry(p.run.clone())
                    .or_insert_with(|| service.reply_examples(&p.run))
                    .as_ref()
                    .and_then(|e| e.reply(&c.node, &c.tool));
                WaitingCall {
                    run: p.run.to_string(),
                    call: c.call.to_string(),
                    task: c.task.clone(),
                    node: c.node.clone(),
                    tool: c.tool.clone(),
                    fact: p.fact.unwrap_or_default(),
                    prompt: c.args.get("prompt").cloned().unwrap_or(Json::Null),
                    schema: c.args.get("schema").cloned().unwrap_or(Json::Null),
                    args: c.args.clone(),
                    example_reply: example,
                }
            })
            .collect()
    }
}

/// A call to answer to continue a paused run.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PendingCall {
    /// The run whose call it is: the paused run, or a nested run it drives
    /// (answer it by either run id).
    pub run: String,
    /// The call id to resume, e.g. `c1:root#1`.
    pub call: String,
    pub task: String,
    pub node: String,
    pub tool: String,
    /// The call's arguments (a hitl call's `prompt` and `schema`).
    #[schema(value_type = Object)]
    pub args: Json,
}

impl RunAnswer {
    /// A run accepted and still going.
    pub fn running(run: &str) -> RunAnswer {
        RunAnswer::at(run, StateName::Running)
    }

    pub fn at(run: &str, state: StateName) -> RunAnswer {
        RunAnswer {
            run: run.to_string(),
            state,
            exit: None,
            output: None,
            fault: None,
            pending: None,
            error: None,
            parent: None,
        }
    }

    /// Where a drive ended or paused.
    pub fn of(r: &crate::service::RunResult) -> RunAnswer {
        use crate::service::RunResult;
        match r {
            RunResult::Completed { run, exit, output } => RunAnswer {
                exit: Some(exit.clone()),
                output: Some(output.clone()),
                ..RunAnswer::at(run.as_str(), StateName::Completed)
            },
            RunResult::Faulted { run, why } => RunAnswer {
                fault: Some(why.clone()),
                ..RunAnswer::at(run.as_str(), StateName::Faulted)
            },
            RunResult::Paused { run, open } => RunAnswer {
                pending: Some(
                    open.iter()
                        .map(|p| PendingCall {
                            run: p.run.to_string(),
                            call: p.open.call.to_string(),
                            task: p.open.task.clone(),
                            node: p.open.node.clone(),
                            tool: p.open.tool.clone(),
                            args: p.open.args.clone(),
                        })
                        .collect(),
                ),
                ..RunAnswer::at(run.as_str(), StateName::Paused)
            },
        }
    }
}
