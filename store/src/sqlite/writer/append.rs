//! A run's facts: a new run with its Start, and each fact appended after
//! it (with its blobs, the run's fault and search attributes).

use super::{Batch, Effects, Writer};
use crate::api::*;
use crate::error::{Error, Result};
use crate::fact::FactKind;
use crate::index::ending_text;
use crate::merkle::NewBlob;
use crate::prepare::{
    CheckedStart, NewFact, StartMeta, check_start, prepare_append, prepare_change,
};
use crate::seal::Place;
use flow_abi::fact::Fact;
use flow_abi::fact::RunId;
use rusqlite::{OptionalExtension, params};

impl Writer {
    pub(super) fn insert_blobs(&self, blobs: &[NewBlob]) -> Result<()> {
        // Most facts have none: no statement to find in the cache.
        if blobs.is_empty() {
            return Ok(());
        }
        let mut st = self.conn.prepare_cached(
            "INSERT INTO blobs (hash, body) VALUES (?1, ?2) ON CONFLICT (hash) DO NOTHING",
        )?;
        for b in blobs {
            let body = self.seal.seal(Place::Blob(&b.hash), &b.body)?;
            st.execute(params![&b.hash[..], &body[..]])?;
        }
        Ok(())
    }

    pub(super) fn insert_fact(
        &self,
        key: i64,
        n: u64,
        kind: FactKind,
        hash: &[u8; 32],
        body: &str,
    ) -> Result<()> {
        let mut st = self.conn.prepare_cached(
            "INSERT INTO facts (run_key, n, kind, hash, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let body = self.seal.seal_text(Place::Fact(hash), body)?;
        st.execute(params![key, n as i64, kind.as_str(), &hash[..], &*body])?;
        Ok(())
    }

    pub(super) fn insert_run(
        &self,
        meta: &StartMeta,
        state: RunState,
        ending: Option<Ending>,
        last_n: u64,
        last_hash: &[u8; 32],
        at_ms: i64,
    ) -> Result<i64> {
        let mut st = self.conn.prepare_cached(
"INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, flow_id, state_attrs, namespace)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13, ?14, ?15,
                     COALESCE(CASE WHEN ?17 THEN (SELECT p.namespace FROM runs p WHERE p.id = COALESCE(?8, ?6)) END, ?16))",
        )?;
        st.execute(params![
            meta.run,
            state.as_str(),
            meta.entry_module,
            meta.entry_function,
            meta.program,
            meta.parent.as_ref().map(|p| p.0.as_str()),
            meta.parent.as_ref().map(|p| p.1 as i64),
            meta.outer.as_ref().map(|o| o.0.as_str()),
            meta.outer.as_ref().map(|o| o.1.as_str()),
            ending.map(ending_text),
            last_n as i64,
            &last_hash[..],
            at_ms,
            meta.flow_id,
            meta.state_attrs_column(),
            meta.namespace.as_str(),
            meta.inherit,
        ])?;
        let key = self.conn.last_insert_rowid();
        let mut attr = self.conn.prepare_cached(
            "INSERT OR IGNORE INTO run_attrs (name, value, run) VALUES (?1, ?2, ?3)",
        )?;
        for (name, value) in &meta.attrs {
            attr.execute(params![name, value, meta.run])?;
        }
        Ok(key)
    }

    pub(super) fn create(
        &mut self,
        namespace: Namespace,
        start: Fact,
        sources: &[SourceText],
        records: Vec<HostRecord>,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<Appended> {
        let mut checked = check_start(start, sources)?;
        checked.meta.namespace = namespace;
        let run = checked.run.clone();
        if batch.heads.contains_key(run.as_str()) || self.run_heads.contains_key(run.as_str()) {
            return Err(Error::RunExists(run.to_string()));
        }
        let exists: Option<i64> = self
            .conn
            .prepare_cached("SELECT key FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get(0))
            .optional()?;
        if exists.is_some() {
            return Err(Error::RunExists(run.to_string()));
        }
        let fact = checked.store()?;
        // Without a savepoint (see `commit_batch`): every check above, the
        // writes after them.
        let written = self.write_run(&checked, &fact, records, at_ms, batch);
        self.after_first_write(written, || format!("writing the new run {run}"))?;
        Ok(fact.appended(&run))
    }

    /// A new run's rows, checked (`create`): its Start's blobs, its row,
    /// the Start, the host records made with it.
    fn write_run(
        &mut self,
        checked: &CheckedStart,
        fact: &NewFact,
        records: Vec<HostRecord>,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<()> {
        let run = &checked.run;
        self.insert_blobs(&checked.blobs)?;
        let key = self.insert_run(&checked.meta, RunState::Running, None, 1, &fact.hash, at_ms)?;
        crate::sqlite::delete::insert_refs(&self.conn, key, &checked.blobs)?;
        self.insert_fact(key, 1, fact.kind, &fact.hash, &fact.body)?;
        for r in records {
            if let HostDetails::Recovered { recovery } = &r.details {
                crate::sqlite::recoveries::insert_fork(
                    &self.conn,
                    recovery,
                    run.as_str(),
                    checked.meta.parent.as_ref(),
                )?;
            }
            // A record that moves the head (a pause) has no place at Start.
            let at = r.at_ms.unwrap_or(at_ms);
            self.host(run, r, at, batch)?;
        }
        Ok(())
    }

    pub(super) fn append(
        &mut self,
        run: &RunId,
        fact: Appending,
        at_ms: i64,
        batch: &mut Batch,
    ) -> Result<(Appended, Effects)> {
        let head = self.head(run, batch)?;
        let key = head.key;
        let was_paused = head.state == RunState::Paused;
        let p = match fact {
            Appending::Fact(fact) => {
                let prev_ckpt = match batch.ckpt.get(&key) {
                    Some(v) => v.as_ref(),
                    None => self.cache.get(&key),
                };
                prepare_append(run, &head, fact, at_ms, prev_ckpt)?
            }
            Appending::Changed {
                n,
                task,
                node,
                change,
            } => {
                // The base is taken (the change is applied to it in place):
                // until this append is in, the run has none in memory, and a
                // refused append leaves it so.
                let kept = match batch.ckpt.insert(key, None) {
                    Some(v) => v,
                    None => self.cache.take(&key),
                };
                let base = match kept {
                    Some(b) => b,
                    None => crate::sqlite::read::on(&self.conn, &self.seal, |db| {
                        crate::read::latest_checkpoint(db, run)
                    })?,
                };
                prepare_change(run, &head, n, task, node, change, at_ms, base)?
            }
        };
        // Without a savepoint (see `commit_batch`): the fact first, whose
        // INSERT is refused whole (a statement is atomic), then its blobs;
        // once the fact is in, a failure leaves the batch broken.
        self.insert_fact(key, p.fact.n, p.fact.kind, &p.fact.hash, &p.fact.body)?;
        let n = p.fact.n;
        let blobs = self.insert_blobs(&p.blobs).and_then(|()| {
            crate::sqlite::delete::insert_refs(&self.conn, key, &p.blobs).map_err(Error::from)
        });
        self.after_first_write(blobs, || format!("writing the blobs of fact {n}"))?;
        if was_paused {
            let cleared = crate::sqlite::waiting::clear(&self.conn, key);
            self.after_first_write(cleared, || {
                format!("clearing the waiting calls at fact {n}")
            })?;
        }
        if let Some(fault) = &p.fault {
            let written = self
                .conn
                .prepare_cached("UPDATE runs SET fault = ?1 WHERE key = ?2")
                .and_then(|mut st| st.execute(params![fault, key]));
            self.after_first_write(written, || format!("writing the fault of fact {n}"))?;
        }
        if let Some((names, now)) = &p.state_attrs {
            let written = self.write_state_attrs(run, names, now);
            self.after_first_write(written, || {
                format!("writing the search attributes of fact {n}")
            })?;
        }
        Ok((
            p.fact.appended(run),
            Effects {
                ckpt: p.ckpt.map(|c| (key, c)),
                head: Some((run.to_string(), p.head)),
                gone: None,
            },
        ))
    }

    /// A Checkpoint's state search attributes: the declared names' rows
    /// replaced by what its state gives now.
    fn write_state_attrs(
        &self,
        run: &RunId,
        names: &[String],
        now: &[(String, String)],
    ) -> rusqlite::Result<()> {
        let mut del = self
            .conn
            .prepare_cached("DELETE FROM run_attrs WHERE name = ?1 AND run = ?2")?;
        for n in names {
            del.execute(params![n, run.as_str()])?;
        }
        let mut ins = self.conn.prepare_cached(
            "INSERT OR IGNORE INTO run_attrs (name, value, run) VALUES (?1, ?2, ?3)",
        )?;
        for (n, v) in now {
            ins.execute(params![n, v, run.as_str()])?;
        }
        Ok(())
    }
}
