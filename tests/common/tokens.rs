//! An admin token and a run-scoped one, written as a `--tokens` file, and
//! a client that sends one (the deletion and redaction tests).

/// A token with the `admin` scope.
pub const ADMIN: &str = "admin-token-0123456789";
/// A token with the `run` scope.
pub const RUNNER: &str = "run-token-0123456789ab";

/// A client that sends `token` as its bearer token.
pub fn client(token: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .no_proxy()
        .default_headers(h)
        .build()
        .unwrap()
}

/// Writes [`ADMIN`] and [`RUNNER`] as the `--tokens` file in `dir`; its path.
pub fn tokens(dir: &std::path::Path) -> String {
    let p = dir.join("tokens");
    std::fs::write(&p, format!("{ADMIN} admin\n{RUNNER} run\n")).unwrap();
    p.to_str().unwrap().to_string()
}
