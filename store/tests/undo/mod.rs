//! SQL that takes a store's database back to before a migration, as a
//! database written by an older build would be: the migration tests undo
//! one and open the store again, which applies it with its backfill.
#![allow(dead_code)] // Each test file uses some of them.

/// Undoes migration 15 on a SQLite store's database (its triggers and
/// index name `flow_id`, which migration 10 added), and migration 19,
/// which rebuilt its counters per namespace (the namespace columns and
/// their indexes go too: every run is in `default` when it comes back).
pub const UNDO_15_SQLITE: &str = "DROP TRIGGER run_counts_insert; DROP TRIGGER run_counts_update;
    DROP TRIGGER run_counts_delete; DROP TABLE run_counts; DROP INDEX runs_by_flow_created;
    DROP INDEX runs_by_namespace; DROP INDEX runs_by_namespace_state; DROP INDEX runs_by_namespace_flow;
    DROP INDEX waiting_calls_by_namespace_age; DROP INDEX waiting_calls_by_namespace_due;
    ALTER TABLE runs DROP COLUMN namespace; ALTER TABLE waiting_calls DROP COLUMN namespace;
    DELETE FROM schema_migrations WHERE version IN (15, 19);";

/// Undoes migrations 15 and 19 on a Postgres store's schema (dropping
/// the functions drops their triggers, the columns their indexes).
#[cfg(feature = "postgres")]
pub const UNDO_15_POSTGRES: &str =
    "DROP FUNCTION run_counts_inserted, run_counts_deleted, run_counts_moved CASCADE;
    DROP TABLE run_counts, run_count_deltas; DROP INDEX runs_by_flow_created;
    ALTER TABLE runs DROP COLUMN namespace; ALTER TABLE waiting_calls DROP COLUMN namespace;
    DELETE FROM schema_migrations WHERE version IN (15, 19);";

/// Undoes migration 10 on a store's database, as a database written before
/// it would be: no flow or fault column, no attributes, version 9 (run
/// after undoing the migrations that build on it).
pub const UNDO_10: &str =
    "DROP INDEX runs_by_flow; DROP INDEX runs_by_entry; DROP INDEX runs_by_created;
    DROP TABLE run_attrs; ALTER TABLE runs DROP COLUMN flow_id; ALTER TABLE runs DROP COLUMN fault;
    ALTER TABLE runs DROP COLUMN state_attrs;
    DELETE FROM schema_migrations WHERE version = 10;";
