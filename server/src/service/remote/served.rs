//! The worker's side of the queue: a worker registers, is heard from,
//! polls for calls, sends their replies and leaves; the live workers listed.

use super::*;
use flow_store::Namespaces;

impl Workers {
    /// Records a worker, the owner tag of the token that registers it
    /// (`""` without tokens), the namespaces whose runs' calls it is
    /// handed (the token's) and what it serves; returns its id.
    pub async fn register(
        &self,
        name: &str,
        owner: &str,
        namespaces: Namespaces,
        tools: Vec<ServedTool>,
    ) -> Result<String> {
        let id = crate::service::new_run_id();
        let id = format!("worker-{}", id.as_str().trim_start_matches("run-"));
        let (i, n, o) = (id.clone(), name.to_string(), owner.to_string());
        blocking(&self.inner.store, move |s| {
            Ok(s.register_worker(&i, &n, &o, &namespaces, &tools)?)
        })
        .await?;
        if let Ok(mut known) = self.inner.owners.lock() {
            if known.len() >= 4096 {
                known.clear();
            }
            known.insert(id.clone(), owner.to_string());
        }
        tracing::info!(worker = %id, worker.name = %name, "worker registered");
        self.inner.arrived.notify_one();
        Ok(id)
    }

    /// The owner tag `worker` was registered with; `None` for a worker the
    /// store does not know. Read from the store once per server.
    pub async fn owner(&self, worker: &str) -> Result<Option<String>> {
        if let Some(o) = self
            .inner
            .owners
            .lock()
            .ok()
            .and_then(|k| k.get(worker).cloned())
        {
            return Ok(Some(o));
        }
        let w = worker.to_string();
        let owner = blocking(&self.inner.store, move |s| Ok(s.worker_owner(&w)?)).await?;
        if let (Some(o), Ok(mut known)) = (&owner, self.inner.owners.lock()) {
            if known.len() >= 4096 {
                known.clear();
            }
            known.insert(worker.to_string(), o.clone());
        }
        Ok(owner)
    }

    /// Marks `worker` heard from; false when it is unknown or was judged
    /// lost. A worker this server marked within a tenth of the timeout is
    /// live for certain, and is not written again: a busy worker polls and
    /// replies far more often than its liveness needs.
    async fn heard(&self, worker: &str) -> Result<bool> {
        let timeout = self.inner.options.timeout;
        let fresh = self
            .inner
            .touched
            .lock()
            .ok()
            .and_then(|t| t.get(worker).copied())
            .is_some_and(|at| at.elapsed() < timeout / 10);
        if fresh {
            return Ok(true);
        }
        let w = worker.to_string();
        let live = blocking(&self.inner.store, move |s| Ok(s.touch_worker(&w, timeout)?)).await?;
        if let Ok(mut t) = self.inner.touched.lock() {
            if live {
                if t.len() >= 4096 {
                    t.clear();
                }
                t.insert(worker.to_string(), std::time::Instant::now());
            } else {
                t.remove(worker);
            }
        }
        Ok(live)
    }

    /// A worker's long poll: at most `max` calls (and cancels) for it, as
    /// soon as there are some, or none after `wait` (at most
    /// [`Workers::hold`]). `None` when the worker is unknown or was judged
    /// lost: it registers again.
    pub async fn poll(&self, worker: &str, max: u32, wait: Duration) -> Result<Option<Claimed>> {
        if !self.heard(worker).await? {
            return Ok(None);
        }
        let until = tokio::time::Instant::now() + wait.min(self.hold());
        loop {
            let notified = self.inner.queued.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let w = worker.to_string();
            let claimed = blocking(&self.inner.store, move |s| Ok(s.claim_calls(&w, max)?)).await?;
            if !claimed.calls.is_empty() || !claimed.cancels.is_empty() {
                return Ok(Some(claimed));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(self.tick()) => {}
                _ = tokio::time::sleep_until(until) => return Ok(Some(Claimed::default())),
                _ = self.inner.shutdown.cancelled() => return Ok(Some(Claimed::default())),
            }
        }
    }

    /// Admits a worker's replies: each stored once if the call went to
    /// that worker and has no outcome yet (else dropped); returns which
    /// were admitted. Also counts as hearing from the worker.
    pub async fn reply(&self, worker: &str, replies: Vec<WorkerReply>) -> Result<Vec<bool>> {
        let w = worker.to_string();
        let mut items = Vec::with_capacity(replies.len());
        for r in replies {
            let run = RunId::parse(&r.run).map_err(|e| Error::Refused(e.to_string()))?;
            let call = CallId::parse(&r.call).map_err(|e| Error::Refused(e.to_string()))?;
            items.push((run, call, r.outcome));
        }
        let (admitted, items) = blocking(&self.inner.store, move |s| {
            Ok((s.reply_calls(&w, &items)?, items))
        })
        .await?;
        // A worker judged lost may still have a reply admitted (its call
        // was not settled yet); that does not bring it back. The replies
        // are admitted whatever this says.
        if let Err(e) = self.heard(worker).await {
            tracing::warn!(worker = %worker, error = %e, "cannot mark a worker heard from");
        }
        if let Ok(waiting) = self.inner.waiting.lock() {
            for ((run, call, outcome), ok) in items.into_iter().zip(&admitted) {
                if let (true, Some(w)) = (ok, waiting.get(&(run, call))) {
                    if let Ok(mut o) = w.outcome.lock() {
                        *o = Some((outcome, worker.to_string()));
                    }
                    w.notify.notify_one();
                }
            }
        }
        Ok(admitted)
    }

    /// A worker leaving: lost at once, so its calls are settled at their
    /// drivers' next look.
    pub async fn leave(&self, worker: &str) -> Result<()> {
        if let Ok(mut t) = self.inner.touched.lock() {
            t.remove(worker);
        }
        let w = worker.to_string();
        blocking(&self.inner.store, move |s| Ok(s.remove_worker(&w)?)).await?;
        tracing::info!(worker = %worker, "worker left");
        // The calls it handed back are settled now, not at the drives'
        // next look: every drive waiting here looks again.
        if let Ok(waiting) = self.inner.waiting.lock() {
            for w in waiting.values() {
                w.notify.notify_one();
            }
        }
        Ok(())
    }

    /// The live workers.
    pub async fn list(&self) -> Result<Vec<WorkerInfo>> {
        let t = self.inner.options.timeout;
        blocking(&self.inner.store, move |s| Ok(s.live_workers(t)?)).await
    }
}
