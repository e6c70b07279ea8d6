-- flow-store schema, version 1, Postgres dialect (DESIGN §3 "History", §6
-- "Run archives"). The same tables, columns and meaning as
-- migrations/sqlite/0001_init.sql. Canonical JSON is kept as TEXT next to
-- its hash; jsonb is never the source of truth (it reorders keys, drops
-- duplicates and rewrites numbers: ECOSYSTEM §3 "Storing JSON").

-- The runs index: one row per run, created with its Start fact.
-- `id` sorts bytewise (COLLATE "C") so discovery's cursor is the id order
-- whatever the database's locale.
CREATE TABLE runs (
    key             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              TEXT    COLLATE "C" NOT NULL UNIQUE,
    state           TEXT    NOT NULL CHECK (state IN ('running','paused','completed','faulted','halted')),
    entry_module    TEXT    NOT NULL,
    entry_function  TEXT    NOT NULL,
    program         TEXT    NOT NULL,
    parent_run      TEXT,
    parent_checkpoint BIGINT,
    outer_run       TEXT,
    outer_call      TEXT,
    ending          TEXT CHECK (ending IN ('completed','faulted')),
    last_n          BIGINT  NOT NULL,
    last_hash       BYTEA   NOT NULL,                 -- 32 raw bytes, the chain hash of fact last_n
    created_ms      BIGINT  NOT NULL,                 -- host timestamps (unix ms), outside the chain
    updated_ms      BIGINT  NOT NULL
);
CREATE INDEX runs_by_state ON runs (state, id);

-- The facts: one canonical stored fact per row with its chain hash.
CREATE TABLE facts (
    run_key  BIGINT NOT NULL REFERENCES runs (key),
    n        BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    hash     BYTEA  NOT NULL,                         -- h_n, 32 raw bytes
    body     TEXT   NOT NULL,                         -- canonical stored fact
    PRIMARY KEY (run_key, n)
);

-- Content-addressed blobs, stored once, shared by every fact, run and fork.
CREATE TABLE blobs (
    hash  BYTEA PRIMARY KEY,                          -- blake3 of body, 32 raw bytes
    body  BYTEA NOT NULL
);

-- Host records: beside the history, never inside it (DESIGN §3).
CREATE TABLE host_records (
    run_key   BIGINT NOT NULL REFERENCES runs (key),
    seq       BIGINT NOT NULL,
    kind      TEXT   NOT NULL CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure')),
    at_ms     BIGINT NOT NULL,
    head_n    BIGINT NOT NULL,
    head_hash BYTEA  NOT NULL,
    details   TEXT   NOT NULL,                        -- canonical JSON, not interpreted by the store
    PRIMARY KEY (run_key, seq)
);
