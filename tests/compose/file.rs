//! docker-compose.yml as compose reads it, for the part of the compose
//! model the file uses: anchors and merge keys resolved, `x-` extension
//! fields dropped, `${VAR:-default}` interpolated, then typed services.
//! Every service key this model does not know is refused
//! (`deny_unknown_fields`), so a key added to the file that the test does
//! not emulate fails the test by name instead of being ignored.

use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::time::Duration;
use yaml_serde::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComposeFile {
    pub services: BTreeMap<String, Service>,
    /// Named volumes: known, not emulated (each service starts empty).
    #[serde(default, rename = "volumes")]
    _volumes: IgnoredAny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub image: String,
    /// The build context; the image it builds is the one `image` names.
    #[serde(default)]
    pub build: Option<String>,
    /// The arguments after the image's ENTRYPOINT (the list form only).
    #[serde(default)]
    pub command: Vec<String>,
    /// The map form only.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    #[serde(default)]
    pub depends_on: BTreeMap<String, Dependency>,
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    /// `[host_ip:]host_port:container_port`.
    #[serde(default)]
    pub ports: Vec<String>,
    /// Known, not emulated: each service starts empty.
    #[serde(default, rename = "volumes")]
    _volumes: IgnoredAny,
    /// Known, not emulated: the test asserts instead that no service
    /// exits.
    #[serde(default, rename = "restart")]
    _restart: IgnoredAny,
    /// How long `docker stop` waits after SIGTERM before SIGKILL (compose's
    /// default: 10s): checked against the service's drain, not emulated.
    #[serde(default)]
    pub stop_grace_period: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    pub condition: Condition,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    ServiceStarted,
    ServiceHealthy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Healthcheck {
    test: Vec<String>,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retries: Option<u32>,
}

/// A health check's command, as the container runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// `["CMD", program, args...]`: executed directly.
    Exec(Vec<String>),
    /// `["CMD-SHELL", line]`: run by `/bin/sh -c`.
    Shell(String),
}

impl Healthcheck {
    pub fn probe(&self) -> Probe {
        match self.test.split_first() {
            Some((kind, rest)) if kind == "CMD" && !rest.is_empty() => Probe::Exec(rest.to_vec()),
            Some((kind, [line])) if kind == "CMD-SHELL" => Probe::Shell(line.clone()),
            _ => panic!(
                "healthcheck test {:?}: expected [\"CMD\", ...] or [\"CMD-SHELL\", line]",
                self.test
            ),
        }
    }

    /// How long one check may take (compose's default: 30 s).
    pub fn timeout(&self) -> Duration {
        self.timeout
            .as_deref()
            .map_or(Duration::from_secs(30), duration)
    }

    /// How long compose waits before it calls the service unhealthy:
    /// `retries` failed checks, `interval` apart (defaults 3 and 30 s).
    pub fn patience(&self) -> Duration {
        let interval = self
            .interval
            .as_deref()
            .map_or(Duration::from_secs(30), duration);
        interval * self.retries.unwrap_or(3)
    }
}

/// A compose duration: `1m30s`, `10s`, `500ms`.
pub fn duration(s: &str) -> Duration {
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits]
            .parse()
            .unwrap_or_else(|_| panic!("duration {s:?}: expected a number"));
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        total += match &rest[..unit] {
            "h" => Duration::from_secs(n * 3600),
            "m" => Duration::from_secs(n * 60),
            "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            u => panic!("duration {s:?}: unit {u:?} is not h, m, s or ms"),
        };
        rest = &rest[unit..];
    }
    total
}

/// A published port: `[host_ip:]host_port:container_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub host_ip: Option<String>,
    pub host_port: u16,
    pub container_port: u16,
}

impl Port {
    pub fn parse(s: &str) -> Port {
        let bad = format!("port {s:?}: expected [host_ip:]host_port:container_port");
        let parts: Vec<&str> = s.split(':').collect();
        let (host_ip, host, container) = match parts[..] {
            [h, c] => (None, h, c),
            [ip, h, c] => (Some(ip.to_string()), h, c),
            _ => panic!("{bad}"),
        };
        Port {
            host_ip,
            host_port: host.parse().expect(&bad),
            container_port: container.parse().expect(&bad),
        }
    }
}

impl ComposeFile {
    /// Reads `text` as `docker compose` would with `vars` as its shell's
    /// environment.
    pub fn parse(text: &str, vars: &BTreeMap<String, String>) -> ComposeFile {
        let mut doc: Value = yaml_serde::from_str(text).expect("docker-compose.yml is YAML");
        doc.apply_merge().expect("docker-compose.yml's merge keys");
        drop_extensions(&mut doc);
        if let Some(services) = doc.get_mut("services").and_then(Value::as_mapping_mut) {
            for (_, service) in services.iter_mut() {
                drop_extensions(service);
            }
        }
        interpolate_all(&mut doc, vars);
        yaml_serde::from_value(doc).unwrap_or_else(|e| {
            panic!("docker-compose.yml is outside what tests/compose/file.rs models: {e}")
        })
    }

    /// The services in an order that starts each after those it depends
    /// on (compose's order); a cycle or an unknown name panics.
    pub fn start_order(&self) -> Vec<&str> {
        let mut order: Vec<&str> = Vec::new();
        while order.len() < self.services.len() {
            let ready = self.services.iter().find(|(name, s)| {
                !order.contains(&name.as_str())
                    && s.depends_on.keys().all(|d| {
                        assert!(
                            self.services.contains_key(d),
                            "{name} depends on unknown {d}"
                        );
                        order.contains(&d.as_str())
                    })
            });
            let (name, _) = ready.expect("the services' depends_on form a cycle");
            order.push(name);
        }
        order
    }
}

/// Removes the `x-` extension fields of a mapping (compose ignores them;
/// the file's anchors live there).
fn drop_extensions(v: &mut Value) {
    if let Some(m) = v.as_mapping_mut() {
        m.retain(|k, _| !k.as_str().is_some_and(|k| k.starts_with("x-")));
    }
}

fn interpolate_all(v: &mut Value, vars: &BTreeMap<String, String>) {
    match v {
        Value::String(s) => *s = interpolate(s, vars),
        Value::Sequence(items) => items.iter_mut().for_each(|i| interpolate_all(i, vars)),
        Value::Mapping(m) => m.iter_mut().for_each(|(_, i)| interpolate_all(i, vars)),
        _ => {}
    }
}

/// Compose's interpolation: `$$` is a `$`; `${NAME}` and `$NAME` are the
/// variable (empty when unset); `${NAME:-default}` is the default when it
/// is unset or empty, `${NAME-default}` when it is unset. Other forms
/// (`:?`, `:+`) are not used by the file and are refused.
pub fn interpolate(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(r) = rest.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let end = r.find('}').unwrap_or_else(|| panic!("{s:?}: unclosed ${{"));
            let body = &r[..end];
            rest = &r[end + 1..];
            let name_end = body
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(body.len());
            let (name, op) = body.split_at(name_end);
            let value = vars.get(name);
            out.push_str(&match op {
                "" => value.cloned().unwrap_or_default(),
                _ if op.starts_with(":-") => value
                    .filter(|v| !v.is_empty())
                    .cloned()
                    .unwrap_or_else(|| op[2..].to_string()),
                _ if op.starts_with('-') => value.cloned().unwrap_or_else(|| op[1..].to_string()),
                _ => panic!("{s:?}: interpolation {body:?} is not modelled"),
            });
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            assert!(end > 0, "{s:?}: a lone $ (write $$)");
            out.push_str(vars.get(&rest[..end]).map_or("", String::as_str));
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}
