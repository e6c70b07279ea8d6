//! Retention (issue 40 item 1, docs/custody.md): `flow serve --retain
//! 'completed=30d,faulted=90d'` deletes runs that have been in a state
//! longer than its rule says, by a background sweeper.
//!
//! A rule is `STATE=AGE` or, for one flow (the root FlowSpec's `id`),
//! `flow:ID:STATE=AGE`; STATE is `completed`, `faulted` or `halted` (a
//! running or paused run is never swept), AGE a number with `s`, `m`, `h`
//! or `d`. A run's age is the time since its state last changed. A flow's
//! own rule for a state replaces the general rule for that state. There is
//! no configuration file for `flow serve`: per-flow rules are `--retain`
//! entries.
//!
//! The sweeper asks the store for at most [`BATCH`] expired runs of each
//! rule and deletes them together (`delete_runs`: on SQLite one writer
//! batch, each deletion in a savepoint, one fsync; on Postgres one
//! transaction), each recorded in the audit log with `who =
//! sweeper`, at most [`RATE`] a second, and sleeps between rounds; it stops
//! when the server shuts down.

use super::store::StoreRef;
use crate::error::{Error, Result};
use flow_store::{Deletion, ExpiredQuery, RunState};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// Expired runs asked for at once, per rule.
pub const BATCH: u32 = 256;

/// The most deletions a second.
pub const RATE: u32 = 2000;

/// One retention rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Only runs of this flow (the root FlowSpec's `id`).
    pub flow: Option<String>,
    pub state: RunState,
    pub age: Duration,
}

/// Every `--retain` rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub rules: Vec<Rule>,
}

fn age(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let n: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        's' => n,
        'm' => n.checked_mul(60)?,
        'h' => n.checked_mul(3600)?,
        'd' => n.checked_mul(86_400)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

impl Retention {
    /// Parses `--retain` entries (each may hold several, comma-separated).
    pub fn parse(entries: &[String]) -> Result<Retention> {
        let mut rules: Vec<Rule> = Vec::new();
        for entry in entries.iter().flat_map(|e| e.split(',')) {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let bad = |why: &str| {
                Error::Refused(format!(
                    "--retain {entry:?}: {why}; expected STATE=AGE or flow:ID:STATE=AGE, STATE completed, faulted or halted, AGE like 30d, 12h, 15m or 90s"
                ))
            };
            let (scope, rule) = match entry.strip_prefix("flow:") {
                Some(rest) => {
                    let (flow, rule) = rest.rsplit_once(':').ok_or_else(|| bad("no flow id"))?;
                    if flow.is_empty() {
                        return Err(bad("an empty flow id"));
                    }
                    (Some(flow.to_string()), rule)
                }
                None => (None, entry),
            };
            let (state, a) = rule.split_once('=').ok_or_else(|| bad("no `=`"))?;
            let state = match RunState::parse(state) {
                Some(s @ (RunState::Completed | RunState::Faulted | RunState::Halted)) => s,
                Some(_) => return Err(bad("a running or paused run is never swept")),
                None => return Err(bad("an unknown state")),
            };
            let age = age(a)
                .ok_or_else(|| bad("an age that is not a positive number with s, m, h or d"))?;
            if rules.iter().any(|r| r.flow == scope && r.state == state) {
                return Err(bad("a second rule for the same state and flow"));
            }
            rules.push(Rule {
                flow: scope,
                state,
                age,
            });
        }
        Ok(Retention { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The store's question for `rule` at `now_ms`: a general rule leaves
    /// the flows with their own rule for that state to them.
    pub fn query(&self, rule: &Rule, now_ms: i64, limit: u32) -> ExpiredQuery {
        let except_flows = match rule.flow {
            Some(_) => Vec::new(),
            None => self
                .rules
                .iter()
                .filter(|r| r.state == rule.state)
                .filter_map(|r| r.flow.clone())
                .collect(),
        };
        ExpiredQuery {
            state: rule.state,
            before_ms: now_ms.saturating_sub(rule.age.as_millis() as i64),
            flow: rule.flow.clone(),
            except_flows,
            limit,
        }
    }

    /// How long the sweeper sleeps between rounds: a quarter of the
    /// shortest age, between 200 ms and a minute.
    pub fn interval(&self) -> Duration {
        let shortest = self
            .rules
            .iter()
            .map(|r| r.age)
            .min()
            .unwrap_or(Duration::from_secs(60));
        (shortest / 4).clamp(Duration::from_millis(200), Duration::from_secs(60))
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One round: every rule's expired runs, a batch at a time, until none is
/// left or shutdown. Returns how many runs it deleted.
pub fn sweep_once(store: &StoreRef, policy: &Retention, stop: &CancellationToken) -> Result<u64> {
    let who = Deletion::by("sweeper");
    let mut deleted = 0u64;
    let started = Instant::now();
    for rule in &policy.rules {
        loop {
            if stop.is_cancelled() {
                return Ok(deleted);
            }
            let q = policy.query(rule, now_ms(), BATCH);
            let runs = store.expired_runs(&q)?;
            let last = runs.len() < BATCH as usize;
            for r in store.delete_runs(&runs, &who) {
                match r {
                    Ok(_) => deleted += 1,
                    // Gone already (another server's sweeper), or driven
                    // again since it was listed: left alone.
                    Err(flow_store::Error::UnknownRun(_) | flow_store::Error::Active { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Bounded rate: never ahead of RATE a second.
            let due = Duration::from_secs_f64(deleted as f64 / RATE as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
            if last {
                break;
            }
        }
    }
    Ok(deleted)
}

/// The sweeper task: a round every [`Retention::interval`] until `stop`.
pub async fn sweeper(store: StoreRef, policy: Retention, stop: CancellationToken) {
    let every = policy.interval();
    tracing::info!(
        rules = policy.rules.len(),
        every_ms = every.as_millis() as u64,
        "retention sweeper started"
    );
    loop {
        let (s, p, t) = (store.clone(), policy.clone(), stop.clone());
        match tokio::task::spawn_blocking(move || sweep_once(&s, &p, &t)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(deleted = n, "retention sweep"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "retention sweep failed; trying again next round")
            }
            Err(e) => tracing::warn!(error = %e, "retention sweep panicked"),
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    tracing::info!("retention sweeper stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_flows_override() {
        let p = Retention::parse(&[
            "completed=30d,faulted=90d".into(),
            "flow:orders:completed=7d".into(),
        ])
        .unwrap();
        assert_eq!(p.rules.len(), 3);
        assert_eq!(p.rules[2].flow.as_deref(), Some("orders"));
        assert_eq!(p.rules[2].age, Duration::from_secs(7 * 86_400));
        let q = p.query(&p.rules[0], 10_000_000_000, 5);
        assert_eq!(q.except_flows, vec!["orders".to_string()]);
        assert_eq!(q.before_ms, 10_000_000_000 - 30 * 86_400_000);
        assert!(p.query(&p.rules[1], 0, 5).except_flows.is_empty());
        for bad in [
            "paused=1d",
            "completed=1w",
            "completed",
            "flow::completed=1d",
            "completed=0s",
            "completed=1d,completed=2d",
        ] {
            assert!(Retention::parse(&[bad.into()]).is_err(), "{bad}");
        }
        assert_eq!(
            Retention::parse(&["completed=1s".into()])
                .unwrap()
                .interval(),
            Duration::from_millis(250)
        );
    }
}
