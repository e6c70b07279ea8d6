//! Imports: a verified archive written as a run of this store, or
//! matched against the run it already holds.

use super::{Batch, Writer};
use crate::api::*;
use crate::archive::VerifiedArchive;
use crate::error::Result;
use crate::hash::parse_hash;
use crate::prepare::{import_over, plan_import};
use crate::seal::Place;
use flow_abi::json::canonical;
use rusqlite::{OptionalExtension, params};

impl Writer {
    pub(super) fn import(
        &mut self,
        a: &VerifiedArchive,
        namespace: &Namespace,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<ImportOutcome> {
        if let Ok(h) = self.head(&a.run, batch) {
            return import_over(a, h.last_n, &h.last_hash);
        }
        let existing: Option<(i64, Vec<u8>)> = self
            .conn
            .prepare_cached("SELECT last_n, last_hash FROM runs WHERE id = ?1")?
            .query_row([a.run.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((n, h)) = existing {
            return import_over(a, n as u64, &h);
        }
        let plan = plan_import(a, namespace)?;
        self.insert_blobs(&a.blobs)?;
        let key = self.insert_run(
            &plan.meta,
            plan.state,
            plan.ending,
            plan.last_n,
            &plan.last_hash,
            at_ms,
        )?;
        self.conn
            .prepare_cached("UPDATE runs SET imported_ms = ?1, fault = ?2 WHERE key = ?3")?
            .execute(params![at_ms, plan.fault, key])?;
        crate::sqlite::delete::insert_refs(&self.conn, key, &a.blobs)?;
        for h in &a.holes {
            self.conn
                .prepare_cached("INSERT OR IGNORE INTO holes (run_key, hash) VALUES (?1, ?2)")?
                .execute(params![key, &h[..]])?;
        }
        for f in &a.facts {
            self.insert_fact(key, f.n, f.kind, &f.hash, &f.body)?;
        }
        for (i, r) in a.host.iter().enumerate() {
            let head = parse_hash(&r.head.hash).unwrap_or([0; 32]);
            let (seq, kind) = ((i + 1) as i64, r.kind().as_str());
            let details = canonical(&r.details.to_json());
            let details = self
                .seal
                .seal_text(Place::Host(&head, seq, kind), &details)?;
            self.conn
                .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
                .execute(params![key, seq, kind, r.at_ms, r.head.n as i64, &head[..], &*details])?;
        }
        Ok(ImportOutcome::Imported {
            run: a.run.clone(),
            facts: plan.last_n,
        })
    }
}
