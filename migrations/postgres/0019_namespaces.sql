-- Namespaces (issue 40 item 4), Postgres dialect: the same as
-- migrations/sqlite/0019_namespaces.sql. Host metadata in the runs index,
-- never a fact: no chained byte moves; every run stored before this
-- migration is in `default`, and a run's namespace never changes.
ALTER TABLE runs ADD COLUMN namespace TEXT COLLATE "C" NOT NULL DEFAULT 'default';
CREATE INDEX runs_by_namespace ON runs (namespace, id);
CREATE INDEX runs_by_namespace_state ON runs (namespace, state, id);
CREATE INDEX runs_by_namespace_flow ON runs (namespace, flow_id, id) WHERE flow_id IS NOT NULL;

-- The maintained counts (0015) per namespace: the counters and their
-- deltas gain the namespace, first in the counters' key.
ALTER TABLE run_counts ADD COLUMN namespace TEXT COLLATE "C" NOT NULL DEFAULT 'default';
ALTER TABLE run_counts DROP CONSTRAINT run_counts_pkey;
ALTER TABLE run_counts ADD PRIMARY KEY (namespace, has_flow, flow, state);
ALTER TABLE run_count_deltas ADD COLUMN namespace TEXT COLLATE "C" NOT NULL DEFAULT 'default';

CREATE OR REPLACE FUNCTION run_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (namespace, has_flow, flow, state, delta)
    SELECT namespace, flow_id IS NOT NULL, COALESCE(flow_id, ''), state, COUNT(*)
    FROM new_runs GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION run_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (namespace, has_flow, flow, state, delta)
    SELECT namespace, flow_id IS NOT NULL, COALESCE(flow_id, ''), state, -COUNT(*)
    FROM old_runs GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION run_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_count_deltas (namespace, has_flow, flow, state, delta) VALUES
        (OLD.namespace, OLD.flow_id IS NOT NULL, COALESCE(OLD.flow_id, ''), OLD.state, -1),
        (NEW.namespace, NEW.flow_id IS NOT NULL, COALESCE(NEW.flow_id, ''), NEW.state, 1);
    RETURN NULL;
END
$$;

-- The inbox of a confined caller (see the SQLite migration).
ALTER TABLE waiting_calls ADD COLUMN namespace TEXT COLLATE "C" NOT NULL DEFAULT 'default';
CREATE INDEX waiting_calls_by_namespace_age ON waiting_calls (namespace, since_ms, run, call);
CREATE INDEX waiting_calls_by_namespace_due ON waiting_calls (namespace, (COALESCE(due_ms, 9223372036854775807)), run, call);
