//! Host records: one added beside a run's history, against its head.

use super::{Batch, Effects, Writer};
use crate::api::*;
use crate::error::Result;
use crate::prepare::{host_head, host_row};
use crate::seal::Place;
use flow_abi::fact::RunId;
use flow_abi::json::canonical;
use rusqlite::params;

impl Writer {
    pub(super) fn host(
        &mut self,
        run: &RunId,
        record: HostRecord,
        at_ms: i64,
        batch: &Batch,
    ) -> Result<(HostRecordRow, Effects)> {
        let head = self.head(run, batch)?;
        let seq: i64 = self
            .conn
            .prepare_cached(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM host_records WHERE run_key = ?1",
            )?
            .query_row([head.key], |r| r.get(0))?;
        let details = canonical(&record.details.to_json());
        let kind = record.kind().as_str();
        let details = self
            .seal
            .seal_text(Place::Host(&head.last_hash, seq, kind), &details)?;
        // Without a savepoint (see `commit_batch`): every check above, the
        // record in one statement (refused whole), then what a pause or
        // halt changes; once the record is in, a failure leaves the batch
        // broken.
        self.conn
            .prepare_cached("INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
            .execute(params![head.key, seq, kind, at_ms, head.last_n as i64, &head.last_hash[..], &*details])?;
        let waiting = crate::sqlite::waiting::on_host(
            &self.conn,
            head.key,
            run,
            &record.details,
            at_ms,
            &self.seal,
        );
        self.after_first_write(waiting, || {
            format!("writing the waiting calls of {kind} record {seq}")
        })?;
        let fx = Effects {
            head: host_head(&head, record.kind(), at_ms).map(|h| (run.to_string(), h)),
            ..Effects::default()
        };
        Ok((host_row(seq as u64, record, at_ms, &head), fx))
    }
}
