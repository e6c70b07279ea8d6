//! Folding the run counters' deltas (migration 0015, docs/store.md "Run
//! counts"). The triggers on `runs` only insert signed deltas, so servers
//! committing at once never queue on one hot counter row; each server's
//! writer moves them into the base rows every [`FOLD_EVERY`] commands and
//! at open, which keeps the deltas a reader sums to a few thousand rows.

use tokio_postgres::Client;

/// Commands a writer commits between two folds: each adds at most two
/// delta rows (a state change), a group of creates one per (flow, state).
pub(super) const FOLD_EVERY: usize = 1_000;

/// Moves every committed delta into `run_counts`, in one statement (one
/// transaction: a reader sees the deltas or their sum, never both). A
/// transaction-level advisory lock per schema, tried and not waited for,
/// lets one server fold at a time; the others skip (the deltas stay
/// counted meanwhile). The base rows are written in key order, so two
/// folds never deadlock even without the lock.
///
/// Then the server that folded vacuums both tables: every delta is
/// deleted soon after it is written, and a reader scans the whole delta
/// table, dead rows' pages included, until a vacuum frees them (measured:
/// 32.8 ms per count after 100,000 runs on a server with autovacuum off,
/// 0.67 ms vacuumed). Not left to autovacuum, which may be off or a minute
/// away. `TRUNCATE false`: giving the emptied pages back would take an
/// exclusive lock that every trigger's insert, so every commit, waits
/// for; kept, they are reused. A vacuum that fails (a role that does not
/// own the tables) leaves that work to autovacuum.
pub(super) async fn fold(client: &Client) -> Result<(), tokio_postgres::Error> {
    let moved = client
        .execute(
            "WITH lock AS (SELECT pg_try_advisory_xact_lock(hashtext('flow-store-counts:' || current_schema())) AS ok),
                  moved AS (DELETE FROM run_count_deltas WHERE (SELECT ok FROM lock) RETURNING namespace, has_flow, flow, state, delta)
             INSERT INTO run_counts (namespace, has_flow, flow, state, n)
             SELECT namespace, has_flow, flow, state, SUM(delta) FROM moved GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
             ON CONFLICT (namespace, has_flow, flow, state) DO UPDATE SET n = run_counts.n + excluded.n",
            &[],
        )
        .await?;
    if moved > 0 {
        let _ = client
            .batch_execute("VACUUM (TRUNCATE false) run_count_deltas, run_counts")
            .await;
    }
    Ok(())
}
