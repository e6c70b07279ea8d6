//! Checking large programs off the async runtime, a bounded number at once
//! (issue 36 item 6: four 2.5 MB `POST /v1/check` on the async workers held
//! `/healthz` for 15 s).
//!
//! A program's check is CPU work proportional to its size (an 18,000-node
//! flow takes about 0.1 s in a release build, ten times that in a debug
//! one). Small programs — nearly all — check in place, as before: handing
//! them to a thread would cost more than the check. Programs of
//! [`LARGE`] bytes or more check on the blocking pool, at most
//! [`Checks::limit`] at once; past that a request is refused `Busy` (503
//! with `Retry-After`) rather than queued: a queue would hold every waiting
//! body's memory and answer it late anyway, and a client retries.

use crate::error::{Error, Result};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Source bytes from which a check leaves the async runtime.
pub const LARGE: usize = 64 << 10;

/// The bounded pool's permits: a cheap `Clone` handle.
#[derive(Clone)]
pub struct Checks {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl Default for Checks {
    /// One check at a time per core, at least two.
    fn default() -> Checks {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Checks::new(cores.max(2))
    }
}

impl Checks {
    pub fn new(limit: usize) -> Checks {
        Checks {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Large checks that may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A permit for work on `size` bytes of sources: `None` (no permit
    /// needed) below [`LARGE`]; `Busy` when every permit is taken.
    pub fn permit(&self, size: usize) -> Result<Option<OwnedSemaphorePermit>> {
        if size < LARGE {
            return Ok(None);
        }
        match self.permits.clone().try_acquire_owned() {
            Ok(p) => Ok(Some(p)),
            Err(_) => Err(Error::Busy(format!(
                "the server is checking {} large programs already; send this one again shortly",
                self.limit
            ))),
        }
    }

    /// Runs `f`, the check of `size` bytes of sources: in place when
    /// small, else on the blocking pool under a permit.
    pub async fn run<T, E>(
        &self,
        size: usize,
        f: impl FnOnce() -> std::result::Result<T, E> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        Checks::under(self.permit(size)?, f).await
    }

    /// Runs `f` under a permit taken with [`Checks::permit`]: on the
    /// blocking pool, giving the permit back when it ends; in place when
    /// none was needed.
    pub async fn under<T, E>(
        permit: Option<OwnedSemaphorePermit>,
        f: impl FnOnce() -> std::result::Result<T, E> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let Some(permit) = permit else {
            return f();
        };
        tokio::task::spawn_blocking(move || {
            let _held = permit;
            f()
        })
        .await
        .map_err(|e| E::from(Error::Unavailable(format!("the check stopped: {e}"))))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_checks_past_the_limit_are_busy_small_ones_never() {
        let checks = Checks::new(1);
        let held = checks.permit(LARGE).unwrap().expect("a permit");
        let busy = checks.run(LARGE, || Ok::<_, Error>(1)).await;
        assert!(matches!(busy, Err(Error::Busy(_))), "{busy:?}");
        assert_eq!(
            checks.run(LARGE - 1, || Ok::<_, Error>(2)).await.unwrap(),
            2
        );
        drop(held);
        assert_eq!(checks.run(LARGE, || Ok::<_, Error>(3)).await.unwrap(), 3);
        // The permit is given back when the work ends.
        assert!(checks.permit(LARGE).unwrap().is_some());
    }
}
