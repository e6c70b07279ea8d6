//! The bench harness: what every row of a service bench needs, and nothing
//! about any one row — the scale read from the environment, an fsync probe,
//! the real `flow serve` as a child process spoken to through flowd's own
//! typed client (`flowd::client`), SSE, percentiles and the markdown
//! table.
//!
//! Rows live in the bench file (`service.rs`); new workloads (issue 16's
//! W1/W2, replay, SSE fan-out) are further functions that take a [`Server`]
//! and push rows to the [`Table`].

pub mod flows;

use flowd::client::{self, Client, RunEvent, causes};
use flowd::http::answers::{RunAnswer, RunView};
use flowd::http::fork::ForkRequest;
use flowd::http::listing::StateName;
use flowd::http::resume::ResumeRequest;
use flowd::http::sse::EventsQuery;
use flowd::http::start::StartRequest;
use serde_json::Value as Json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A number from the environment, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of numbers from the environment, or `default`.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .filter_map(|x| x.trim().replace('_', "").parse().ok())
            .collect(),
        _ => default.to_vec(),
    }
}

/// `FLOW_BENCH_SCALE=small` asks for a quick run (seconds, not minutes).
pub fn small() -> bool {
    std::env::var("FLOW_BENCH_SCALE").is_ok_and(|s| s == "small")
}

/// Whether row group `name` is selected by `FLOW_BENCH_ROWS` (a
/// comma-separated list; unset selects every group).
pub fn selected(name: &str) -> bool {
    match std::env::var("FLOW_BENCH_ROWS") {
        Ok(s) if !s.trim().is_empty() => s.split(',').any(|x| x.trim() == name),
        _ => true,
    }
}

/// Median µs of 200 × (write 4 KiB, fsync) in `dir`: the floor a durable
/// step waits for, reported beside every figure measured on the same disk.
pub fn fsync_probe(dir: &Path) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let block = vec![7u8; 4096];
    let p50 = fsync_p50(&mut f, |f, _| f.write_all(&block));
    let _ = std::fs::remove_file(&path);
    p50
}

/// Median µs of 200 × (overwrite 48 KiB in place, fsync) in `dir`: what a
/// step's commit waits for once SQLite's WAL has wrapped (three 16 KiB
/// frames written over blocks the file already has). [`fsync_probe`]
/// appends, so its fsync also writes the file's grown size and blocks, as
/// a WAL's first fill does.
pub fn fsync_overwrite_probe(dir: &Path) -> f64 {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fsync-overwrite-probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let frames = vec![7u8; 48 * 1024];
    let at = |i: u64| i * frames.len() as u64;
    for i in 0..PROBES {
        f.write_all_at(&frames, at(i)).expect("write");
    }
    f.sync_all().expect("fsync");
    let p50 = fsync_p50(&mut f, |f, i| f.write_all_at(&frames, at(i)));
    let _ = std::fs::remove_file(&path);
    p50
}

/// Writes and fsyncs a probe makes.
const PROBES: u64 = 200;

/// Median µs of [`PROBES`] × (`write(f, i)`, fsync).
fn fsync_p50(
    f: &mut std::fs::File,
    mut write: impl FnMut(&mut std::fs::File, u64) -> std::io::Result<()>,
) -> f64 {
    let mut times = Vec::new();
    for i in 0..PROBES {
        let t = Instant::now();
        write(f, i).expect("write");
        f.sync_all().expect("fsync");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Stats::of(&times).p50
}

/// The 1-minute load average (other work on the machine moves every
/// figure; the table notes it at the start and the end).
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Percentiles of a sample (nearest rank).
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Stats {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            if v.is_empty() {
                return f64::NAN;
            }
            let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i]
        };
        Stats {
            n: v.len(),
            p50: rank(0.5),
            p99: rank(0.99),
        }
    }

    /// `p50 1.23 ms · p99 4.56 ms (n = 20)`, from samples in ms.
    pub fn ms(&self) -> String {
        format!(
            "p50 {} · p99 {} ms (n = {})",
            fmt_ms(self.p50),
            fmt_ms(self.p99),
            self.n
        )
    }
}

/// Milliseconds with about three significant digits.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

/// Milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The result table, printed in markdown so it can go into a note as is.
#[derive(Default)]
pub struct Table {
    rows: Vec<[String; 3]>,
    notes: Vec<String>,
}

impl Table {
    pub fn row(&mut self, workload: impl Into<String>, figure: impl Into<String>, target: &str) {
        let row = [workload.into(), figure.into(), target.to_string()];
        eprintln!("  {} | {} | {}", row[0], row[1], row[2]);
        self.rows.push(row);
    }

    /// A line printed under the table (setup figures, skipped samples).
    pub fn note(&mut self, text: impl Into<String>) {
        let text = text.into();
        eprintln!("  note: {text}");
        self.notes.push(text);
    }

    pub fn print(&self) {
        println!("| workload | flowd (this run) | target |");
        println!("|---|---|---|");
        for [w, f, t] in &self.rows {
            println!("| {w} | {f} | {t} |");
        }
        if !self.notes.is_empty() {
            println!();
            for n in &self.notes {
                println!("- {n}");
            }
        }
    }
}

/// The directory of the release binaries: beside this bench's own
/// executable (`target/release/deps/service-…` → `target/release`).
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("target dir")
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .expect("repo root")
}

/// A running `flow serve`: the real release binary as a child process on
/// 127.0.0.1:0, its own data directory, its log in `serve.log` there.
/// Dropping it stops the server by its pid (SIGTERM, then SIGKILL).
pub struct Server {
    child: Child,
    pub base: String,
    pub client: Client,
}

impl Server {
    /// Starts `flow --data DATA serve --listen 127.0.0.1:0 --tools …` and
    /// waits for its `flowd listening on http://ADDR` line.
    pub fn start(data: &Path, tools: &[PathBuf]) -> Server {
        Server::start_with(data, tools, &[])
    }

    /// [`Server::start`] with more `flow serve` arguments (`--postgres …`).
    pub fn start_with(data: &Path, tools: &[PathBuf], extra: &[&str]) -> Server {
        let flow = PathBuf::from(env!("CARGO_BIN_EXE_flow"));
        std::fs::create_dir_all(data).expect("data dir");
        let log = std::fs::File::create(data.join("serve.log")).expect("serve.log");
        let mut cmd = Command::new(&flow);
        cmd.arg("--data")
            .arg(data)
            .args(["serve", "--listen", "127.0.0.1:0", "--no-recover"])
            .args(extra);
        for t in tools {
            cmd.arg("--tools").arg(t);
        }
        let mut child = cmd
            .env(
                "FLOW_LOG",
                std::env::var("FLOW_LOG").unwrap_or("warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", flow.display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        let _ = lines.read_line(&mut first);
        let Some(base) = first.trim().strip_prefix("flowd listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(data.join("serve.log")).unwrap_or_default();
            panic!("flow serve did not start: {first:?}\n{log}");
        };
        let base = base.to_string();
        eprintln!(
            "flow serve (pid {}) at {base}, log {}",
            child.id(),
            data.join("serve.log").display()
        );
        // Nothing else is expected on stdout; drain it so a line can never
        // block the server on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while lines.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        let options = client::Options {
            timeout: Duration::from_secs(120),
            env_proxy: false,
        };
        let client = Client::new(&base, None, options).expect("client");
        Server {
            child,
            base,
            client,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `POST /v1/runs`: the answer and the ms from sending the request until
    /// the whole answer was read.
    pub async fn start_run(&self, req: &StartRequest) -> (RunAnswer, f64) {
        self.try_start_run(req)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Server::start_run`], with a run that could not be started as an
    /// error that says why, down to its cause.
    pub async fn try_start_run(&self, req: &StartRequest) -> Result<(RunAnswer, f64), String> {
        timed(self.client.start_run(req))
            .await
            .map_err(|e| format!("POST /v1/runs: {e}"))
    }

    /// `POST /v1/runs/{run}/resume`, timed as [`Server::start_run`].
    pub async fn resume_run(&self, run: &str, req: &ResumeRequest) -> (RunAnswer, f64) {
        timed(self.client.resume_run(run, req))
            .await
            .unwrap_or_else(|e| panic!("resume {run}: {e}"))
    }

    /// `POST /v1/runs/{run}/fork`, timed as [`Server::start_run`].
    pub async fn fork_run(&self, run: &str, req: &ForkRequest) -> (RunAnswer, f64) {
        timed(self.client.fork_run(run, req))
            .await
            .unwrap_or_else(|e| panic!("fork {run}: {e}"))
    }

    /// `GET /v1/runs/{run}`.
    pub async fn get_run(&self, run: &str) -> RunView {
        self.try_get_run(run)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Server::get_run`], with a failed read as an error that says why.
    pub async fn try_get_run(&self, run: &str) -> Result<RunView, String> {
        self.client
            .get_run(run)
            .await
            .map_err(|e| format!("GET /v1/runs/{run}: {}", causes(&e)))
    }

    /// Polls `GET /v1/runs/{run}` every `every` until the server no longer
    /// drives the run and it is not `running`; returns the run view.
    pub async fn settled(&self, run: &str, every: Duration) -> RunView {
        let deadline = Instant::now() + Duration::from_secs(1800);
        loop {
            let v = self.get_run(run).await;
            if v.state != StateName::Running && !v.driving {
                return v;
            }
            assert!(Instant::now() < deadline, "{run} did not settle: {v:?}");
            tokio::time::sleep(every).await;
        }
    }

    /// Reads `GET /v1/runs/{run}/events` from the start until the first
    /// fact of kind `kind`; returns when it arrived.
    pub async fn first_event(&self, run: &str, kind: &str) -> Instant {
        let mut feed = self
            .client
            .run_events(run, &EventsQuery::default())
            .await
            .unwrap_or_else(|e| panic!("events of {run}: {e}"));
        while let Some(e) = feed.next().await.expect("event") {
            let RunEvent::Fact { fact, .. } = e else {
                continue;
            };
            let got = fact.kind().as_str();
            if got == kind {
                return Instant::now();
            }
            assert!(got != "End", "{run} ended before a {kind}");
        }
        panic!("the events of {run} ended before a {kind}");
    }

    /// CPU ms the server process has used so far (its Tool processes not
    /// included): [`cpu_ms_of`]. The difference over a row, per operation,
    /// says how much of its wall time is the server's own work.
    pub fn cpu_ms(&self) -> f64 {
        cpu_ms_of(self.pid())
    }

    /// [`Server::cpu_ms`] as user and system time.
    pub fn cpu(&self) -> Cpu {
        cpu_of(self.pid())
    }

    /// Times the server's threads have gone to sleep so far (voluntary
    /// context switches, summed over `/proc/PID/task/*/status`; threads
    /// that ended are not counted): over a row, per operation, how many
    /// hand-offs it waits for. It moves with the machine's load less than
    /// wall time does, but it moves (a one-step run: 17 on a quiet
    /// machine, 24–26 beside a parallel build). None without procfs.
    pub fn sleeps(&self) -> Option<u64> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).ok()?;
        let mut n = 0;
        for t in tasks.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            n += status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        Some(n)
    }
}

/// `POST /v1/runs`' body: `flow` as the module `name`, started with
/// `input`, the server waiting up to `wait` seconds for it to end or
/// pause.
pub fn start_request(flow: Json, name: &str, input: Json, wait: Option<u64>) -> StartRequest {
    StartRequest {
        flow,
        modules: None,
        name: Some(name.to_string()),
        input,
        wait,
        namespace: None,
    }
}

/// What `call` answers, and the ms from sending its request until the
/// whole answer was read; a failure says why, down to its cause.
async fn timed<T>(
    call: impl std::future::Future<Output = client::Result<T>>,
) -> Result<(T, f64), String> {
    let t = Instant::now();
    let a = call.await.map_err(|e| causes(&e))?;
    Ok((a, ms_since(t)))
}

/// CPU ms process `pid` has used so far (user + system, from
/// `/proc/PID/stat`); NaN where there is no procfs.
pub fn cpu_ms_of(pid: u32) -> f64 {
    cpu_of(pid).total_ms()
}

/// CPU ms every `postgres` process on this machine has used so far (the
/// database beside a Postgres row; 0 when it runs elsewhere).
pub fn postgres_cpu_ms() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(cpu_ms_of)
        .filter(|ms| ms.is_finite())
        .sum()
}

/// CPU ms a process has used so far, in user space and in the kernel.
#[derive(Clone, Copy)]
pub struct Cpu {
    pub user_ms: f64,
    pub system_ms: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            user_ms: self.user_ms - o.user_ms,
            system_ms: self.system_ms - o.system_ms,
        }
    }
}

impl Cpu {
    /// User + system.
    pub fn total_ms(&self) -> f64 {
        self.user_ms + self.system_ms
    }

    /// User + system µs per operation over `ops` operations.
    pub fn us_per_op(&self, ops: usize) -> f64 {
        self.total_ms() * 1e3 / ops as f64
    }

    /// `total µs/step (user U, system S)` over `ops` operations.
    pub fn per_op(&self, ops: usize) -> String {
        let us = |ms: f64| ms * 1e3 / ops as f64;
        format!(
            "{:.0} µs/step (user {:.0}, system {:.0})",
            self.us_per_op(ops),
            us(self.user_ms),
            us(self.system_ms)
        )
    }
}

/// [`cpu_ms_of`] as user and system time (NaN where there is no procfs).
pub fn cpu_of(pid: u32) -> Cpu {
    let none = Cpu {
        user_ms: f64::NAN,
        system_ms: f64::NAN,
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return none;
    };
    // Fields after the parenthesised command name; utime and stime are
    // the 14th and 15th fields, in clock ticks (USER_HZ, 100 on Linux).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return none;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
    match (tick(11), tick(12)) {
        (Some(u), Some(s)) => Cpu {
            user_ms: u * 10.0,
            system_ms: s * 10.0,
        },
        _ => none,
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM by pid lets the server stop its Tool processes; SIGKILL
        // only if it has not exited within 10 s.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// W2 (issue 16): `runs` runs of `body` (each `steps` steps, with `wait`)
/// started at once, spread over `servers`; waits until each is in state
/// `until`, and answers steps per second over the whole.
pub async fn concurrent_runs(
    servers: &[&Server],
    body: &StartRequest,
    runs: usize,
    steps: usize,
    until: StateName,
) -> f64 {
    let t = Instant::now();
    let all = (0..runs).map(|i| {
        let s = servers[i % servers.len()];
        async move {
            let (a, _) = s.start_run(body).await;
            let state = match a.state {
                StateName::Running => s.settled(&a.run, Duration::from_millis(5)).await.state,
                state => state,
            };
            assert_eq!(
                state, until,
                "a run did not end its steps {until:?}: {}",
                a.run
            );
        }
    });
    futures_util::future::join_all(all).await;
    (runs * steps) as f64 / t.elapsed().as_secs_f64()
}
