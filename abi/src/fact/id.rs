//! The typed ids of a history (DESIGN §3): run ids, call ids, and the task
//! and node ids call ids are made of.

use std::borrow::Borrow;
use std::fmt::{self, Write as _};

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Why a text is not an id. Its text says what the id should look like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdError(String);

/// Run ids: `run-` + a lowercase ULID, so id order is creation order.
///
/// A run id that parsed strictly: `run-` followed by 26 lowercase Crockford
/// base32 characters whose first is at most `7` (a ULID is 128 bits).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RunId(String);

impl RunId {
    /// Parses a run id, refusing anything else.
    pub fn parse(s: &str) -> Result<RunId, IdError> {
        let bad = || {
            IdError(format!(
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

    /// Builds a run id from a creation time in unix milliseconds (48 bits are
    /// used) and 80 random bits supplied by the caller: nothing here reads a
    /// clock or randomness.
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

    /// The creation time the id carries (unix ms: its first 10 digits,
    /// the ULID's top 48 bits): the creating engine's clock.
    pub fn millis(&self) -> u64 {
        self.0[4..14].bytes().fold(0u64, |v, c| {
            let digit = CROCKFORD.iter().position(|d| *d == c).unwrap_or(0) as u64;
            (v << 5) | digit
        })
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

/// The node id form of buildaharness's schema, `^[a-z0-9][a-z0-9-_]*$`
/// (kebab-case, or with `_` as real files write them). The checker refuses
/// a flow with any other node id, so every task and call id of a history is
/// made of these.
pub fn is_node_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

/// Whether `s` is a task id: the root task is `root`, a parallel branch is
/// `<parent>/<branch-node-id>` (DESIGN §3).
pub fn is_task_id(s: &str) -> bool {
    match s.strip_prefix("root") {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('/')
            .is_some_and(|branches| branches.split('/').all(is_node_id)),
        None => false,
    }
}

/// Call ids: `c1:<task>#<k>` (as in the seed's `c1:root#2`): `c1` names the
/// id scheme, k counts that task's calls from 1 (decimal, no leading zero).
/// Call ids are deterministic: they never depend on timing.
///
/// Ordered as their text, which is the order open calls are listed in.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CallId(String);

impl CallId {
    /// Parses a call id, refusing anything else.
    pub fn parse(s: &str) -> Result<CallId, IdError> {
        let bad = || {
            IdError(format!(
                "not a call id: {s:?} (expected c1:<task>#<k>, e.g. c1:root#1 or c1:root/branch-a#2)"
            ))
        };
        let rest = s.strip_prefix("c1:").ok_or_else(bad)?;
        let (task, k) = rest.rsplit_once('#').ok_or_else(bad)?;
        if !is_task_id(task) || parse_count(k).is_none() {
            return Err(bad());
        }
        Ok(CallId(s.to_string()))
    }

    /// The id of call `k` (from 1) of `task`.
    pub fn new(task: &str, k: u64) -> Result<CallId, IdError> {
        if !is_task_id(task) {
            return Err(IdError(format!(
                "not a task id: {task:?} (expected root or <parent>/<branch-node-id>)"
            )));
        }
        if k == 0 {
            return Err(IdError("a task's calls are counted from 1".into()));
        }
        // Made once per Tool call: built by hand, not by `format!`.
        let mut id = String::with_capacity(task.len() + 24);
        id.push_str("c1:");
        id.push_str(task);
        id.push('#');
        let _ = write!(id, "{k}");
        Ok(CallId(id))
    }

    /// The task that made the call.
    pub fn task(&self) -> &str {
        let rest = &self.0[3..];
        rest.rsplit_once('#').map_or(rest, |(t, _)| t)
    }

    /// Which of its task's calls this is, from 1.
    pub fn k(&self) -> u64 {
        self.0
            .rsplit_once('#')
            .and_then(|(_, k)| parse_count(k))
            .unwrap_or(0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A positive decimal count without a leading zero that fits in a u64.
fn parse_count(k: &str) -> Option<u64> {
    let b = k.as_bytes();
    if b.is_empty() || b[0] == b'0' || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    k.parse().ok()
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Maps keyed by call id are looked up by the text a host holds.
impl Borrow<str> for CallId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for CallId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CallId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for CallId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// Written as their text, as every wire form and stored row holds them.
impl serde::Serialize for RunId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl serde::Serialize for CallId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_round_trip_in_creation_order() {
        for ms in [0, 1, 1_733_000_000_123, 0xffff_ffff_ffff] {
            assert_eq!(RunId::from_parts(ms, [0xff; 10]).millis(), ms);
        }
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

    #[test]
    fn run_id_refusals() {
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

    #[test]
    fn call_ids_parse_strictly() {
        for s in [
            "c1:root#1",
            "c1:root#2",
            "c1:root/branch-a#2",
            "c1:root/a/b_2#18446744073709551615",
        ] {
            assert_eq!(CallId::parse(s).unwrap().as_str(), s);
        }
        for s in [
            "",
            "c",
            "c1:",
            "c1:root",
            "c1:root#",
            "c1:root#0",
            "c1:root#01",
            "c1:root#-1",
            "c1:root#1a",
            "c1:root#18446744073709551616",
            "c2:root#1",
            "c1:Root#1",
            "c1:main#1",
            "c1:root/#1",
            "c1:root//a#1",
            "c1:root/A#1",
            "c1:root/_a#1",
            "c1:rootx#1",
            "c1:root#1#2",
            " c1:root#1",
        ] {
            assert!(CallId::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn call_id_parts() {
        let c = CallId::new("root/branch-a", 2).unwrap();
        assert_eq!(c, "c1:root/branch-a#2");
        assert_eq!(c.task(), "root/branch-a");
        assert_eq!(c.k(), 2);
        assert_eq!(CallId::parse(c.as_str()).unwrap(), c);
        assert!(CallId::new("root", 0).is_err());
        assert!(CallId::new("branch", 1).is_err());
        // Text order, as open calls are listed.
        let (a, b) = (
            CallId::new("root", 10).unwrap(),
            CallId::new("root", 9).unwrap(),
        );
        assert!(a < b);
    }
}
