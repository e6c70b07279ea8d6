-- Retention and deletion (issue 40 item 1, docs/custody.md). Both tables
-- are outside every history: no chained byte moves.
--
-- Which runs reference which blob: one row per (run, blob) for every blob a
-- run's stored facts reach (its own value blobs, the blobs nested in them,
-- its source blobs), written in the same transaction as the fact (or Start,
-- or import) that references the blob. Writers and deletions meet on a
-- transaction advisory lock per blob (docs/custody.md "Concurrency"): a
-- writer takes it shared before it inserts a blob and its references, a
-- deletion takes it exclusive before it looks for other references, so a
-- blob is removed only when no committed or in-flight write references it.
CREATE TABLE blob_refs (
    run_key BIGINT NOT NULL,
    hash    BYTEA  NOT NULL,                          -- blobs.hash, 32 raw bytes
    PRIMARY KEY (run_key, hash)
);
CREATE INDEX blob_refs_by_hash ON blob_refs (hash);

-- The deletion audit log: who deleted which run, when, and the run's head
-- (last fact number and chain hash) at that moment; `who` is a token's name
-- for the HTTP API, `cli` for `flow delete` on a local store, `sweeper`
-- for retention.
CREATE TABLE deletions (
    seq           BIGSERIAL PRIMARY KEY,
    run           TEXT COLLATE "C" NOT NULL,
    state         TEXT   NOT NULL,
    head_n        BIGINT NOT NULL,
    head_hash     BYTEA  NOT NULL,
    who           TEXT   NOT NULL,
    at_ms         BIGINT NOT NULL,
    facts         BIGINT NOT NULL,                    -- fact rows removed
    blobs_removed BIGINT NOT NULL                     -- blobs no other run referenced
);
CREATE INDEX deletions_by_run ON deletions (run);

-- Back-fill the references of the runs already stored (nothing they hold
-- moves): every `$blob` reference in a fact, the references nested in the
-- value blobs those reach, and the Start's source blobs. A stored key that
-- is exactly `$blob` is always a reference (user keys are escaped).
WITH RECURSIVE reach(run_key, hash) AS (
    SELECT f.run_key, decode(substr(v #>> '{}', 8), 'hex')
    FROM facts f
    CROSS JOIN LATERAL jsonb_path_query(f.body::jsonb, 'strict $.**."$blob"') v
    WHERE jsonb_typeof(v) = 'string'
    UNION
    SELECT r.run_key, decode(substr(v #>> '{}', 8), 'hex')
    FROM reach r
    JOIN blobs b ON b.hash = r.hash
    CROSS JOIN LATERAL jsonb_path_query(convert_from(b.body, 'UTF8')::jsonb, 'strict $.**."$blob"') v
    WHERE jsonb_typeof(v) = 'string'
)
INSERT INTO blob_refs (run_key, hash)
SELECT run_key, hash FROM reach
UNION
SELECT f.run_key, decode(substr(s ->> 'hash', 8), 'hex')
FROM facts f
CROSS JOIN LATERAL jsonb_array_elements(f.body::jsonb -> 'sources') s
WHERE f.n = 1 AND s ->> 'hash' IS NOT NULL
ON CONFLICT DO NOTHING;
