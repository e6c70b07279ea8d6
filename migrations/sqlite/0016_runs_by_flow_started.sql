-- The flow + started-range filter (c), paged in start-time order (issue
-- 38): with a started range a page is ordered by (created_ms, id), so the
-- index holds the id right after the start time, and one index range
-- serves the page a page's worth at a time (before: every run in the
-- range read and sorted by id). State stays in the index, so the range's
-- counts by state still read no table row.
DROP INDEX runs_by_flow_created;
CREATE INDEX runs_by_flow_created ON runs (flow_id, created_ms, id, state) WHERE flow_id IS NOT NULL;
