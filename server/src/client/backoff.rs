//! How a caller of the server waits between tries: backon's exponential
//! backoff with jitter and a ceiling, slept on tokio's clock (so tests
//! pause it). Every loop that tries the server again — the worker's
//! registration, polls and replies, the CLI following a run — takes its
//! waits from here.

use backon::ExponentialBuilder;
use std::time::Duration;

/// Waits that start below `first` and double up to below `max`, with no
/// limit on the tries. Jitter adds up to the wait itself (backon draws
/// each wait from `[d, 2d)`), so `d` starts at `first / 2` and stops at
/// `max / 2`: each wait lies in `[first/2 · 2ⁿ, first · 2ⁿ)`, never
/// longer than `max`, and callers that go wrong together do not come
/// back in step.
pub fn policy(first: Duration, max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_jitter()
        .with_factor(2.0)
        .with_min_delay(first / 2)
        .with_max_delay(max / 2)
        .without_max_times()
}

/// Following a run that goes on past the server's `wait`: looked at again
/// after 100–200 ms at first, then less often, at most every 1 s.
pub fn follow() -> ExponentialBuilder {
    policy(Duration::from_millis(200), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn waits_double_within_their_jitter_up_to_the_ceiling() {
        let (first, max) = (Duration::from_millis(250), Duration::from_secs(5));
        let waits: Vec<Duration> = policy(first, max).build().take(12).collect();
        let mut ceiling = first;
        for w in &waits {
            assert!(
                *w >= ceiling / 2 && *w < ceiling,
                "{w:?} not in [{:?}, {ceiling:?})",
                ceiling / 2
            );
            ceiling = (ceiling * 2).min(max);
        }
        // 250 ms, 500 ms, 1 s, 2 s, 4 s, then 5 s from the sixth wait on.
        assert!(waits[5..].iter().all(|w| *w >= max / 2 && *w < max));
    }
}
