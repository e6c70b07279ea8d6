//! Several servers on one store (docs/deploy.md): each run is driven by one
//! server at a time, the holder of the run's lease (the store's `Leases`).
//!
//! * A drive claims the lease before it records anything (start, resume,
//!   fork, a deadline, a takeover) and lets go of it when the run pauses or
//!   ends — or, at a graceful shutdown, hands it over (it expires at once).
//! * [`renew`] extends every lease this server holds every third of the
//!   lease time (a timer, not a round trip per step). A lease another
//!   server took over is not renewed: that drive is stopped (fenced), and
//!   so is every drive once renewals have failed for a whole lease time,
//!   since the leases may have passed on. Until it stops, a fenced drive
//!   cannot fork the history: the store refuses an append that does not
//!   follow the stored head, inside the append's transaction.
//! * [`take_over`] claims expired leases of runs still `running` (their
//!   server died) with `FOR UPDATE SKIP LOCKED` and continues each through
//!   the crash-recovery path of `resume`: open calls settled
//!   `Unknown("host restarted")`, or resent when the binding says
//!   `resend = true`.
//!
//! A single process (the CLI, `flow serve` on SQLite) has no lease options
//! and makes none of these round trips: a [`Claim`] is then only this
//! process's mark that a run is being driven (one drive per run).

use super::running::Running;
use super::{RunService, store::blocking};
use crate::error::{Error, Result};
use backon::{ConstantBuilder, Retryable};
use flow_store::{LeaseClaim, LeaseDone, RunId};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A lease operation's answer, awaited without a thread held for it: the
/// store hands it over when its round trip ends (`Leases::claim_lease_then`).
async fn answered<T: Send + 'static>(op: impl FnOnce(LeaseDone<T>)) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    op(Box::new(move |r| {
        let _ = tx.send(r);
    }));
    rx.await
        .map_err(|_| Error::Unreadable("the store dropped a lease's answer".into()))?
        .map_err(Error::from)
}

/// How this server takes part in a cluster.
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    /// What a 409 names as the holder: where the run's driver can be
    /// reached (`flow serve --node`, by default its own URL).
    pub node: String,
    /// How long a lease lasts unless renewed (`flow serve --lease-seconds`).
    pub ttl: Duration,
}

/// The lease options with this process's holder name: the node and a
/// random instance, so a restarted server on the same address never
/// mistakes its predecessor's leases for its own.
pub(super) struct Leasing {
    pub(super) holder: String,
    pub(super) ttl: Duration,
}

/// Expired leases taken over per scan.
const TAKE_PER_SCAN: u32 = 32;
/// The longest wait between scans for expired leases.
const SCAN_MAX: Duration = Duration::from_secs(1);
/// How many times (10 ms apart) a patient claim looks again for a drive
/// here to let go of the run.
const LOCAL_WAITS: usize = 50;
/// Tries, 50 ms apart, before a request answers that another server holds
/// the lease (the holder may be letting go of it: a pause in flight).
const PATIENT_TRIES: usize = 6;

impl Leasing {
    pub(super) fn new(o: LeaseOptions) -> Leasing {
        let instance = super::new_run_id();
        let instance = instance.as_str().trim_start_matches("run-");
        Leasing {
            holder: format!(
                "{}#{}",
                o.node,
                &instance[instance.len().saturating_sub(10)..]
            ),
            ttl: o.ttl.max(Duration::from_secs(1)),
        }
    }
}

/// The node part of a holder name.
fn node_of(holder: &str) -> &str {
    holder.rsplit_once('#').map_or(holder, |(n, _)| n)
}

/// A run marked as driven (and, with leases, its lease); dropping it
/// unmarks the run and lets go of the lease (every early return before the
/// drive task takes it over) unless told to keep it.
pub(super) struct Claim {
    pub(super) service: RunService,
    pub(super) run: RunId,
    pub(super) token: CancellationToken,
    pub(super) drain: CancellationToken,
    epoch: Option<u64>,
    release: bool,
}

impl Claim {
    fn set_epoch(&mut self, epoch: u64) {
        self.epoch = Some(epoch);
        self.service.inner.running.set_epoch(&self.run, epoch);
    }

    /// Dropped, the claim leaves the lease to expire in its time.
    pub(super) fn keep_lease(mut self) -> Claim {
        self.release = false;
        self
    }

    /// Lets go of the lease (awaited, so whoever hears of the pause or the
    /// end next can claim it) when `release`, then of the run.
    pub(super) async fn finish(mut self, release: bool) {
        if let (Some(epoch), true) = (self.epoch.take(), release) {
            self.service.release_lease(&self.run, epoch).await;
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.service.inner.running.unmark(&self.run);
        if let (Some(epoch), true) = (self.epoch.take(), self.release)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (service, run) = (self.service.clone(), self.run.clone());
            rt.spawn(async move { service.release_lease(&run, epoch).await });
        }
    }
}

impl RunService {
    /// Marks `run` as driven here (with the lease of `epoch` already
    /// claimed, if any); refused when it is driven here already.
    pub(super) fn claim_local(&self, run: &RunId, epoch: Option<u64>) -> Result<Claim> {
        let super::running::Marked { token, drain } = self.inner.running.mark(run, epoch)?;
        Ok(Claim {
            service: self.clone(),
            run: run.clone(),
            token,
            drain,
            epoch,
            release: true,
        })
    }

    /// Marks `run` as driven here and, with leases, claims its lease; a run
    /// driven here already, or whose lease another server holds, is
    /// refused (409). `patient` waits a moment for a holder letting go: a
    /// drive here that has just recorded its pause (a client that saw the
    /// run paused resumes it at once), or another server's lease.
    pub(super) async fn claim(&self, run: &RunId, patient: bool) -> Result<Claim> {
        // Both waits are short and bounded, so constant (backon's, as
        // every retry here): a patient claim looks again every 10 ms for
        // a drive here letting go, then every 50 ms for another server's.
        let (local, remote) = match patient {
            true => (LOCAL_WAITS, PATIENT_TRIES - 1),
            false => (0, 0),
        };
        let local = ConstantBuilder::new()
            .with_delay(Duration::from_millis(10))
            .with_max_times(local);
        let mut claim = (|| async { self.claim_local(run, None) })
            .retry(local)
            .when(|e| matches!(e, Error::Conflict(_)))
            .await?;
        let Some(l) = &self.inner.leasing else {
            return Ok(claim);
        };
        let held = || async {
            let (r, h, ttl) = (run.clone(), l.holder.clone(), l.ttl);
            let store = self.inner.store.clone();
            match answered(move |done| store.claim_lease_then(&r, &h, ttl, done)).await? {
                LeaseClaim::Held { epoch } => Ok(epoch),
                LeaseClaim::HeldBy {
                    holder,
                    expires_in_ms,
                } => Err(Error::Leased {
                    run: run.to_string(),
                    holder: node_of(&holder).to_string(),
                    expires_in_ms,
                }),
            }
        };
        let remote = ConstantBuilder::new()
            .with_delay(Duration::from_millis(50))
            .with_max_times(remote);
        let epoch = held
            .retry(remote)
            .when(|e| matches!(e, Error::Leased { .. }))
            .await?;
        claim.set_epoch(epoch);
        Ok(claim)
    }

    /// Lets go of `run`'s lease of `epoch` (a run still running is handed
    /// over, any other's lease removed).
    pub(super) async fn release_lease(&self, run: &RunId, epoch: u64) {
        let Some(l) = &self.inner.leasing else { return };
        let (r, h) = (run.clone(), l.holder.clone());
        let store = self.inner.store.clone();
        if let Err(e) = answered(move |done| store.release_lease_then(&r, &h, epoch, done)).await {
            tracing::warn!(run.id = %run, error = %e, "cannot let go of the lease; it expires in its time");
        }
    }

    /// Keeps this server's leases and takes over the runs of servers that
    /// died, until shutdown (tasks in the service's JoinSet). Nothing to do
    /// without leases.
    pub fn serve_leases(&self) {
        if self.inner.leasing.is_none() {
            return;
        }
        self.inner.running.spawn(renew(self.clone()), false);
        self.inner.running.spawn(take_over(self.clone()), false);
    }

    /// How many run leases this server holds now.
    pub fn leases_held(&self) -> usize {
        self.inner.running.leased().len()
    }
}

/// Renews every lease held here every third of the lease time.
async fn renew(service: RunService) {
    let Some(l) = &service.inner.leasing else {
        return;
    };
    let (holder, ttl) = (l.holder.clone(), l.ttl);
    let store = service.inner.store.clone();
    renewing(
        &service.inner.running,
        ttl,
        service.shutdown_token(),
        |held| {
            let (h, store) = (holder.clone(), store.clone());
            async move { blocking(&store, move |s| Ok(s.renew_leases(&h, &held, ttl)?)).await }
        },
    )
    .await;
}

/// The renewal timer over the drives of `running`: every `ttl / 3`,
/// `renew` the leases they hold (it answers the runs whose leases it
/// renewed). A drive whose lease was not renewed (another server took
/// it) is stopped; so is every drive once no renewal went through for a
/// whole `ttl`, since the leases may have passed on. Ends at `stop`.
async fn renewing<F, Fut>(running: &Running, ttl: Duration, stop: &CancellationToken, mut renew: F)
where
    F: FnMut(Vec<(RunId, u64)>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<RunId>>>,
{
    let fence = |run: &RunId, epoch: u64| {
        if running.fence(run, epoch) {
            tracing::warn!(run.id = %run, "fenced: another server holds the run's lease now; stopping its drive here");
        }
    };
    let mut last_ok = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
        let held = running.leased();
        if held.is_empty() {
            last_ok = Instant::now();
            continue;
        }
        match renew(held.clone()).await {
            Ok(still) => {
                last_ok = Instant::now();
                for (run, epoch) in held {
                    if !still.contains(&run) {
                        fence(&run, epoch);
                    }
                }
            }
            Err(e) if last_ok.elapsed() >= ttl => {
                tracing::error!(error = %e, "leases not renewed for a whole lease time; stopping every drive here");
                for (run, epoch) in held {
                    fence(&run, epoch);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew leases; trying again"),
        }
    }
}

/// Claims expired leases of running runs and continues each run.
async fn take_over(service: RunService) {
    let Some(l) = &service.inner.leasing else {
        return;
    };
    let token = service.shutdown_token().clone();
    let every = (l.ttl / 4).min(SCAN_MAX);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // A draining server takes on no run: it is letting go of its own.
        if !service.accepting() {
            continue;
        }
        let (h, ttl) = (l.holder.clone(), l.ttl);
        let taken = match blocking(&service.inner.store, move |s| {
            Ok(s.claim_expired(&h, ttl, TAKE_PER_SCAN)?)
        })
        .await
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for expired leases; trying again");
                continue;
            }
        };
        for (run, epoch) in taken {
            tracing::info!(run.id = %run, "taking over a run whose lease expired");
            // A takeover that fails keeps the lease until it expires, so
            // the next try (here or elsewhere) waits a lease time.
            let claim = match service.claim_local(&run, Some(epoch)) {
                Ok(c) => c.keep_lease(),
                Err(e) => {
                    tracing::warn!(run.id = %run, error = %e, "takeover: the run is driven here already");
                    continue;
                }
            };
            if let Err(e) = service.resume_claimed(claim, None).await {
                tracing::error!(run.id = %run, error = %e, "takeover: cannot continue the run");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn run(n: u8) -> RunId {
        RunId::from_parts(u64::from(n), [0; 10])
    }

    /// Renewals that fail from the start stop no drive for a whole lease
    /// time, then every drive; a lease another server took stops only its
    /// drive, at the first renewal.
    #[tokio::test(start_paused = true)]
    async fn drives_are_fenced_when_their_lease_is_lost_or_cannot_be_renewed() {
        let ttl = Duration::from_secs(9);
        let (running, stop) = (
            Running::new(CancellationToken::new(), None),
            CancellationToken::new(),
        );
        let a = running.mark(&run(1), Some(1)).unwrap();
        let b = running.mark(&run(2), Some(1)).unwrap();
        let renewals = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let failing = {
            let renewals = renewals.clone();
            move |held: Vec<(RunId, u64)>| {
                renewals.lock().unwrap().push((start.elapsed(), held.len()));
                async { Err(Error::Unreadable("the database is away".into())) }
            }
        };
        tokio::select! {
            () = renewing(&running, ttl, &stop, failing) => unreachable!("renewing ends only at stop"),
            () = async {
                while !a.token.is_cancelled() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            } => {}
        }
        // Tried at 3 s and 6 s (nothing stopped), given up at 9 s.
        let tries: Vec<Duration> = renewals.lock().unwrap().iter().map(|(t, _)| *t).collect();
        assert_eq!(tries, [3, 6, 9].map(Duration::from_secs));
        assert!(a.token.is_cancelled() && b.token.is_cancelled());

        let running = Running::new(CancellationToken::new(), None);
        let a = running.mark(&run(3), Some(2)).unwrap();
        let b = running.mark(&run(4), Some(2)).unwrap();
        let only_b = |_held: Vec<(RunId, u64)>| async { Ok(vec![run(4)]) };
        tokio::select! {
            () = renewing(&running, ttl, &stop, only_b) => unreachable!(),
            () = tokio::time::sleep(Duration::from_secs(4)) => {}
        }
        assert!(
            a.token.is_cancelled(),
            "run 3's lease was taken: its drive stops"
        );
        assert!(!b.token.is_cancelled(), "run 4's lease was renewed");
    }
}
