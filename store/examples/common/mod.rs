//! What the Postgres examples share: the fsync probe they print beside
//! their figures, and SQL on a connection of their own.

use std::io::Write;
use std::time::{Duration, Instant};

/// p50 of `samples` fsyncs of a one-byte write to a file under the temp
/// directory, µs.
pub fn fsync_us(samples: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = std::fs::File::create(dir.path().join("probe")).expect("probe");
    median_us((0..samples).map(|_| {
        let t = Instant::now();
        f.write_all(b"x").expect("write");
        f.sync_all().expect("fsync");
        t.elapsed()
    }))
}

/// The median of `times`, µs.
pub fn median_us(times: impl Iterator<Item = Duration>) -> f64 {
    let mut v: Vec<Duration> = times.collect();
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

/// Runs SQL on a connection of its own.
pub fn run_sql(url: &str, text: &str) {
    on_connection(url, |rt, client| {
        rt.block_on(client.batch_execute(text)).expect("SQL")
    })
}

/// `f` with a connection of its own to `url`, on a runtime of its own.
pub fn on_connection<T>(
    url: &str,
    f: impl FnOnce(&tokio::runtime::Runtime, &tokio_postgres::Client) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (client, conn) = rt
        .block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))
        .expect("connect");
    let driver = rt.spawn(conn);
    let out = f(&rt, &client);
    drop(client);
    let _ = rt.block_on(driver);
    out
}
