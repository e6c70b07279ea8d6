//! Connection settings and the migration runner.
//!
//! Every connection the store opens (writer, read pool, listener) is made
//! from one [`tokio_postgres::Config`] whose startup options set the
//! store's schema as `search_path` and `synchronous_commit = on`, so no
//! connection can be without them, whatever the server's defaults.

use super::PostgresOptions;
use crate::error::{Error, Result};
use crate::migrate;
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls};

/// Longest schema name: the notification channels `flow_facts:<schema>`
/// and `flow_workers:<schema>` must stay within Postgres's 63-byte
/// identifiers.
const MAX_SCHEMA: usize = 48;

/// Checks a schema name: lowercase letters, digits and `_`, not starting
/// with a digit, so it never needs quoting.
pub(super) fn check_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= MAX_SCHEMA
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit()
        && !schema.starts_with("pg_");
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "schema {schema:?}: use 1 to {MAX_SCHEMA} lowercase letters, digits or _, not starting with a digit or pg_"
        )))
    }
}

/// Where a config points, for messages (never the password).
pub(super) fn describe(cfg: &Config) -> String {
    let host = cfg
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let db = cfg
        .get_dbname()
        .or(cfg.get_user())
        .unwrap_or("postgres")
        .to_string();
    format!("{host}:{port}/{db}")
}

/// The config every connection of the store uses.
pub(super) fn config(opts: &PostgresOptions) -> Result<Config> {
    check_schema(&opts.schema)?;
    let mut cfg: Config = opts
        .url
        .parse()
        .map_err(|e| Error::InvalidArgument(format!("postgres URL: {e}")))?;
    cfg.options(format!(
        "-c search_path={} -c synchronous_commit=on",
        opts.schema
    ));
    // Names the store's connections in pg_stat_activity.
    cfg.application_name(format!("flow-store:{}", opts.schema));
    cfg.connect_timeout(Duration::from_secs(10));
    Ok(cfg)
}

/// Opens one connection and drives it on the current runtime.
pub(super) async fn connect(cfg: &Config) -> Result<Client> {
    let (client, conn) = cfg.connect(NoTls).await.map_err(|e| {
        let cause = std::error::Error::source(&e)
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        Error::Unavailable(format!(
            "cannot connect to Postgres at {}: {e}{cause}",
            describe(cfg)
        ))
    })?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; the
        // client then reports itself closed and its owner reconnects.
        let _ = conn.await;
    });
    Ok(client)
}

/// Checks the server, creates the schema if needed and applies the
/// migrations not yet recorded, each in its own transaction under an
/// advisory lock (several servers may open one schema at once).
pub(super) async fn migrate(client: &Client, schema: &str) -> Result<()> {
    let enc: String = client
        .query_one("SELECT current_setting('server_encoding')", &[])
        .await?
        .get(0);
    if enc != "UTF8" {
        return Err(Error::Schema(format!(
            "the database's encoding is {enc}; flow-store needs UTF8"
        )));
    }
    let lock = format!("flow-store:{schema}");
    loop {
        client.batch_execute("BEGIN").await?;
        let step = async {
            client
                .execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock])
                .await?;
            client
                .batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {schema};
                     CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
                        version BIGINT PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_ms BIGINT NOT NULL)"
                ))
                .await?;
            let applied: Vec<(i64, String)> = client
                .query(
                    "SELECT version, checksum FROM schema_migrations ORDER BY version",
                    &[],
                )
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let Some((version, name, sql)) = migrate::pending(migrate::POSTGRES, &applied)?
                .first()
                .copied()
            else {
                return Ok(false);
            };
            client.batch_execute(sql).await?;
            client
                .execute(
                    "INSERT INTO schema_migrations (version, name, checksum, applied_ms) VALUES ($1, $2, $3, $4)",
                    &[version, name, &migrate::checksum(sql), &crate::sqlite::now_ms()],
                )
                .await?;
            Ok::<bool, Error>(true)
        };
        match step.await {
            Ok(more) => {
                client.batch_execute("COMMIT").await?;
                if !more {
                    return Ok(());
                }
            }
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
    }
}

/// The schema version this build writes.
pub fn schema_version() -> i64 {
    migrate::latest(migrate::POSTGRES)
}
