//! Who drives each run: the lease trait and what a claim finds.

use crate::error::Result;
use flow_abi::fact::RunId;
use std::time::Duration;

/// What a lease claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseClaim {
    /// The caller holds the lease now; `epoch` names this claim (a release
    /// or renewal of another epoch changes nothing).
    Held { epoch: u64 },
    /// Another holder's lease has not expired.
    HeldBy { holder: String, expires_in_ms: i64 },
}

/// Who drives each run (docs/deploy.md "Leases"): a row per driven run,
/// valid until it expires by the store's clock. Several servers on one
/// database drive each run from one server at a time; a single process
/// needs none of it (the run service calls these only when it is given a
/// lease time).
pub trait Leases {
    /// Claims `run`'s lease for `holder` for `ttl`: granted when no lease
    /// exists, when it expired, or when `holder` holds it already (a new
    /// epoch); otherwise names the holder.
    fn claim_lease(&self, run: &RunId, holder: &str, ttl: Duration) -> Result<LeaseClaim>;
    /// Extends the leases `holder` still holds among `(run, epoch)`, by
    /// `ttl` from now; returns the runs it still holds (the others were
    /// taken over: their drives must stop).
    fn renew_leases(
        &self,
        holder: &str,
        leases: &[(RunId, u64)],
        ttl: Duration,
    ) -> Result<Vec<RunId>>;
    /// Lets go of a lease (only that epoch of that holder's): a run still
    /// `running` is handed over (its lease expires now, for another server
    /// to take), any other run's lease is removed.
    fn release_lease(&self, run: &RunId, holder: &str, epoch: u64) -> Result<()>;
    /// Claims, for `holder`, at most `limit` expired leases of top-level
    /// runs still `running` (their server died or handed them over),
    /// skipping rows another claimer has locked; returns `(run, epoch)`.
    fn claim_expired(&self, holder: &str, ttl: Duration, limit: u32) -> Result<Vec<(RunId, u64)>>;
    /// [`Leases::claim_lease`] without holding the caller's thread: `done`
    /// gets the answer on whichever thread has it, so it must only hand it
    /// on (a channel send). A backend whose claim is a round trip to a
    /// database runs it on its own runtime; the default answers on the
    /// caller's thread.
    fn claim_lease_then(
        &self,
        run: &RunId,
        holder: &str,
        ttl: Duration,
        done: LeaseDone<LeaseClaim>,
    ) {
        done(self.claim_lease(run, holder, ttl))
    }
    /// [`Leases::release_lease`] as [`Leases::claim_lease_then`] claims.
    fn release_lease_then(&self, run: &RunId, holder: &str, epoch: u64, done: LeaseDone<()>) {
        done(self.release_lease(run, holder, epoch))
    }
}

/// What a lease operation's answer is handed to (see
/// [`Leases::claim_lease_then`]).
pub type LeaseDone<T> = Box<dyn FnOnce(Result<T>) + Send>;
