-- Remote workers (docs/deploy.md "Workers"): the `flow worker` processes
-- connected to any server of the store, the declarations each serves, and
-- the Tool calls travelling to them. Host state beside the histories, never
-- inside them: a call's Call and Reply facts are the record; a row here is
-- how the call reaches a worker connected to any server and its reply
-- comes back to the server driving the run.
CREATE TABLE workers (
    id TEXT COLLATE "C" PRIMARY KEY,   -- worker-<ulid>, given at registration
    name TEXT NOT NULL,                -- the worker's --name
    seen_ms BIGINT NOT NULL            -- last heard from (the database's clock, unix ms)
);
-- The declarations a worker serves, by identity and fingerprint.
CREATE TABLE worker_tools (
    worker TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    resend BOOLEAN NOT NULL,           -- its binding says resend = true
    PRIMARY KEY (worker, tool)
);
CREATE INDEX worker_tools_by_decl ON worker_tools (tool, fingerprint);
-- One row per call sent through the queue, kept until its run ends.
-- worker NULL: queued; parked: its drive gave up waiting for a worker and
-- the run paused (handed out again once the run is resumed); worker set:
-- sent to it; outcome set: the reply admitted (or the host's decision for
-- a lost worker), once. cancel: 0 none, 1 asked, 2 the worker was told.
-- Claims take rows FOR UPDATE SKIP LOCKED.
CREATE TABLE worker_calls (
    run TEXT COLLATE "C" NOT NULL,
    call TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    args TEXT NOT NULL,                -- canonical JSON object, never jsonb
    queued_ms BIGINT NOT NULL,
    worker TEXT COLLATE "C",
    resend BOOLEAN NOT NULL DEFAULT FALSE,
    cancel SMALLINT NOT NULL DEFAULT 0,
    parked BOOLEAN NOT NULL DEFAULT FALSE,
    outcome TEXT,                      -- canonical JSON outcome
    PRIMARY KEY (run, call)
);
CREATE INDEX worker_calls_queued ON worker_calls (tool, fingerprint, queued_ms) WHERE worker IS NULL;
CREATE INDEX worker_calls_cancels ON worker_calls (worker) WHERE cancel = 1;
