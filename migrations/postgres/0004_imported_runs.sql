-- When a run came in by archive import (unix ms), NULL for runs this store
-- created. Host records in an archive are outside the hash chain: the
-- service never binds an imported run's Tools from a directory they name.
ALTER TABLE runs ADD COLUMN imported_ms BIGINT;
