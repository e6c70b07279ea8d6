-- Remote workers (docs/deploy.md "Workers"): the `flow worker` processes
-- connected to any server of the store, the declarations each serves, and
-- the Tool calls travelling to them. Host state beside the histories, never
-- inside them: a call's Call and Reply facts are the record; a row here is
-- how the call reaches a worker and its reply comes back.
CREATE TABLE workers (
    id TEXT PRIMARY KEY,           -- worker-<ulid>, given at registration
    name TEXT NOT NULL,            -- the worker's --name
    seen_ms INTEGER NOT NULL       -- last heard from (this host's clock, unix ms)
);
-- The declarations a worker serves, by identity and fingerprint.
CREATE TABLE worker_tools (
    worker TEXT NOT NULL,
    tool TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    resend INTEGER NOT NULL,       -- its binding says resend = true
    PRIMARY KEY (worker, tool)
);
CREATE INDEX worker_tools_by_decl ON worker_tools (tool, fingerprint);
-- One row per call sent through the queue, kept until its run ends.
-- worker NULL: queued; parked 1: its drive gave up waiting for a worker and
-- the run paused (handed out again once the run is resumed); worker set:
-- sent to it; outcome set: the reply admitted (or the host's decision for
-- a lost worker), once. cancel: 0 none, 1 asked, 2 the worker was told.
CREATE TABLE worker_calls (
    run TEXT NOT NULL,
    call TEXT NOT NULL,
    tool TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    args TEXT NOT NULL,            -- canonical JSON object
    queued_ms INTEGER NOT NULL,
    worker TEXT,
    resend INTEGER NOT NULL DEFAULT 0,
    cancel INTEGER NOT NULL DEFAULT 0,
    parked INTEGER NOT NULL DEFAULT 0,
    outcome TEXT,                  -- canonical JSON outcome
    PRIMARY KEY (run, call)
) WITHOUT ROWID;
-- Small on purpose: a call queued, claimed and answered touches as few
-- pages as it can (the queued index only while it waits, the cancels
-- index only when it is cancelled).
CREATE INDEX worker_calls_queued ON worker_calls (tool, fingerprint, queued_ms) WHERE worker IS NULL;
CREATE INDEX worker_calls_cancels ON worker_calls (worker) WHERE cancel = 1;
