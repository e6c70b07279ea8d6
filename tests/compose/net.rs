//! The compose network, made of Linux network namespaces: one per service,
//! each with a veth pair on one bridge (a /24 of 198.18.0.0/15, the range
//! set aside for network tests), and an `/etc/netns/<ns>/hosts` that
//! `ip netns exec` mounts over `/etc/hosts`, so every service reaches every
//! other by its service name, as compose's DNS gives. The host keeps the
//! bridge's first address: the test reaches the services there, and
//! forwards TCP from it (and from its loopback: the published ports) with
//! [`Net::forward`]. Everything made is removed on drop, also when the
//! test panics.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use tokio::task::JoinHandle;

pub struct Net {
    /// `fdc<pid>`: the bridge's name and the prefix of every name made.
    prefix: String,
    subnet: [u8; 3],
    bridge: Option<String>,
    namespaces: Vec<Namespace>,
    forwarders: Vec<JoinHandle<()>>,
}

struct Namespace {
    name: String,
    veth: String,
    service: String,
}

/// `ip ARGS`, panicking with its stderr when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// `ip ARGS` on the way out: errors are ignored (the thing may not exist).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The effective uid, from /proc (no libc in the tests).
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

impl Net {
    /// A bridge on a free /24; `Err(why)` where namespaces cannot be made
    /// (no `ip`, not root), for the test to skip by name.
    pub fn new() -> Result<Net, String> {
        if Command::new("ip")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            return Err("no `ip` command (iproute2) to make network namespaces".into());
        }
        match euid() {
            Some(0) => {}
            Some(uid) => {
                return Err(format!(
                    "network namespaces need root; running as uid {uid}"
                ));
            }
            None => return Err("cannot read the uid from /proc/self/status".into()),
        }
        let pid = std::process::id();
        let prefix = format!("fdc{pid}");
        sweep(&prefix);
        let taken = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .expect("ip addr");
        let taken = String::from_utf8_lossy(&taken.stdout).into_owned();
        let third = (0..=255u8)
            .map(|i| ((pid as usize + i as usize) % 256) as u8)
            .find(|n| !taken.contains(&format!(" 198.18.{n}.")))
            .expect("a free /24 in 198.18.0.0/16");
        let mut net = Net {
            prefix,
            subnet: [198, 18, third],
            bridge: None,
            namespaces: Vec::new(),
            forwarders: Vec::new(),
        };
        let bridge = net.prefix.clone();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        net.bridge = Some(bridge.clone());
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.gateway()),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        Ok(net)
    }

    /// The host's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// A namespace for `service` on the bridge; its address.
    pub fn add(&mut self, service: &str) -> Ipv4Addr {
        let i = self.namespaces.len();
        let [a, b, c] = self.subnet;
        let addr = Ipv4Addr::new(a, b, c, 10 + i as u8);
        let name = format!("{}-{service}", self.prefix);
        let veth = format!("{}-{i}", self.prefix);
        ip(&["netns", "add", &name]);
        self.namespaces.push(Namespace {
            name: name.clone(),
            veth: veth.clone(),
            service: service.to_string(),
        });
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ]);
        ip(&[
            "link",
            "set",
            &veth,
            "master",
            self.bridge.as_deref().unwrap(),
        ]);
        ip(&["link", "set", &veth, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &name, "link", "set", "eth0", "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        addr
    }

    /// Gives every namespace the same hosts file: localhost, and each of
    /// `names` at its address.
    pub fn write_hosts(&self, names: &[(String, Ipv4Addr)]) {
        let mut hosts = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n");
        for (name, addr) in names {
            hosts.push_str(&format!("{addr}\t{name}\n"));
        }
        for ns in &self.namespaces {
            let dir = format!("/etc/netns/{}", ns.name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(format!("{dir}/hosts"), &hosts).unwrap();
        }
    }

    /// `ip netns exec <service's namespace>`: append the program and its
    /// arguments. `ip` execs the program (same pid), so the pid the test
    /// holds is the service's.
    pub fn exec(&self, service: &str) -> Command {
        let ns = self
            .namespaces
            .iter()
            .find(|n| n.service == service)
            .unwrap_or_else(|| panic!("no namespace for {service}"));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.name]);
        cmd
    }

    /// Accepts TCP on `listen` (in the test's own namespace) and joins each
    /// connection to `to`; the address it listens on.
    pub async fn forward(&mut self, listen: SocketAddr, to: SocketAddr) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .unwrap_or_else(|e| panic!("listen on {listen} (to forward to {to}): {e}"));
        let bound = listener.local_addr().unwrap();
        self.forwarders.push(tokio::spawn(async move {
            // Dropped (so every connection's task aborted) with the loop.
            let mut joins = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                joins.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                while joins.try_join_next().is_some() {}
            }
        }));
        bound
    }
}

/// Removes what a test process of the same pid left when it was killed
/// before its drop ran (a reused pid would otherwise find its names taken).
fn sweep(prefix: &str) {
    let listed = Command::new("ip").args(["netns", "list"]).output();
    let listed = listed.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    for ns in listed.unwrap_or_default().lines() {
        let name = ns.split_whitespace().next().unwrap_or_default();
        if name.starts_with(&format!("{prefix}-")) {
            ip_quiet(&["netns", "del", name]);
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{name}"));
        }
    }
    ip_quiet(&["link", "del", prefix]);
}

impl Drop for Net {
    /// The caller has ended the processes inside first (a namespace with a
    /// process in it outlives `ip netns del`).
    fn drop(&mut self) {
        for f in &self.forwarders {
            f.abort();
        }
        for ns in &self.namespaces {
            // The host end first: that removes the pair at once.
            ip_quiet(&["link", "del", &ns.veth]);
            ip_quiet(&["netns", "del", &ns.name]);
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", ns.name));
        }
        if let Some(b) = &self.bridge {
            ip_quiet(&["link", "del", b]);
        }
    }
}
