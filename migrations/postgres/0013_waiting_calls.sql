-- The calls paused runs wait on (issue 38 §1, §2): the inbox's index and
-- the run query's `waiting_node=` / `waiting_tool=` filters. Outside every
-- history (no chained byte moves). The writer derives a run's rows from its
-- `pause` host record, the Call facts it names and the run's `timeout`
-- records, in the same transaction as that record; any later fact of the
-- run, a halt or the run's deletion removes them. A call that drives a
-- nested run not ended has no row (the nested run lists its own calls).
-- Runs already paused are filled in at open (see `store/src/waiting.rs`).
CREATE TABLE waiting_calls (
    run_key  BIGINT NOT NULL,
    call     TEXT COLLATE "C" NOT NULL,               -- call id, e.g. c1:root#3
    run      TEXT COLLATE "C" NOT NULL,               -- runs.id: the inbox's tie-break (byte order, as SQLite)
    task     TEXT   NOT NULL,
    node     TEXT   NOT NULL,
    tool     TEXT   NOT NULL,
    fact     BIGINT NOT NULL,                         -- the Call's fact number
    since_ms BIGINT NOT NULL,                         -- the pause record's time
    due_ms   BIGINT,                                  -- its deadline (a timeout record), if any
    PRIMARY KEY (run_key, call)
);
CREATE INDEX waiting_calls_by_age ON waiting_calls (since_ms, run, call);
CREATE INDEX waiting_calls_by_due ON waiting_calls ((COALESCE(due_ms, 9223372036854775807)), run, call);
CREATE INDEX waiting_calls_by_node ON waiting_calls (node, run_key);
CREATE INDEX waiting_calls_by_tool ON waiting_calls (tool, run_key);
