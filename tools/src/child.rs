//! Starting an implementation's process.
//!
//! STYLE rule 8: "child processes are killed by a Drop guard". Every child is
//! spawned with `kill_on_drop`, so dropping the [`tokio::process::Child`]
//! (when its owning service ends, or the runtime shuts down) kills it.
//! Its stderr is drained into tracing line by line, its last 8 KiB kept
//! ([`StderrTail`]); it never reaches the protocol stream, and a chatty
//! child never blocks on a full pipe.
//!
//! The environment is inherited: flow.toml "carries no credential", so an
//! implementation that needs one (flow-llm's `FLOW_LLM_API_KEY`) reads it
//! from the host's environment.

use crate::manifest::Launch;
use crate::stderr::StderrTail;
use std::path::Path;
use std::process::Stdio;
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinSet;

/// A started child: the process and its protocol pipes.
pub struct Started {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    /// The end of what it writes to stderr.
    pub stderr: StderrTail,
}

/// The program to start: as named, unless it is a bare name found nowhere on
/// PATH but present beside the running executable — so the binaries that
/// ship with flowd (`flow-llm`) are found next to `flow` without setup.
fn companion(program: &str) -> std::path::PathBuf {
    let named = std::path::PathBuf::from(program);
    if program.contains('/') {
        return named;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    if on_path {
        return named;
    }
    match std::env::current_exe() {
        Ok(exe) => match exe.parent().map(|d| d.join(program)) {
            Some(beside) if beside.is_file() => beside,
            _ => named,
        },
        Err(_) => named,
    }
}

/// Starts `launch` in `dir`, with stdin and stdout piped for the protocol
/// and stderr drained into tracing by a task in `tasks`.
pub fn start(
    launch: &Launch,
    dir: &Path,
    label: &str,
    tasks: &mut JoinSet<()>,
) -> std::io::Result<Started> {
    let argv = launch.argv();
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ));
    };
    let mut cmd = Command::new(companion(program));
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("child pipes missing"));
    };
    let (keep, tail) = crate::stderr::tail();
    if let Some(stderr) = child.stderr.take() {
        let label = label.to_string();
        let pid = child.id().unwrap_or(0);
        tasks.spawn(async move {
            let mut r = BufReader::new(stderr);
            let mut buf = Vec::new();
            // Lines are cut at 64 KiB so a child cannot grow our memory.
            while let Ok(Some(line)) = crate::lines::read_line(&mut r, 64 * 1024, &mut buf).await {
                let text = match line {
                    crate::lines::Line::Text(t) => t,
                    crate::lines::Line::NotUtf8 => "(a line that is not UTF-8)".into(),
                    crate::lines::Line::Oversized { len, .. } => format!("(a line of {len} bytes)"),
                };
                tracing::info!(tool.process = %label, tool.pid = pid, tool.stderr = %text, "tool stderr");
                keep.push(&text);
            }
            drop(keep);
        });
    }
    Ok(Started {
        child,
        stdin,
        stdout,
        stderr: tail,
    })
}
