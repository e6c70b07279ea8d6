-- Encryption at rest (issue 40 item 3, docs/custody.md "Encryption at
-- rest"). Rows of `blobs.body`, `facts.body`, `host_records.details` and
-- `memory.value` may be sealed: XChaCha20-Poly1305 under a data key named
-- in the row's own header. The data keys live here only wrapped (sealed)
-- by a master key, and the master keys never enter the database: they come
-- from the operator's key file. A store with a row here is encrypted: it
-- does not open without a key file holding the master key that wraps it.
-- `flow keys rotate` re-wraps these rows under the key file's active master
-- key (no value row moves, nothing is re-hashed).
CREATE TABLE data_keys (
    id         BYTEA   PRIMARY KEY,                   -- 8 random bytes, named by every sealed row's header
    master     TEXT    NOT NULL,                      -- the key file's id of the master key that wraps it
    wrapped    BYTEA   NOT NULL,                      -- nonce (24) || sealed 32-byte key || tag (16)
    created_ms BIGINT  NOT NULL
);
