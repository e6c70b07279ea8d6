-- std/memory key-value stores served by the host from the store's own
-- database (DESIGN §4). Keys and values are canonical JSON texts; `store`
-- is the memory store id, prefixed with the run id for thread-scoped stores.
CREATE TABLE memory (
    store TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (store, key)
);
