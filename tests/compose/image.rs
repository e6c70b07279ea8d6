//! The image the Dockerfile builds, as processes on this machine: its
//! paths mapped to the repository and the cargo target directory by one
//! table, each row checked against the Dockerfile line that makes it true,
//! and a service of that image run as its ENTRYPOINT with the service's
//! command, in its namespace, with the container's environment.

use super::file::{Healthcheck, Probe};
use super::net::Net;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where a path of the image lives here.
enum Here {
    /// The directory of the `flow` binary under test (and `flow-llm`).
    Bins,
    /// A directory of the repository.
    Repo(&'static str),
}

/// The image's paths: (path in the image, where it is here, the Dockerfile
/// line that puts it there). A path in a command line that no row maps
/// fails the test.
const PATHS: &[(&str, Here, &str)] = &[
    (
        "/usr/local/bin",
        Here::Bins,
        "COPY --from=build /src/target/release/flow /src/target/release/flow-llm /usr/local/bin/",
    ),
    (
        "/opt/flowd/examples",
        Here::Repo("examples"),
        "COPY examples /opt/flowd/examples",
    ),
    // Not in any command line: the example Tools find the toolkit at
    // ../../../toolkits/python, which holds here as in the image only
    // while the two copies keep the repository's layout.
    (
        "/opt/flowd/toolkits",
        Here::Repo("toolkits"),
        "COPY toolkits /opt/flowd/toolkits",
    ),
];

/// The image's ENTRYPOINT (the `flow` binary under test) and WORKDIR (a
/// fresh directory per service: a container starts with its image's).
const ENTRYPOINT: &str = r#"ENTRYPOINT ["flow"]"#;
const WORKDIR: &str = "WORKDIR /var/lib/flowd";
/// Debian's PATH, which the image keeps, after its `/usr/local/bin` (the
/// binaries under test here; its `/usr/local/sbin` is empty).
const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn flow_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flow"))
}

/// Panics unless the Dockerfile still says what the table assumes.
pub fn check_dockerfile() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for (_, _, line) in PATHS {
        assert!(
            lines.contains(line),
            "the Dockerfile no longer says {line:?}: update tests/compose/image.rs's PATHS"
        );
    }
    for line in [ENTRYPOINT, WORKDIR] {
        assert!(
            lines.contains(&line),
            "the Dockerfile no longer says {line:?}: update tests/compose/image.rs"
        );
    }
}

/// `s` with the image's paths replaced by where they are here.
pub fn map_paths(s: &str) -> String {
    let mut out = s.to_string();
    for (image, here, _) in PATHS {
        let here = match here {
            Here::Bins => flow_bin().parent().unwrap().to_path_buf(),
            Here::Repo(dir) => repo().join(dir),
        };
        out = out.replace(image, here.to_str().unwrap());
    }
    for image in ["/usr/local/", "/opt/"] {
        assert!(
            !out.contains(image),
            "{s:?} names a path of the image that tests/compose/image.rs's PATHS does not map"
        );
    }
    out
}

/// One service's process (its own process group: the Tools it starts go
/// with it), killed on drop.
pub struct Container {
    pub service: String,
    child: Child,
    env: BTreeMap<String, String>,
    dir: tempfile::TempDir,
}

impl Container {
    /// Starts the image's ENTRYPOINT with `command` (already mapped) in
    /// `service`'s namespace, with only the container's environment:
    /// the image's PATH, HOME at its WORKDIR, and the service's own.
    pub fn start(
        net: &Net,
        service: &str,
        command: &[String],
        environment: &BTreeMap<String, String>,
    ) -> Container {
        let dir = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::from([
            (
                "PATH".to_string(),
                format!("{}:{SYSTEM_PATH}", map_paths("/usr/local/bin")),
            ),
            ("HOME".to_string(), dir.path().display().to_string()),
        ]);
        env.extend(environment.iter().map(|(k, v)| (k.clone(), v.clone())));
        let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
        let child = net
            .exec(service)
            .arg(flow_bin())
            .args(command)
            .env_clear()
            .envs(&env)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log("stdout"))
            .stderr(log("stderr"))
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{service}: {e}"));
        Container {
            service: service.to_string(),
            child,
            env,
            dir,
        }
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// What it printed, for failure messages.
    pub fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- {} stdout ---\n{}--- {} stderr ---\n{}",
            self.service,
            read("stdout"),
            self.service,
            read("stderr")
        )
    }

    /// Runs the health check once, as `docker` does: inside the container
    /// (its namespace, environment and directory), within its timeout.
    pub async fn check(&self, net: &Net, hc: &Healthcheck) -> Result<(), String> {
        let mut cmd = net.exec(&self.service);
        match hc.probe() {
            Probe::Exec(argv) => cmd.args(argv),
            Probe::Shell(line) => cmd.args(["/bin/sh", "-c", &line]),
        };
        cmd.env_clear()
            .envs(&self.env)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        match tokio::time::timeout(hc.timeout(), cmd.output()).await {
            Err(_) => Err(format!("timed out after {:?}", hc.timeout())),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    /// Waits until the health check passes, as long as compose would
    /// before calling the service unhealthy (`retries` × `interval`);
    /// panics with its logs if it exits or stays unhealthy.
    pub async fn wait_healthy(&mut self, net: &Net, hc: &Healthcheck) {
        let give_up = Instant::now() + hc.patience() + hc.timeout();
        loop {
            if let Some(status) = self.exited() {
                panic!("{} exited ({status}):\n{}", self.service, self.logs());
            }
            let last = match self.check(net, hc).await {
                Ok(()) => return,
                Err(why) => why,
            };
            assert!(
                Instant::now() < give_up,
                "{} is unhealthy after {:?}: its health check says {last}\n{}",
                self.service,
                hc.patience(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The whole group, also when the service itself has exited: the
        // Tools it started may not have.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}
