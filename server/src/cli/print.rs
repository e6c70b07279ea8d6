//! What the CLI prints the same way locally and with `--server`: the
//! printed commands (`flow_cmd`, resume lines, `more:` lines), the runs
//! listing and the check diagnostics.

use super::{Color, Global};
use serde_json::Value as Json;
use std::io::IsTerminal;
use std::path::Path;

/// The resume command for the pending human call `c` of `run`, with
/// `example` as its reply when there is one (else `--reply -` and the
/// schema the reply must fit). Printed the same locally and with
/// `--server` (only `flow_cmd` differs).
pub(crate) fn print_resume_line(
    g: &Global,
    run: &str,
    call: &str,
    schema: &Json,
    example: Option<Json>,
    allow: bool,
    tools: &[String],
) {
    let allow = if allow { " --allow" } else { "" };
    let head = format!(
        "{} resume {run} --call {}{allow}{}",
        flow_cmd(g),
        shell_quote(call),
        tools_flags(tools)
    );
    match example {
        Some(reply) => out!(
            "    {head} --reply {}",
            shell_quote(&flow_abi::json::canonical(&reply))
        ),
        None => {
            out!("    {head} --reply -");
            out!("    (then the outcome on standard input: {{\"Ok\": value}}, the value fitting");
            out!("     {})", flow_abi::json::canonical(schema));
        }
    }
}

/// ` --tools PATH` for each manifest a printed resume or fork needs to
/// bind the run's Tools as they were bound (a run a server started binds
/// from the server's `--tools`; [`crate::service::RunService::resume_tools`]).
/// Empty with `--server`: the server binds them itself.
pub(crate) fn tools_flags(tools: &[String]) -> String {
    tools
        .iter()
        .map(|t| format!(" --tools {}", shell_quote(t)))
        .collect()
}

/// `flow` with the flag that makes a printed command reach the same
/// store or server as the command that printed it (`--server URL`, or
/// `--data DIR` when it is not the default). A token is not printed: the
/// command reads it from `FLOW_TOKEN`.
pub(crate) fn flow_cmd(g: &Global) -> String {
    let cmd = match &g.server {
        Some(url) => return format!("flow --server {}", shell_quote(url)),
        None if g.data == Path::new(".flow") => "flow".to_string(),
        None => format!("flow --data {}", shell_quote(&g.data.to_string_lossy())),
    };
    // An encrypted store opens only with its key file: a printed command
    // names it, so it runs as printed.
    match &g.key_file {
        Some(k) => format!("{cmd} --key-file {}", shell_quote(&k.to_string_lossy())),
        None => cmd,
    }
}

/// `s` as one POSIX shell word.
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Whether to style diagnostics on standard output (running-a-program.txt:
/// "auto styles only when the specific output destination is a terminal,
/// NO_COLOR is absent or empty, and TERM is not dumb"; `always` overrides
/// those conditions; JSON is never styled).
pub(crate) fn styled(g: &Global) -> bool {
    match g.color {
        Color::Always => !g.json,
        Color::Never => false,
        Color::Auto => {
            !g.json
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    }
}

/// A severity label, in red or yellow when styled.
pub(crate) fn label(severity: &str, style: bool) -> String {
    match (style, severity) {
        (true, "error") => format!("\x1b[1;31m{severity}\x1b[0m"),
        (true, _) => format!("\x1b[1;33m{severity}\x1b[0m"),
        (false, _) => severity.to_string(),
    }
}

/// `flow check`'s text: the diagnostics, then `FILE: checks (N warnings)`
/// when none is an error (locally and with `--server` alike).
pub(crate) fn print_check(g: &Global, flow: &Path, all: &[Json], errors: usize) {
    print_diagnostics(g, all);
    if errors == 0 {
        out!("{}: checks ({} warnings)", flow.display(), all.len());
    }
}

/// Diagnostics as `severity[CODE] module#/json/pointer: message`: the
/// location is the module and the RFC 6901 JSON Pointer into it (`#` alone
/// is the whole document), as a URI fragment names a part of a file; each
/// related place on its own indented line, `  module#/pointer: message`.
pub(crate) fn print_diagnostics(g: &Global, ds: &[Json]) {
    let style = styled(g);
    for d in ds {
        let at = &d["location"];
        out!(
            "{}[{}] {}#{}: {}",
            label(d["severity"].as_str().unwrap_or("error"), style),
            d["code"].as_str().unwrap_or("-"),
            at["module"].as_str().or(d["module"].as_str()).unwrap_or(""),
            at["pointer"].as_str().unwrap_or(""),
            d["message"].as_str().unwrap_or("")
        );
        // GAP-DIAG-1 `related`: the other places the problem involves.
        for r in d["related"].as_array().into_iter().flatten() {
            let at = &r["location"];
            out!(
                "  {}#{}: {}",
                at["module"].as_str().unwrap_or(""),
                at["pointer"].as_str().unwrap_or(""),
                r["message"].as_str().unwrap_or("")
            );
        }
    }
}

/// One row of `flow runs`.
pub(crate) struct RunLine {
    pub run: String,
    pub state: String,
    pub record: String,
    pub module: String,
}

/// What the `more:` line of `flow runs` repeats of the query.
pub(crate) struct RunsMore<'a> {
    pub next: Option<&'a str>,
    pub state: Option<&'a str>,
    pub limit: Option<u32>,
    pub runs: Option<&'a Path>,
}

/// The rows as `RUN  STATE  (RECORD)  ENTRY`: the run's state word and
/// discovery's record, as `flow history` shows them; then the command for
/// the next page, with the same store or server, state and limit.
pub(crate) fn print_runs(
    g: &Global,
    rows: impl Iterator<Item = RunLine>,
    problems: &[Json],
    more: RunsMore,
) {
    let mut any = false;
    for r in rows {
        any = true;
        out!(
            "{}  {:<9}  {:<22}  {}",
            r.run,
            r.state,
            format!("({})", r.record),
            r.module
        );
    }
    if !any {
        out!("no runs");
    }
    for p in problems {
        eprintln!("problem: {p}");
    }
    if let Some(next) = more.next {
        let mut cmd = format!("{} runs --after {next}", flow_cmd(g));
        if let Some(s) = more.state {
            cmd.push_str(&format!(" --state {s}"));
        }
        if let Some(l) = more.limit {
            cmd.push_str(&format!(" --limit {l}"));
        }
        if let Some(dir) = more.runs {
            cmd.push_str(&format!(" --runs {}", shell_quote(&dir.to_string_lossy())));
        }
        out!("more: {cmd}");
    }
}

/// What `flow import` says (locally and with `--server` alike): the run,
/// whether it was written, and the torn last fact left out (CRASH-7) as
/// `(fact, reason)`.
pub(crate) fn print_import(g: &Global, run: &str, imported: bool, torn: Option<(u64, &str)>) {
    if g.json {
        let mut v = serde_json::json!({"run": run, "imported": imported});
        if let Some((fact, reason)) = torn {
            v["truncated"] = serde_json::json!({"fact": fact, "reason": reason});
        }
        out!("{v}");
        return;
    }
    let torn = torn
        .map(|(fact, reason)| {
            format!(
                "; truncated: the history's torn last fact {fact} was left out ({reason}), the {} facts before it kept",
                fact.saturating_sub(1)
            )
        })
        .unwrap_or_default();
    if imported {
        out!("imported {run}{torn}");
    } else {
        out!("{run} is already stored; nothing changed{torn}");
    }
}
