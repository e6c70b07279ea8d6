-- A run's forks and nested runs, found by the run they name: a fork's
-- `parent_run`, a nested run's `outer_run` (GET /v1/runs/{run} lists
-- them). Without these, finding them read the runs index row by row after
-- the run (issue 36: 0.5-0.8 s at 2,200 runs on Postgres). Partial: most
-- runs name neither. Both columns are written once, with the Start, so a
-- step's update of the runs row still writes no index.
CREATE INDEX runs_by_parent ON runs (parent_run) WHERE parent_run IS NOT NULL;
CREATE INDEX runs_by_outer ON runs (outer_run) WHERE outer_run IS NOT NULL;
