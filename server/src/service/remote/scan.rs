//! The queue's scan: paused runs resumed as soon as a worker serves their
//! parked calls; ended runs' calls and long-lost workers forgotten.

use super::*;

impl RunService {
    /// The worker queue, on a server.
    pub fn workers(&self) -> Option<&Workers> {
        self.inner.bindings.workers()
    }

    /// Resumes paused runs as soon as a worker serves their parked calls,
    /// and now and then forgets ended runs' calls and long-lost workers (a
    /// task in the service's JoinSet; ends on shutdown).
    pub fn serve_workers(&self) {
        let Some(workers) = self.workers().cloned() else {
            return;
        };
        self.inner.running.spawn(scan(self.clone(), workers), false);
    }
}

async fn scan(service: RunService, workers: Workers) {
    let timeout = workers.inner.options.timeout;
    let forget = (timeout * 10).max(Duration::from_secs(60));
    let mut scans = 0u32;
    loop {
        tokio::select! {
            _ = workers.inner.arrived.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = workers.inner.shutdown.cancelled() => return,
        }
        scans += 1;
        if scans.is_multiple_of(SCANS_PER_SWEEP)
            && let Err(e) =
                blocking(&workers.inner.store, move |s| Ok(s.sweep_workers(forget)?)).await
        {
            tracing::warn!(error = %e, "cannot sweep the worker queue");
        }
        let parked = match blocking(&workers.inner.store, move |s| {
            Ok(s.parked_runs(timeout, RESUME_PER_SCAN)?)
        })
        .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the worker queue");
                continue;
            }
        };
        for run in parked {
            // A draining server resumes nothing: another server, or this
            // one once restarted, will.
            if service.is_active(&run) || !service.accepting() {
                continue;
            }
            tracing::info!(run.id = %run, "a worker serves a parked call: resuming the run");
            match service.resume(&run, None).await {
                // The drive goes on in its task; the scan goes on.
                Ok(_) => {}
                Err(e @ (Error::Leased { .. } | Error::Conflict(_))) => {
                    tracing::debug!(run.id = %run, "not resumed here: {e}");
                }
                Err(e) => tracing::warn!(run.id = %run, error = %e, "cannot resume a parked run"),
            }
        }
    }
}
