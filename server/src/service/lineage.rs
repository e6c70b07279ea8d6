//! A run's lineage: the runs it came from, nearest first — a fork's parent
//! (at which checkpoint, by which recovery), a nested run's outer run (for
//! which call) — up to the run that came from none. The one reading of it:
//! the run view's `parent` is its first step, `GET /v1/runs/{run}/lineage`
//! the whole chain. Read for a caller that sees some namespaces only: an
//! ancestor of another namespace (an import can place a fork away from
//! its parent) is told as a deleted one, as a run that does not exist,
//! and the chain ends there (docs/custody.md "Namespaces").

use super::store::Store;
use crate::error::Result;
use flow_abi::fact::CallId;
use flow_store::{Namespaces, RunId, RunInfo};

/// Ancestors read at most (a chain longer than this is cut, and says so).
pub const MAX_LINEAGE: usize = 64;

/// How a run came from the one before it in its lineage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Forked from `from` at Checkpoint `checkpoint`; by bulk recovery
    /// `recovery` when one made it.
    Fork {
        checkpoint: u64,
        recovery: Option<String>,
    },
    /// Run by `from`'s call `call` (a subgraph).
    Nested { call: CallId },
}

/// One step up a lineage: `run` came from `from` by `link`.
#[derive(Clone, Debug)]
pub struct Step {
    pub run: RunId,
    pub from: RunId,
    pub link: Link,
    /// `from` has been deleted (docs/custody.md): the chain ends here.
    pub deleted: bool,
}

/// The first step up from `run` (whose info is `info`), if it came from
/// another run, as a caller that sees `seen` reads it.
pub fn step(
    store: &dyn Store,
    run: &RunId,
    info: &RunInfo,
    seen: &Namespaces,
) -> Result<Option<Step>> {
    Ok(step_and_from(store, run, info, seen)?.map(|(s, _)| s))
}

/// [`step`], with the info of the run it came from when that run is
/// still stored (read once, for `deleted` and for the next step up).
fn step_and_from(
    store: &dyn Store,
    run: &RunId,
    info: &RunInfo,
    seen: &Namespaces,
) -> Result<Option<(Step, Option<RunInfo>)>> {
    let (from, link) = match (&info.parent, &info.outer) {
        (Some((parent, checkpoint)), _) => (
            parent.clone(),
            Link::Fork {
                checkpoint: *checkpoint,
                recovery: store.recovery_of(run.as_str())?.map(|f| f.recovery),
            },
        ),
        (None, Some((outer, call))) => (outer.clone(), Link::Nested { call: call.clone() }),
        (None, None) => return Ok(None),
    };
    let (from_info, deleted) = match store.run_info(&from) {
        Ok(i) if seen.contains(&i.namespace) => (Some(i), false),
        Ok(_) | Err(flow_store::Error::UnknownRun(_)) => (None, true),
        Err(_) => (None, false),
    };
    let step = Step {
        run: run.clone(),
        from,
        link,
        deleted,
    };
    Ok(Some((step, from_info)))
}

/// `run`'s lineage as a caller that sees `seen` reads it, nearest first,
/// and whether it was cut at [`MAX_LINEAGE`].
pub fn lineage(store: &dyn Store, run: &RunId, seen: &Namespaces) -> Result<(Vec<Step>, bool)> {
    let mut steps = Vec::new();
    let mut info = store.run_info(run)?;
    let mut cur = run.clone();
    while let Some((s, from)) = step_and_from(store, &cur, &info, seen)? {
        if steps.len() == MAX_LINEAGE {
            return Ok((steps, true));
        }
        let next = from.map(|i| (s.from.clone(), i));
        steps.push(s);
        let Some((next, next_info)) = next else {
            break;
        };
        (cur, info) = (next, next_info);
    }
    Ok((steps, false))
}
