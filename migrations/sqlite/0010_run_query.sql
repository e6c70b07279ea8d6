-- The run query (issue 38 item 1): every filter of GET /v1/runs is an
-- index lookup. Written once per run by the store (with its Start, or its
-- End), so a step's commit still writes the runs row alone and no index.
--
-- `flow_id`: the root FlowSpec document's `id` (the entry module's source),
-- NULL when the root source is not a JSON object with a string `id`.
-- `fault`: a faulted run's End reason, for the fault-text filter (found
-- through runs_by_state: only faulted runs have one).
ALTER TABLE runs ADD COLUMN flow_id TEXT;
ALTER TABLE runs ADD COLUMN fault TEXT;
-- The search attributes a run takes from its state at each Checkpoint:
-- the root flow's declarations `[[name, pointer], ...]` that point into
-- `/state`, kept with the Start so the writer reads them with the head.
ALTER TABLE runs ADD COLUMN state_attrs TEXT;
CREATE INDEX runs_by_flow ON runs (flow_id, id) WHERE flow_id IS NOT NULL;
CREATE INDEX runs_by_entry ON runs (entry_module, entry_function, id);
CREATE INDEX runs_by_created ON runs (created_ms, id);

-- Search attributes: named typed values (string, integer, boolean) taken
-- from a run's input at Start, as its root flow's
-- `runtime_hints.search_attributes` declares (docs/store.md). `value` is
-- the value's canonical JSON text, so `"42"` and `42` differ. Keyed by the
-- run id so an equality lookup walks the runs in id order (keyset paging).
CREATE TABLE run_attrs (
    name   TEXT NOT NULL,
    value  TEXT NOT NULL,
    run    TEXT NOT NULL,
    PRIMARY KEY (name, value, run)
) WITHOUT ROWID;
-- A Checkpoint replaces its run's state attributes by (run, name).
CREATE INDEX run_attrs_by_run ON run_attrs (run, name);

-- Backfill from what is stored (history bytes are not touched): the flow id
-- from the root source blob, the fault from the End fact. SQLite's JSON
-- functions read them here once; the store never keeps JSON it reads this
-- way as a source of truth.
UPDATE runs SET flow_id = (
    SELECT json_extract(CAST(b.body AS TEXT), '$.id')
    FROM facts f, json_each(f.body, '$.sources') s, blobs b
    WHERE f.run_key = runs.key AND f.n = 1
      AND json_extract(s.value, '$.module') = runs.entry_module
      AND b.hash = unhex(substr(json_extract(s.value, '$.hash'), 8))
      AND json_valid(CAST(b.body AS TEXT))
      AND json_type(CAST(b.body AS TEXT), '$.id') = 'text'
);
UPDATE runs SET fault = (
    SELECT json_extract(f.body, '$.ending.Faulted')
    FROM facts f WHERE f.run_key = runs.key AND f.n = runs.last_n AND f.kind = 'End'
) WHERE ending = 'faulted';
