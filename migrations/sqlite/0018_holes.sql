-- Holes: redaction after the fact (issue 40 item 2, docs/custody.md
-- "Holes"). Both tables are outside every history: no chained byte moves.
--
-- A hole is a value blob that one run may no longer read: its facts keep
-- the reference (`{"$blob":"blake3:…","length":L}`, which is all the chain
-- hash covers), reads of that run answer a hole marker in its place, and
-- the run's `blob_refs` row for it is gone, so the blob's row is deleted
-- once no other run references it. Another run that references the same
-- blob keeps reading it. Deleting the run deletes its holes.
CREATE TABLE holes (
    run_key INTEGER NOT NULL,
    hash    BLOB    NOT NULL,                         -- the blob's hash, 32 raw bytes
    PRIMARY KEY (run_key, hash)
) WITHOUT ROWID;

-- The redaction audit log: who made which values of which run holes, and
-- when; `paths` and `hashes` are JSON arrays of the targets asked for and
-- of the blobs that became holes (`blake3:<hex>`).
CREATE TABLE redactions (
    seq           INTEGER PRIMARY KEY,
    run           TEXT    NOT NULL,
    who           TEXT    NOT NULL,
    at_ms         INTEGER NOT NULL,
    paths         TEXT    NOT NULL,
    hashes        TEXT    NOT NULL,
    blobs_removed INTEGER NOT NULL                    -- blobs no other run referenced
);
CREATE INDEX redactions_by_run ON redactions (run);
