//! Binding a program's Tools before Start (host-boundary.txt, "Binding"),
//! the two ways a host does it:
//!
//! * **Local** (the CLI, `flow mcp`): flow.toml beside the program, after
//!   approval ([`Approval`]: `--allow`, a prompt on a terminal for the CLI,
//!   never a prompt for `flow mcp`), with `flow mcp --tools` manifests
//!   binding declarations before it (those need no approval: the operator
//!   named them); the Tool processes live as long as the one drive.
//! * **Configured** (`flow serve`, and `/mcp` on it): only the server's own
//!   `--tools` manifests bind — a submitted flow has no filesystem bindings
//!   of its own — and the bound Tools are pooled by program hash, so their
//!   processes stay up across runs and resumes (issue 10, item 3; the
//!   process client restarts a process that ended, as the seed's process
//!   rules say).
//!
//! Both serve `std/memory#read|write` from the store's own database.
//!
//! A resume or fork binds from what was recorded at Start
//! ([`RunService::bind_at`]; never an imported run's directory), and a
//! server refuses a flow that asks for more steps than it allows.

use super::store::StoreRef;
use crate::error::{Error, Result};
use crate::host::{HUMAN, Host, HostOptions, MEMORY_READ, MEMORY_WRITE, SLEEP};
use crate::service::remote::Workers;
use flow_engine::program::Program;
use flow_store::{HostDetails, HostRecordRow, RunId};
use flow_tools::manifest::{Binding, Manifest, Resolver};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Programs whose bound Tools the pool keeps at most; past it, unused
/// entries are shut down.
const POOL_PROGRAMS: usize = 64;

/// How a host binds.
pub enum Bindings {
    /// flow.toml from the program's directory once `approval` allows its
    /// commands; `manifests` (`flow mcp --tools`, first match wins) bind
    /// declarations before it, with no approval.
    Local {
        approval: Approval,
        manifests: Vec<Manifest>,
    },
    /// The server's `--tools` manifests, first match wins; the
    /// declarations its `--workers` names go to remote workers instead.
    Configured {
        manifests: Vec<Manifest>,
        pool: Pool,
        workers: Option<Workers>,
    },
}

/// Who approves starting the commands a program's own flow.toml names
/// (seed "Running a repository's implementations"; a local manifest's
/// command needs consent on each run or live continuation, APR-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// `--allow`: approved.
    Allowed,
    /// The CLI without `--allow`: asks on a terminal, refuses without one.
    Ask,
    /// `flow mcp` without `--allow`: never asks, refuses (APR-6).
    Refuse,
}

/// Bound Tools by program hash.
#[derive(Default)]
pub struct Pool {
    hosts: Mutex<HashMap<String, Arc<Host>>>,
    /// Held while a new program binds, so two first runs of one program
    /// start its processes once.
    binding: tokio::sync::Mutex<()>,
}

/// A bound host for one drive; `pooled` hosts outlive it.
pub struct Bound {
    pub host: Arc<Host>,
    pooled: bool,
    /// The `--tools` manifests that bind some of the program's
    /// declarations, canonical paths: recorded at Start, so a command
    /// printed for the run on this host carries them (issue 41 §7).
    pub tools: Vec<PathBuf>,
}

impl Bound {
    /// Stops the drive's Tools unless the pool keeps them.
    pub async fn release(self) {
        if !self.pooled {
            self.host.shutdown().await;
        }
    }
}

impl Bindings {
    /// The CLI's: flow.toml beside the program, after `--allow` or asking.
    /// The CLI's: `--allow` or a prompt approves flow.toml beside the
    /// program; `--tools` manifests bind declarations before it.
    pub fn local(allow: bool, manifests: Vec<Manifest>) -> Bindings {
        Bindings::Local {
            approval: if allow {
                Approval::Allowed
            } else {
                Approval::Ask
            },
            manifests,
        }
    }

    /// `flow mcp`'s: never asks; `--allow` approves flow.toml beside a
    /// program, `--tools` manifests bind declarations of any program.
    pub fn unattended(allow: bool, manifests: Vec<Manifest>) -> Bindings {
        Bindings::Local {
            approval: if allow {
                Approval::Allowed
            } else {
                Approval::Refuse
            },
            manifests,
        }
    }

    pub fn configured(manifests: Vec<Manifest>) -> Bindings {
        Bindings::Configured {
            manifests,
            pool: Pool::default(),
            workers: None,
        }
    }

    /// A server's: its `--tools` manifests, and its worker queue.
    pub fn served(manifests: Vec<Manifest>, workers: Workers) -> Bindings {
        Bindings::Configured {
            manifests,
            pool: Pool::default(),
            workers: Some(workers),
        }
    }

    /// The worker queue, on a server.
    pub fn workers(&self) -> Option<&Workers> {
        match self {
            Bindings::Configured { workers, .. } => workers.as_ref(),
            Bindings::Local { .. } => None,
        }
    }

    /// Binds every declaration `program` can reach, or refuses with every
    /// unbound or unfitting one. `dir` is the program's directory on disk
    /// (read from disk, or recorded at Start for resume and fork). The
    /// Tool processes start on `runtime` when one is given (their pipes
    /// and tasks belong to the runtime that starts them: the drives').
    pub async fn bind(
        &self,
        store: &StoreRef,
        program: &Arc<Program>,
        hash: &str,
        dir: Option<PathBuf>,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Result<Bound> {
        match self {
            Bindings::Local {
                approval,
                manifests,
            } => {
                approve(program, dir.as_deref(), *approval, manifests)?;
                let opts = HostOptions {
                    program_dir: dir,
                    resolver: resolver(manifests, program),
                    memory: Some(store.clone()),
                    ..HostOptions::default()
                };
                Ok(Bound {
                    host: Arc::new(bind_on(runtime, program, opts).await?),
                    pooled: false,
                    tools: used(manifests, program),
                })
            }
            Bindings::Configured {
                manifests,
                pool,
                workers,
            } => {
                if let Some(h) = pool.get(hash) {
                    h.check_workers().await?;
                    return Ok(Bound {
                        host: h,
                        pooled: true,
                        tools: used(manifests, program),
                    });
                }
                let _one = pool.binding.lock().await;
                if let Some(h) = pool.get(hash) {
                    h.check_workers().await?;
                    return Ok(Bound {
                        host: h,
                        pooled: true,
                        tools: used(manifests, program),
                    });
                }
                let opts = HostOptions {
                    program_dir: None,
                    resolver: resolver(manifests, program),
                    memory: Some(store.clone()),
                    workers: workers.clone(),
                    ..HostOptions::default()
                };
                let host = match bind_on(runtime, program, opts).await {
                    Ok(h) => Arc::new(h),
                    Err(Error::Bind(msgs)) => {
                        let mut msgs: Vec<String> =
                            msgs.iter().map(|m| redact(manifests, m)).collect();
                        msgs.extend(name_hints(manifests, program));
                        return Err(Error::Bind(msgs));
                    }
                    Err(e) => return Err(e),
                };
                pool.put(hash, host.clone()).await;
                host.check_workers().await?;
                Ok(Bound {
                    host,
                    pooled: true,
                    tools: used(manifests, program),
                })
            }
        }
    }

    /// Stops every pooled Tool (server shutdown).
    pub async fn shutdown(&self) {
        if let Bindings::Configured { pool, .. } = self {
            let hosts: Vec<Arc<Host>> = match pool.hosts.lock() {
                Ok(mut h) => h.drain().map(|(_, v)| v).collect(),
                Err(_) => Vec::new(),
            };
            for h in hosts {
                h.shutdown().await;
            }
        }
    }
}

/// [`Host::bind`], on `runtime` when one is given.
async fn bind_on(
    runtime: Option<&tokio::runtime::Handle>,
    program: &Arc<Program>,
    mut opts: HostOptions,
) -> Result<Host> {
    let Some(rt) = runtime else {
        return Host::bind(program, &mut opts).await;
    };
    let program = program.clone();
    rt.spawn(async move { Host::bind(&program, &mut opts).await })
        .await
        .map_err(|e| Error::Unavailable(format!("binding the Tools stopped: {e}")))?
}

impl Pool {
    fn get(&self, hash: &str) -> Option<Arc<Host>> {
        self.hosts.lock().ok()?.get(hash).cloned()
    }

    async fn put(&self, hash: &str, host: Arc<Host>) {
        let evicted: Vec<Arc<Host>> = match self.hosts.lock() {
            Ok(mut h) => {
                let mut out = Vec::new();
                if h.len() >= POOL_PROGRAMS {
                    // Only hosts no drive holds (the map's is the one
                    // reference left).
                    let idle: Vec<String> = h
                        .iter()
                        .filter(|(_, v)| Arc::strong_count(v) == 1)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in idle {
                        out.extend(h.remove(&k));
                    }
                }
                h.insert(hash.to_string(), host);
                out
            }
            Err(_) => Vec::new(),
        };
        for h in evicted {
            h.shutdown().await;
        }
    }
}

/// Each declaration looked up in the manifests and bound as a host
/// override.
fn resolver(manifests: &[Manifest], program: &Program) -> Resolver {
    let mut resolver = Resolver::new();
    for m in program.modules.values() {
        for d in m.decls.values() {
            if let Some(b) = configured(manifests, &d.identity) {
                resolver.override_binding(&d.identity, b.clone());
            }
        }
    }
    resolver
}

/// The manifests (canonical paths, in their order) whose bindings serve
/// some of `program`'s declarations: each declaration's first match.
fn used(manifests: &[Manifest], program: &Program) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in manifests {
        let serves = program
            .modules
            .values()
            .flat_map(|m| m.decls.keys())
            .any(|id| {
                id.rsplit_once('#').is_some_and(|(module, tool)| {
                    manifests
                        .iter()
                        .find(|x| x.lookup(module, tool).is_some())
                        .is_some_and(|first| std::ptr::eq(first, m))
                })
            });
        if serves {
            out.push(std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone()));
        }
    }
    out
}

/// The first manifest binding of the declaration `identity`, looked up by
/// its module and tool id, as flow.toml keys them.
fn configured<'m>(manifests: &'m [Manifest], identity: &str) -> Option<&'m Binding> {
    let (module, tool) = identity.rsplit_once('#')?;
    manifests.iter().find_map(|man| man.lookup(module, tool))
}

/// What to do about declarations no manifest binds because of the module
/// name they are looked up by: a submitted flow's module is named by the
/// request's `name` (default `flow.json`), and the server's `--tools`
/// keys its tables by module name (`[tools."triage.json"]`). One line per
/// unbound module that some table would bind under another name.
fn name_hints(manifests: &[Manifest], program: &Program) -> Vec<String> {
    let mut hints = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for id in program.modules.values().flat_map(|m| m.decls.keys()) {
        let Some((module, tool)) = id.rsplit_once('#') else {
            continue;
        };
        if module.starts_with("std/") || configured(manifests, id).is_some() {
            continue;
        }
        for key in manifests.iter().flat_map(|m| m.tables.keys()) {
            let named = key.split_once('#').map_or(key.as_str(), |(m, _)| m);
            if named != module
                && !named.starts_with("std/")
                && manifests.iter().any(|m| m.lookup(named, tool).is_some())
            {
                hints
                    .entry(module.to_string())
                    .or_default()
                    .insert(named.to_string());
            }
        }
    }
    hints
        .into_iter()
        .map(|(module, names)| {
            let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
            format!(
                "this flow's module is named {module:?}, and the server's --tools binds Tools by module name ([tools.\"NAME\"] in its flow.toml): a submitted flow is named by the request's `name` (default \"flow.json\"); send \"name\": {} (flow --server URL run FILE sends the file's name)",
                names.join(" or ")
            )
        })
        .collect()
}

/// Hides the server's own paths (the `--tools` manifests and their
/// directories) in a message meant for a client.
fn redact(manifests: &[Manifest], msg: &str) -> String {
    let mut out = msg.to_string();
    let mut paths: Vec<String> = Vec::new();
    for m in manifests {
        paths.push(m.path.display().to_string());
        paths.push(m.dir.display().to_string());
    }
    // Longest first, so a file's path goes before its directory's.
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in paths.iter().filter(|p| !p.is_empty() && p.as_str() != ".") {
        out = out.replace(p.as_str(), "<tools>");
    }
    out
}

/// The approval rule (seed "Running a repository's implementations"): a
/// local manifest's commands start only with `--allow`, or after asking on
/// a terminal (the CLI); with neither the run is refused naming `--allow`.
/// A declaration the host serves itself, or one the configured `manifests`
/// bind, needs no approval; a program not read from disk has no local
/// manifest.
fn approve(
    program: &Program,
    dir: Option<&Path>,
    approval: Approval,
    manifests: &[Manifest],
) -> Result<()> {
    let needed: Vec<String> = program
        .reachable()
        .into_iter()
        .map(|(_, id)| id)
        .filter(|id| ![HUMAN, SLEEP, MEMORY_READ, MEMORY_WRITE].contains(&id.as_str()))
        .filter(|id| configured(manifests, id).is_none())
        .collect();
    if needed.is_empty() || approval == Approval::Allowed || dir.is_none() {
        return Ok(());
    }
    if approval == Approval::Refuse {
        return Err(Error::Refused(format!(
            "the run is refused, nothing was recorded: it would start the Tool commands flow.toml names for {}, and flow mcp never asks; start flow mcp with --allow to approve them, or bind them with --tools",
            needed.join(", ")
        )));
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        // Name the directory and every command it would start.
        let commands: std::collections::BTreeSet<String> = dir
            .and_then(|d| Manifest::find(d).ok().flatten())
            .map(|m| m.tables.values().map(|b| b.launch.to_string()).collect())
            .unwrap_or_default();
        eprintln!(
            "flow: this run starts the Tool commands that flow.toml in {} names:",
            dir.map(|d| d.display().to_string()).unwrap_or_default()
        );
        for c in &commands {
            eprintln!("  {}", c.escape_debug());
        }
        eprint!("Allow? [y/N] ");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        if matches!(line.trim(), "y" | "Y" | "yes") {
            return Ok(());
        }
    }
    Err(Error::Refused(
        "this run would start Tool commands named by flow.toml; pass --allow to allow them".into(),
    ))
}

impl super::RunService {
    /// Refuses a program any of whose modules asks for more node
    /// executions than this service allows.
    pub(super) fn within_step_limit(&self, program: &Program) -> Result<()> {
        let Some(ceiling) = self.inner.max_steps else {
            return Ok(());
        };
        for (path, m) in &program.modules {
            if let Some(asked) = m
                .report
                .flow
                .harness_meta
                .as_ref()
                .and_then(|h| h.max_steps)
                .filter(|n| *n > ceiling)
            {
                return Err(Error::Refused(format!(
                    "{path}: harness_meta.max_steps is {asked}, more than this server allows ({ceiling}; flow serve --max-steps)"
                )));
            }
        }
        Ok(())
    }

    /// The `--tools` manifests recorded at the Start of `run`, or of the
    /// run that drives it when it is nested: what a resume or fork of it
    /// on this host passes as `--tools` to bind as it was bound (a run a
    /// server started binds from the server's `--tools`). None for a run
    /// that came in by archive import: its records never name what runs.
    pub fn recorded_tools(&self, run: &RunId) -> Vec<String> {
        let store = &self.inner.store;
        let mut run = run.clone();
        // A nested run is at most as deep as its outer runs; bounded all
        // the same.
        for _ in 0..64 {
            let Ok(info) = store.run_info(&run) else {
                return Vec::new();
            };
            if info.imported_ms.is_some() {
                return Vec::new();
            }
            let recorded: Vec<String> = store
                .host_records(&run)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| match r.details {
                    HostDetails::Tools { tools } => Some(tools),
                    _ => None,
                })
                .flatten()
                .collect();
            match info.outer {
                Some((outer, _)) if recorded.is_empty() => run = outer,
                _ => return recorded,
            }
        }
        Vec::new()
    }

    /// The `--tools` a resume or fork of `run` printed by this host
    /// carries: those recorded at its Start ([`Self::recorded_tools`]),
    /// then this command's own (`flow resume --tools`), each once.
    pub fn resume_tools(&self, run: &RunId) -> Vec<String> {
        let mut out = self.recorded_tools(run);
        if let Bindings::Local { manifests, .. } = &self.inner.bindings {
            for m in manifests {
                let p = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
                let p = p.to_string_lossy().into_owned();
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Binds `program` for a resume or fork of `run` (its host records
    /// `records`, read already): from the program directory recorded at
    /// Start — unless the run came in by archive import (`imported`),
    /// whose host records are outside the hash chain and so never choose a
    /// directory whose commands run (issue 17, item 6); then only this
    /// host's own configuration binds. Returns the directory used.
    pub(super) async fn bind_at(
        &self,
        run: &RunId,
        program: &Arc<Program>,
        hash: &str,
        imported: bool,
        records: &[HostRecordRow],
    ) -> Result<(Bound, Option<std::path::PathBuf>)> {
        let dir = if imported {
            None
        } else {
            records
                .iter()
                .find_map(|r| match &r.details {
                    HostDetails::ProgramDir { program_dir } => Some(program_dir),
                    _ => None,
                })
                .map(std::path::PathBuf::from)
        };
        match self
            .inner
            .bindings
            .bind(
                &self.inner.store,
                program,
                hash,
                dir.clone(),
                self.inner.running.runtime(),
            )
            .await
        {
            Ok(b) => Ok((b, dir)),
            Err(Error::Bind(mut msgs)) if imported => {
                msgs.push(format!(
                    "{run} was imported from an archive: its Tools bind only from this host's own configuration (flow resume --tools FLOW.toml, flow serve --tools), never from a directory the archive names"
                ));
                Err(Error::Bind(msgs))
            }
            Err(e) => Err(e),
        }
    }
}
