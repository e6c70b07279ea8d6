-- Live feeds poll the runs index for rows changed since a time, so that a
-- server also sees what other processes (the CLI on the same store) wrote.
CREATE INDEX runs_by_updated ON runs (updated_ms);
