-- The facts' and host records' `run_key` without a foreign key (issue 42):
-- checked once per row, a key check is a query of its own inside every
-- commit. The writer inserts both through a join on `runs` (a row whose run
-- is not there is not written, and the batch's count check then fails it),
-- and a deletion removes a run's facts and host records before its row in
-- one transaction (store/src/postgres/delete.rs), as it does for
-- `blob_refs`, `holes` and `waiting_calls`, which never had one.
ALTER TABLE facts DROP CONSTRAINT IF EXISTS facts_run_key_fkey;
ALTER TABLE host_records DROP CONSTRAINT IF EXISTS host_records_run_key_fkey;
