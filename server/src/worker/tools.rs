//! The Tools a worker serves: what its flow.toml binds, started and
//! described as a host starts them (flow-tools' `bind`, as
//! [`crate::host::Host`] does), so each declaration is registered with the
//! fingerprint its implementation's describe answered.
//!
//! A flow.toml says how to run each file's implementations, not what the
//! declarations are; a worker learns them from the FlowSpec files its
//! table keys name (`[tools."triage.json"]` → `triage.json` beside the
//! manifest), each read as the root of a program in its own directory, as
//! `flow run FILE` reads it — so declarations have the identities a run of
//! that file gives them. Every declaration of those programs that the
//! manifest binds is served, `std/...` modules included (`[tools."std/llm"]`
//! serves `std/llm#chat` when a named flow calls it). The host's own
//! built-ins (`std/human`, `std/clock`, `std/memory`) never are: the server
//! serves them.

use crate::error::{Error, Result};
use crate::host::{HUMAN, MEMORY_READ, MEMORY_WRITE, SLEEP};
use crate::source::Sources;
use flow_store::ServedTool;
use flow_tools::CallOutcome;
use flow_tools::dispatch::{BindOptions, Dispatcher, ToBind, bind};
use flow_tools::manifest::{Manifest, Resolver, Source};
use flow_tools::outcome::CallRequest;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The bound Tools of a worker.
pub struct Served {
    /// Identity → the dispatcher of the module it was bound for.
    routes: BTreeMap<String, Dispatcher>,
    dispatchers: Vec<Dispatcher>,
    /// What the worker registers.
    pub tools: Vec<ServedTool>,
}

impl Served {
    /// Reads the FlowSpec files `manifest` names, binds every declaration
    /// it binds (starting each implementation once and checking its
    /// fingerprint), or refuses with every problem at once.
    pub async fn bind(manifest: &Manifest, shutdown: &CancellationToken) -> Result<Served> {
        let files: BTreeSet<&str> = manifest
            .tables
            .keys()
            .filter(|k| !k.starts_with("std/"))
            .map(|k| k.split_once('#').map_or(k.as_str(), |(f, _)| f))
            .collect();
        if files.is_empty() {
            return Err(Error::Refused(format!(
                "{}: no table names a FlowSpec file; a worker learns the declarations it serves from the files its table keys name ([tools.\"flow.json\"])",
                manifest.path.display()
            )));
        }
        let mut out = Served {
            routes: BTreeMap::new(),
            dispatchers: Vec::new(),
            tools: Vec::new(),
        };
        let mut refusals = Vec::new();
        for file in files {
            if let Err(e) = out.bind_file(manifest, file, shutdown, &mut refusals).await {
                refusals.push(format!("{file}: {e}"));
            }
        }
        if out.tools.is_empty() && refusals.is_empty() {
            refusals.push(format!(
                "{}: binds no declaration of the FlowSpec files it names",
                manifest.path.display()
            ));
        }
        if !refusals.is_empty() {
            out.shutdown().await;
            return Err(Error::Bind(refusals));
        }
        Ok(out)
    }

    async fn bind_file(
        &mut self,
        manifest: &Manifest,
        file: &str,
        shutdown: &CancellationToken,
        refusals: &mut Vec<String>,
    ) -> Result<()> {
        let path = manifest.dir.join(file);
        let sources = Sources::read(&path)?;
        let program = sources.program()?;
        // The table key of a module of this program: its path relative to
        // the manifest's directory (built-ins by their name).
        let prefix = Path::new(file)
            .parent()
            .map(|p| p.to_string_lossy().to_string())
            .filter(|p| !p.is_empty());
        for (module, m) in &program.modules {
            let mut resolver = Resolver::new();
            let mut decls = Vec::new();
            let mut found = Vec::new();
            for d in m.decls.values() {
                let id = &d.identity;
                if [HUMAN, SLEEP, MEMORY_READ, MEMORY_WRITE].contains(&id.as_str())
                    || m.subflows
                        .values()
                        .any(|s| *id == flow_engine::program::subflow_entry(s))
                {
                    continue;
                }
                let Some((decl_module, tool)) = id.rsplit_once('#') else {
                    continue;
                };
                let key = match &prefix {
                    Some(p) if !decl_module.starts_with("std/") => format!("{p}/{decl_module}"),
                    _ => decl_module.to_string(),
                };
                let Some(binding) = manifest.lookup(&key, tool) else {
                    continue;
                };
                let fp = m.fingerprint(id).unwrap_or_default();
                if let Some(t) = self.tools.iter().find(|t| &t.tool == id) {
                    if t.fingerprint != fp {
                        refusals.push(format!(
                            "{id} is declared with fingerprint {} and {fp} by the flows this flow.toml names; a worker serves one",
                            t.fingerprint
                        ));
                    }
                    continue;
                }
                resolver.override_binding(id, binding.clone());
                found.push(ServedTool {
                    tool: id.clone(),
                    fingerprint: fp,
                    resend: binding.resend,
                });
                decls.push(ToBind {
                    decl: d.clone(),
                    source: Source::Submitted,
                });
            }
            if decls.is_empty() {
                continue;
            }
            let bound = bind(
                &decls,
                Arc::new(m.report.types.clone()),
                &mut resolver,
                &BindOptions::default(),
                shutdown.child_token(),
            )
            .await;
            match bound {
                Ok(d) => {
                    for t in &found {
                        self.routes.insert(t.tool.clone(), d.clone());
                    }
                    self.tools.extend(found);
                    self.dispatchers.push(d);
                }
                Err(errs) => {
                    refusals.extend(errs.into_iter().map(|e| format!("{module}: {e}")));
                }
            }
        }
        Ok(())
    }

    /// Sends a call to its implementation; `None` when the worker's
    /// shutdown interrupted it before any reply (the server decides it, as
    /// for a worker lost with the call out).
    pub async fn call(&self, req: CallRequest) -> Option<CallOutcome> {
        let Some(d) = self.routes.get(&req.tool) else {
            return Some(CallOutcome::NotRun(format!(
                "this worker does not serve {}",
                req.tool
            )));
        };
        d.call(req).await.ok()
    }

    /// Stops every implementation (cancelling what is still out).
    pub async fn shutdown(&self) {
        for d in &self.dispatchers {
            d.shutdown().await;
        }
    }
}
