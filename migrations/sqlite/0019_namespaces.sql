-- Namespaces (issue 40 item 4, docs/custody.md "Namespaces"): every run
-- belongs to one, `default` unless its creator said otherwise. Host
-- metadata in the runs index, never a fact: no chained byte moves, and
-- every run stored before this migration is in `default`. A run's
-- namespace never changes after its insert.
ALTER TABLE runs ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
-- The run query of a caller confined to namespaces: each namespace is one
-- ordered index range (keyset paging), merged as the states are.
CREATE INDEX runs_by_namespace ON runs (namespace, id);
CREATE INDEX runs_by_namespace_state ON runs (namespace, state, id);
CREATE INDEX runs_by_namespace_flow ON runs (namespace, flow_id, id) WHERE flow_id IS NOT NULL;

-- The maintained counts (0015), kept per namespace so a confined caller's
-- counts are still sums over a few counter rows. Rebuilt with the
-- namespace leading its key; every row stored so far is `default`'s.
DROP TRIGGER run_counts_insert;
DROP TRIGGER run_counts_update;
DROP TRIGGER run_counts_delete;
CREATE TABLE run_counts_by_namespace (
    namespace TEXT    NOT NULL,
    has_flow  INTEGER NOT NULL,
    flow      TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (namespace, has_flow, flow, state)
) WITHOUT ROWID;
INSERT INTO run_counts_by_namespace (namespace, has_flow, flow, state, n)
SELECT 'default', has_flow, flow, state, n FROM run_counts;
DROP TABLE run_counts;
ALTER TABLE run_counts_by_namespace RENAME TO run_counts;

CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
    INSERT INTO run_counts (namespace, has_flow, flow, state, n)
    VALUES (new.namespace, new.flow_id IS NOT NULL, COALESCE(new.flow_id, ''), new.state, 1)
    ON CONFLICT (namespace, has_flow, flow, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_update AFTER UPDATE OF state, flow_id ON runs
WHEN old.state IS NOT new.state OR old.flow_id IS NOT new.flow_id BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE namespace = old.namespace AND has_flow = (old.flow_id IS NOT NULL)
      AND flow = COALESCE(old.flow_id, '') AND state = old.state;
    INSERT INTO run_counts (namespace, has_flow, flow, state, n)
    VALUES (new.namespace, new.flow_id IS NOT NULL, COALESCE(new.flow_id, ''), new.state, 1)
    ON CONFLICT (namespace, has_flow, flow, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE namespace = old.namespace AND has_flow = (old.flow_id IS NOT NULL)
      AND flow = COALESCE(old.flow_id, '') AND state = old.state;
END;

-- The inbox of a confined caller: the waiting calls carry their run's
-- namespace (written with the row, from the runs index), and each of the
-- inbox's orders has a namespace-led index.
ALTER TABLE waiting_calls ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
CREATE INDEX waiting_calls_by_namespace_age ON waiting_calls (namespace, since_ms, run, call);
CREATE INDEX waiting_calls_by_namespace_due ON waiting_calls (namespace, COALESCE(due_ms, 9223372036854775807), run, call);
