//! Failover time (issue 12 §5): from `kill -9` of the server driving a run
//! to the next durable fact of that run, written by the other server.
//!
//! Workload: two `flow serve --postgres` processes on one fresh schema
//! (database `test` at 127.0.0.1:5432, or `FLOW_TEST_POSTGRES`), the
//! triage example's Tools bound with `resend = true`. Per round: a new
//! server A starts a triage run whose Python Tool answers only after a
//! minute; once the Call is durable, A is killed with SIGKILL; the
//! survivor B (driving nothing else) takes the run over when the lease
//! expires, resends the call (answered at once there) and appends the
//! Reply. The time measured is kill → that Reply visible through B's API
//! (polled every 10 ms). It is bounded by the lease time plus B's scan
//! interval (min(1 s, lease/4)) plus one resume.
//!
//! Run: `cargo bench -p flowd --bench failover` (any profile; the time is
//! the lease's, not the code's: `cargo bench --profile dev` avoids a
//! release build). `FLOW_BENCH_LEASE_SECONDS` (default 10, the server's
//! default) and `FLOW_BENCH_KILLS` (default 10).

#[path = "../../tests/common/mod.rs"]
mod common;

use flowd::client::{self, Client};
use flowd::http::facts::FactsQuery;
use flowd::http::start::StartRequest;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(
    data: &Path,
    url: &str,
    schema: &str,
    lease: &str,
    tools: &Path,
    env: &[(&str, &str)],
) -> Server {
    let (child, base) = common::serve_args(
        data,
        Some(tools),
        env,
        &[
            "--postgres",
            url,
            "--postgres-schema",
            schema,
            "--lease-seconds",
            lease,
        ],
    );
    Server(child, base)
}

/// The processes whose parent is `pid` (A's Tool processes, which its
/// SIGKILL leaves behind; ended by PID after the round).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces, so split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid)
            && let Ok(child) = e.file_name().to_string_lossy().parse()
        {
            out.push(child);
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A client of the server at `base`.
fn client(base: &str) -> Client {
    let options = client::Options {
        timeout: Duration::from_secs(30),
        env_proxy: false,
    };
    Client::new(base, None, options).expect("client")
}

/// How many facts `run` has on the server `c` speaks to.
async fn facts(c: &Client, run: &str) -> usize {
    let q = FactsQuery {
        limit: Some(200),
        ..FactsQuery::default()
    };
    c.list_facts(run, &q).await.expect("GET facts").facts.len()
}

fn main() {
    let db = common::Schema::new().expect("a Postgres to measure on (FLOW_TEST_POSTGRES)");
    let (url, schema) = (db.url.clone(), db.name.clone());
    let lease = env_u64("FLOW_BENCH_LEASE_SECONDS", 10).to_string();
    let kills = env_u64("FLOW_BENCH_KILLS", 10).max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let triage = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage");
    let tools = dir.path().join("flow.toml");
    std::fs::write(
        &tools,
        format!(
            "[tools.\"triage.json\"]\ncommand = \"python3 {}\"\nresend = true\n\n[tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
            triage.join("triage_tools.py").display()
        ),
    )
    .expect("flow.toml");
    let flow: Value = serde_json::from_str(
        &std::fs::read_to_string(triage.join("triage.json")).expect("triage.json"),
    )
    .expect("triage flow");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let b_data = tempfile::tempdir().expect("temp dir");
    let b = serve(b_data.path(), &url, &schema, &lease, &tools, &[]);
    let to_b = client(&b.1);
    let mut times = Vec::new();
    for round in 0..kills {
        let a_data = tempfile::tempdir().expect("temp dir");
        let mut a = serve(
            a_data.path(),
            &url,
            &schema,
            &lease,
            &tools,
            &[("TRIAGE_DELAY_MS", "60000")],
        );
        let t = rt.block_on(async {
            let to_a = client(&a.1);
            let start = StartRequest {
                flow: flow.clone(),
                modules: None,
                name: Some("triage.json".into()),
                input: json!({"ticket": "site down", "customer": "Acme"}),
                wait: None,
                namespace: None,
            };
            let run = to_a.start_run(&start).await.expect("start").run;
            while facts(&to_a, &run).await < 4 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let tools = children(a.0.id());
            a.0.kill().expect("kill -9");
            let killed = Instant::now();
            a.0.wait().expect("wait");
            for pid in tools {
                let _ = std::process::Command::new("kill")
                    .arg(pid.to_string())
                    .status();
            }
            while facts(&to_b, &run).await < 5 {
                assert!(
                    killed.elapsed() < Duration::from_secs(120),
                    "no takeover within 120 s"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            killed.elapsed()
        });
        eprintln!("kill {}: next durable fact after {t:?}", round + 1);
        times.push(t);
        drop(a);
    }
    drop(b);
    drop(db);
    times.sort();
    println!(
        "failover (lease {lease} s, {kills} kills): p50 {:?}, p99 {:?}, min {:?}, max {:?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[0],
        times[times.len() - 1]
    );
}
