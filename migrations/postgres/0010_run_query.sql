-- The run query (issue 38 item 1), Postgres dialect: the same columns,
-- indexes, table and backfill as migrations/sqlite/0010_run_query.sql.
ALTER TABLE runs ADD COLUMN flow_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN fault TEXT;
-- The search attributes a run takes from its state at each Checkpoint:
-- the root flow's declarations `[[name, pointer], ...]` that point into
-- `/state`, kept with the Start so the writer reads them with the head.
ALTER TABLE runs ADD COLUMN state_attrs TEXT;
CREATE INDEX runs_by_flow ON runs (flow_id, id) WHERE flow_id IS NOT NULL;
CREATE INDEX runs_by_entry ON runs (entry_module, entry_function, id);
CREATE INDEX runs_by_created ON runs (created_ms, id);

CREATE TABLE run_attrs (
    name   TEXT COLLATE "C" NOT NULL,
    value  TEXT COLLATE "C" NOT NULL,
    run    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (name, value, run)
);
CREATE INDEX run_attrs_by_run ON run_attrs (run, name);

-- Backfill (history bytes are not touched). A root source that is not JSON
-- names no flow: the cast's error is caught row by row.
DO $$
DECLARE
    r RECORD;
    doc json;
BEGIN
    FOR r IN
        SELECT runs.key, convert_from(b.body, 'UTF8') AS text
        FROM runs
        JOIN facts f ON f.run_key = runs.key AND f.n = 1
        CROSS JOIN LATERAL json_array_elements(f.body::json -> 'sources') s
        JOIN blobs b ON b.hash = decode(substr(s ->> 'hash', 8), 'hex')
        WHERE s ->> 'module' = runs.entry_module
    LOOP
        BEGIN
            doc := r.text::json;
            IF json_typeof(doc) = 'object' AND json_typeof(doc -> 'id') = 'string' THEN
                UPDATE runs SET flow_id = doc ->> 'id' WHERE key = r.key;
            END IF;
        EXCEPTION WHEN others THEN
            NULL;
        END;
    END LOOP;
END
$$;
UPDATE runs SET fault = f.body::json -> 'ending' ->> 'Faulted'
FROM facts f
WHERE runs.ending = 'faulted' AND f.run_key = runs.key AND f.n = runs.last_n AND f.kind = 'End';
