-- Two more kinds of host record (issue 38 §3, §4): `timing` (when a call
-- went out, to what, and when its Reply was admitted) and `stderr` (the end
-- of a Tool process's stderr when it ended before answering). SQLite cannot
-- change a CHECK constraint in place: the table is rebuilt, every row kept
-- as it was (nothing references host_records).
CREATE TABLE host_records_next (
    run_key   INTEGER NOT NULL REFERENCES runs (key),
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure','timing','stderr')),
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
