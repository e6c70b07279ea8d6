-- Maintained run counts (issue 38 §1, §5), Postgres dialect: the same
-- counts as migrations/sqlite/0015_run_counts.sql, kept so that many
-- servers committing at once do not queue on one hot row per (flow,
-- state). The triggers only insert signed deltas into `run_count_deltas`
-- (an insert takes no row lock another commit waits for); each server's
-- writer folds the deltas into `run_counts` every ~1,000 commands and at
-- open (one statement under an advisory lock, see
-- store/src/postgres/counts.rs); a reader sums both in one snapshot, so a
-- fold never shows a count twice or not at all.
--
-- `has_flow` is false for the runs whose root flow has no `id` (`flow_id`
-- NULL, kept as `flow = ''`).
CREATE TABLE run_counts (
    has_flow BOOLEAN NOT NULL,
    flow     TEXT    COLLATE "C" NOT NULL,
    state    TEXT    NOT NULL,
    n        BIGINT  NOT NULL,
    PRIMARY KEY (has_flow, flow, state)
);
CREATE TABLE run_count_deltas (
    has_flow BOOLEAN NOT NULL,
    flow     TEXT    COLLATE "C" NOT NULL,
    state    TEXT    NOT NULL,
    delta    BIGINT  NOT NULL
);

-- A run's insert (create, fork, import) adds one, its deletion removes
-- one: per statement, so a group commit of 256 creates writes a delta row
-- per (flow, state) it touched, not per run.
CREATE FUNCTION run_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (has_flow, flow, state, delta)
    SELECT flow_id IS NOT NULL, COALESCE(flow_id, ''), state, COUNT(*)
    FROM new_runs GROUP BY 1, 2, 3;
    RETURN NULL;
END
$$;
CREATE FUNCTION run_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (has_flow, flow, state, delta)
    SELECT flow_id IS NOT NULL, COALESCE(flow_id, ''), state, -COUNT(*)
    FROM old_runs GROUP BY 1, 2, 3;
    RETURN NULL;
END
$$;
-- A change of state (or flow) moves one. Per row with a WHEN, so a step's
-- commit (which sets `state` to the value it had) calls no function.
CREATE FUNCTION run_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (has_flow, flow, state, delta) VALUES
        (OLD.flow_id IS NOT NULL, COALESCE(OLD.flow_id, ''), OLD.state, -1),
        (NEW.flow_id IS NOT NULL, COALESCE(NEW.flow_id, ''), NEW.state, 1);
    RETURN NULL;
END
$$;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs
    REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION run_counts_inserted();
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION run_counts_deleted();
CREATE TRIGGER run_counts_update AFTER UPDATE OF state, flow_id ON runs FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.flow_id IS DISTINCT FROM NEW.flow_id)
    EXECUTE FUNCTION run_counts_moved();

-- Back-fill from the runs already stored (the triggers above already see
-- any write that commits after this transaction's lock on `runs`).
INSERT INTO run_counts (has_flow, flow, state, n)
SELECT flow_id IS NOT NULL, COALESCE(flow_id, ''), state, COUNT(*)
FROM runs GROUP BY 1, 2, 3;

-- The flow + started-range filter (c): one index range for its page (the
-- ids in range, sorted) and its counts (state is in the index, so counting
-- by state reads no table row). Written with the run's insert and its
-- state changes, not with a step (`flow_id` and `created_ms` never change).
CREATE INDEX runs_by_flow_created ON runs (flow_id, created_ms, state, id) WHERE flow_id IS NOT NULL;
