//! Binding a program's Tools before Start (host-boundary.txt, "Binding"),
//! the two ways a host does it:
//!
//! * **Local** (the CLI): flow.toml beside the program, after approval
//!   (`--allow`, or a prompt on a terminal); the Tool processes live as
//!   long as the one drive of this process.
//! * **Configured** (`flow serve`, `flow mcp`): only the server's own
//!   `--tools` manifests bind — a submitted flow has no filesystem bindings
//!   of its own — and the bound Tools are pooled by program hash, so their
//!   processes stay up across runs and resumes (issue 10, item 3; the
//!   process client restarts a process that ended, as the seed's process
//!   rules say).
//!
//! Both serve `std/memory#read|write` from the store's own database.

use super::store::StoreRef;
use crate::error::{Error, Result};
use crate::host::{HUMAN, Host, HostOptions, MEMORY_READ, MEMORY_WRITE, SLEEP};
use flow_engine::program::Program;
use flow_tools::manifest::{Manifest, Resolver};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Programs whose bound Tools the pool keeps at most; past it, unused
/// entries are shut down.
const POOL_PROGRAMS: usize = 64;

/// How a host binds.
pub enum Bindings {
    /// flow.toml from the program's directory; `allow` is `--allow`.
    Local { allow: bool },
    /// The server's `--tools` manifests, first match wins.
    Configured {
        manifests: Vec<Manifest>,
        pool: Pool,
    },
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
    pub fn configured(manifests: Vec<Manifest>) -> Bindings {
        Bindings::Configured {
            manifests,
            pool: Pool::default(),
        }
    }

    /// Binds every declaration `program` can reach, or refuses with every
    /// unbound or unfitting one. `dir` is the program's directory on disk
    /// (read from disk, or recorded at Start for resume and fork).
    pub async fn bind(
        &self,
        store: &StoreRef,
        program: &Arc<Program>,
        hash: &str,
        dir: Option<PathBuf>,
    ) -> Result<Bound> {
        match self {
            Bindings::Local { allow } => {
                approve(program, dir.as_deref(), *allow)?;
                let mut opts = HostOptions {
                    program_dir: dir,
                    memory: Some(store.clone()),
                    ..HostOptions::default()
                };
                Ok(Bound {
                    host: Arc::new(Host::bind(program, &mut opts).await?),
                    pooled: false,
                })
            }
            Bindings::Configured { manifests, pool } => {
                if let Some(h) = pool.get(hash) {
                    return Ok(Bound {
                        host: h,
                        pooled: true,
                    });
                }
                let _one = pool.binding.lock().await;
                if let Some(h) = pool.get(hash) {
                    return Ok(Bound {
                        host: h,
                        pooled: true,
                    });
                }
                let mut opts = HostOptions {
                    program_dir: None,
                    resolver: resolver(manifests, program),
                    memory: Some(store.clone()),
                    ..HostOptions::default()
                };
                let host = match Host::bind(program, &mut opts).await {
                    Ok(h) => Arc::new(h),
                    Err(Error::Bind(msgs)) => {
                        return Err(Error::Bind(
                            msgs.iter().map(|m| redact(manifests, m)).collect(),
                        ));
                    }
                    Err(e) => return Err(e),
                };
                pool.put(hash, host.clone()).await;
                Ok(Bound { host, pooled: true })
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

/// Each declaration looked up in the manifests (by its module and tool id,
/// as flow.toml keys them) and bound as a host override.
fn resolver(manifests: &[Manifest], program: &Program) -> Resolver {
    let mut resolver = Resolver::new();
    for m in program.modules.values() {
        for d in m.decls.values() {
            let Some((module, tool)) = d.identity.rsplit_once('#') else {
                continue;
            };
            if let Some(b) = manifests.iter().find_map(|man| man.lookup(module, tool)) {
                resolver.override_binding(&d.identity, b.clone());
            }
        }
    }
    resolver
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

/// The approval rule (seed "Running a repository's implementations"): the
/// CLI starts a local manifest's commands only with `--allow` (or after
/// asking on a terminal); with no terminal and no `--allow` the run is
/// refused naming `--allow`.
fn approve(program: &Program, dir: Option<&Path>, allow: bool) -> Result<()> {
    let needs = program
        .reachable()
        .iter()
        .any(|(_, id)| ![HUMAN, SLEEP, MEMORY_READ, MEMORY_WRITE].contains(&id.as_str()));
    if !needs || allow || dir.is_none() {
        return Ok(());
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        eprint!(
            "flow: this run starts the Tool commands that flow.toml in {} names. Allow? [y/N] ",
            dir.map(|d| d.display().to_string()).unwrap_or_default()
        );
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
