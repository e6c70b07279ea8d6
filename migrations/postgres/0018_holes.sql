-- Holes: redaction after the fact (issue 40 item 2, docs/custody.md
-- "Holes"). Both tables are outside every history: no chained byte moves.
--
-- A hole is a value blob that one run may no longer read: its facts keep
-- the reference (`{"$blob":"blake3:…","length":L}`, which is all the chain
-- hash covers), reads of that run answer a hole marker in its place, and
-- the run's `blob_refs` row for it is gone, so the blob's row is deleted
-- once no other run references it (under the blob's advisory lock, taken
-- exclusive as a deletion takes it). Another run that references the same
-- blob keeps reading it. Deleting the run deletes its holes.
CREATE TABLE holes (
    run_key BIGINT NOT NULL,
    hash    BYTEA  NOT NULL,                          -- the blob's hash, 32 raw bytes
    PRIMARY KEY (run_key, hash)
);

-- The redaction audit log: who made which values of which run holes, and
-- when; `paths` and `hashes` are JSON arrays of the targets asked for and
-- of the blobs that became holes (`blake3:<hex>`).
CREATE TABLE redactions (
    seq           BIGSERIAL PRIMARY KEY,
    run           TEXT COLLATE "C" NOT NULL,
    who           TEXT   NOT NULL,
    at_ms         BIGINT NOT NULL,
    paths         TEXT   NOT NULL,
    hashes        TEXT   NOT NULL,
    blobs_removed BIGINT NOT NULL                     -- blobs no other run referenced
);
CREATE INDEX redactions_by_run ON redactions (run);
