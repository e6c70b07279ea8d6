-- Retention and deletion (issue 40 item 1, docs/custody.md). Both tables
-- are outside every history: no chained byte moves.
--
-- Which runs reference which blob: one row per (run, blob) for every blob a
-- run's stored facts reach (its own value blobs, the blobs nested in them,
-- its source blobs). Written by the writer in the same transaction as the
-- fact (or Start, or import) that references the blob, so a committed fact
-- always has its rows. A run's deletion removes its rows and then each of
-- its blobs that no row of another run names, in one transaction of the
-- single writer.
CREATE TABLE blob_refs (
    run_key INTEGER NOT NULL,
    hash    BLOB    NOT NULL,                         -- blobs.hash, 32 raw bytes
    PRIMARY KEY (run_key, hash)
) WITHOUT ROWID;
CREATE INDEX blob_refs_by_hash ON blob_refs (hash);

-- The deletion audit log: who deleted which run, when, and the run's head
-- (last fact number and chain hash) at that moment; `who` is a token's name
-- for the HTTP API, `cli` for `flow delete` on a local store, `sweeper`
-- for retention.
CREATE TABLE deletions (
    seq           INTEGER PRIMARY KEY,
    run           TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    head_n        INTEGER NOT NULL,
    head_hash     BLOB    NOT NULL,
    who           TEXT    NOT NULL,
    at_ms         INTEGER NOT NULL,
    facts         INTEGER NOT NULL,                   -- fact rows removed
    blobs_removed INTEGER NOT NULL                    -- blobs no other run referenced
);
CREATE INDEX deletions_by_run ON deletions (run);

-- Back-fill the references of the runs already stored (nothing they hold
-- moves): every `$blob` reference in a fact, the references nested in the
-- value blobs those reach, and the Start's source blobs. A stored key that
-- is exactly `$blob` is always a reference (user keys are escaped).
INSERT OR IGNORE INTO blob_refs (run_key, hash)
WITH RECURSIVE reach(run_key, hash) AS (
    SELECT f.run_key, unhex(substr(t.value, 8))
    FROM facts f, json_tree(f.body) t
    WHERE t.key = '$blob' AND t.type = 'text'
    UNION
    SELECT r.run_key, unhex(substr(t.value, 8))
    FROM reach r
    JOIN blobs b ON b.hash = r.hash
    JOIN json_tree(CAST(b.body AS TEXT)) t
    WHERE t.key = '$blob' AND t.type = 'text'
)
SELECT run_key, hash FROM reach WHERE hash IS NOT NULL
UNION
SELECT f.run_key, unhex(substr(json_extract(s.value, '$.hash'), 8))
FROM facts f, json_each(f.body, '$.sources') s
WHERE f.n = 1 AND json_extract(s.value, '$.hash') IS NOT NULL;
