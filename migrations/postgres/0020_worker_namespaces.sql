-- Workers confined to namespaces (issue 40 item 4), Postgres dialect: the
-- same as migrations/sqlite/0020_worker_namespaces.sql. One row per
-- namespace a worker serves, or '*' for every one.
CREATE TABLE worker_namespaces (
    worker    TEXT COLLATE "C" NOT NULL,
    namespace TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (worker, namespace)
);
INSERT INTO worker_namespaces (worker, namespace)
SELECT id, CASE WHEN owner = '' THEN '*' ELSE 'default' END FROM workers;
