//! Run ids: `run-` + a lowercase ULID, so id order is creation order (DESIGN §3).
//!
//! [`RunId::generate`] draws them from one process-wide monotonic ULID
//! generator: ids made within the same millisecond still increase, where
//! time plus fresh random bits would order them by chance.

use crate::error::{Error, Result};
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// The process's one generator, so every id it hands out is greater than the
/// last, whichever thread asks.
static GENERATOR: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A run id that parsed strictly: `run-` followed by 26 lowercase Crockford
/// base32 characters whose first is at most `7` (a ULID is 128 bits).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RunId(String);

impl RunId {
    /// Parses a run id, refusing anything else.
    pub fn parse(s: &str) -> Result<RunId> {
        let bad = || {
            Error::InvalidArgument(format!(
                "not a run id: {s:?} (expected run- and a lowercase ULID)"
            ))
        };
        let rest = s.strip_prefix("run-").ok_or_else(bad)?;
        let b = rest.as_bytes();
        if b.len() != 26 || !b.iter().all(|c| CROCKFORD.contains(c)) || b[0] > b'7' {
            return Err(bad());
        }
        Ok(RunId(s.to_string()))
    }

    /// A new run id for a run created now: greater than every id this
    /// process generated before (ULID's monotonic generator: within one
    /// millisecond the random part is incremented).
    pub fn generate() -> RunId {
        // The generator holds only the last id, which a panic elsewhere
        // cannot leave half-written: a poisoned lock is still sound.
        let mut g = GENERATOR.lock().unwrap_or_else(PoisonError::into_inner);
        let ulid = match g.generate() {
            Ok(u) => u,
            // 2^80 ids in one millisecond: carry into the next one, which
            // keeps the order.
            Err(overflow) => overflow.commit_overflow_increment(),
        };
        let mut out = String::with_capacity(30);
        out.push_str("run-");
        out.push_str(&ulid.to_string().to_ascii_lowercase());
        RunId(out)
    }

    /// Builds a run id from a creation time in unix milliseconds (48 bits are
    /// used) and 80 random bits supplied by the caller.
    pub fn from_parts(millis: u64, random: [u8; 10]) -> RunId {
        let mut v: u128 = u128::from(millis & 0xffff_ffff_ffff) << 80;
        for (i, b) in random.iter().enumerate() {
            v |= u128::from(*b) << (72 - 8 * i);
        }
        let mut out = String::with_capacity(30);
        out.push_str("run-");
        for i in (0..26).rev() {
            let digit = ((v >> (5 * i)) & 31) as usize;
            out.push(char::from(CROCKFORD[digit]));
        }
        RunId(out)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_order() {
        let a = RunId::from_parts(1, [0; 10]);
        let b = RunId::from_parts(2, [0xff; 10]);
        let c = RunId::from_parts(2, [0xff; 10]);
        assert!(a < b);
        assert_eq!(b, c);
        assert_eq!(RunId::parse(a.as_str()).unwrap(), a);
        let max = RunId::from_parts(u64::MAX, [0xff; 10]);
        assert_eq!(max.as_str(), "run-7zzzzzzzzzzzzzzzzzzzzzzzzz");
        assert!(RunId::parse(max.as_str()).is_ok());
    }

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

    #[test]
    fn refusals() {
        for s in [
            "",
            "run-",
            "run-8zzzzzzzzzzzzzzzzzzzzzzzzz",
            "run-01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "run-01arz3ndektsv4rrffq69g5fai",
            "xrun-01arz3ndektsv4rrffq69g5fav",
        ] {
            assert!(RunId::parse(s).is_err(), "{s}");
        }
        assert!(RunId::parse("run-01arz3ndektsv4rrffq69g5fav").is_ok());
    }
}
