-- Who drives each run now (docs/deploy.md "Leases"): one row per run being
-- driven, claimed by a server (`holder`: its node name and instance), valid
-- until `expires_ms` (the database's clock, unix ms, so servers' clocks
-- never disagree) and renewed while the drive goes on. `epoch` counts the
-- claims of the row, so a late release or renewal of an older claim changes
-- nothing. A paused or ended run has no row; a running run whose row
-- expired is taken over by another server (FOR UPDATE SKIP LOCKED).
CREATE TABLE leases (
    run TEXT COLLATE "C" PRIMARY KEY,
    holder TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX leases_by_expiry ON leases (expires_ms);
