-- Maintained run counts (issue 38 §1, §5): how many runs each (flow, state)
-- has, so the dashboard's tabs and `/metrics` (`flowd_runs{state}`) read a
-- few rows instead of scanning the runs they count. Outside every history
-- (no chained byte moves).
--
-- `has_flow` is 0 for the runs whose root flow has no `id` (`flow_id` NULL,
-- kept as `flow = ''`), so a flow whose id is the empty string stays apart.
-- Triggers on `runs` keep the rows: a run's insert (create, fork, import)
-- adds one, a change of its state (or flow) moves one, its deletion removes
-- one. A step's commit does not set `state`, so the update trigger does not
-- fire for it (`UPDATE OF state, flow_id`). One writer: rows are updated in
-- place; a row whose count reaches 0 stays (readers skip it).
CREATE TABLE run_counts (
    has_flow INTEGER NOT NULL,
    flow     TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (has_flow, flow, state)
) WITHOUT ROWID;

CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
    INSERT INTO run_counts (has_flow, flow, state, n)
    VALUES (new.flow_id IS NOT NULL, COALESCE(new.flow_id, ''), new.state, 1)
    ON CONFLICT (has_flow, flow, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_update AFTER UPDATE OF state, flow_id ON runs
WHEN old.state IS NOT new.state OR old.flow_id IS NOT new.flow_id BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE has_flow = (old.flow_id IS NOT NULL) AND flow = COALESCE(old.flow_id, '') AND state = old.state;
    INSERT INTO run_counts (has_flow, flow, state, n)
    VALUES (new.flow_id IS NOT NULL, COALESCE(new.flow_id, ''), new.state, 1)
    ON CONFLICT (has_flow, flow, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE has_flow = (old.flow_id IS NOT NULL) AND flow = COALESCE(old.flow_id, '') AND state = old.state;
END;

-- Back-fill from the runs already stored.
INSERT INTO run_counts (has_flow, flow, state, n)
SELECT flow_id IS NOT NULL, COALESCE(flow_id, ''), state, COUNT(*)
FROM runs GROUP BY flow_id IS NOT NULL, COALESCE(flow_id, ''), state;

-- The flow + started-range filter (c): one index range for its page (the
-- ids in range, sorted) and its counts (state is in the index, so counting
-- by state reads no table row). Written with the run's insert and its
-- state changes, not with a step (`flow_id` and `created_ms` never change).
CREATE INDEX runs_by_flow_created ON runs (flow_id, created_ms, state, id) WHERE flow_id IS NOT NULL;
