//! The stand-in for the file's `postgres` service (image `postgres:*`):
//! not the image, but the PostgreSQL the tests use (tests/common's
//! `pg_url()`, with a schema of the test's own), reached from every
//! namespace at the service's name and the image's port through a
//! forwarder on the bridge. The servers' command lines name the image's
//! database: each `--postgres=URL` is checked against what the image makes
//! of the service's `POSTGRES_*` environment (user, password, database;
//! so a password the servers and the database disagree on fails here) and
//! pointed at the test's database under the same host name; each
//! `--postgres-schema=NAME` is pointed at the test's schema.

use crate::common::Schema;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use tokio_postgres::config::{Config, Host};

/// The port the `postgres` image listens on.
pub const IMAGE_PORT: u16 = 5432;

pub struct StandIn {
    service: String,
    /// What the image creates from `POSTGRES_USER`, `POSTGRES_PASSWORD`,
    /// `POSTGRES_DB` (user and database default to `postgres`, the
    /// database to the user).
    user: String,
    password: String,
    db: String,
    /// The schema the servers name, once one has.
    file_schema: Option<String>,
    test: Config,
    pub schema: Schema,
}

impl StandIn {
    pub fn is_image(image: &str) -> bool {
        image.starts_with("postgres:")
    }

    pub fn new(service: &str, env: &BTreeMap<String, String>, schema: Schema) -> StandIn {
        let user = env
            .get("POSTGRES_USER")
            .cloned()
            .unwrap_or_else(|| "postgres".into());
        let password = env
            .get("POSTGRES_PASSWORD")
            .cloned()
            .unwrap_or_else(|| panic!("{service}: the postgres image needs POSTGRES_PASSWORD"));
        let db = env
            .get("POSTGRES_DB")
            .cloned()
            .unwrap_or_else(|| user.clone());
        StandIn {
            service: service.to_string(),
            user,
            password,
            db,
            file_schema: None,
            test: Config::from_str(&schema.url).expect("the test database's URL"),
            schema,
        }
    }

    /// Where the test's PostgreSQL listens (the forwarder's far end).
    pub fn target(&self) -> SocketAddr {
        let host = match self.test.get_hosts() {
            [Host::Tcp(h)] => h.clone(),
            other => panic!("the test database must be one TCP host, not {other:?}"),
        };
        let port = self.test.get_ports().first().copied().unwrap_or(5432);
        (host.as_str(), port)
            .to_socket_addrs()
            .expect("the test database's host resolves")
            .next()
            .unwrap()
    }

    /// `arg` of a server's command line, pointed at the stand-in.
    pub fn rewrite(&mut self, arg: &str) -> String {
        assert!(
            arg != "--postgres" && arg != "--postgres-schema",
            "write {arg}=VALUE in docker-compose.yml (tests/compose/postgres.rs reads that form)"
        );
        if let Some(url) = arg.strip_prefix("--postgres=") {
            return format!("--postgres={}", self.url(url));
        }
        if let Some(name) = arg.strip_prefix("--postgres-schema=") {
            let first = self.file_schema.get_or_insert_with(|| name.to_string());
            assert_eq!(first, name, "the servers must share one schema");
            return format!("--postgres-schema={}", self.schema.name);
        }
        arg.to_string()
    }

    fn url(&self, url: &str) -> String {
        let c = Config::from_str(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(
            c.get_hosts(),
            [Host::Tcp(self.service.clone())],
            "{url}: the database is the {} service",
            self.service
        );
        assert_eq!(
            c.get_ports().first().copied().unwrap_or(5432),
            IMAGE_PORT,
            "{url}"
        );
        assert_eq!(
            c.get_user(),
            Some(self.user.as_str()),
            "{url}: POSTGRES_USER"
        );
        assert_eq!(
            c.get_password(),
            Some(self.password.as_bytes()),
            "{url}: POSTGRES_PASSWORD"
        );
        assert_eq!(c.get_dbname(), Some(self.db.as_str()), "{url}: POSTGRES_DB");
        let user = self.test.get_user().expect("the test database's user");
        let password = self
            .test
            .get_password()
            .map(|p| format!(":{}", String::from_utf8_lossy(p)))
            .unwrap_or_default();
        let db = self.test.get_dbname().unwrap_or(user);
        format!(
            "postgres://{user}{password}@{}:{IMAGE_PORT}/{db}",
            self.service
        )
    }
}
