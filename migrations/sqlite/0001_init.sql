-- flow-store schema, version 1 (DESIGN §3 "History", §6 "Run archives").
-- Canonical JSON is kept as TEXT next to its hash; SQLite's JSON functions are
-- never used on it (ECOSYSTEM §3 "Storing JSON").

-- The runs index: one row per run, created with its Start fact.
-- `key` is an internal integer so every fact row does not repeat the 30-byte id.
CREATE TABLE runs (
    key             INTEGER PRIMARY KEY,
    id              TEXT    NOT NULL UNIQUE,          -- run-<lowercase ULID>, so id order is creation order
    state           TEXT    NOT NULL CHECK (state IN ('running','paused','completed','faulted','halted')),
    entry_module    TEXT    NOT NULL,
    entry_function  TEXT    NOT NULL,
    program         TEXT    NOT NULL,                 -- recorded program fingerprint
    parent_run      TEXT,                             -- fork: Start.parent.run
    parent_checkpoint INTEGER,                        -- fork: Start.parent.checkpoint
    outer_run       TEXT,                             -- nested run: Start.outer.run
    outer_call      TEXT,                             -- nested run: Start.outer.call
    ending          TEXT CHECK (ending IN ('completed','faulted')),
    last_n          INTEGER NOT NULL,
    last_hash       BLOB    NOT NULL,                 -- 32 raw bytes, the chain hash of fact last_n
    created_ms      INTEGER NOT NULL,                 -- host timestamps (unix ms), outside the chain
    updated_ms      INTEGER NOT NULL
);
CREATE INDEX runs_by_state ON runs (state, id);

-- The facts: one canonical stored fact per row with its chain hash.
-- A rowid table so appends fill pages sequentially; (run_key, n) is unique.
CREATE TABLE facts (
    run_key  INTEGER NOT NULL REFERENCES runs (key),
    n        INTEGER NOT NULL,
    kind     TEXT    NOT NULL,
    hash     BLOB    NOT NULL,                        -- h_n, 32 raw bytes
    body     TEXT    NOT NULL,                        -- canonical stored fact (values over 1 KiB are references)
    UNIQUE (run_key, n)
);

-- Content-addressed blobs: value blobs (canonical JSON text of a stored
-- value) and source blobs (the exact source text). Stored once, shared by
-- every fact, run and fork that uses them.
CREATE TABLE blobs (
    id    INTEGER PRIMARY KEY,
    hash  BLOB NOT NULL UNIQUE,                       -- blake3 of body, 32 raw bytes
    body  BLOB NOT NULL
);

-- Host records: beside the history, never inside it (DESIGN §3).
CREATE TABLE host_records (
    run_key   INTEGER NOT NULL REFERENCES runs (key),
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure')),
    at_ms     INTEGER NOT NULL,
    head_n    INTEGER NOT NULL,                       -- the last fact when the record was made
    head_hash BLOB    NOT NULL,
    details   TEXT    NOT NULL,                       -- canonical JSON, not interpreted by the store
    PRIMARY KEY (run_key, seq)
);
