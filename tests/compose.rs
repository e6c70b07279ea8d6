//! Issue 36 item 5, "the compose file runs": docker-compose.yml itself,
//! read and run as compose would run it, without Docker.
//!
//! The test parses the file (tests/compose/file.rs), gives every service a
//! network namespace of its own on one bridge, reachable from the others
//! by its service name (tests/compose/net.rs), and starts each service's
//! exact command line in it, in compose's order, each after the health
//! checks of the services it depends on pass — the health checks being
//! the file's own commands, run inside the service's namespace. The
//! `flowd:local` image is the `flow` binary under test with the image's
//! paths mapped by one table checked against the Dockerfile
//! (tests/compose/image.rs); the `postgres` service is the tests'
//! PostgreSQL under the service's name (tests/compose/postgres.rs). The
//! published ports are forwarded from the host's loopback (on free ports
//! rather than the file's, so the test never collides with anything).
//!
//! Then the triage quickstart runs through `flow1`, its classifier served
//! by the `worker` (connected to `flow2` only), and its review is answered
//! through `flow2`; the run completes, replays matched on both servers, and
//! no service exited meanwhile (compose's `restart` would hide a crash
//! loop; the test does not restart anything).
//!
//! Needs root and `ip` (iproute2); without them the test prints
//! `skipped: <test> (<why>)` and returns.

mod common;
#[path = "compose/file.rs"]
mod file;
#[path = "compose/image.rs"]
mod image;
#[path = "compose/net.rs"]
mod net;
#[path = "compose/postgres.rs"]
mod postgres;

use file::{ComposeFile, Condition, Port};
use image::Container;
use net::Net;
use postgres::StandIn;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn compose_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docker-compose.yml")
}

/// Says why a test did not run, past the test harness's capture (a
/// skipped test must be seen).
fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "skipped: {test} ({why})");
}

/// The file as `docker compose up` reads it from a shell with none of its
/// variables set (so every `${VAR:-default}` takes its default).
fn read_file() -> ComposeFile {
    let text = std::fs::read_to_string(compose_path()).unwrap();
    ComposeFile::parse(&text, &BTreeMap::new())
}

/// The file's services up: the stand-in database, then the rest in
/// compose's order, each started once its dependencies are healthy, each
/// healthy before `up` returns. Dropping it kills the processes, then
/// removes the network, then the database schema (field order).
struct Cluster {
    containers: Vec<Container>,
    /// Removed once the processes are gone.
    _net: Net,
    /// Held for its schema, dropped last.
    _db: StandIn,
    /// Service → where the test reaches the one port it publishes.
    published: BTreeMap<String, SocketAddr>,
}

impl Cluster {
    async fn up(file: &ComposeFile, mut net: Net, schema: common::Schema) -> Cluster {
        image::check_dockerfile();
        let mut db = None;
        let mut hosts: Vec<(String, Ipv4Addr)> = Vec::new();
        for (name, s) in &file.services {
            if StandIn::is_image(&s.image) {
                assert!(db.is_none(), "one postgres service");
                db = Some(name.clone());
                hosts.push((name.clone(), net.gateway()));
            } else {
                let built = file.services.values().find(|b| b.build.is_some());
                assert!(
                    built.is_some_and(|b| b.image == s.image && b.build.as_deref() == Some(".")),
                    "{name}: the test runs only postgres and the image the top Dockerfile builds"
                );
                hosts.push((name.clone(), net.add(name)));
            }
        }
        net.write_hosts(&hosts);
        let db_service = db.expect("a postgres service");
        let mut db = StandIn::new(&db_service, &file.services[&db_service].environment, schema);
        net.forward(
            SocketAddr::from((net.gateway(), postgres::IMAGE_PORT)),
            db.target(),
        )
        .await;

        let mut containers: Vec<Container> = Vec::new();
        let mut published = BTreeMap::new();
        for name in file.start_order() {
            if name == db_service {
                continue; // Schema::new checked it answers.
            }
            let s = &file.services[name];
            for (dep, d) in &s.depends_on {
                if d.condition == Condition::ServiceHealthy && *dep != db_service {
                    let hc = file.services[dep]
                        .healthcheck
                        .as_ref()
                        .unwrap_or_else(|| panic!("{name} waits for {dep}'s health check"));
                    let c = containers.iter_mut().find(|c| c.service == *dep).unwrap();
                    c.wait_healthy(&net, hc).await;
                }
            }
            let command: Vec<String> = s
                .command
                .iter()
                .map(|a| image::map_paths(&db.rewrite(a)))
                .collect();
            containers.push(Container::start(&net, name, &command, &s.environment));
            let addr = hosts.iter().find(|(n, _)| n == name).unwrap().1;
            for p in s.ports.iter().map(|p| Port::parse(p)) {
                assert_eq!(
                    p.host_ip.as_deref(),
                    Some("127.0.0.1"),
                    "{name} publishes {p:?} beyond the host's loopback"
                );
                let local = net
                    .forward(
                        SocketAddr::from(([127, 0, 0, 1], 0)),
                        SocketAddr::from((addr, p.container_port)),
                    )
                    .await;
                let before = published.insert(name.to_string(), local);
                assert!(
                    before.is_none(),
                    "{name}: the test reaches one published port"
                );
            }
        }
        for c in &mut containers {
            if let Some(hc) = &file.services[&c.service].healthcheck {
                c.wait_healthy(&net, hc).await;
            }
        }
        Cluster {
            containers,
            _net: net,
            _db: db,
            published,
        }
    }

    /// `http://127.0.0.1:PORT/path` on `service`'s published port.
    fn url(&self, service: &str, path: &str) -> String {
        let addr = self.published[service];
        format!("http://{addr}{path}")
    }

    /// Panics naming every service that has exited, with its logs.
    fn assert_all_running(&mut self) {
        let mut dead = String::new();
        for c in &mut self.containers {
            if let Some(status) = c.exited() {
                dead.push_str(&format!("{} exited ({status})\n{}\n", c.service, c.logs()));
            }
        }
        assert!(dead.is_empty(), "{dead}");
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = c.post(&url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn paused_at_review(v: &Value) -> bool {
    v["state"] == "paused" && v["pending"][0]["tool"] == "std/human#input"
}

const TEST: &str = "the_compose_file_runs_the_quickstart_across_its_servers";

/// Issue 36 item 5: docker-compose.yml's services, each in its own
/// network namespace, run the triage quickstart started on `flow1`, its
/// classifier served by the worker on `flow2`, its review answered on
/// `flow2`; every service healthy by its own check, none exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_file_runs_the_quickstart_across_its_servers() {
    let net = match Net::new() {
        Ok(n) => n,
        Err(why) => return skip(TEST, &why),
    };
    let Some(schema) = common::Schema::new() else {
        return skip(TEST, "FLOW_TEST_POSTGRES=skip");
    };
    let mut cluster = Cluster::up(&read_file(), net, schema).await;
    let c = client();
    let (one, two) = ("flow1", "flow2");

    // The worker registered on flow2 is seen by flow1 (through the
    // database), named as the file names it.
    let workers = common::get_json(&c, cluster.url(one, "/v1/workers")).await;
    assert!(
        workers["workers"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["name"] == "worker")),
        "{workers}"
    );

    let flow: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/triage/triage.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let (status, v) = post(
        &c,
        cluster.url(one, "/v1/runs"),
        json!({"flow": flow, "name": "triage.json", "wait": 10,
               "input": {"ticket": "The site is down for all our users!", "customer": "Acme"}}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let run = v["run"].as_str().unwrap().to_string();
    // The classifier's call goes out at the worker (on flow2) through the
    // database's queue; the run pauses at its review.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut view = v;
    while !paused_at_review(&view) {
        assert!(
            Instant::now() < deadline,
            "the run never reached its review: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        view = common::get_json(&c, cluster.url(one, &format!("/v1/runs/{run}"))).await;
    }
    let facts = common::get_json(
        &c,
        cluster.url(two, &format!("/v1/runs/{run}/facts?limit=200")),
    )
    .await;
    let classified: Vec<&Value> = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "Reply" && f["fact"]["call"] == "c1:root#1")
        .map(|f| &f["fact"]["outcome"])
        .collect();
    assert_eq!(
        classified,
        [&json!({"Ok": {"category": "outage", "severity": "high"}})],
        "the worker's classification, once"
    );

    // The review, answered through the other server.
    let review = view["pending"][0]["call"].as_str().unwrap();
    let (status, done) = post(
        &c,
        cluster.url(two, &format!("/v1/runs/{run}/resume")),
        json!({"call": review, "reply": {"Ok": {"decision": "send"}}, "wait": 10}),
    )
    .await;
    assert_eq!(
        (status, done["state"].as_str()),
        (202, Some("completed")),
        "{done}"
    );
    for server in [one, two] {
        let (_, verdict) = post(
            &c,
            cluster.url(server, &format!("/v1/runs/{run}/replay")),
            json!({}),
        )
        .await;
        assert_eq!(verdict["verdict"], "matched", "{server}: {verdict}");
    }
    cluster.assert_all_running();
}

/// `docker compose config` (or Debian's `docker-compose config`) accepts
/// the file, where one is installed; otherwise the test says it skipped.
#[test]
fn the_compose_file_validates() {
    const TEST: &str = "the_compose_file_validates";
    let file = compose_path();
    let candidates: [&[&str]; 2] = [&["docker", "compose"], &["docker-compose"]];
    for argv in candidates {
        let Ok(version) = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .arg("version")
            .output()
        else {
            continue;
        };
        if !version.status.success() {
            continue;
        }
        let out = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .arg("-f")
            .arg(&file)
            .args(["config", "-q"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} config: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    skip(
        TEST,
        "neither `docker compose` nor `docker-compose` is installed",
    );
}

/// Whatever `FLOWD_DB_PASSWORD` the operator sets, the servers' database
/// URL and the database's own password are the same (read as compose
/// reads the file; no namespaces needed).
#[test]
fn the_servers_and_the_database_agree_on_the_password() {
    let vars = BTreeMap::from([("FLOWD_DB_PASSWORD".to_string(), "s3cret".to_string())]);
    let file = ComposeFile::parse(&std::fs::read_to_string(compose_path()).unwrap(), &vars);
    let db = file
        .services
        .values()
        .find(|s| StandIn::is_image(&s.image))
        .expect("a postgres service");
    assert_eq!(db.environment["POSTGRES_PASSWORD"], "s3cret");
    let mut servers = 0;
    for (name, s) in &file.services {
        for url in s
            .command
            .iter()
            .filter_map(|a| a.strip_prefix("--postgres="))
        {
            let c: tokio_postgres::Config = url.parse().unwrap();
            assert_eq!(c.get_password(), Some(&b"s3cret"[..]), "{name}: {url}");
            servers += 1;
        }
    }
    assert_eq!(servers, 2, "flow1 and flow2 name the database");
}

/// `docker stop` (a rolling update of the compose services) sends SIGTERM,
/// then SIGKILL after the service's `stop_grace_period`: every flowd
/// service, server or worker, gives its drain (`--drain-seconds`, default
/// 30) that long and more, so a stop is a drain, not a kill -9 (issue 36).
#[test]
fn every_flowd_service_is_given_time_to_drain() {
    let file = read_file();
    let mut flowd = 0;
    for (name, s) in &file.services {
        if StandIn::is_image(&s.image) {
            continue;
        }
        flowd += 1;
        let drain: u64 = s
            .command
            .iter()
            .find_map(|a| a.strip_prefix("--drain-seconds="))
            .map_or(30, |n| n.parse().unwrap());
        let grace = s.stop_grace_period.as_deref().unwrap_or_else(|| {
            panic!("{name}: no stop_grace_period (compose's default 10s cuts a drain short)")
        });
        let grace: u64 = grace
            .strip_suffix('s')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                panic!("{name}: stop_grace_period {grace:?}: write it in seconds, as 45s")
            });
        assert!(
            grace > drain,
            "{name}: stop_grace_period {grace}s does not outlast --drain-seconds {drain}"
        );
    }
    assert_eq!(flowd, 3, "flow1, flow2 and the worker");
}
