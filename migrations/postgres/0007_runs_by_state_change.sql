-- When a run's state last changed (unix ms): its start, a pause, a resume,
-- its end, a halt. Live feeds poll this index for state changes (another
-- process, such as the CLI, may have made them); `updated_ms` moves with
-- every commit of the run and is no longer indexed, so a step's update of
-- the runs row changes no indexed column (a HOT update: no index written).
ALTER TABLE runs ADD COLUMN state_ms BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET state_ms = updated_ms;
DROP INDEX runs_by_updated;
CREATE INDEX runs_by_state_change ON runs (state_ms);
