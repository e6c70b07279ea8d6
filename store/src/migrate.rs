//! Schema migrations (STYLE rule 11), one numbered list per backend with the
//! same versions and names (`migrations/sqlite/`, `migrations/postgres/`).
//! Each backend records applied versions in `schema_migrations(version,
//! name, checksum, applied_ms)`; the rules for what is applied or refused
//! live here.

use crate::error::{Error, Result};
use crate::hash::{blob_hash, hash_text};

/// `(version, name, sql)`.
pub(crate) type Migration = (i64, &'static str, &'static str);

pub(crate) const SQLITE: &[Migration] = &[
    (
        1,
        "init",
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "memory",
        include_str!("../../migrations/sqlite/0002_memory.sql"),
    ),
    (
        3,
        "runs_by_updated",
        include_str!("../../migrations/sqlite/0003_runs_by_updated.sql"),
    ),
    (
        4,
        "imported_runs",
        include_str!("../../migrations/sqlite/0004_imported_runs.sql"),
    ),
    (
        5,
        "leases",
        include_str!("../../migrations/sqlite/0005_leases.sql"),
    ),
    (
        6,
        "workers",
        include_str!("../../migrations/sqlite/0006_workers.sql"),
    ),
    (
        7,
        "runs_by_state_change",
        include_str!("../../migrations/sqlite/0007_runs_by_state_change.sql"),
    ),
    (
        8,
        "runs_by_parent",
        include_str!("../../migrations/sqlite/0008_runs_by_parent.sql"),
    ),
    (
        9,
        "worker_owner",
        include_str!("../../migrations/sqlite/0009_worker_owner.sql"),
    ),
    (
        10,
        "run_query",
        include_str!("../../migrations/sqlite/0010_run_query.sql"),
    ),
    (
        11,
        "host_timing",
        include_str!("../../migrations/sqlite/0011_host_timing.sql"),
    ),
    (
        12,
        "deletion",
        include_str!("../../migrations/sqlite/0012_deletion.sql"),
    ),
    (
        13,
        "waiting_calls",
        include_str!("../../migrations/sqlite/0013_waiting_calls.sql"),
    ),
    (
        14,
        "recoveries",
        include_str!("../../migrations/sqlite/0014_recoveries.sql"),
    ),
    (
        15,
        "run_counts",
        include_str!("../../migrations/sqlite/0015_run_counts.sql"),
    ),
    (
        16,
        "runs_by_flow_started",
        include_str!("../../migrations/sqlite/0016_runs_by_flow_started.sql"),
    ),
    (
        17,
        "data_keys",
        include_str!("../../migrations/sqlite/0017_data_keys.sql"),
    ),
    (
        18,
        "holes",
        include_str!("../../migrations/sqlite/0018_holes.sql"),
    ),
    (
        19,
        "namespaces",
        include_str!("../../migrations/sqlite/0019_namespaces.sql"),
    ),
    (
        20,
        "worker_namespaces",
        include_str!("../../migrations/sqlite/0020_worker_namespaces.sql"),
    ),
    (
        21,
        "facts_unchecked_keys",
        include_str!("../../migrations/sqlite/0021_facts_unchecked_keys.sql"),
    ),
];

#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: &[Migration] = &[
    (
        1,
        "init",
        include_str!("../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "memory",
        include_str!("../../migrations/postgres/0002_memory.sql"),
    ),
    (
        3,
        "runs_by_updated",
        include_str!("../../migrations/postgres/0003_runs_by_updated.sql"),
    ),
    (
        4,
        "imported_runs",
        include_str!("../../migrations/postgres/0004_imported_runs.sql"),
    ),
    (
        5,
        "leases",
        include_str!("../../migrations/postgres/0005_leases.sql"),
    ),
    (
        6,
        "workers",
        include_str!("../../migrations/postgres/0006_workers.sql"),
    ),
    (
        7,
        "runs_by_state_change",
        include_str!("../../migrations/postgres/0007_runs_by_state_change.sql"),
    ),
    (
        8,
        "runs_by_parent",
        include_str!("../../migrations/postgres/0008_runs_by_parent.sql"),
    ),
    (
        9,
        "worker_owner",
        include_str!("../../migrations/postgres/0009_worker_owner.sql"),
    ),
    (
        10,
        "run_query",
        include_str!("../../migrations/postgres/0010_run_query.sql"),
    ),
    (
        11,
        "host_timing",
        include_str!("../../migrations/postgres/0011_host_timing.sql"),
    ),
    (
        12,
        "deletion",
        include_str!("../../migrations/postgres/0012_deletion.sql"),
    ),
    (
        13,
        "waiting_calls",
        include_str!("../../migrations/postgres/0013_waiting_calls.sql"),
    ),
    (
        14,
        "recoveries",
        include_str!("../../migrations/postgres/0014_recoveries.sql"),
    ),
    (
        15,
        "run_counts",
        include_str!("../../migrations/postgres/0015_run_counts.sql"),
    ),
    (
        16,
        "runs_by_flow_started",
        include_str!("../../migrations/postgres/0016_runs_by_flow_started.sql"),
    ),
    (
        17,
        "data_keys",
        include_str!("../../migrations/postgres/0017_data_keys.sql"),
    ),
    (
        18,
        "holes",
        include_str!("../../migrations/postgres/0018_holes.sql"),
    ),
    (
        19,
        "namespaces",
        include_str!("../../migrations/postgres/0019_namespaces.sql"),
    ),
    (
        20,
        "worker_namespaces",
        include_str!("../../migrations/postgres/0020_worker_namespaces.sql"),
    ),
    (
        21,
        "facts_unchecked_keys",
        include_str!("../../migrations/postgres/0021_facts_unchecked_keys.sql"),
    ),
];

/// The checksum recorded with a migration: blake3 of its SQL.
pub(crate) fn checksum(sql: &str) -> String {
    hash_text(&blob_hash(sql.as_bytes()))
}

/// Checks the recorded `(version, checksum)` rows against this build's
/// list and returns the migrations still to apply, in order. A database
/// that is newer than this build, or whose applied migration was edited,
/// is refused.
pub(crate) fn pending<'a>(
    known: &'a [Migration],
    applied: &[(i64, String)],
) -> Result<Vec<&'a Migration>> {
    for (version, sum) in applied {
        match known.iter().find(|(v, _, _)| v == version) {
            None => {
                return Err(Error::Schema(format!(
                    "database has schema version {version}, newer than this build"
                )));
            }
            Some((_, name, sql)) if checksum(sql) != *sum => {
                return Err(Error::Schema(format!(
                    "applied migration {version} ({name}) differs from this build's"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(known
        .iter()
        .filter(|(v, _, _)| !applied.iter().any(|(a, _)| a == v))
        .collect())
}

/// The schema version a list writes.
pub(crate) fn latest(known: &[Migration]) -> i64 {
    known.iter().map(|(v, _, _)| *v).max().unwrap_or(0)
}
