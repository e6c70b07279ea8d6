//! `flow test DIR`: fixtures run against fakes, saved histories replayed.
//!
//! running-a-program.txt, "Testing": a test's Tool calls go to fakes
//! "matched to the declaration by the same identity a host binding uses ...
//! a test that can reach a declaration no fake stands in for does not
//! start"; a fake may answer by call number; "A saved history is a
//! regression test: flow test replays it against the current program and
//! fails on any verdict other than Matched"; "flow test exits 0 when every
//! test passes and every history matches, 1 when any fails, and 2 when a
//! program does not check, a history or a directory cannot be read, or its
//! current program cannot be found."
//!
//! A fixture is the FlowSpec form of @test/@fake, a `*.test.json` file:
//! `{flow, input, fakes: {identity: outcome | [outcome, ...]}, expect:
//! {ending, exit_code?, output?}}`. An outcome is written as a reply carries
//! it (`{"Ok": v}`, `{"Failed": e}`, `{"NotRun": why}`, `{"Unknown": why}`),
//! and in a test also `{"BadReply": why}`. A list answers the Tool's calls
//! by number, the last entry answering any later call. Tests run in memory
//! on a virtual clock: `std/clock#sleep` is answered at once unless faked,
//! and `std/llm#chat` by flow-llm's offline model unless faked.

use crate::error::{Error, Result};
use crate::host::SLEEP;

/// The model's declaration: answered by the offline model unless faked.
const LLM: &str = "std/llm#chat";
use crate::source::Sources;
use flow_abi::protocol::Outcome;
use flow_engine::machine::{Effect, Ending, Machine};
use flow_engine::replay::{Verdict, replay};
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Replies fed to one test at most (the seed's step bound, counted in
/// admitted replies; each node execution is bounded by the engine too).
pub const MAX_REPLIES: usize = 100_000;

/// One test's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub name: String,
    /// `None` when it passed; the reason otherwise.
    pub failure: Option<String>,
    /// The test could not be run at all (exit 2).
    pub broken: bool,
}

/// Finds fixtures and saved histories under `dir` (entries starting with
/// `.` skipped, no symbolic link followed), and runs each.
pub fn run_dir(dir: &Path) -> Result<Vec<TestResult>> {
    let mut fixtures = Vec::new();
    let mut histories = Vec::new();
    walk(dir, &mut fixtures, &mut histories)?;
    let mut out = Vec::new();
    for f in fixtures {
        out.push(run_fixture(&f));
    }
    for h in histories {
        out.push(replay_history(&h));
    }
    Ok(out)
}

fn walk(dir: &Path, fixtures: &mut Vec<PathBuf>, histories: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::Refused(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            continue;
        }
        let path = e.path();
        if ft.is_dir() {
            if path.join("history.jsonl").is_file() {
                histories.push(path);
            } else {
                walk(&path, fixtures, histories)?;
            }
        } else if name.ends_with(".test.json") {
            fixtures.push(path);
        }
    }
    Ok(())
}

fn broken(name: &str, why: String) -> TestResult {
    TestResult {
        name: name.to_string(),
        failure: Some(why),
        broken: true,
    }
}

fn failed(name: &str, why: String) -> TestResult {
    TestResult {
        name: name.to_string(),
        failure: Some(why),
        broken: false,
    }
}

/// Runs one fixture.
pub fn run_fixture(path: &Path) -> TestResult {
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return broken(&name, e.to_string()),
    };
    let fx = match flow_abi::json::parse(&text) {
        Ok(v) => v,
        Err(e) => return broken(&name, format!("not JSON: {e}")),
    };
    let Some(flow) = fx.get("flow").and_then(Json::as_str) else {
        return broken(&name, "a fixture names its `flow` file".into());
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let sources = match Sources::read(&base.join(flow)) {
        Ok(s) => s,
        Err(e) => return broken(&name, e.to_string()),
    };
    let program = match sources.program() {
        Ok(p) => p,
        Err(e) => return broken(&name, e.to_string()),
    };
    let fakes: BTreeMap<String, Vec<Json>> = match fx.get("fakes") {
        None => BTreeMap::new(),
        Some(Json::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                let list = match v {
                    Json::Array(a) => a.clone(),
                    one => vec![one.clone()],
                };
                (k.clone(), list)
            })
            .collect(),
        Some(_) => {
            return broken(
                &name,
                "`fakes` maps declaration identities to outcomes".into(),
            );
        }
    };
    // A test that can reach a declaration no fake stands in for does not
    // start.
    let unfaked: Vec<String> = program
        .reachable()
        .into_iter()
        .map(|(_, id)| id)
        .filter(|id| id != SLEEP && id != LLM && !fakes.contains_key(id))
        .collect();
    if !unfaked.is_empty() {
        return broken(
            &name,
            format!("no fake stands in for {}", unfaked.join(", ")),
        );
    }
    let input = fx.get("input").cloned().unwrap_or(json!({}));
    let mut fakes = Fakes {
        table: fakes,
        counts: BTreeMap::new(),
        replies: 0,
    };
    let root = program.root.clone();
    let machine = match fakes.run(&program, &root, &input, 0) {
        Ok(m) => m,
        Err(TestStop::Refused(e)) => return failed(&name, format!("the run is refused: {e}")),
        Err(TestStop::Bound) => {
            return failed(
                &name,
                format!("the test reached its bound of {MAX_REPLIES} replies"),
            );
        }
        Err(TestStop::Broken(e)) => return broken(&name, e),
    };
    let expect = fx.get("expect").cloned().unwrap_or(json!({}));
    let (ending, exit, output) = match machine.ending() {
        Some(Ending::Completed { exit, output }) => {
            ("completed", Some(exit.clone()), Some(output.clone()))
        }
        Some(Ending::Faulted(why)) => ("faulted", None, Some(Json::String(why.clone()))),
        None => ("paused", None, None),
    };
    let mut problems = Vec::new();
    if let Some(want) = expect.get("ending").and_then(Json::as_str)
        && want != ending
    {
        let detail = match (ending, &output) {
            ("faulted", Some(Json::String(why))) => format!(" ({why})"),
            _ => String::new(),
        };
        problems.push(format!("ended {ending}{detail}, expected {want}"));
    }
    if let Some(want) = expect.get("exit_code").and_then(Json::as_str)
        && exit.as_deref() != Some(want)
    {
        problems.push(format!("exit code {exit:?}, expected {want}"));
    }
    if let Some(want) = expect.get("output")
        && ending == "completed"
        && output.as_ref().map(flow_abi::json::canonical) != Some(flow_abi::json::canonical(want))
    {
        problems.push(format!(
            "output {}, expected {}",
            output
                .as_ref()
                .map(flow_abi::json::canonical)
                .unwrap_or_default(),
            flow_abi::json::canonical(want)
        ));
    }
    TestResult {
        name,
        failure: (!problems.is_empty()).then(|| problems.join("; ")),
        broken: false,
    }
}

/// Why a test stopped before its run ended or paused.
enum TestStop {
    Refused(String),
    Bound,
    Broken(String),
}

/// The fakes of one test, answering calls by number across the test and
/// its nested runs.
struct Fakes {
    table: BTreeMap<String, Vec<Json>>,
    counts: BTreeMap<String, usize>,
    replies: usize,
}

impl Fakes {
    /// Runs `module` with `input` until it ends or waits on calls no fake
    /// answers; a subgraph runs as a nested machine with the same fakes.
    fn run(
        &mut self,
        program: &Arc<flow_engine::program::Program>,
        module: &str,
        input: &Json,
        depth: usize,
    ) -> std::result::Result<Machine, TestStop> {
        if depth > 32 {
            return Err(TestStop::Broken("subgraphs nest deeper than 32".into()));
        }
        let (mut machine, effects) = Machine::start(program.clone(), module, input)
            .map_err(|e| TestStop::Refused(e.to_string()))?;
        let effects = machine.settle(effects);
        let mut queue: VecDeque<(String, Outcome)> = VecDeque::new();
        self.answer(program, module, effects, &mut queue, depth)?;
        while let Some((call, outcome)) = queue.pop_front() {
            if machine.ending().is_some() {
                break;
            }
            self.replies += 1;
            if self.replies > MAX_REPLIES {
                return Err(TestStop::Bound);
            }
            // A call closed meanwhile: its fake's answer is dropped.
            if let Ok(effects) = machine.feed(&call, &outcome) {
                let effects = machine.settle(effects);
                self.answer(program, module, effects, &mut queue, depth)?;
            }
        }
        Ok(machine)
    }

    fn answer(
        &mut self,
        program: &Arc<flow_engine::program::Program>,
        module: &str,
        effects: Vec<Effect>,
        queue: &mut VecDeque<(String, Outcome)>,
        depth: usize,
    ) -> std::result::Result<(), TestStop> {
        for e in effects {
            let Effect::Call {
                call,
                tool,
                args,
                nested,
                ..
            } = e
            else {
                continue;
            };
            let outcome = if let Some(sub) = nested {
                let input = args.get("input").cloned().unwrap_or(json!({}));
                match self.run(program, &sub, &input, depth + 1) {
                    Ok(m) => match m.ending() {
                        Some(Ending::Completed { output, .. }) => Outcome::Ok(output.clone()),
                        Some(Ending::Faulted(why)) => Outcome::Failed(json!({"message": why})),
                        None => Outcome::Unknown(format!("nested run of {sub} paused")),
                    },
                    Err(TestStop::Refused(e)) => {
                        Outcome::NotRun(format!("nested run refused: {e}"))
                    }
                    Err(other) => return Err(other),
                }
            } else if tool == SLEEP && !self.table.contains_key(&tool) {
                Outcome::Ok(Json::Null)
            } else if tool == LLM && !self.table.contains_key(&tool) {
                // No fake for the model: flow-llm's offline model answers,
                // deterministically, in process.
                let text = |k: &str| args.get(k).and_then(Json::as_str);
                let answer = flow_llm::offline_answer(
                    text("model").unwrap_or("default"),
                    text("system"),
                    text("prompt").unwrap_or(""),
                    args.get("schema"),
                );
                admit(program, module, &tool, Outcome::Ok(answer))
            } else {
                let list = self
                    .table
                    .get(&tool)
                    .ok_or_else(|| TestStop::Broken(format!("no fake for {tool}")))?;
                let k = self.counts.entry(tool.clone()).or_insert(0);
                *k += 1;
                let o = list.get(*k - 1).or_else(|| list.last()).ok_or_else(|| {
                    TestStop::Broken(format!("the fake for {tool} has no outcome"))
                })?;
                let o = Outcome::from_record(o)
                    .map_err(|e| TestStop::Broken(format!("the fake for {tool}: {e}")))?;
                admit(program, module, &tool, o)
            };
            queue.push_back((call.to_string(), outcome));
        }
        Ok(())
    }
}

/// A fake's Ok or Failed value is decoded against the declared type, as an
/// implementation's reply is: what does not decode is BadReply.
fn admit(program: &flow_engine::program::Program, module: &str, tool: &str, o: Outcome) -> Outcome {
    let Some((d, types)) = program.decl(module, tool) else {
        return o;
    };
    match o {
        Outcome::Ok(v) => match flow_abi::decode_json(&v, &d.ok, types) {
            Ok(x) => Outcome::Ok(x.to_json()),
            Err(e) => Outcome::BadReply(e.to_string()),
        },
        Outcome::Failed(v) => match flow_abi::decode_json(&v, &d.err, types) {
            Ok(x) => Outcome::Failed(x.to_json()),
            Err(e) => Outcome::BadReply(e.to_string()),
        },
        other => other,
    }
}

/// Replays a saved archive against the current program: the root file its
/// entry module names, in its directory or the nearest one above.
pub fn replay_history(dir: &Path) -> TestResult {
    let name = dir.display().to_string();
    let tmp = std::env::temp_dir().join(format!("flow-test-{}", crate::service::new_run_id()));
    let result = (|| -> Result<TestResult> {
        std::fs::create_dir_all(&tmp).map_err(|e| Error::Refused(e.to_string()))?;
        let store = Arc::new(flow_store::SqliteStore::open(
            tmp.join("flow.db"),
            flow_store::SqliteOptions::default(),
        )?);
        let outcome = flow_store::import_run(&*store, dir)?;
        let run = match outcome {
            flow_store::ImportOutcome::Imported { run, .. }
            | flow_store::ImportOutcome::AlreadyPresent { run } => run,
        };
        let facts = flow_store::ReadHistory::logical_history(&*store, &run)?;
        let module = match facts.first() {
            Some(flow_abi::fact::Fact::Start { entry, .. }) => entry.module.clone(),
            _ => return Err(Error::Unreadable("the history has no entry module".into())),
        };
        let root = dir
            .ancestors()
            .map(|d| d.join(&module))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no current program {module} beside {}",
                    dir.display()
                ))
            })?;
        let program = Sources::read(&root)?.program()?;
        let verdict = replay(program, &facts).verdict;
        Ok(TestResult {
            name: name.clone(),
            failure: (verdict != Verdict::Matched).then(|| verdict.to_string()),
            broken: false,
        })
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result.unwrap_or_else(|e| broken(&name, e.to_string()))
}
