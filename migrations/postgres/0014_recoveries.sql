-- Bulk recoveries (issue 39 §2, docs/recovery.md): each `flow recover` /
-- `POST /v1/recover` that forks is recorded here, outside every history (no
-- chained byte moves). While it goes, `expires_ms` (the database's clock) is
-- its lock on the flow: a second recovery of the same flow is refused until
-- the first ends or its lock expires (its server stopped: renewed every few
-- seconds while it runs). `ended_ms` NULL and an expired lock: it was
-- interrupted. Beginning one takes a transaction advisory lock on the flow,
-- so two servers beginning at once see each other.
CREATE TABLE recoveries (
    id         TEXT COLLATE "C" PRIMARY KEY,          -- rec-…
    flow       TEXT   NOT NULL,                       -- FIXED's flow id
    program    TEXT   NOT NULL,                       -- FIXED's program hash
    who        TEXT   NOT NULL,                       -- a token's name, or `cli`
    started_ms BIGINT NOT NULL,
    expires_ms BIGINT,                                -- the lock, while it runs
    ended_ms   BIGINT,
    report     TEXT                                   -- its counts, canonical JSON, once ended
);
CREATE INDEX recoveries_by_flow ON recoveries (flow, started_ms);

-- The forks a recovery made: written by the store's writer in the same
-- transaction as the fork's Start and its `recovery` host record.
CREATE TABLE recovery_forks (
    fork       TEXT COLLATE "C" PRIMARY KEY,          -- the fork's run id
    recovery   TEXT COLLATE "C" NOT NULL,             -- recoveries.id
    run        TEXT   NOT NULL,                       -- the run it recovers (Start.parent.run)
    checkpoint BIGINT NOT NULL                        -- Start.parent.checkpoint
);
CREATE INDEX recovery_forks_by_recovery ON recovery_forks (recovery, fork);

-- One more kind of host record: `recovery`, written with a fork's Start by
-- the recovery that made it ("recovered by R").
ALTER TABLE host_records DROP CONSTRAINT host_records_kind_check;
ALTER TABLE host_records ADD CONSTRAINT host_records_kind_check
    CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure','timing','stderr','recovery'));
