//! Generating run ids. [`RunId`] is flow-abi's (`run-` + a lowercase ULID, so
//! id order is creation order, DESIGN §3), and flow-abi reads no clock and
//! no randomness; the store, which files runs by id, makes new ones.
//!
//! [`GenerateRunId::generate`] draws them from one process-wide monotonic
//! ULID generator: ids made within the same millisecond still increase,
//! where time plus fresh random bits would order them by chance.

use flow_abi::fact::RunId;
use std::sync::{Mutex, PoisonError};

/// The process's one generator, so every id it hands out is greater than the
/// last, whichever thread asks.
static GENERATOR: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());

/// `RunId::generate()`, with this trait in scope.
pub trait GenerateRunId {
    /// A new run id for a run created now: greater than every id this
    /// process generated before (ULID's monotonic generator: within one
    /// millisecond the random part is incremented).
    fn generate() -> Self;
}

impl GenerateRunId for RunId {
    fn generate() -> RunId {
        // The generator holds only the last id, which a panic elsewhere
        // cannot leave half-written: a poisoned lock is still sound.
        let mut g = GENERATOR.lock().unwrap_or_else(PoisonError::into_inner);
        let ulid = match g.generate() {
            Ok(u) => u,
            // 2^80 ids in one millisecond: carry into the next one, which
            // keeps the order.
            Err(overflow) => overflow.commit_overflow_increment(),
        };
        let mut random = [0u8; 10];
        random.copy_from_slice(&ulid.random().to_be_bytes()[6..]);
        RunId::from_parts(ulid.timestamp_ms(), random)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "id order is creation order" (DESIGN §3), even within one millisecond.
    #[test]
    fn generated_ids_strictly_increase() {
        let ids: Vec<RunId> = (0..10_000).map(|_| RunId::generate()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
        for id in [&ids[0], &ids[9_999]] {
            assert_eq!(&RunId::parse(id.as_str()).unwrap(), id);
        }
    }

    /// The same text as the ULID's own, lowercased.
    #[test]
    fn the_text_is_the_lowercase_ulid() {
        let mut g = ulid::Generator::new();
        let u = g.generate().unwrap();
        let mut random = [0u8; 10];
        random.copy_from_slice(&u.random().to_be_bytes()[6..]);
        let id = RunId::from_parts(u.timestamp_ms(), random);
        assert_eq!(
            id.as_str(),
            format!("run-{}", u.to_string().to_ascii_lowercase())
        );
    }
}
