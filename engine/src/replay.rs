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
//! derives. Resume uses the
//! same walk: the machine it ends with continues live, and the effects it
//! derived past the end of the record are the ones still to record.

use crate::machine::{Effect, Machine};
use crate::program::Program;
use flow_abi::fact::Fact;
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// The verdict of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Matched,
    Incomplete,
    Diverged { fact: u64, reason: String },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Matched => f.write_str("matched"),
            Verdict::Incomplete => f.write_str("incomplete"),
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
        if !r.push(f.borrow()) {
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
    /// (later facts change nothing).
    pub fn push(&mut self, fact: &Fact) -> bool {
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
                started(begun).follow(fact)
            }
            running @ At::Running { .. } => running.follow(fact),
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
                    unrecorded: pending.into_iter().collect(),
                }
            }
        }
    }
}

/// A replay begun, or one that could not start.
fn started(begun: Result<(Machine, Vec<Effect>), crate::machine::Refusal>) -> At {
    match begun {
        Ok((machine, first)) => At::Running {
            machine,
            pending: first.into_iter().filter(is_fact).collect(),
            next: 2,
        },
        Err(e) => At::Done(diverged(1, format!("the run cannot start: {e}"))),
    }
}

impl At {
    /// A running replay, given the next recorded fact after Start.
    fn follow(self, fact: &Fact) -> At {
        let At::Running {
            mut machine,
            mut pending,
            next: n,
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
                        compare(pending.pop_front(), fact)
                    }
                    Err(e) => Err(format!("a timeout of {call}, but {e}")),
                }
            }
            _ => compare(pending.pop_front(), fact),
        };
        match matched {
            Ok(()) => At::Running {
                machine,
                pending,
                next: n + 1,
            },
            Err(reason) => At::Done(diverged(n, reason)),
        }
    }
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
/// match; otherwise the reason names the first field that differs.
fn compare(derived: Option<Effect>, recorded: &Fact) -> Result<(), String> {
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
    let Some(want) = d.into_fact() else {
        return Err("internal: a host record among facts".into());
    };
    let want = want.numbered(recorded.n());
    if want == *recorded {
        return Ok(());
    }
    // Values equal as `json.Value`s may differ in how a number is spelled
    // in memory; their canonical texts settle it.
    if want.to_canonical() == recorded.to_canonical() {
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
