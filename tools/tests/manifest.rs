//! flow.toml reading and binding resolution (REQUIREMENTS TOML-*, BND-*).

use flow_tools::manifest::{Binding, ConfigError, Launch, Manifest, Origin, Resolver, Source};
use std::path::Path;

fn parse(text: &str) -> Result<Manifest, ConfigError> {
    Manifest::parse(text, Path::new("/app/flow.toml"))
}

/// TOML-3, TOML-4: a table names exactly one of command or mcp.
#[test]
fn reads_command_mcp_and_resend() {
    let m = parse(
        r#"
[tools."support.json"]
command = "python3 tools/support.py --fast 'two words'"
[tools."support.json#web-search"]
mcp = "npx @acme/search-mcp"
resend = true
[tools."std/llm"]
command = "flow-llm --backend offline"
"#,
    )
    .unwrap();
    let b = &m.tables["support.json"];
    assert_eq!(
        b.launch,
        Launch::Command(vec![
            "python3".into(),
            "tools/support.py".into(),
            "--fast".into(),
            "two words".into()
        ])
    );
    assert_eq!(b.dir, Path::new("/app"));
    assert!(!b.resend);
    let w = &m.tables["support.json#web-search"];
    assert!(matches!(&w.launch, Launch::Mcp(a) if a[0] == "npx"));
    assert!(w.resend);
    // DESIGN §5: the tool's own table wins over the file key.
    assert!(matches!(
        m.lookup("support.json", "web-search").unwrap().launch,
        Launch::Mcp(_)
    ));
    assert!(matches!(
        m.lookup("support.json", "other").unwrap().launch,
        Launch::Command(_)
    ));
    assert!(m.lookup("other.json", "x").is_none());
}

/// TOML-5: an unknown key, or a table naming none or several, is a
/// configuration error naming the file and key.
#[test]
fn configuration_errors_name_file_and_key() {
    let cases = [
        (
            "[tools.\"a.json\"]\ncommand = \"x\"\nenv = \"y\"\n",
            "/app/flow.toml: unknown key `tools.\"a.json\".env`",
        ),
        (
            "[tools.\"a.json\"]\nresend = true\n",
            "names neither `command` nor `mcp`",
        ),
        (
            "[tools.\"a.json\"]\ncommand = \"x\"\nmcp = \"y\"\n",
            "names both `command` and `mcp`",
        ),
        ("[other]\nx = 1\n", "/app/flow.toml: unknown key `other`"),
        (
            "[tools.\"a.json\"]\ncommand = 3\n",
            "`tools.\"a.json\".command` must be a string",
        ),
        (
            "[tools.\"a.json\"]\ncommand = \"\"\n",
            "`tools.\"a.json\".command`: is empty",
        ),
        (
            "[tools.\"a.json\"]\ncommand = \"x 'open\"\n",
            "`tools.\"a.json\".command`",
        ),
        (
            "[tools.\"a.json\"]\ncommand = \"x\"\nresend = \"yes\"\n",
            "must be true or false",
        ),
        (
            "[tools]\n\"a.json\" = \"x\"\n",
            "`tools.\"a.json\"` must be a table",
        ),
        (
            "[tools.\"../a.json\"]\ncommand = \"x\"\n",
            "table key `../a.json`",
        ),
        ("tools = [", "/app/flow.toml: not valid TOML"),
    ];
    for (text, want) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err}");
        assert!(err.starts_with("/app/flow.toml"), "{err}");
    }
}

/// BND-5, BND-6, BND-12: the nearest manifest is the boundary, keys are
/// relative to it, overrides win, and an absent table is unbound.
#[test]
fn nearest_manifest_is_the_boundary() {
    let root = tempfile::tempdir().unwrap();
    let outer = root.path();
    let inner = outer.join("app");
    std::fs::create_dir_all(inner.join("lib")).unwrap();
    std::fs::write(
        outer.join("flow.toml"),
        "[tools.\"app/support.json\"]\ncommand = \"outer\"\n[tools.\"app/other.json\"]\ncommand = \"outer\"\n",
    )
    .unwrap();
    std::fs::write(
        inner.join("flow.toml"),
        "[tools.\"support.json\"]\ncommand = \"inner\"\n[tools.\"lib/x.json#t\"]\ncommand = \"lib\"\n[tools.\"std/llm\"]\ncommand = \"flow-llm --backend offline\"\n",
    )
    .unwrap();
    let src = Source::Local {
        program_dir: inner.clone(),
    };
    let mut r = Resolver::new();
    let (b, origin) = r.resolve("support.json#web-search", &src).unwrap().unwrap();
    assert_eq!(b.launch, Launch::Command(vec!["inner".into()]));
    assert_eq!(b.dir, inner);
    assert_eq!(
        origin,
        Origin::Manifest {
            path: inner.join("flow.toml"),
            table: "support.json".into()
        }
    );
    // In the nearest manifest there is no table for other.json: the outer
    // manifest is not searched.
    assert!(r.resolve("other.json#t", &src).unwrap().is_none());
    // A file in a subdirectory is keyed by its path relative to the manifest.
    let (b, _) = r.resolve("lib/x.json#t", &src).unwrap().unwrap();
    assert_eq!(b.launch, Launch::Command(vec!["lib".into()]));
    let (b, _) = r.resolve("std/llm#chat", &src).unwrap().unwrap();
    assert_eq!(b.launch.argv()[0], "flow-llm");
    // BND-7: submitted source has no inferred filesystem binding.
    assert!(
        r.resolve("support.json#web-search", &Source::Submitted)
            .unwrap()
            .is_none()
    );
    // BND-8: the host's override, keyed by identity, wins.
    let fake = Binding {
        launch: Launch::Command(vec!["fake".into()]),
        dir: outer.to_path_buf(),
        resend: false,
    };
    r.override_binding("support.json#web-search", fake.clone());
    let (b, origin) = r.resolve("support.json#web-search", &src).unwrap().unwrap();
    assert_eq!((b, origin), (fake.clone(), Origin::Override));
    assert_eq!(
        r.resolve("support.json#web-search", &Source::Submitted)
            .unwrap()
            .unwrap()
            .0,
        fake
    );
}

/// A program with no manifest anywhere above it: everything is unbound.
#[test]
fn no_manifest_means_unbound() {
    let root = tempfile::tempdir().unwrap();
    let mut r = Resolver::new();
    let src = Source::Local {
        program_dir: root.path().to_path_buf(),
    };
    // tempdir lives under /tmp, which has no flow.toml above it.
    assert!(r.resolve("a.json#t", &src).unwrap().is_none());
}

/// A broken manifest refuses, naming the file.
#[test]
fn broken_manifest_refuses() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("flow.toml"), "[tools.\"a.json\"]\n").unwrap();
    let mut r = Resolver::new();
    let src = Source::Local {
        program_dir: root.path().to_path_buf(),
    };
    let err = r.resolve("a.json#t", &src).unwrap_err();
    assert!(matches!(err, ConfigError::NoneNamed { .. }), "{err}");
}
