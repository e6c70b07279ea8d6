//! Which runs a recovery takes: those the run query's filters select, or
//! runs named by id (the dashboard's multi-select), each checked to be a
//! run of FIXED's flow in this store.

use super::{RecoverOutcome, RecoverRun};
use crate::error::Result;
use crate::service::RunService;
use crate::service::gate::Candidate;
use flow_store::{RunId, RunListQuery};

/// The most runs a recovery takes by name.
pub const NAMED: usize = 1_000;

/// Which runs a recovery takes.
#[derive(Clone, Debug)]
pub enum Selection {
    /// Those the run query's filters select of FIXED's flow.
    Filters(Box<RunListQuery>),
    /// These, by id (the dashboard's multi-select; at most [`NAMED`]):
    /// one that is malformed, not in the store or a run of another flow
    /// is `unrecoverable` with why, and the others go on.
    Named(Vec<String>),
}

impl From<RunListQuery> for Selection {
    fn from(query: RunListQuery) -> Selection {
        Selection::Filters(Box::new(query))
    }
}

impl RunService {
    /// The runs `selection` takes, in its order: those the filters select
    /// (confined to FIXED's `flow`), or each named run once — or, for a
    /// name that is not a run of `flow` in this store, its `unrecoverable`
    /// line.
    pub(super) fn selected(
        &self,
        flow: &str,
        selection: Selection,
    ) -> Result<Vec<std::result::Result<RunId, RecoverRun>>> {
        let names = match selection {
            Selection::Filters(mut query) => {
                Candidate::confine(flow, &mut query, "fixed program")?;
                return Ok(self.select(*query)?.into_iter().map(Ok).collect());
            }
            Selection::Named(names) => names,
        };
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for name in names.into_iter().filter(|n| seen.insert(n.clone())) {
            let why = match RunId::parse(&name) {
                Err(e) => e.to_string(),
                Ok(run) => {
                    let query = RunListQuery {
                        prefix: Some(name.clone()),
                        limit: Some(1),
                        ..RunListQuery::default()
                    };
                    let page = self.inner.store.list_runs(&query)?;
                    match page.runs.into_iter().find(|r| r.row.run == name) {
                        None => format!("no run {name} in this store"),
                        Some(r) if r.flow_id.as_deref() == Some(flow) => {
                            out.push(Ok(run));
                            continue;
                        }
                        Some(r) => format!(
                            "a run of flow {:?}, not of the fixed program's flow {flow:?}",
                            r.flow_id.unwrap_or_default()
                        ),
                    }
                }
            };
            out.push(Err(RecoverRun {
                why: Some(why),
                ..RecoverRun::new(name, RecoverOutcome::Unrecoverable)
            }));
        }
        Ok(out)
    }
}
