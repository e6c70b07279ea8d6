-- Bulk recoveries (issue 39 §2, docs/recovery.md): each `flow recover` /
-- `POST /v1/recover` that forks is recorded here, outside every history (no
-- chained byte moves). While it goes, `expires_ms` is its lock on the flow:
-- a second recovery of the same flow is refused until the first ends or its
-- lock expires (its server stopped: renewed every few seconds while it
-- runs). `ended_ms` NULL and an expired lock: it was interrupted.
CREATE TABLE recoveries (
    id         TEXT    PRIMARY KEY,                   -- rec-…
    flow       TEXT    NOT NULL,                      -- FIXED's flow id
    program    TEXT    NOT NULL,                      -- FIXED's program hash
    who        TEXT    NOT NULL,                      -- a token's name, or `cli`
    started_ms INTEGER NOT NULL,
    expires_ms INTEGER,                               -- the lock, while it runs
    ended_ms   INTEGER,
    report     TEXT                                   -- its counts, canonical JSON, once ended
);
CREATE INDEX recoveries_by_flow ON recoveries (flow, started_ms);

-- The forks a recovery made: written by the store's writer in the same
-- transaction as the fork's Start and its `recovery` host record.
CREATE TABLE recovery_forks (
    fork       TEXT    PRIMARY KEY,                   -- the fork's run id
    recovery   TEXT    NOT NULL,                      -- recoveries.id
    run        TEXT    NOT NULL,                      -- the run it recovers (Start.parent.run)
    checkpoint INTEGER NOT NULL                       -- Start.parent.checkpoint
);
CREATE INDEX recovery_forks_by_recovery ON recovery_forks (recovery, fork);

-- One more kind of host record: `recovery`, written with a fork's Start by
-- the recovery that made it ("recovered by R"). SQLite cannot change a
-- CHECK constraint in place: the table is rebuilt, every row kept as it
-- was (nothing references host_records), as in 0011.
CREATE TABLE host_records_next (
    run_key   INTEGER NOT NULL REFERENCES runs (key),
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure','timing','stderr','recovery')),
    at_ms     INTEGER NOT NULL,
    head_n    INTEGER NOT NULL,                       -- the last fact when the record was made
    head_hash BLOB    NOT NULL,
    details   TEXT    NOT NULL,                       -- canonical JSON, not interpreted by the store
    PRIMARY KEY (run_key, seq)
);
INSERT INTO host_records_next (run_key, seq, kind, at_ms, head_n, head_hash, details)
    SELECT run_key, seq, kind, at_ms, head_n, head_hash, details FROM host_records;
DROP TABLE host_records;
ALTER TABLE host_records_next RENAME TO host_records;
