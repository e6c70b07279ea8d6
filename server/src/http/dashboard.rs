//! The dashboard (issue 13): plain HTML, CSS and JavaScript modules from
//! `web/`, embedded at compile time (`include_bytes!`: `cargo build` needs
//! neither Node.js nor a network, and what the browser tests load is what
//! ships). It speaks only the public HTTP API, with the same auth.
//!
//! * `GET /` is the app: `index.html` with the asset version filled in,
//!   `Cache-Control: no-cache` and an ETag, so a browser always revalidates
//!   it and an upgraded server's page is seen at once.
//! * `GET /assets/<version>/<file>`: the files, immutable for a year — the
//!   version is a hash of every file, so new bytes get a new URL; modules
//!   import each other relatively and stay within one version.
//! * Any other `/assets/…` path is a problem+json 404.
//!
//! Every answer carries a Content-Security-Policy that allows only this
//! origin (no inline script, no CDN), `nosniff` and `no-referrer`: set
//! around the whole router, with the other kinds' policies
//! ([`super::headers`]).

use super::AppState;
use super::error::ApiError;
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $ct:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $ct,
            bytes: include_bytes!(concat!("../../../web/assets/", $path)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = assets! {
    "app.css" => "text/css; charset=utf-8",
    "icon.svg" => "image/svg+xml",
    "app.js" => JS,
    "api.js" => JS,
    "ui.js" => JS,
    "runs.js" => JS,
    "run.js" => JS,
    "graph.js" => JS,
    "timeline.js" => JS,
    "form.js" => JS,
    "order.js" => JS,
    "inbox.js" => JS,
    "share.js" => JS,
    "start.js" => JS,
    "checkpoint.js" => JS,
    "gantt.js" => JS,
    "whatif.js" => JS,
    "bulk.js" => JS,
    "gate.js" => JS,
    "recover.js" => JS,
    "diff.js" => JS,
};

const INDEX: &str = include_str!("../../../web/index.html");

/// The version (12 hex digits of the SHA-256 of every file) and the
/// rendered index page with its ETag.
struct Built {
    version: String,
    index: String,
    index_etag: String,
    etags: Vec<String>,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut all = Sha256::new();
        let mut etags = Vec::with_capacity(ASSETS.len());
        for a in ASSETS {
            all.update(a.path.as_bytes());
            all.update([0]);
            all.update(a.bytes);
            etags.push(etag(a.bytes));
        }
        all.update(INDEX.as_bytes());
        let version = hex::encode(&all.finalize()[..6]);
        let index = INDEX.replace("{{VERSION}}", &version);
        Built {
            index_etag: etag(index.as_bytes()),
            version,
            index,
            etags,
        }
    })
}

fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(&Sha256::digest(bytes)[..16]))
}

/// The asset version the index page links to.
pub fn version() -> &'static str {
    &built().version
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*path}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    let b = built();
    answer(
        &headers,
        "text/html; charset=utf-8",
        b.index.as_bytes(),
        &b.index_etag,
        "no-cache",
    )
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    let b = built();
    let found = path
        .split_once('/')
        .filter(|(v, _)| *v == b.version)
        .and_then(|(_, file)| ASSETS.iter().position(|a| a.path == file));
    match found {
        Some(i) => answer(
            &headers,
            ASSETS[i].content_type,
            ASSETS[i].bytes,
            &b.etags[i],
            "public, max-age=31536000, immutable",
        ),
        None => ApiError::not_found(format!(
            "no dashboard asset {path:?}; the page links to /assets/{}/…",
            b.version
        ))
        .into_response(),
    }
}

/// The bytes, or 304 when the client's `If-None-Match` names this ETag.
fn answer(
    headers: &HeaderMap,
    content_type: &'static str,
    bytes: &'static [u8],
    tag: &str,
    cache: &'static str,
) -> Response {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, bytes).into_response()
    };
    let h = r.headers_mut();
    if !fresh {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_named_once_and_typed() {
        for (i, a) in ASSETS.iter().enumerate() {
            assert!(ASSETS[..i].iter().all(|b| b.path != a.path), "{}", a.path);
            assert_eq!(a.path.ends_with(".js"), a.content_type == JS, "{}", a.path);
        }
        assert!(
            built()
                .index
                .contains(&format!("/assets/{}/app.js", version()))
        );
    }

    /// A module added to web/assets and not listed here would be a 404 for
    /// the browser and a page that never renders.
    #[test]
    fn every_file_in_web_assets_is_served() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/assets");
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(
                ASSETS.iter().any(|a| a.path == name),
                "web/assets/{name} is not in ASSETS"
            );
        }
    }
}
