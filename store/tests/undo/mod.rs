//! SQL that takes a store's database back to before a migration, as a
//! database written by an older build would be: the migration tests undo
//! one and open the store again, which applies it with its backfill.
#![allow(dead_code)] // Each test file uses some of them.

/// Undoes migration 15 on a SQLite store's database (its triggers and
/// index name `flow_id`, which migration 10 added).
pub const UNDO_15_SQLITE: &str = "DROP TRIGGER run_counts_insert; DROP TRIGGER run_counts_update;
    DROP TRIGGER run_counts_delete; DROP TABLE run_counts; DROP INDEX runs_by_flow_created;
    DELETE FROM schema_migrations WHERE version = 15;";

/// Undoes migration 15 on a Postgres store's schema (dropping the
/// functions drops their triggers).
#[cfg(feature = "postgres")]
pub const UNDO_15_POSTGRES: &str =
    "DROP FUNCTION run_counts_inserted, run_counts_deleted, run_counts_moved CASCADE;
    DROP TABLE run_counts, run_count_deltas; DROP INDEX runs_by_flow_created;
    DELETE FROM schema_migrations WHERE version = 15;";

/// Undoes migration 10 on a store's database, as a database written before
/// it would be: no flow or fault column, no attributes, version 9 (run
/// after undoing the migrations that build on it).
pub const UNDO_10: &str =
    "DROP INDEX runs_by_flow; DROP INDEX runs_by_entry; DROP INDEX runs_by_created;
    DROP TABLE run_attrs; ALTER TABLE runs DROP COLUMN flow_id; ALTER TABLE runs DROP COLUMN fault;
    ALTER TABLE runs DROP COLUMN state_attrs;
    DELETE FROM schema_migrations WHERE version = 10;";
