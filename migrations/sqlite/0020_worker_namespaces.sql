-- Workers confined to namespaces (issue 40 item 4, docs/custody.md
-- "Namespaces"): the namespaces each worker serves, its registering
-- token's (`ns=`), one row each, or one row '*' for every namespace (an
-- `ns=*` token's worker, or any worker of a server without tokens). A
-- queued call is handed only to a worker with a row for its run's
-- namespace (the runs index, which the claim already reads) or '*': two
-- point lookups of this key per candidate call.
CREATE TABLE worker_namespaces (
    worker    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    PRIMARY KEY (worker, namespace)
) WITHOUT ROWID;
-- A worker registered before now: one of a server without tokens (owner
-- '') served every namespace; one of a token serves `default`, where
-- every run was before 0019 and what a token line without `ns=` sees (an
-- `ns=*` token's worker serves the others once it registers again).
INSERT INTO worker_namespaces (worker, namespace)
SELECT id, CASE WHEN owner = '' THEN '*' ELSE 'default' END FROM workers;
