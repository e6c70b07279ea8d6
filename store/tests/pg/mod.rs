//! Shared by the Postgres tests: a fresh schema per store in database
//! `test` on `postgres://postgres@127.0.0.1:5432/test` (or
//! `FLOW_TEST_POSTGRES`), dropped when the guard is dropped — also when a
//! test fails, since the guard drops while the panic unwinds.

#![allow(dead_code)]

use flow_store::{PostgresOptions, PostgresStore};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The server's URL, or `None` when `FLOW_TEST_POSTGRES=skip`.
pub fn url() -> Option<String> {
    match std::env::var("FLOW_TEST_POSTGRES") {
        Ok(v) if v == "skip" => None,
        Ok(v) if !v.is_empty() => Some(v),
        _ => Some(DEFAULT_URL.to_string()),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs SQL on a connection of its own (outside any store).
pub fn sql(url: &str, schema: Option<&str>, text: &str) -> Result<(), String> {
    runtime().block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| {
                let cause = std::error::Error::source(&e)
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                format!("{e}{cause}")
            })?;
        let driver = tokio::spawn(conn);
        let text = match schema {
            Some(s) => format!("SET search_path = {s}; {text}"),
            None => text.to_string(),
        };
        let r = client
            .batch_execute(&text)
            .await
            .map_err(|e| format!("{e}: {:?}", e.as_db_error().map(|d| d.message())));
        drop(client);
        let _ = driver.await;
        r
    })
}

/// Schemas made by one test, dropped with it.
pub struct TestDb {
    pub url: String,
    schemas: Mutex<Vec<String>>,
}

impl TestDb {
    /// `None` (after saying so) when the tests are skipped; a panic saying
    /// how to start Postgres when it is unreachable.
    pub fn new() -> Option<TestDb> {
        let Some(url) = url() else {
            eprintln!("FLOW_TEST_POSTGRES=skip: Postgres test skipped");
            return None;
        };
        if let Err(e) = sql(&url, None, "SELECT 1") {
            panic!(
                "Postgres is not reachable at {url}: {e}\n\
                 Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n\
                 (check with: pg_isready -h 127.0.0.1), or point FLOW_TEST_POSTGRES at a server, \
                 or set FLOW_TEST_POSTGRES=skip to skip the Postgres tests."
            );
        }
        Some(TestDb {
            url,
            schemas: Mutex::new(Vec::new()),
        })
    }

    /// Options for a new, empty schema.
    pub fn options(&self) -> PostgresOptions {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let schema = format!("flow_test_{}_{i}_{nanos}", std::process::id());
        self.adopt(&schema);
        PostgresOptions {
            url: self.url.clone(),
            schema,
            keys: None,
        }
    }

    /// Drops `schema` with this guard too.
    pub fn adopt(&self, schema: &str) {
        if let Ok(mut s) = self.schemas.lock() {
            s.push(schema.to_string());
        }
    }

    /// A store in a new schema.
    pub fn store(&self) -> PostgresStore {
        PostgresStore::open(self.options()).expect("open a Postgres store")
    }

    /// Runs SQL inside `schema`.
    pub fn sql(&self, schema: &str, text: &str) {
        sql(&self.url, Some(schema), text).expect("SQL");
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let schemas = self.schemas.lock().map(|s| s.clone()).unwrap_or_default();
        for s in schemas {
            if let Err(e) = sql(
                &self.url,
                None,
                &format!("DROP SCHEMA IF EXISTS {s} CASCADE"),
            ) {
                eprintln!("could not drop schema {s}: {e}");
            }
        }
    }
}
