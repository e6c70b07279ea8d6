//! The committed OpenAPI document is the one the code generates (STYLE
//! rule 12). Regenerate with `UPDATE_OPENAPI=1 cargo test -p flowd --test
//! http_openapi`.

use std::path::PathBuf;

#[test]
fn openapi_document_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
    let now = flowd::http::openapi::document_text();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == now,
        "openapi/openapi.json is stale; regenerate it with UPDATE_OPENAPI=1 cargo test -p flowd --test http_openapi"
    );
}

#[test]
fn every_operation_has_an_id_of_verb_and_resource() {
    let doc: serde_json::Value =
        serde_json::from_str(&flowd::http::openapi::document_text()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.contains_key("/v1/runs/{run}/events"));
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_default();
            assert!(
                id.contains('_'),
                "{method} {path}: operation id {id:?} is not <verb>_<resource>"
            );
        }
    }
}
