//! The `flow` command line: global flags, every command and its
//! arguments, with each command's example and exit codes (`--help`).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "flow",
    version,
    about = "Run, resume, replay, fork and inspect FlowSpec runs"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Where the embedded store lives.
    #[arg(long, global = true, env = "FLOW_DATA", default_value = ".flow")]
    pub data: PathBuf,
    /// Print structured JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// ANSI styling: auto styles only a terminal, with NO_COLOR unset and
    /// TERM not dumb.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Talk to a running flowd at this URL instead of the embedded store
    /// (run, resume, fork, replay, history, runs, check); for `flow
    /// worker`, the server it serves.
    #[arg(long, global = true, env = "FLOW_SERVER", value_parser = server_url)]
    pub server: Option<String>,
    /// The bearer token for --server.
    #[arg(long, global = true, env = "FLOW_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The master key file of encryption at rest (docs/custody.md): the
    /// store seals what it writes, and an encrypted store needs it to open.
    #[arg(long, global = true, env = "FLOW_KEY_FILE", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
}

/// `--server`'s value: an `http://` or `https://` URL with a host (a bare
/// `127.0.0.1:8080` was refused by the HTTP client as "builder error").
fn server_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(s.to_string()),
        _ => Err(format!(
            "--server needs a URL like http://127.0.0.1:8080 (the scheme included), not {s:?}"
        )),
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a flow to completion or to a pause.
    #[command(after_help = concat!(
        "Example:\n  flow run examples/flows/triage/triage.json --allow \\\n    --input '{\"ticket\": \"The site is down!\", \"customer\": \"Acme\"}'\n\n",
        "Exit codes: 0 completed with exit_code success; 4 completed with another exit_code; 3 paused (the pending calls and the resume command are printed); 1 faulted; 2 refused, nothing recorded; 5 cut short by a storage failure; 130 halted by an interrupt."))]
    Run {
        /// The FlowSpec file to run (its subgraph modules are read beside it).
        flow: PathBuf,
        /// The input JSON object, or - to read it from standard input.
        #[arg(long)]
        input: String,
        /// Start the Tool commands flow.toml names without asking.
        #[arg(long)]
        allow: bool,
        /// The namespace the run belongs to (default `default`): 1 to 64
        /// of a-z, 0-9, '-', '_' and '.'. With `--server`, the token must
        /// hold it.
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Admit a reply for an open call and continue; with no reply, continue
    /// a crashed or halted run, settling its open calls.
    #[command(after_help = concat!(
        "Example:\n  flow resume run-01m8… --call 'c1:root#1' --reply '{\"Ok\": {\"decision\": \"send\"}}'\n\n",
        "Exit codes: as flow run; 2 also when the call is not open or the reply does not fit its type."))]
    Resume {
        /// The run id (`flow runs` lists them).
        run: String,
        /// The open call to answer, e.g. `c1:root#1` (`flow history RUN --summary` lists them).
        #[arg(long, requires = "reply")]
        call: Option<String>,
        /// The outcome, e.g. '{"Ok": {...}}', or - for standard input.
        #[arg(long, requires = "call")]
        reply: Option<String>,
        /// Continuing a halted or crashed run: send the Tool calls that were
        /// out again (`resend`: they may run twice) or settle them
        /// `unknown`. Left out, each call's binding decides (`resend =
        /// true` in flow.toml sends it again). Calls never sent are sent.
        #[arg(long, value_enum, conflicts_with = "call")]
        open: Option<crate::service::OpenChoice>,
        /// Start the Tool commands the recorded flow.toml names without asking.
        #[arg(long)]
        allow: bool,
        /// flow.toml files that bind the run's Tools (repeatable, first
        /// match wins), before the flow.toml recorded at Start. An imported
        /// run has only these: it never binds from a directory its archive
        /// names.
        #[arg(long = "tools")]
        tools: Vec<PathBuf>,
    },
    /// Halt a run a server drives (with --server): by default once the
    /// calls out have finished (their Replies recorded, nothing new sent);
    /// with --force at once, leaving them open for `flow resume --open`.
    #[command(after_help = concat!(
        "Example:\n  flow --server http://127.0.0.1:8080 halt run-01m8…\n\n",
        "A run `flow run` drives here is halted by interrupting it (Ctrl-C).\n\n",
        "Exit codes: 0 halted; 2 no such run, or it has ended."))]
    Halt {
        /// The run id.
        run: String,
        /// Halt at once, with the calls out left open.
        #[arg(long)]
        force: bool,
    },
    /// Delete runs: their facts, host records, index rows, search
    /// attributes and the blobs no other run uses (forks keep theirs). The
    /// deletion is recorded in the store's audit log (docs/custody.md).
    #[command(after_help = concat!(
        "Examples:\n  flow delete run-01m8… --yes\n  flow --server http://127.0.0.1:8080 --token $ADMIN delete run-01m8… run-01m9… --yes\n\n",
        "Permanent: without --yes it asks on a terminal and refuses otherwise. A running run is refused unless --force (halt it first).\n\n",
        "Exit codes: 0 every run deleted; 2 refused (no such run, a running run without --force, no --yes; with several runs, the others are still deleted)."))]
    Delete {
        /// The run ids.
        #[arg(required = true)]
        runs: Vec<String>,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
        /// Also delete a running (or leased) run: its driver finds the
        /// history gone and stops.
        #[arg(long)]
        force: bool,
    },
    /// Redact values of a stored run: the blobs the paths reach become
    /// holes (their content is deleted unless another run still uses it);
    /// the chain still verifies, and the audit log records the redaction
    /// (docs/custody.md "Holes").
    #[command(after_help = concat!(
        "Examples:\n  flow redact run-01m8… --path /input/document --yes\n  flow redact run-01m8… --path '/calls/c1:root#2/reply/text' --path /state/notes/3 --yes\n  flow --server http://127.0.0.1:8080 --token $ADMIN redact run-01m8… --path /input/ssn --yes\n\n",
        "Paths: /input/…, /state/FIELD/…, /output/…, /calls/CALL/args/…, /calls/CALL/reply/…, /facts/N/… (JSON pointers; ~1 for /) or a blob hash blake3:<hex>. Each must reach a value stored as a blob: over 1 KiB, or declared in the flow's runtime_hints.sensitive.\n\n",
        "Permanent: without --yes it asks on a terminal and refuses otherwise. A running run is refused (halt it first).\n\n",
        "Exit codes: 0 redacted; 2 refused (no such run, a path that reaches no blob, a running run, no --yes), nothing changed."))]
    Redact {
        /// The run id.
        run: String,
        /// A value to make a hole (repeatable).
        #[arg(long = "path", required = true)]
        paths: Vec<String>,
        /// Redact without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Replay a run against its recorded program: matched, incomplete or
    /// diverged.
    #[command(
        after_help = "Example:\n  flow replay run-01m8…\n\nExit codes: 0 matched; 1 incomplete or diverged (the fact and the reason are printed); 2 no such run, or its program does not check; 5 a storage failure (the history does not verify)."
    )]
    Replay {
        /// The run id.
        run: String,
    },
    /// Start a new run from a checkpoint of another, on its recorded
    /// program or, with --flow, on a newer one that fits; or, with --call
    /// and --reply, from the checkpoint before a recorded call, that call
    /// answered with another reply (what if it had said …?).
    #[command(after_help = concat!(
        "Example:\n  flow fork run-01m8… --checkpoint 4 --set 'severity=\"low\"'\n  flow fork run-01m8… --checkpoint 4 --flow fixed/triage.json\n  flow fork run-01m8… --call 'c1:root#1' --reply '{\"Ok\":{\"category\":\"billing\"}}'\n\n",
        "Exit codes: as flow run; 2 refused (no such checkpoint or call, a --set, --reply or --flow that does not fit), nothing recorded."))]
    Fork {
        /// The run to fork from.
        run: String,
        /// The fact number of a root-task Checkpoint in RUN's history (see
        /// `flow history RUN --kind Checkpoint`).
        #[arg(long, required_unless_present = "call", conflicts_with = "call")]
        checkpoint: Option<u64>,
        /// A call RUN recorded (see `flow history RUN --kind Call`): the
        /// fork starts at the root Checkpoint before it, and the call is
        /// answered with --reply instead of being made again.
        #[arg(long, requires = "reply")]
        call: Option<String>,
        /// The outcome that replaces --call's reply, decoded against the
        /// call's declared type: {"Ok": value} or {"Failed": value}.
        #[arg(long, requires = "call")]
        reply: Option<String>,
        /// Replace a state field: field=JSON (repeatable).
        #[arg(long = "set")]
        set: Vec<String>,
        /// Fork onto this program (e.g. the fixed file) instead of the
        /// recorded one: the same flow id, the checkpoint's node, and state
        /// that fits its state_schema, or the fork is refused. Its flow.toml
        /// binds its Tools.
        #[arg(long)]
        flow: Option<PathBuf>,
        /// Start the Tool commands flow.toml names without asking.
        #[arg(long)]
        allow: bool,
        /// flow.toml files that bind the fork's Tools (repeatable, first
        /// match wins), before the flow.toml recorded at RUN's Start (a run
        /// a server started binds from the server's `--tools`).
        #[arg(long = "tools")]
        tools: Vec<PathBuf>,
    },
    /// Replay stored runs against a candidate program before deploying it
    /// (the replay gate): which would diverge, grouped by reason.
    #[command(after_help = concat!(
        "Examples:\n  flow gate fixed/triage.json\n  flow gate fixed/triage.json --state completed,paused --started-from 1765000000000 --json\n\n",
        "Replays every selected stored run of the candidate's flow id against the candidate (nothing bound, no Tool started), in parallel, and prints the verdicts grouped by reason with one example run each. Incomplete runs (paused, running, halted) pass: every fact they recorded re-derives.\n\n",
        "Exit codes: 0 no run diverged; 1 a run diverged (each group's fact and reason are printed); 2 refused: the candidate does not check (its diagnostics are printed) or a filter is bad; 5 a storage failure."))]
    Gate(super::gate::GateArgs),
    /// Recover runs onto a fixed program: fork each selected run that FIXED
    /// does not replay from its last root Checkpoint before the divergence
    /// that FIXED fits, onto FIXED, and start the fork.
    #[command(
        mut_arg("flow", |a| a
            .required(true)
            .value_name("FIXED.json")
            .help("The fixed program (a FlowSpec document): its flow id selects the runs, and the forks run it. Its flow.toml binds their Tools")),
        after_help = concat!(
        "Examples:\n  flow recover --flow fixed/triage.json --state faulted --dry-run\n  flow recover --flow fixed/triage.json --state faulted --allow\n  flow --server http://flowd:8080 recover --flow fixed/triage.json --fault 'node classify' --rate 5\n\n",
        "For each selected run of FIXED's flow id that FIXED does not replay (matched or incomplete runs are `not needed`): forks it from the latest root Checkpoint before its first divergence that FIXED fits, onto FIXED, and starts the fork, as `flow fork RUN --checkpoint N --flow FIXED` does. Every recorded Reply before that checkpoint is kept. A run that already has a fork onto FIXED's program is `already recovered`: running the recovery again (after an interruption too) forks only what is left. A line per run on stderr; --dry-run lists fork points and the calls made again, forking nothing.\n\n",
        "Exit codes: 0 every selected run recovered, already recovered or not needed; 1 a run cannot be recovered (no root Checkpoint before its divergence that FIXED fits: the reason is printed); 2 refused: FIXED does not check (its diagnostics are printed), a bad filter, Tools not bound (--allow); 5 a storage failure."))]
    Recover(super::recover::RecoverArgs),
    /// List bulk recoveries (flow recover) newest first, or show one and
    /// the forks it made.
    #[command(after_help = concat!(
        "Examples:\n  flow recoveries\n  flow recoveries rec-01m8…\n  flow --server http://flowd:8080 recoveries --json\n\n",
        "Each recovery that forked is recorded outside every history: who began it, the fixed program's flow and hash, `running` (it holds its flow's lock: a second recovery of the flow is refused meanwhile), `ended` with its counts, or `interrupted` (its server stopped: recovering the flow again goes on where it stopped), and the forks it made of which runs from which checkpoints.\n\n",
        "Exit codes: 0 listed; 2 no such recovery; 5 a storage failure."))]
    Recoveries(super::recoveries::RecoveriesArgs),
    /// Compare two runs' histories: where they part, and each call and
    /// checkpoint that differs.
    #[command(after_help = concat!(
        "Examples:\n  flow diff run-01m8…parent run-01m8…fork\n  flow diff run-01m8…a run-01m8…b --json\n\n",
        "Aligns the two histories (a fork beside its parent from the fork's checkpoint; other runs fact by fact from Start), says where they part, and lists each call and checkpoint that differs, field by field (a JSON path per field).\n\n",
        "Exit codes: 0 the histories agree from the alignment on; 1 they differ; 2 no such run; 5 a storage failure (a history does not verify)."))]
    Diff(super::diff::DiffArgs),
    /// Show a run's history.
    #[command(
        after_help = "Examples:\n  flow history run-01m8… --summary\n  flow history run-01m8… --kind Call --search classify\n  flow history run-01m8… --fact 5\n\nExit codes: 0 shown; 2 no such run or a bad selection; 5 a storage failure (the history does not verify)."
    )]
    History(super::history::Ask),
    /// Follow a run live: each fact as it becomes durable, whichever
    /// process appends it, until the run ends, pauses or is halted; then
    /// the next command.
    #[command(
        after_help = "Example:\n  flow watch run-01m8…\n\nExit codes: as flow run: 0 completed with exit_code success; 4 another exit_code; 1 faulted; 3 paused (the resume command is printed); 130 halted; 2 no such run; 5 a storage failure."
    )]
    Watch {
        /// The run id.
        run: String,
        /// Print facts after this number (0: from Start).
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Discover stored runs (or, with --runs, a directory of archives).
    #[command(
        after_help = "Examples:\n  flow runs --state paused\n  flow runs --newest --state faulted,halted --flow orders --fault timeout --counts\n  flow runs --attr customer=acme --started-from 1765000000000\n  flow runs --runs ./archives --limit 20\n\nExit codes: 0 a page was inspected (or the --runs root is missing); 2 refused (a bad cursor or state, a root that is a file or too large)."
    )]
    Runs {
        /// Runs on a page, at most.
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this run id (the previous page's next cursor).
        #[arg(long)]
        after: Option<String>,
        /// Only runs in these states, comma-separated: running, paused, completed, faulted, halted.
        #[arg(long)]
        state: Option<String>,
        /// Discover the archive directories under this root instead of the store.
        #[arg(long)]
        runs: Option<PathBuf>,
        #[command(flatten)]
        filter: super::query::RunsFilter,
    },
    /// Check a flow: diagnostics.
    #[command(
        after_help = "Example:\n  flow check examples/flows/triage/triage.json\n\nExit codes: 0 no error (warnings may be printed); 2 errors, each with its JSON Pointer."
    )]
    Check {
        /// The FlowSpec file.
        flow: PathBuf,
    },
    /// The `flow tools` document: every declaration, fingerprint and type.
    #[command(
        after_help = "Example:\n  flow tools examples/flows/triage/triage.json > tools.json\n\nExit codes: 0 every module checks; 2 one does not (the document is printed all the same, each module's diagnostics in programs[].diagnostics)."
    )]
    Tools {
        /// The FlowSpec file.
        flow: PathBuf,
        /// Only the declarations reachable from this entry module.
        #[arg(long)]
        entry: Option<String>,
    },
    /// Export a run as an archive directory.
    #[command(
        after_help = "Examples:\n  flow export run-01m8… --out ./archives/run-01m8…\n  flow export run-01m8… --out ./shared --lineage --sign ~/.flowd/alice.key\n\nExit codes: 0 written; 2 no such run, the directory cannot be written, or the key file is refused; 5 a storage failure (the history does not verify)."
    )]
    Export {
        /// The run id.
        run: String,
        /// The archive directory to write (history.jsonl, blobs/, host.jsonl).
        #[arg(long)]
        out: PathBuf,
        /// Also the run's forks and nested runs, recursively: the
        /// directory then holds one archive directory per run, by id.
        #[arg(long)]
        lineage: bool,
        /// Sign the archive with this key file (`flow keys new-signing`):
        /// signature.json, over every run's head and host records and the
        /// key's signer name. Signed here, even with --server.
        #[arg(long, value_name = "KEYFILE")]
        sign: Option<PathBuf>,
        /// Leave this value out of the archive as a hole (repeatable; the
        /// paths of `flow redact`): its blob is not written and
        /// holes.json lists it, so the archive still verifies on import.
        /// The store keeps the value. Not with --lineage.
        #[arg(long = "redact", value_name = "PATH")]
        redact: Vec<String>,
    },
    /// Import a run archive: a directory (as `flow export` writes) or a
    /// tar file (as `GET /v1/runs/{run}/archive` sends); verified first,
    /// idempotent.
    #[command(
        after_help = "Examples:\n  flow import ./archives/run-01m8…\n  flow import run-01m8….tar\n\nExit codes: 0 imported (or already present); 2 refused: it does not verify, it is not a directory or a regular file, or another history has the run id; nothing written."
    )]
    Import {
        /// The archive: a directory or a tar file.
        #[arg(value_name = "DIR|FILE.tar")]
        dir: PathBuf,
        /// Accept only an archive signed by a key this file lists (one
        /// `ed25519:<base64> NAME` a line): an unsigned archive or another
        /// key is refused. Without it a signed archive is still verified.
        /// Not with --server (the server's --trusted-keys decides there).
        #[arg(long, value_name = "FILE")]
        trust: Option<PathBuf>,
        /// The namespace the runs go into (default `default`; a run already
        /// stored stays where it is). With `--server`, the token must hold
        /// it.
        #[arg(long, value_name = "NS", value_parser = super::query::namespace_arg)]
        namespace: Option<flow_store::Namespace>,
    },
    /// Run every `*.test.json` fixture under DIR against its fakes and
    /// replay every saved archive against the current program.
    #[command(
        after_help = "Example:\n  flow test examples/flows\n\nExit codes: 0 every fixture passed and every archive replayed matched; 1 a failure (each is printed); 2 a fixture does not read."
    )]
    Test {
        /// The directory searched for fixtures and archives.
        dir: PathBuf,
    },
    /// The HTTP server (docs/http.md).
    #[command(
        after_help = "Example:\n  flow serve --listen 127.0.0.1:8080 --tools examples/flows/triage/flow.toml\n\nThe first line printed is `flowd listening on URL`; the dashboard is at URL/ and the API docs at URL/docs/. Exit codes: 0 after Ctrl-C or SIGTERM; 2 refused (a bad flag, a non-loopback address without --tokens)."
    )]
    Serve(crate::http::cli::ServeArgs),
    /// Serve the Tools a flow.toml names to a flowd server (or cluster)
    /// from this host: a remote worker (docs/deploy.md "Workers").
    #[command(after_help = concat!(
        "Example:\n  flow worker --server http://flowd.internal:8080 --token \"$WORKER_TOKEN\" \\\n    --tools examples/flows/triage/flow.toml\n\n",
        "The server routes declarations to workers with flow serve --workers KEY. The first line printed is `flow worker ID serving N declarations for URL`. ",
        "Exit codes: 0 after Ctrl-C or SIGTERM (calls out get 10 s, then the worker leaves); 2 refused (no --server, a flow.toml that does not read or bind, a token the server refuses)."))]
    Worker(crate::worker::WorkerArgs),
    /// The MCP server over standard input and output (docs/mcp.md).
    #[command(
        after_help = "Example:\n  flow mcp --tools examples/flows/triage/flow.toml\n\nExit codes: 0 when the client closes standard input; 2 refused (a bad flag)."
    )]
    Mcp(crate::mcp::stdio::McpArgs),
    /// Keys: master keys for encryption at rest (make one, rotate a
    /// store's) and archive signing keys (docs/custody.md).
    #[command(subcommand)]
    Keys(super::keys::KeysCommand),
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// `flow --help` says what each command does: every command has its
    /// own line (a doc comment misplaced onto the next variant once showed
    /// `gate` as "Show a run's history" and `history` as nothing).
    #[test]
    fn every_command_says_what_it_does_in_its_own_words() {
        let cli = Cli::command();
        let mut seen = std::collections::BTreeMap::new();
        for c in cli.get_subcommands() {
            let about = c.get_about().map(ToString::to_string).unwrap_or_default();
            assert!(
                !about.is_empty(),
                "flow {} has no description",
                c.get_name()
            );
            assert!(
                !about.contains("arguments"),
                "flow {}: {about:?}",
                c.get_name()
            );
            if let Some(other) = seen.insert(about.clone(), c.get_name().to_string()) {
                panic!("flow {} and flow {other} both say {about:?}", c.get_name());
            }
        }
    }
}
