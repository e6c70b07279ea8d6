//! Replay: re-derive a recorded history without any Tool.
//!
//! DESIGN §3: "Replay verdicts: `matched` (every recorded fact re-derived,
//! same End), `incomplete` (every recorded fact matched but the record ends
//! first, e.g. a paused or crashed run), `diverged` with the fact number and
//! a reason (other tool, other args, other node, a call the record lacks, a
//! different ending)."
//!
//! Recorded Replies are fed to the machine as they come; every other fact
//! must equal (`==` on [`Fact`]s), in order, the next fact the machine
//! derives. A Checkpoint costs what changed, not the whole state: the
//! machine gives Checkpoints by change ([`Machine::checkpoint_by_change`]),
//! and one that follows a matched Checkpoint is compared field by field
//! on the fields the machine wrote and the fields the record's delta names
//! ([`RecordedChange`]), every other field being the same on both sides
//! as it was in the Checkpoint before (held here, kept up to date by the
//! machine's changes). Resume uses the
//! same walk: the machine it ends with continues live, and the effects it
//! derived past the end of the record are the ones still to record.

use crate::machine::{Effect, Machine};
use crate::program::Program;
use flow_abi::fact::{Fact, FieldChange, RecordedChange, StateChange, Touched};
use serde_json::Value as Json;
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// The verdict of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Matched,
    Incomplete,
    /// Incomplete with reason `hole` (GAP-RPL-1): every fact before `fact`
    /// matched, and fact `fact` holds a value that was redacted, so the
    /// replay cannot go on. The engine never meets a hole itself: the
    /// host's read of the history does, and says so.
    Hole {
        fact: u64,
    },
    Diverged {
        fact: u64,
        reason: String,
    },
}

impl Verdict {
    /// The verdict as every surface spells it: its name (`matched`,
    /// `incomplete`, `diverged`), the fact and the reason where there are
    /// some (a hole is `incomplete` at its fact with reason `hole`).
    pub fn parts(&self) -> (&'static str, Option<u64>, Option<&str>) {
        match self {
            Verdict::Matched => ("matched", None, None),
            Verdict::Incomplete => ("incomplete", None, None),
            Verdict::Hole { fact } => ("incomplete", Some(*fact), Some("hole")),
            Verdict::Diverged { fact, reason } => ("diverged", Some(*fact), Some(reason)),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Matched => f.write_str("matched"),
            Verdict::Incomplete => f.write_str("incomplete"),
            Verdict::Hole { fact } => write!(f, "incomplete: hole at fact {fact}"),
            Verdict::Diverged { fact, reason } => write!(f, "diverged at fact {fact}: {reason}"),
        }
    }
}

/// What a replay leaves: the verdict, and (unless it diverged or the
/// history could not start) the machine in the state the record left it,
/// with the effects it derived that the record does not hold yet.
#[derive(Debug)]
pub struct Replayed {
    pub verdict: Verdict,
    pub machine: Option<Machine>,
    pub unrecorded: Vec<Effect>,
}

fn diverged(fact: u64, reason: impl Into<String>) -> Replayed {
    Replayed {
        verdict: Verdict::Diverged {
            fact,
            reason: reason.into(),
        },
        machine: None,
        unrecorded: Vec::new(),
    }
}

/// Takes the machine's next slices while nothing is pending and it has
/// work left (a long run between two calls comes in slices).
fn refill(machine: &mut Machine, pending: &mut VecDeque<Effect>) {
    while pending.is_empty() && machine.busy() {
        pending.extend(machine.proceed().into_iter().filter(is_fact));
    }
}

/// Replays `facts` (a run's history, numbered from 1, values resolved:
/// logical facts) of a run of `program`. The facts are taken one by one
/// as they come (a slice, or a stream read while the replay goes on), so
/// nothing here holds more than the fact at hand.
pub fn replay<I>(program: Arc<Program>, facts: I) -> Replayed
where
    I: IntoIterator,
    I::Item: Borrow<Fact>,
{
    let mut r = Replayer::new(program);
    for f in facts {
        if !r.push(f.borrow(), None) {
            break;
        }
    }
    r.finish()
}

/// A replay fed one fact at a time, by whoever reads the history (a
/// store's walk hands each verified fact over as it is read): what
/// [`replay`] does, without an iterator to pull from.
pub struct Replayer {
    program: Arc<Program>,
    at: At,
}

enum At {
    /// No fact yet.
    Begin,
    /// A fork's Start, until its starting Checkpoint (its second fact).
    Fork(Fact),
    Running {
        machine: Machine,
        /// Derived facts not yet matched by the record.
        pending: VecDeque<Effect>,
        /// The number the next fact must have.
        next: u64,
        /// The state of the last Checkpoint matched: the base of the
        /// machine's next Checkpoint by change.
        base: Option<Json>,
    },
    /// Diverged (or could not start): the outcome, whatever follows.
    Done(Replayed),
}

impl Replayer {
    pub fn new(program: Arc<Program>) -> Replayer {
        Replayer {
            program,
            at: At::Begin,
        }
    }

    /// Takes the next recorded fact; false once the replay has diverged
    /// (later facts change nothing). `change` is what a Checkpoint's
    /// stored delta changed against the Checkpoint recorded just before
    /// it, when the reader knows it (a whole Checkpoint is compared whole).
    pub fn push(&mut self, fact: &Fact, change: Option<&RecordedChange>) -> bool {
        let at = std::mem::replace(&mut self.at, At::Begin);
        self.at = match at {
            At::Begin => match fact {
                Fact::Start {
                    parent: Some(_), ..
                } => At::Fork(fact.clone()),
                Fact::Start { entry, input, .. } => {
                    started(Machine::start(self.program.clone(), &entry.module, input))
                }
                _ => At::Done(diverged(1, "the history does not begin with Start")),
            },
            At::Fork(start) => {
                // A fork: its own first Checkpoint holds the node and state
                // it starts from.
                let (Fact::Start { entry, .. }, Fact::Checkpoint { node, state, .. }) =
                    (&start, fact)
                else {
                    self.at = At::Done(diverged(
                        2,
                        "a fork's history holds its starting Checkpoint second",
                    ));
                    return false;
                };
                let begun =
                    Machine::resume_at(self.program.clone(), &entry.module, node, state.clone());
                started(begun).follow(fact, change)
            }
            running @ At::Running { .. } => running.follow(fact, change),
            done @ At::Done(_) => done,
        };
        !matches!(self.at, At::Done(_))
    }

    /// The verdict, with the machine where the record left it.
    pub fn finish(self) -> Replayed {
        match self.at {
            At::Begin => diverged(1, "the history has no Start"),
            At::Fork(_) => diverged(2, "a fork's history holds its starting Checkpoint second"),
            At::Done(r) => r,
            At::Running {
                mut machine,
                mut pending,
                base,
                ..
            } => {
                refill(&mut machine, &mut pending);
                let verdict = if pending.is_empty() && machine.ending().is_some() {
                    Verdict::Matched
                } else {
                    Verdict::Incomplete
                };
                Replayed {
                    verdict,
                    machine: Some(machine),
                    unrecorded: whole(pending, base),
                }
            }
        }
    }
}

/// A replay begun, or one that could not start.
fn started(begun: Result<(Machine, Vec<Effect>), crate::machine::Refusal>) -> At {
    match begun {
        Ok((mut machine, first)) => {
            // Its first Checkpoints (in `first`) are whole; the ones after
            // a matched Checkpoint come by change.
            machine.checkpoint_by_change();
            At::Running {
                machine,
                pending: first.into_iter().filter(is_fact).collect(),
                next: 2,
                base: None,
            }
        }
        Err(e) => At::Done(diverged(1, format!("the run cannot start: {e}"))),
    }
}

impl At {
    /// A running replay, given the next recorded fact after Start.
    fn follow(self, fact: &Fact, change: Option<&RecordedChange>) -> At {
        let At::Running {
            mut machine,
            mut pending,
            next: n,
            mut base,
        } = self
        else {
            return self;
        };
        refill(&mut machine, &mut pending);
        if fact.n() != n {
            return At::Done(diverged(n, "fact numbers are not consecutive"));
        }
        let matched = match fact {
            Fact::Reply { call, outcome, .. } => {
                if let Some(e) = pending.front() {
                    return At::Done(diverged(
                        n,
                        format!("the record lacks {} before this Reply", describe(e)),
                    ));
                }
                match machine.feed(call.as_str(), outcome) {
                    Ok(effects) => {
                        pending.extend(effects.into_iter().filter(is_fact));
                        Ok(())
                    }
                    Err(e) => Err(format!("a Reply for {call}, but {e}")),
                }
            }
            Fact::Close { call, reason, .. } if pending.is_empty() && reason == "timeout" => {
                match machine.expire(call.as_str()) {
                    Ok(effects) => {
                        pending.extend(effects.into_iter().filter(is_fact));
                        compare(pending.pop_front(), fact, change, &mut base)
                    }
                    Err(e) => Err(format!("a timeout of {call}, but {e}")),
                }
            }
            _ => compare(pending.pop_front(), fact, change, &mut base),
        };
        match matched {
            Ok(()) => At::Running {
                machine,
                pending,
                next: n + 1,
                base,
            },
            Err(reason) => At::Done(diverged(n, reason)),
        }
    }
}

/// The effects past the record's end with every Checkpoint whole, as a
/// host that did not ask for changes expects them: each one by change is
/// made whole on the state of the Checkpoint before it (`base`, the last
/// one matched, then each one made here).
fn whole(pending: VecDeque<Effect>, mut base: Option<Json>) -> Vec<Effect> {
    pending
        .into_iter()
        .map(|e| match e {
            Effect::Changed { task, node, change } => {
                let mut state = base.take().unwrap_or(Json::Null);
                // A change the machine took on its own previous Checkpoint
                // applies to it; were it refused, the state stays the base.
                let _ = change.apply(&mut state);
                base = Some(state.clone());
                Effect::Checkpoint { task, node, state }
            }
            Effect::Checkpoint { task, node, state } => {
                base = Some(state.clone());
                Effect::Checkpoint { task, node, state }
            }
            other => other,
        })
        .collect()
}

fn describe(e: &Effect) -> String {
    match e {
        Effect::Call {
            call, tool, node, ..
        } => format!("a Call {call} to {tool} at node {node}"),
        Effect::Checkpoint { node, task, .. } | Effect::Changed { node, task, .. } => {
            format!("a Checkpoint of task {task} at node {node}")
        }
        Effect::Close { call, .. } => format!("a Close of {call}"),
        Effect::Deadline { call, .. } => format!("a deadline for {call}"),
        Effect::End(_) => "the End".into(),
    }
}

/// Whether an effect records a fact (a Deadline is a host record).
fn is_fact(e: &Effect) -> bool {
    !matches!(e, Effect::Deadline { .. })
}

/// Compares the next derived effect with a recorded fact: equal facts
/// match; otherwise the reason names the first field that differs. A
/// matched Checkpoint's state becomes `base`.
fn compare(
    derived: Option<Effect>,
    recorded: &Fact,
    change: Option<&RecordedChange>,
    base: &mut Option<Json>,
) -> Result<(), String> {
    let kind = recorded.kind().as_str();
    let Some(d) = derived else {
        return Err(format!(
            "the record has a {kind} the program does not derive here"
        ));
    };
    if d.kind() != Some(recorded.kind()) {
        return Err(format!(
            "the record has a {kind} where the program derives {}",
            describe(&d)
        ));
    }
    let d = match d {
        Effect::Changed {
            task,
            node,
            change: c,
        } => {
            return compare_changed(&task, &node, c, recorded, change, base);
        }
        d => d,
    };
    let Some(want) = d.into_fact() else {
        return Err("internal: a host record among facts".into());
    };
    let want = want.numbered(recorded.n());
    // Values equal as `json.Value`s may differ in how a number is spelled
    // in memory; their canonical texts settle it.
    if want == *recorded || want.to_canonical() == recorded.to_canonical() {
        if let Fact::Checkpoint { state, .. } = want {
            *base = Some(state);
        }
        return Ok(());
    }
    Err(match (&want, recorded) {
        (
            Fact::Call {
                call: wc,
                tool: wt,
                node: wn,
                fingerprint: wf,
                ..
            },
            Fact::Call {
                call: rc,
                tool: rt,
                node: rn,
                fingerprint: rf,
                ..
            },
        ) => {
            if wc != rc {
                format!("other call: recorded {rc}, derived {wc}")
            } else if wt != rt {
                format!("other tool: recorded {rt}, derived {wt}")
            } else if wn != rn {
                format!("other node: recorded {rn}, derived {wn}")
            } else if wf != rf {
                format!("the declaration of {wt} changed (fingerprint)")
            } else {
                format!("other args for call {wc}")
            }
        }
        (Fact::Checkpoint { node: wn, .. }, Fact::Checkpoint { node: rn, .. }) => {
            if wn != rn {
                format!("other node: recorded {rn}, derived {wn}")
            } else {
                format!("other state at node {wn}")
            }
        }
        (Fact::End { .. }, Fact::End { .. }) => "a different ending".into(),
        (w, _) => format!("a different {}", w.kind().as_str()),
    })
}

/// Compares a Checkpoint the machine gave by change (`derived`, of `task`
/// at `node`) with the recorded Checkpoint (of the same kind, checked
/// before), then moves `base` on by that change.
fn compare_changed(
    task: &str,
    node: &str,
    derived: StateChange,
    recorded: &Fact,
    change: Option<&RecordedChange>,
    base: &mut Option<Json>,
) -> Result<(), String> {
    let Fact::Checkpoint {
        task: rt,
        node: rn,
        state,
        ..
    } = recorded
    else {
        return Err("internal: a Checkpoint by change against another fact".into());
    };
    if node != rn {
        return Err(format!("other node: recorded {rn}, derived {node}"));
    }
    let Some(b) = base.as_mut() else {
        return Err("internal: a Checkpoint by change without a base".into());
    };
    if task != rt || !same_change(b, &derived, state, change) {
        return Err(format!("other state at node {node}"));
    }
    derived.apply(b).map_err(|e| format!("internal: {e}"))
}

/// Whether `recorded` (a recorded Checkpoint's whole state) is `base`
/// with the machine's `derived` change made, given that `base` is the
/// state of the Checkpoint recorded before it. With what the record's
/// delta changed (`change`), only the fields either side touched are
/// looked at, and a list both sides only appended to only at its new
/// items; without it, every field.
fn same_change(
    base: &Json,
    derived: &StateChange,
    recorded: &Json,
    change: Option<&RecordedChange>,
) -> bool {
    let (Some(base), Some(rec)) = (base.as_object(), recorded.as_object()) else {
        return false;
    };
    if rec.len() != derived.len {
        return false;
    }
    // The field as the machine has it: `Some(Ok(v))` whole, `Some(Err((from,
    // items)))` as `base`'s list with items appended, `None` absent.
    let field = |k: &str| -> Option<Result<&Json, (usize, &[Json])>> {
        match derived.fields.get(k) {
            Some(FieldChange::Set(v)) => Some(Ok(v)),
            Some(FieldChange::Append { from, items }) => Some(Err((*from, items))),
            None => base.get(k).map(Ok),
        }
    };
    let same_field = |k: &str| -> bool {
        let r = rec.get(k);
        match (field(k), r) {
            (None, None) => true,
            (Some(Ok(m)), Some(r)) => same(m, r),
            (Some(Err((from, items))), Some(Json::Array(r))) => {
                let only_appended =
                    change.is_some_and(|c| c.fields.get(k) == Some(&Touched::Append));
                r.len() == from + items.len()
                    && r[from..].iter().zip(items).all(|(a, b)| same(a, b))
                    && (only_appended
                        || base.get(k).and_then(Json::as_array).is_some_and(|b| {
                            b.len() == from && r[..from].iter().zip(b).all(|(a, b)| same(a, b))
                        }))
            }
            _ => false,
        }
    };
    match change {
        Some(c) => derived
            .fields
            .keys()
            .chain(c.fields.keys())
            .all(|k| same_field(k)),
        None => base
            .keys()
            .chain(rec.keys())
            .chain(derived.fields.keys())
            .all(|k| same_field(k)),
    }
}

/// Equal values, or the same canonical text (a number spelled otherwise
/// in memory).
fn same(a: &Json, b: &Json) -> bool {
    a == b || flow_abi::json::canonical(a) == flow_abi::json::canonical(b)
}
