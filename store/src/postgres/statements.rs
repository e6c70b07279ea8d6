//! The statements a writer's connection prepares once: the SQL of every
//! part of a batch ([`super::sql::write`] sends them).

use crate::error::Error;
use tokio_postgres::{Client, Config, Statement};

/// The statements the writer prepares once per connection.
pub(super) struct Statements {
    pub(super) heads: Statement,
    pub(super) fence: Statement,
    pub(super) xid: Statement,
    pub(super) blobs: Statement,
    pub(super) runs: Statement,
    pub(super) facts: Statement,
    pub(super) host: Statement,
    pub(super) update: Statement,
    pub(super) notify: Statement,
    pub(super) attrs: Statement,
    pub(super) faults: Statement,
    pub(super) unattr: Statement,
    pub(super) blob_locks: Statement,
    pub(super) refs: Statement,
    pub(super) holes: Statement,
    pub(super) unwait: Statement,
    pub(super) wait: Statement,
    pub(super) recovery_forks: Statement,
}

pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) st: Statements,
}

impl Conn {
    /// Connects and prepares the statements.
    pub(super) async fn open(cfg: &Config) -> Result<Conn, Error> {
        let client = super::connect::connect(cfg).await?;
        let st = Statements {
            heads: client
                .prepare(
                    "SELECT r.id, r.key, r.last_n, r.last_hash, r.ending, r.state, r.updated_ms, r.state_ms,
                            (SELECT COALESCE(MAX(h.seq), 0) FROM host_records h WHERE h.run_key = r.key),
                            r.state_attrs, r.xmin::text::int8
                     FROM runs r WHERE r.id = ANY($1::text[]) ORDER BY r.id FOR UPDATE OF r",
                )
                .await?,
            // Fails (an int8 cast of a sentence) unless every row is there
            // at the version given; not a constant, so never folded at
            // plan time. A row another transaction changed since is
            // re-checked at its newest version once its lock is ours.
            fence: client
                .prepare(
                    "SELECT CASE WHEN count(*) = $3 THEN count(*)
                            ELSE ('stale heads: ' || ($3 - count(*)) || ' of the batch''s runs changed since this writer''s last look')::int8 END
                     FROM (SELECT r.id FROM runs r JOIN unnest($1::text[], $2::int8[]) AS u(id, x) ON r.id = u.id
                           WHERE r.xmin::text::int8 = u.x ORDER BY r.id FOR UPDATE OF r) AS l",
                )
                .await?,
            xid: client
                .prepare("SELECT txid_current() % 4294967296")
                .await?,
            blobs: client
                .prepare(
                    "INSERT INTO blobs (hash, body) SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (hash) DO NOTHING",
                )
                .await?,
            runs: client
                .prepare(
                    "INSERT INTO runs (id, state, entry_module, entry_function, program, parent_run, parent_checkpoint, outer_run, outer_call, ending, last_n, last_hash, created_ms, updated_ms, state_ms, imported_ms, flow_id, fault, state_attrs, namespace)
                     SELECT id, state, em, ef, program, pr, pc, orun, ocall, ending, n, h, t, t, t, imp, fid, fault, sa,
                            COALESCE(CASE WHEN inh THEN (SELECT p.namespace FROM runs p WHERE p.id = COALESCE(u.orun, u.pr)) END, ns)
                     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::bytea[], $13::int8[], $14::int8[], $15::text[], $16::text[], $17::text[], $18::text[], $19::bool[])
                       AS u(id, state, em, ef, program, pr, pc, orun, ocall, ending, n, h, t, imp, fid, fault, sa, ns, inh)",
                )
                .await?,
            facts: client
                .prepare(
                    "INSERT INTO facts (run_key, n, kind, hash, body)
                     SELECT r.key, u.n, u.kind, u.hash, u.body
                     FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[], $5::text[]) AS u(id, n, kind, hash, body)
                     JOIN runs r ON r.id = u.id",
                )
                .await?,
            host: client
                .prepare(
                    "INSERT INTO host_records (run_key, seq, kind, at_ms, head_n, head_hash, details)
                     SELECT r.key, u.seq, u.kind, u.at, u.hn, u.hh, u.details
                     FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::bytea[], $7::text[]) AS u(id, seq, kind, at, hn, hh, details)
                     JOIN runs r ON r.id = u.id",
                )
                .await?,
            update: client
                .prepare(
                    "UPDATE runs AS r SET last_n = u.n, last_hash = u.h, state = u.s, ending = u.e, updated_ms = u.t, state_ms = u.st
                     FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::int8[]) AS u(id, n, h, s, e, t, st)
                     WHERE r.id = u.id",
                )
                .await?,
            notify: client
                .prepare("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                .await?,
            attrs: client
                .prepare(
                    "INSERT INTO run_attrs (name, value, run) SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING",
                )
                .await?,
            unattr: client
                .prepare(
                    "DELETE FROM run_attrs a USING unnest($1::text[], $2::text[]) AS u(run, name) WHERE a.run = u.run AND a.name = u.name",
                )
                .await?,
            faults: client
                .prepare(
                    "UPDATE runs AS r SET fault = u.f FROM unnest($1::text[], $2::text[]) AS u(id, f) WHERE r.id = u.id",
                )
                .await?,
            // Shared, in key order: a deletion holding one exclusively
            // (docs/custody.md) is waited for before the blob is written.
            blob_locks: client
                .prepare(
                    "SELECT count(pg_advisory_xact_lock_shared(k)) FROM (SELECT DISTINCT k FROM unnest($1::int8[]) AS k ORDER BY k) AS s",
                )
                .await?,
            refs: client
                .prepare(
                    "INSERT INTO blob_refs (run_key, hash)
                     SELECT r.key, u.h FROM unnest($1::text[], $2::bytea[]) AS u(id, h)
                     JOIN runs r ON r.id = u.id
                     ON CONFLICT DO NOTHING",
                )
                .await?,
            holes: client
                .prepare(
                    "INSERT INTO holes (run_key, hash)
                     SELECT r.key, u.h FROM unnest($1::text[], $2::bytea[]) AS u(id, h)
                     JOIN runs r ON r.id = u.id
                     ON CONFLICT DO NOTHING",
                )
                .await?,
            unwait: client
                .prepare(
                    "DELETE FROM waiting_calls w USING runs r WHERE w.run_key = r.key AND r.id = ANY($1::text[])",
                )
                .await?,
            wait: client
                .prepare(
                    "INSERT INTO waiting_calls (run_key, call, run, task, node, tool, fact, since_ms, due_ms, namespace)
                     SELECT r.key, u.call, u.id, u.task, u.node, u.tool, u.fact, u.since, u.due, r.namespace
                     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[], $8::int8[])
                       AS u(id, call, task, node, tool, fact, since, due)
                     JOIN runs r ON r.id = u.id
                     ON CONFLICT DO NOTHING",
                )
                .await?,
            recovery_forks: client
                .prepare(
                    "INSERT INTO recovery_forks (fork, recovery, run, checkpoint)
                     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[])
                     ON CONFLICT DO NOTHING",
                )
                .await?,
        };
        Ok(Conn { client, st })
    }
}
